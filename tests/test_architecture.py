"""The drivers name no algorithm: everything algorithm-specific is in the algorithm's own module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgeprof.algorithms import ALGORITHMS, REGISTRY

PACKAGE = Path(__file__).resolve().parents[1] / "edgeprof"
DRIVERS = sorted((PACKAGE / "flower").glob("*.py")) + [PACKAGE / "rounds" / name for name in (
    "simulate.py", "federation.py", "sweep.py")] + [PACKAGE / "session" / name for name in ("run.py", "monitoring.py")]


@pytest.mark.parametrize("path", DRIVERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_algorithm_is_named_in_a_driver(path):
    text = path.read_text()
    names = [n for n in ALGORITHMS if re.search(rf"\b{re.escape(n)}\b", text, flags=re.IGNORECASE)]
    # sweep.py may name the two sides of the claim it checks (its defaults), nothing else
    allowed = {"pflego", "fedavg"} if path.name == "sweep.py" else set()
    assert set(names) <= allowed, f"{path.name} names {names}"


def test_every_registry_line_points_at_a_spec_of_that_name():
    for name, target in REGISTRY.items():
        spec = ALGORITHMS[name]
        assert spec.name == name and target.endswith((":SPEC", ":FEDSIM", ":FEDALT"))
        assert spec.phases and spec.engines and callable(spec.client) and callable(spec.server)


# ---------------------------------------------------------------------------------------------------- compute seam

#: what moves a tensor between host and device, or makes one on the default device: only the seam may
HOST_DEVICE = re.compile(r"\.numpy\(\)|from_numpy\(|torch\.tensor\(|\.cpu\(\)|\.cuda\(|\.to\(|\bset_params\(|"
                         r"\bget_params\(|torch\.(ones|zeros|empty|full|arange|rand|randn)\(|\.synchronize\(")


def _py(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _py(PACKAGE / "algorithms") + [PACKAGE / "rounds" / "federation.py",
                                                                PACKAGE / "rounds" / "runtime.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_tensors_cross_between_host_and_device_only_through_the_compute_seam(path):
    """Placements, copies and synchronisation go through :class:`edgeprof.nn.compute.Compute`; a line that builds a
    tensor on the host before the module is placed says so with ``# host-only``."""
    bad = [f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
           if HOST_DEVICE.search(line.split("#")[0]) and "# host-only" not in line]
    assert not bad, "\n".join(bad)


def test_one_runtime_factory_builds_every_runtime():
    """``Runtime(`` is called in edgeprof.rounds.runtime alone; the in-process driver and both Flower apps call it."""
    callers = [p for p in _py(PACKAGE) if re.search(r"(?<![\w.])Runtime\(", p.read_text())
               and p.name != "contract.py"]
    assert [p.relative_to(PACKAGE).as_posix() for p in callers] == ["rounds/runtime.py"]
    for driver in ("rounds/federation.py", "flower/client_app.py", "flower/strategy.py"):
        assert "build_runtime(" in (PACKAGE / driver).read_text(), driver


def test_no_execution_plan_or_compute_has_a_default():
    """A forgotten argument must fail, not silently run some other plan or device: no parameter typed
    ExecutionPlan or Compute has a default, and no module keeps a chosen plan."""
    import ast

    found = []
    for path in _py(PACKAGE):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, _ in pairs:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if re.search(r"\b(ExecutionPlan|Compute)\b", annotation):
                    found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
        text = path.read_text()
        if re.search(r"\bLEGACY\b|_CHOSEN\b|def chosen\(", text):
            found.append(f"{path.name}: a module-level plan")
    assert not found, found


# ---------------------------------------------------------------------------------------------------- one window engine

def test_one_window_engine_opens_every_window_and_phase():
    """Windows and phases are built once, in edgeprof.measure.windows: the profiler only samples (no module but the
    engine takes its samples), and no module but the engine builds a WindowResult or keeps its own phase marker."""
    import ast

    samplers, results, markers = [], [], []
    for path in _py(PACKAGE):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        if re.search(r"profiler\.sample\(|\._sample\(", text) and rel not in ("measure/windows.py", "measure/profiler.py"):
            samplers.append(rel)
        if re.search(r"(?<![\w.])WindowResult\(", text) and rel != "measure/windows.py":
            results.append(rel)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ContextVar") and rel != "measure/windows.py":
                markers.append(rel)
    assert samplers == [] and results == [], (samplers, results)
    assert markers == [], f"context variables outside the engine (a second phase mechanism?): {markers}"
    from edgeprof.measure.profiler import Profiler

    assert not hasattr(__import__("edgeprof.measure.profiler", fromlist=["Window"]), "Window")
    assert Profiler.window.__doc__ and "windows" in Profiler.window.__doc__


# ---------------------------------------------------------------------------------------------------- layers and names

def _import_graph() -> dict[str, set[str]]:
    """edgeprof module -> the edgeprof modules it imports, at module level, inside functions or under
    ``if TYPE_CHECKING:`` (``import x``, ``from x import y`` and relative ``from .x import y``): a type-only import is
    a dependency on the other module's names as much as one that runs."""
    import ast

    modules = {}
    for path in _py(PACKAGE):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, one level up per dot after the first
                    above = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(above + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            graph[module] |= {r for n in names if n.startswith("edgeprof") and (r := resolve(n)) not in (None, module)}
    return graph


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else ""


def test_no_import_cycle_spans_two_folders():
    """Strongly connected components of the import graph (Tarjan) stay inside one folder of edgeprof, counting the
    imports inside functions and under ``if TYPE_CHECKING:`` (:func:`_import_graph`)."""
    import sys

    graph = _import_graph()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    spanning = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len({_folder(m) for m in component}) > 1:
                spanning.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert spanning == [], spanning


#: what each lower layer may import besides itself (errors, the host description and whole-or-absent writes are
#: below everything)
LOWER = {"data": {"data"}, "nn": {"nn", "data"}, "meters": {"meters"}, "hardware": {"hardware", "nn"},
         "algorithms": {"algorithms", "nn", "data"}}


def test_lower_layers_import_nothing_above_them():
    """data/, nn/, meters/, hardware/ and algorithms/ never import the config, the drivers, reports or the CLI."""
    below = ("edgeprof", "edgeprof.atomic", "edgeprof.errors", "edgeprof.host")
    up = [(m, sorted(d for d in deps if _folder(d) not in LOWER[_folder(m)] | {""} or
                     (_folder(d) == "" and d not in below)))
          for m, deps in _import_graph().items() if _folder(m) in LOWER]
    assert [(m, d) for m, d in up if d] == []


#: the drivers and what sits above them: the run's set-up and the monitor, the in-process rounds, Flower, the CLI
SET_UP_AND_DRIVERS = {"session", "rounds", "flower", "cli"}


def test_measure_and_report_import_one_way():
    """The flow is one way, as pyinstrument's: measure/ (the sampler and the window engine) imports the meters and
    the plain results alone, never report/, the set-up or the drivers; report/ reads plain results and writes files
    and never imports measure/ (not even its types), the set-up or the drivers; the plain results
    (edgeprof/results.py) import only the errors and the meters' base. The set-up (session/) imports both."""
    graph = _import_graph()
    top = ("edgeprof.errors", "edgeprof.results")
    measure = {m: sorted(d for d in deps if _folder(d) not in {"measure", "meters", ""} or
                         (_folder(d) == "" and d not in top))
               for m, deps in graph.items() if _folder(m) == "measure"}
    report = {m: sorted(d for d in deps if _folder(d) in {"measure"} | SET_UP_AND_DRIVERS or
                        d in ("edgeprof", "edgeprof.api", "edgeprof.__main__"))
              for m, deps in graph.items() if _folder(m) == "report"}

    assert {"edgeprof.measure.profiler", "edgeprof.measure.windows"} <= set(measure) and len(report) >= 8
    assert {m: d for m, d in measure.items() if d} == {}
    assert {m: d for m, d in report.items() if d} == {}
    assert graph["edgeprof.results"] <= {"edgeprof.errors", "edgeprof.meters.base"}, graph["edgeprof.results"]
    assert {"edgeprof.measure.profiler", "edgeprof.report.schema"} <= graph["edgeprof.session.run"]


def test_the_window_engine_is_given_the_reports_phase_check(tmp_path):
    """The engine knows no report column: alone it refuses only what can name no column; a window written into a
    report (open_run, the monitor) refuses a phase named after one of the report's own columns too."""
    from edgeprof.errors import MonitorError
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.report.schema import check_phase_name
    from edgeprof.session.monitoring import monitor

    bare = Profiler(MeterSet([]))
    with bare.window("w") as win:
        with win.phase("wall"):  # columns wall_s, wall_cpu_s, wall_j: the engine alone does not know them
            pass
    with monitor(out=tmp_path, name="phases", cpu_watts=1.0) as mon:
        with mon.window("w") as mw:
            with pytest.raises(MonitorError, match="report's own column 'wall_s'"):
                with mw.phase("wall"):
                    pass

    assert "wall" in win.result.phases and bare.windows.check_phase is not check_phase_name
    assert mon._windows.check_phase is check_phase_name


def test_the_config_reads_the_layers_own_names_and_imports_no_torch():
    """The config takes the optimizers, participation modes and evaluation protocols from algorithms/ and
    re-exports no data or backbone name (their importers read edgeprof.data.names, edgeprof.nn.names)."""
    import subprocess
    import sys

    from edgeprof import config
    from edgeprof.algorithms import aggregation, contract, participants
    from edgeprof.nn import backbones
    from edgeprof.nn import names as nn_names

    owned = ("DATASETS", "FILE_DATASETS", "DEGREES", "SPLITS", "TABLE4_BACKBONES", "VISION_BACKBONES", "BACKBONES",
             "FACTORY_FORM", "factory_spec", "check_backbone")
    assert [name for name in owned if hasattr(config, name)] == []
    assert config.SERVER_OPTIMIZERS is aggregation.SERVER_OPTIMIZERS == ("adam", "sgd")
    assert config.PARTICIPATION_MODES is participants.PARTICIPATION_MODES
    assert config.EVAL_PROTOCOLS is contract.EVAL_PROTOCOLS
    assert backbones.BACKBONES is nn_names.TABLE4_BACKBONES
    probe = "import sys, edgeprof.config, edgeprof.data.names, edgeprof.nn.names; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


#: meter settings that are also another layer's word, so no literal search can tell them apart: ``gpu`` (a report
#: column, report/gpu_energy.py; as a setting, NVML's round GPU, which session/run.py gives discovery) and
#: ``cpu_model`` (the host's description, edgeprof/host.py)
SHARED_WORDS = {"gpu", "cpu_model"}


def test_no_file_outside_meters_names_a_meter_setting():
    """A meter's settings are named in its module and the registry alone: every other file of edgeprof (the config,
    the CLI, the Flower config and mod, the monitor) reads them from edgeprof.meters.registry, in either spelling
    (``cpu_watts`` as an argument or ``cpu-watts`` as a flag or a Flower key)."""
    from edgeprof.meters import registry

    declared = set(registry.settings())
    names = sorted(declared - SHARED_WORDS)
    spelled = "|".join(re.escape(s) for n in names for s in {n, n.replace("_", "-")})
    pattern = re.compile(rf"(?<![\w-])({spelled})(?![\w-])")
    outside = [p for p in _py(PACKAGE) if "meters" not in p.relative_to(PACKAGE).parts[:1]]
    found = sorted({f"{p.relative_to(PACKAGE).as_posix()}: {m}" for p in outside for m in pattern.findall(p.read_text())})

    assert {"cpu_watts", "jetson_hz"} <= set(names) and SHARED_WORDS <= declared
    assert {o.name for o in registry.options()} == {"cpu_watts", "jetson_hz"}
    assert found == [], found


#: public names with one meaning each, and where each is defined (at module level: a class or an assignment)
DEFINED_ONCE = {
    "ROW_KINDS": "report/schema.py", "TRACED_KINDS": "report/trace_view.py", "DEVICE_KINDS": "nn/compute.py",
    "Energy": "session/run.py", "EnergySection": "report/sidecar.py",
    "Monitor": "session/monitoring.py", "MonitorSection": "report/sidecar.py",
    "SERVER_OPTIMIZERS": "algorithms/aggregation.py", "PARTICIPATION_MODES": "algorithms/participants.py",
    "EVAL_PROTOCOLS": "algorithms/contract.py", "DATASETS": "data/names.py", "BACKBONES": "nn/names.py",
}


def test_each_public_name_is_defined_once_and_kinds_means_nothing_alone():
    """``KINDS`` meant three things in four places: the report's row kinds are report/schema.py's ``ROW_KINDS`` (the
    writer and ``edgeprof trace`` read them), the device kinds nn/compute.py's ``DEVICE_KINDS``; the sidecar's
    sections are ``EnergySection`` / ``MonitorSection`` beside the run's ``Energy`` and the public ``Monitor``."""
    import ast

    where: dict[str, list[str]] = {}
    for path in _py(PACKAGE):
        tree = ast.parse(path.read_text())
        names = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            names += [t.id for t in targets if isinstance(t, ast.Name)]
        for name in names:
            where.setdefault(name, []).append(path.relative_to(PACKAGE).as_posix())

    assert {name: where.get(name) for name in DEFINED_ONCE} == {n: [p] for n, p in DEFINED_ONCE.items()}
    assert "KINDS" not in where, where.get("KINDS")


def test_importing_edgeprof_sets_nothing_in_the_environment():
    """The OpenMP wait policy is the entry points' to set (edgeprof.host.prefer_passive_openmp), not an import's."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    probe = ("import os, edgeprof, edgeprof.config, edgeprof.session.monitoring, edgeprof.api, "
             "edgeprof.rounds.simulate; "
             "print(os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "None"


# ---------------------------------------------------------------------------------------------------- recipes

ARCHITECTURE_PAGE = PACKAGE.parent / "docs" / "architecture.md"


@pytest.mark.parametrize("algo", ["pflego", "fedavg"])
def test_the_device_kind_recipe_is_one_class_and_one_registry_line(tmp_path, monkeypatch, algo):
    """The architecture page's "Add a device kind" block, run as written: a round of PFLEGO and of FedAvg goes
    through the new kind (data placed once, rows labelled with it) with no other change anywhere."""
    import csv
    import sys
    import types

    from edgeprof.config import RunConfig
    from edgeprof.nn import compute as computelib
    from edgeprof.rounds.simulate import run

    text = ARCHITECTURE_PAGE.read_text()
    block = text[text.index("### Add a device kind"):]
    code = block[block.index("```python") + len("```python"):block.index("```", block.index("```python") + 9)]
    module_part, registry_part = code.split("# edgeprof/nn/compute.py, DEVICE_KINDS:")
    line = registry_part.strip().lstrip("#").strip().rstrip(",")
    name, target = (part.strip().strip('"') for part in line.split(": "))
    module = types.ModuleType(target.partition(":")[0])
    exec(module_part, module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(computelib.DEVICE_KINDS, name, target)  # the recipe's registry line
    kind_class = getattr(module, target.partition(":")[2])
    placed = []
    monkeypatch.setattr(kind_class, "to_device", lambda self, t, device: placed.append(tuple(t.shape)) or t.clone())

    cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=2,
                    participation=1.0, backbone="mlp", tau=2, rounds=2, threads=1, device=name, progress=False,
                    out=tmp_path, run_name="kind")
    rows = list(csv.DictReader(run(cfg).csv_path.open()))

    assert len(code.strip().splitlines()) <= 16 and name == "mydevice"
    assert {r["device_kind"] for r in rows} == {name} and len(rows) == 2 * (2 + 1)
    images = [s for s in placed if len(s) == 4]  # (N, C, H, W) batches of images
    assert 1 <= len(images) <= cfg.clients  # each client's images placed once per run, not once per round
    assert isinstance(computelib.kind_of(name), kind_class)


def test_the_top_level_holds_only_entry_points_and_what_every_layer_shares():
    """The flow is in packages (cli, data, nn, algorithms, rounds, session, measure, meters, hardware, report, flower);
    loose at the top: the script, the public API, the config, the errors, the host, the stop signals, whole-or-absent
    file writes (atomic) and the plain results that measure/ makes and report/ reads."""
    loose = sorted(p.stem for p in PACKAGE.glob("*.py"))
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())

    assert loose == ["__init__", "__main__", "api", "atomic", "config", "errors", "host", "results", "signals"]
    assert packages == ["algorithms", "cli", "data", "flower", "hardware", "measure", "meters", "nn", "report",
                        "rounds", "session"]


def test_one_flower_client_mod_and_one_reading_of_its_wire_format():
    """edgeprof's ClientApp mod is the one client mod (flower/energy.py's profile_mod) set up for its rounds; the
    profile record is written and read (the older format too) in flower/energy.py alone."""
    flower = {p.name: p.read_text() for p in (PACKAGE / "flower").glob("*.py")}
    mod = flower["mod.py"]

    assert "profile_mod(" in mod and "Profiler" not in mod and ".window(" not in mod
    writers = sorted(n for n, t in flower.items() if re.search(r"content\[[A-Z_]*(PROFILE|OLD)[A-Z_]*\]\s*=", t))
    readers = sorted(n for n, t in flower.items() if re.search(r"\b(OLD_METRICS|OLD_INFO|PROFILE_RECORD)\b", t))
    assert writers == ["energy.py"] and readers == ["energy.py"], (writers, readers)


def test_one_server_side_reporter():
    """Besides the algorithm's own strategy, one Strategy wrapper writes reports (flower/report.py), for edgeprof's
    ServerApp and a user's own app alike; where its rows go is its only variation (RunRows, MonitorRows)."""
    wrappers = sorted(f"{p.name}:{m}" for p in (PACKAGE / "flower").glob("*.py")
                      for m in re.findall(r"^class (\w+)\(Strategy\)", p.read_text(), flags=re.M))

    assert wrappers == ["report.py:ProfiledStrategy", "strategy.py:EdgeprofStrategy"]
    assert "ProfiledStrategy(strategy, rows=RunRows(" in (PACKAGE / "flower" / "server_app.py").read_text()


def test_the_config_imports_only_from_below():
    """config.py (at any depth: module level or inside its functions) imports the layers' names, the algorithm
    registry and their tables, and the model layer's checks; never the drivers, the measurement, reports or CLI."""
    deps = _import_graph()["edgeprof.config"]

    assert {_folder(d) for d in deps} <= {"", "data", "nn", "algorithms", "meters"}, sorted(deps)
    assert not {d for d in deps if _folder(d) == ""} - {"edgeprof", "edgeprof.errors"}, sorted(deps)


# ---------------------------------------------------------------------------------------------------- scripts

SCRIPTS = PACKAGE.parent / "scripts"


def test_every_file_under_scripts_is_named_in_its_index_and_every_name_there_is_a_file():
    """scripts/README.md names each file under scripts/ (at any depth) by its path there, in backquotes; a name in
    its tables that is no file (a script moved or removed) fails too."""
    index = (SCRIPTS / "README.md").read_text()
    files = sorted(p.relative_to(SCRIPTS).as_posix() for p in SCRIPTS.rglob("*")
                   if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts)
    named = sorted({m for m in re.findall(r"^\| `([^`]+)` \|", index, flags=re.M)})

    assert len(files) >= 20
    assert [f for f in files if f"`{f}`" not in index] == []
    assert [n for n in named if not (SCRIPTS / n).is_file()] == []


def test_ci_legs_and_the_helpers_they_source_live_with_ci():
    """Every script .ci/run calls is under .ci/ or is the README's set-up (scripts/setup.sh), and each exists."""
    ci = PACKAGE.parent / ".ci"
    called = re.findall(r"\bbash (\S+\.sh)\b", (ci / "run").read_text())
    sourced = [s for p in ci.glob("*.sh") for s in re.findall(r"^source (\S+)", p.read_text(), flags=re.M)]

    assert called and all((PACKAGE.parent / c).is_file() for c in called + sourced), (called, sourced)
    assert [c for c in called if not c.startswith(".ci/") and c != "scripts/setup.sh"] == []
    assert [s for s in sourced if not s.startswith(".ci/") and s != "scripts/torch_index.sh"] == []


# ---------------------------------------------------------------------------------------------------- the one sync

#: torch.cuda calls that only ask (a device's properties, how many there are, its memory in use): no wait, no copy
CUDA_QUERIES = {"get_device_properties", "get_device_name", "is_available", "device_count", "current_device",
                "is_initialized", "memory_allocated", "max_memory_allocated", "mem_get_info"}


def _syncs_and_moves(source: str) -> list[str]:
    """The calls in ``source`` that synchronise a device (any ``synchronize(``: torch.cuda's, a stream's, a kind's)
    or move a tensor or module between host and device (``.cuda(``, ``.cpu(``, ``.to(`` with a device or any
    positional argument, a copy or buffer ``non_blocking`` or ``pin_memory``) or run work on torch.cuda's streams
    and graphs (any ``torch.cuda.<call>`` but :data:`CUDA_QUERIES`). ``.to(dtype=...)`` and
    ``.to(memory_format=...)`` move nothing."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func, keywords = ast.unparse(node.func), {k.arg for k in node.keywords}
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        moves = attr in ("cuda", "cpu") or (attr == "to" and (node.args or keywords - {"dtype", "memory_format"}))
        cuda = re.search(r"\bcuda\.(\w+)$", func)
        if attr == "synchronize" or moves or keywords & {"non_blocking", "pin_memory"} or (
                cuda and cuda[1] not in CUDA_QUERIES):
            found.append(f"{node.lineno}: {func}(...)")
    return found


@pytest.mark.parametrize("source,caught", [
    ("torch.cuda.synchronize(device)", True),  # hardware/rates.py before it used the seam
    ("a = torch.randn(n, n).to(dev, dtype)", True),
    ("sync = lambda: torch.cuda.current_stream(dev).synchronize()", True),
    ("x.cuda()", True), ("p.detach().cpu().numpy()", True), ("b.copy_(a, non_blocking=True)", True),
    ("torch.empty(3, pin_memory=True)", True), ("torch.cuda.CUDAGraph()", True),
    ("a = compute.tensor(x).to(dtype=dtype); compute.sync()", False),
    ("torch.cuda.get_device_properties(dev); torch.backends.cuda.matmul.allow_tf32", False),
])
def test_the_one_sync_rule_catches_a_module_that_syncs_or_moves_on_its_own(source, caught):
    assert bool(_syncs_and_moves(source)) is caught, _syncs_and_moves(source)


def test_the_one_sync():
    """Only the compute seam synchronises the device or moves a tensor: no module of edgeprof outside edgeprof/nn/
    (the seam, its device kinds and the device programs that run inside it) does (the meters, the window engine,
    hardware/'s GEMM, the drivers); inside it, only compute.py (Compute.sync) and cuda.py (the CUDA kind) call
    ``synchronize(``; and the scripts (the benchmarks) call it nowhere, their waits being ``compute.sync``."""
    import ast

    outside = {p.relative_to(PACKAGE).as_posix(): _syncs_and_moves(p.read_text()) for p in _py(PACKAGE)
               if p.relative_to(PACKAGE).parts[0] != "nn"}
    syncing = sorted(p.relative_to(PACKAGE).as_posix() for p in _py(PACKAGE / "nn")
                     if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                            and n.func.attr == "synchronize" for n in ast.walk(ast.parse(p.read_text()))))
    scripts = {p.name: [f for f in _syncs_and_moves(p.read_text()) if "synchronize" in f or ".cuda." in f]
               for p in sorted(SCRIPTS.rglob("*.py"))}

    assert len(outside) >= 80 and {"hardware/rates.py", "meters/nvml.py", "measure/windows.py"} <= set(outside)
    assert {path: found for path, found in outside.items() if found} == {}
    assert syncing == ["nn/compute.py", "nn/cuda.py"]
    assert {name: found for name, found in scripts.items() if found} == {}


# ---------------------------------------------------------------------------------------------------- resolved once

def _counting(monkeypatch, module, name: str, counts: dict, key=lambda *a, **k: True) -> None:
    """``module.name`` still called, each call for which ``key(...)`` holds counted in ``counts[name]``."""
    real = getattr(module, name)

    def counted(*args, **kwargs):
        counts[name] = counts.get(name, 0) + bool(key(*args, **kwargs))
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)


def _loopback_run(tmp_path, *, device: str, execution: str, nodes: dict) -> dict:
    """A real ServerApp start (:func:`edgeprof.flower.server_app.run_server`) driving the real ClientApp of 3 nodes
    in this process, PFLEGO for 2 rounds on ``device`` with ``--execution execution``; ``nodes``: each node's
    config beyond its partition. Returns the sidecar."""
    import dataclasses
    import json

    pytest.importorskip("flwr")
    from flwr.app import Context, RecordDict

    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from test_flower_algorithms import LoopbackGrid, tiny_cfg

    cfg = dataclasses.replace(tiny_cfg("pflego", tmp_path), device=device, execution=execution)
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    contexts = {pid + 1: Context(run_id=1, node_id=pid + 1, state=RecordDict(), run_config=run_config, node_config={
        "partition-id": pid, "num-partitions": 3, "warmup": "0", **nodes[pid]}) for pid in range(3)}
    run_id = run_server(LoopbackGrid(make_client_app(), contexts), run_config)
    return json.loads((tmp_path / f"{run_id}.json").read_text())


def test_the_flower_server_builds_its_runtime_once_so_calibrate_calibrates_once(tmp_path, monkeypatch, task_identity):
    """``--execution calibrate`` on the server: one runtime (the round-0 arrays and the server steps share it), one
    calibration, ``auto`` resolved once; the nodes, told a plan and a device of their own, calibrate nothing."""
    from edgeprof.flower import strategy
    from edgeprof.nn import compute as computelib
    from edgeprof.nn import execution

    # a cache of its own: the calibration this run stores would be every later auto run's plan in this session
    monkeypatch.setenv("EDGEPROF_CACHE_DIR", str(tmp_path / "cache"))
    counts: dict = {}
    _counting(monkeypatch, execution, "calibrate", counts)
    _counting(monkeypatch, strategy, "server_runtime", counts)
    _counting(monkeypatch, computelib, "resolve_device", counts, key=lambda device: device == "auto")
    nodes = {pid: {"compute-device": "cpu", "execution": "contiguous:all"} for pid in range(3)}

    sidecar = _loopback_run(tmp_path, device="auto", execution="calibrate", nodes=nodes)

    assert sidecar["status"] == "complete"
    assert counts == {"calibrate": 1, "server_runtime": 1, "resolve_device": 1}
    assert sidecar["numerics"]["compute"]["execution"]["requested"] == "calibrate"


def test_a_flower_node_resolves_auto_once_and_its_set_up_window_waits_for_the_device(tmp_path, monkeypatch,
                                                                                     task_identity):
    """Three nodes on ``compute-device=auto`` (each its own settings, as nodes in processes of their own), one of them
    sampled in both rounds: ``auto`` is resolved once per node, never again per message; and the device the mod's
    profiler synchronises is its own from the start: the set-up window's edges wait for it too."""
    from edgeprof.nn import compute as computelib
    from test_device_sync import EdgeRecordingKind

    kind = EdgeRecordingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)
    monkeypatch.setattr(computelib, "resolve_device", lambda device, real=computelib.resolve_device: (
        resolved.append(device) or "fake:0") if device == "auto" else real(device))
    resolved: list = []
    nodes = {pid: {"compute-device": "auto", "cpu-watts": 10.0 + pid} for pid in range(3)}

    sidecar = _loopback_run(tmp_path, device="cpu", execution="contiguous:all", nodes=nodes)

    rounds = {int(t): r["accepted"] for t, r in sidecar["flower"]["rounds"].items()}
    assert sidecar["status"] == "complete" and sorted(sum(rounds.values(), [])) == [0, 0, 1, 2]
    assert resolved == ["auto"] * 3  # one per node, though node 0 trained twice
    assert ("setup", None) in kind.edges and kind.edges.count((None, None)) == 2 * 4  # set-up and client, each round
