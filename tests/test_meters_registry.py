"""The meter registry: discovery order, back-ends and report columns are one list.

A back-end defined entirely in this file (an amdsmi-like GPU meter over a file tree) is registered, found by
discovery in its place, adds its column to the report header and fills it in a profiled window's row, shows
up in ``describe()`` and ``edgeprof doctor``, and is gone again once unregistered; the package is not changed.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Mapping

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters import Backend, Domain, Meter, MeterContext, MeterSet, ProbeResult, discover, registry
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report import ReportWriter, columns_for, read_report, row_from_window
from edgeprof.report.schema import domain_columns
from docs_text import page
from fixtures_sysfs import build_rapl, fake_pynvml

NO_GPU = fake_pynvml([], init_error=9)
ROOT = Path(__file__).resolve().parents[1]
METERS_PAGE = "docs/meters.md"  # where the docs show the recipe
#: the energy columns of every report before the registry existed, in header order, NVML's gpu_other (the GPUs
#: beside the round's, since the round's GPU is known), and Apple silicon's SoC columns (since issue 41; AMD SMI's
#: GPUs share NVML's gpu and gpu_other)
TODAYS_COLUMNS = ("cpu_package", "dram", "psys", "gpu", "gpu_other", "board_total", "board_cpu", "board_gpu",
                  "board_soc", "soc_cpu", "soc_gpu", "soc_ane", "soc_dram", "soc_gpu_sram", "cpu_estimate")
#: the built-in back-ends, in discovery order
TODAYS_BACKENDS = ["rapl", "nvml", "amdsmi", "jetson", "apple", "cpu_estimate"]


# --- a back-end defined here: amdsmi-like, over a file tree ---------------------------------------------------


class FakeAmdSmi:
    """A stand-in for the amdsmi library: ``<tree>/gpu<N>/energy_accumulator`` and ``counter_resolution_uj``."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree

    def amdsmi_get_processor_handles(self) -> list[Path]:
        return sorted(self.tree.glob("gpu*"))

    def amdsmi_get_energy_count(self, handle: Path) -> dict:
        return {"energy_accumulator": int((handle / "energy_accumulator").read_text()),
                "counter_resolution": float((handle / "counter_resolution_uj").read_text())}


def set_amd_counts(tree: Path, counts: Mapping[int, int], resolution_uj: float = 15.25) -> None:
    for index, count in counts.items():
        (tree / f"gpu{index}").mkdir(parents=True, exist_ok=True)
        (tree / f"gpu{index}" / "energy_accumulator").write_text(f"{count}\n")
        (tree / f"gpu{index}" / "counter_resolution_uj").write_text(f"{resolution_uj}\n")


def amd_probe(ctx: MeterContext) -> ProbeResult:
    smi = ctx.settings["amdsmi_like_module"]
    if smi is None:
        return ProbeResult("amdsmi_like", False, "amdsmi is not installed", "pip install amdsmi (ships with ROCm)")
    handles = smi.amdsmi_get_processor_handles()
    if not handles:
        return ProbeResult("amdsmi_like", False, "amdsmi found no AMD GPU", "check that rocm-smi lists the GPU")
    return ProbeResult("amdsmi_like", True, domains=tuple(f"gpu_amd_{i}" for i in range(len(handles))))


class AmdSmiLikeMeter(Meter):
    """Cumulative joules per AMD GPU: energy accumulator counts times the counter resolution."""

    name = "amdsmi_like"
    update_period_s = 0.001

    def __init__(self, ctx: MeterContext) -> None:
        self.settings = dict(ctx.settings)  # what reached it
        self._smi = ctx.settings["amdsmi_like_module"]
        self._handles = tuple(self._smi.amdsmi_get_processor_handles())
        self._start_uj = [self._uj(h) for h in self._handles]

    def _uj(self, handle: Path) -> float:
        count = self._smi.amdsmi_get_energy_count(handle)
        return count["energy_accumulator"] * count["counter_resolution"]

    def domains(self) -> tuple[Domain, ...]:
        return tuple(Domain(f"gpu_amd_{i}", "gpu_amd", "counter") for i in range(len(self._handles)))

    def read_j(self) -> Mapping[str, float]:
        return {f"gpu_amd_{i}": (self._uj(h) - start) / 1e6
                for i, (h, start) in enumerate(zip(self._handles, self._start_uj))}


AMD = Backend(name="amdsmi_like", title="an AMD SMI-like meter", columns=("gpu_amd",), probe=amd_probe,
              open=AmdSmiLikeMeter, settings={"amdsmi_like_module": None})


class ConstantMeter(Meter):
    """A meter that always reads ``joules`` on each of its domains (for roles and declarations)."""

    def __init__(self, name: str, domains: tuple[Domain, ...], joules: float = 1.0) -> None:
        self.name, self._domains, self._joules = name, domains, joules

    def domains(self) -> tuple[Domain, ...]:
        return self._domains

    def read_j(self) -> Mapping[str, float]:
        return {d.name: self._joules for d in self._domains}


def constant_backend(name: str, column: str, **role) -> Backend:
    return Backend(name=name, title=f"the {name} meter", columns=(column,),
                   probe=lambda ctx: ProbeResult(name, True, domains=(name,)),
                   open=lambda ctx: ConstantMeter(name, (Domain(name, column, "counter"),)), **role)


# --- tests ------------------------------------------------------------------------------------------------------


def test_the_registry_keeps_todays_order_and_report_columns():
    names = [b.name for b in registry.backends()]

    assert names == TODAYS_BACKENDS
    assert registry.report_columns() == TODAYS_COLUMNS
    assert domain_columns() == tuple(f"{c}_{unit}" for c in TODAYS_COLUMNS for unit in ("j", "method"))
    assert all(re.fullmatch(r"edgeprof\.meters\.\w+:BACKEND", line) for line in registry.BACKENDS)


@pytest.mark.parametrize(("rapl_layout", "meters"),
                         [(None, ["amdsmi_like", "cpu_estimate"]), ("one_socket", ["rapl", "amdsmi_like"])],
                         ids=["amd-only", "rapl+amd"])
def test_a_backend_defined_here_is_discovered_in_its_place(tmp_path, rapl_layout, meters):
    if rapl_layout:
        build_rapl(tmp_path, rapl_layout)
    set_amd_counts(tmp_path / "amd", {0: 0})
    smi = FakeAmdSmi(tmp_path / "amd")

    with registry.registered(AMD, before="jetson"):
        with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, amdsmi_like_module=smi) as found:
            names = [m.name for m in found.meters]
            probes = [p.meter for p in found.probes]
            described = {m["name"]: m for m in found.describe()["meters"]}
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as after:
        probes_after = [p.meter for p in after.probes]

    assert names == meters  # AMD does not measure the CPU: the estimate stands in unless RAPL does
    assert probes == ["rapl", "nvml", "amdsmi", "amdsmi_like", "jetson", "apple", "cpu_estimate"]
    assert described["amdsmi_like"]["domains"] == [{"name": "gpu_amd_0", "column": "gpu_amd", "method": "counter",
                                               "in_total": True}]
    assert probes_after == TODAYS_BACKENDS


def test_its_column_joins_the_header_and_a_profiled_window_fills_it(tmp_path):
    tree = tmp_path / "amd"
    set_amd_counts(tree, {0: 1_000, 1: 5_000})

    with registry.registered(AMD, before="jetson"):
        header = columns_for(("local_steps",))
        meters = discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, cpu_watts=2.0,
                          amdsmi_like_module=FakeAmdSmi(tree))
        # The fake's read (four small file reads, ~0.15 ms) sits near SLOW_READ_S, so discovery may time it either
        # side of the line on a given CPU; this test is about the column, not the series (tests/test_undisturbed.py), so
        # it is read at the edges, where the step in its counter falls wholly inside the phase that made it.
        meters.read_cost_s["amdsmi_like"] = 0.0
        with meters, Profiler(meters, rss=PeakRss(tmp_path / "no-proc")).window("client") as win:
            with win.phase("local_steps"):
                set_amd_counts(tree, {0: 201_000, 1: 45_000})  # 200,000 + 40,000 counts of 15.25 uJ
        with ReportWriter(tmp_path / "r.csv", header) as writer:
            writer.write(row_from_window(win.result, {"run_id": "r", "kind": "client"}))
    row = read_report(tmp_path / "r.csv").rows[0]

    at = header.index("gpu_amd_j")
    assert header[at - 1:at + 3] == ("gpu_other_method", "gpu_amd_j", "gpu_amd_method", "board_total_j")
    assert float(row["gpu_amd_j"]) == pytest.approx(240_000 * 15.25e-6, rel=1e-5)
    assert row["gpu_amd_method"] == "counter" and row["energy_method"] == "counter+estimate"
    assert row["cpu_package_j"] == "" and row["local_steps_j"] != ""
    assert "gpu_amd_j" not in columns_for(("local_steps",))  # unregistered again


@pytest.mark.parametrize(("tree", "status"), [(True, "found"), (False, "not found")])
def test_doctor_lists_a_registered_backend(tmp_path, tree, status):
    if tree:
        set_amd_counts(tmp_path / "amd", {0: 0})

    with registry.registered(AMD, before="jetson"):
        rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU,
                             amdsmi_like_module=FakeAmdSmi(tmp_path / "amd"))
    amd = {r["meter"]: r for r in rows}["amdsmi_like"]

    assert amd["status"] == status
    assert amd["domains"] == (["gpu_amd_0"] if tree else []) and bool(amd["fix"]) is not tree
    assert "amdsmi_like" in render_doctor(rows)


@pytest.fixture(scope="module")
def doctor_here(tmp_path_factory) -> str:
    """What ``edgeprof doctor`` prints on this machine: the real CLI in a process of its own, this checkout first
    on its path, the machine's own libraries (no fake), an empty sysfs root."""
    env = {**os.environ, "EDGEPROF_SYSFS_ROOT": str(tmp_path_factory.mktemp("sysfs")),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "edgeprof", "doctor"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _doctor_block(text: str, meter: str) -> dict[str, str]:
    """The status and the ``why:``/``fix:`` lines of ``meter`` in ``edgeprof doctor``'s output."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [meter])
    block = {"status": lines[start][len(meter):].strip()}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        key, _, value = line.strip().partition(":")
        block.setdefault(key, value.strip())
    return block


@pytest.mark.parametrize(("meter", "why", "fix", "absent_here"), [
    ("amdsmi", "amdsmi is not installed", "pip install 'edgeprof[amd]'", importlib.util.find_spec("amdsmi") is None),
    ("apple", f"not an Apple silicon Mac ({sys.platform}, ", "pip install 'edgeprof[apple]'", sys.platform != "darwin"),
], ids=["amdsmi", "apple"])
def test_doctor_here_lists_amd_and_apple_with_why_and_how_to_fix(doctor_here, meter, why, fix, absent_here):
    if not absent_here:
        pytest.skip(f"{meter}'s library or machine is here: this test checks what doctor says where it is not")

    block = _doctor_block(doctor_here, meter)

    assert block["status"] == "NOT FOUND"
    assert block["why"].startswith(why) and fix in block["fix"]


def test_a_cpu_measuring_backend_registered_last_stands_the_estimate_down(tmp_path):
    with registry.registered(constant_backend("powermetrics", "apple_cpu", measures_cpu=True)):
        with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as found:
            names = [m.name for m in found.meters]
            probes = {p.meter: p for p in found.probes}
            not_used = found.describe()["not_used"]

    assert names == ["powermetrics"]
    assert list(probes) == [*TODAYS_BACKENDS, "powermetrics"]
    assert not_used == [{"meter": "cpu_estimate",
                         "reason": "not needed: CPU energy is measured by the powermetrics meter"}]


def test_discover_takes_only_the_settings_registered_backends_declare(tmp_path):
    with pytest.raises(TypeError, match="amdsmi_like_module"):
        discover(sysfs_root=str(tmp_path), amdsmi_like_module=None)
    with registry.registered(AMD):
        with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, amdsmi_like_module=None) as found:
            reason = {p.meter: p.reason for p in found.probes}["amdsmi_like"]

    assert reason == "amdsmi is not installed"


@pytest.mark.parametrize(
    ("make", "error"),
    [(lambda: registry.register(constant_backend("rapl", "psys")), "already registered"),
     (lambda: registry.register(AMD, before="no_such_meter"), "no meter back-end named 'no_such_meter'"),
     (lambda: constant_backend("both", "x", measures_cpu=True, cpu_fallback=True), "both measure the CPU"),
     (lambda: constant_backend("bad", "GPU-AMD"), "lower-case report columns")],
    ids=["duplicate-name", "unknown-before", "two-roles", "bad-column"],
)
def test_the_registry_refuses_what_it_cannot_place(make, error):
    with pytest.raises(ValueError, match=error):
        make()

    assert [b.name for b in registry.backends()] == TODAYS_BACKENDS


def test_a_meter_outside_its_declaration_is_refused(tmp_path):
    liar = Backend(name="liar", title="a liar", columns=("gpu_amd",), probe=lambda ctx: ProbeResult("liar", True),
                   open=lambda ctx: ConstantMeter("liar", (Domain("liar_0", "gpu", "counter"),)))

    with registry.registered(liar), pytest.raises(MeterError, match=r"columns it does not declare: \['gpu'\]"):
        discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    with pytest.raises(MeterError, match="'nowhere', which no registered back-end declares"):
        MeterSet([ConstantMeter("stray", (Domain("stray_0", "nowhere", "counter"),))])


def _code_without_docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


@pytest.mark.parametrize("module", ["meters/discovery.py", "meters/doctor.py", "report/schema.py"])
def test_discovery_doctor_and_schema_name_no_backend_or_column(module):
    code = _code_without_docstrings(ROOT / "edgeprof" / module)
    words = {b.name for b in registry.backends()} | set(registry.report_columns())

    named = sorted(w for w in words if re.search(rf"\b{w}\b", code))

    assert not named, f"{module} names {named}"


def _recipe() -> list[str]:
    lines = page(METERS_PAGE).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("**How to add a meter**"))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


def test_the_docs_recipe_adds_a_meter_in_ten_lines(tmp_path, monkeypatch):
    recipe = _recipe()
    code = recipe[recipe.index("```python") + 1:recipe.index("```")]
    split = next(i for i, line in enumerate(code) if line.startswith("# edgeprof/meters/registry.py"))
    module = types.ModuleType("edgeprof.meters.amdsmi_like")  # the recipe's module, over this file's probe and meter
    module.__dict__.update(Backend=Backend, probe=amd_probe, AmdSmiLikeMeter=AmdSmiLikeMeter)
    exec("\n".join(code[:split]), module.__dict__)
    monkeypatch.setitem(sys.modules, "edgeprof.meters.amdsmi_like", module)
    line = ast.literal_eval(code[split + 1].strip().rstrip(","))
    set_amd_counts(tmp_path / "amd", {0: 0})
    smi = FakeAmdSmi(tmp_path / "amd")

    with registry.registered(line, before="jetson"):  # the recipe's registry line
        with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, amdsmi_like_module=smi) as found:
            names = [m.name for m in found.meters]
        header = columns_for(())

    assert len(recipe) <= 10
    assert line.split(":")[0] == module.__name__ and "edgeprof/meters/registry.py" in code[split]
    assert names == ["amdsmi_like", "cpu_estimate"] and "gpu_amd_method" in header


def test_a_meter_option_declared_in_its_backend_reaches_it_from_every_front_door(tmp_path, monkeypatch):
    """The recipe's option (``amd_hz``, declared in the BACKEND's settings and nowhere else) reaches the meter
    through one EnergySettings value from the CLI's --meter-setting, a RunConfig, a Flower run config's round
    trip and a Flower node config; an option no meter declares is one ConfigError line."""
    from edgeprof.config import EnergySettings, RunConfig
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import from_run_config, node_overrides, to_run_config
    from edgeprof.cli.options import run_config
    from edgeprof.session.run import open_meters

    backend = Backend(name="amdsmi_like", title="an AMD SMI-like meter", columns=("gpu_amd",), probe=amd_probe,
                      open=AmdSmiLikeMeter, settings={"amdsmi_like_module": None, "amd_hz": 10.0})
    set_amd_counts(tmp_path / "amd", {0: 0})
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path))
    smi = FakeAmdSmi(tmp_path / "amd")

    with registry.registered(backend, before="jetson"):
        from_cli = run_config({"meter_setting": ["amd_hz=20"], "out": tmp_path})
        flower, _ = from_run_config(to_run_config(from_cli))
        node = node_overrides(RunConfig(), {"meter-settings": "amd_hz=40"})
        opened = []
        for cfg in (from_cli, flower, node):
            energy = EnergySettings(meters={**cfg.energy.meter_settings, "amdsmi_like_module": smi,
                                            "nvml_module": NO_GPU})
            with open_meters(RunConfig(energy=energy)) as meters:
                opened += [m.settings["amd_hz"] for m in meters.meters if m.name == "amdsmi_like"]
        with pytest.raises(ConfigError, match="unknown meter setting.*amd_hx"):
            run_config({"meter_setting": ["amd_hx=20"]})
        # a misspelt name with no value is refused too (it was dropped as "not set", silently), on a node too
        with pytest.raises(ConfigError, match="unknown meter setting.*amd_hx"):
            run_config({"meter_setting": ["amd_hx="]})
        with pytest.raises(ConfigError, match="unknown meter setting.*amd_hx"):
            node_overrides(RunConfig(), {"meter-settings": "amd_hz=40,amd_hx="})
        assert "amd_hz" not in node_overrides(RunConfig(), {"meter-settings": "amd_hz="}).energy.meter_settings
        # the monitor's front door: a declared setting reaches its config; a misspelt one, even as None, is refused
        import edgeprof

        assert edgeprof.monitor(out=tmp_path, meter_settings={"amd_hz": 30.0}).config.energy.meter_settings \
            == {"amd_hz": 30.0}
        with pytest.raises(ConfigError, match="unknown meter setting.*amd_hx"):
            edgeprof.monitor(out=tmp_path, meter_settings={"amd_hx": None})

    assert opened == [20.0, 20.0, 40.0]
    with pytest.raises(ConfigError, match="unknown meter setting"):  # unregistered: no meter declares it
        EnergySettings(meters={"amd_hz": 20.0})
