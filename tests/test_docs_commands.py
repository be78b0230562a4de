"""Every ``edgeprof ...`` command the README and the docs site show in a code block is run by a test.

``RUNS`` lists each shown command once. A ``Here`` entry is run by this file as shown, with its placeholders
filled (``profiles/<run>.csv`` becomes a report made first, ``mynets`` the page's own ``mynets.py``, ``data`` a
folder of files in the data set's official format) and, where the command as shown runs for minutes, smaller
sizes appended (a later option wins). An ``Elsewhere`` entry names the test that runs it; that test must exist and
its source must name the command's subcommand and every one of its options. A command shown in the docs and
missing from ``RUNS`` fails here, and so does an entry no page shows any more.

The docs site itself: ``mkdocs build --strict`` passes (skipped, saying so, where the ``docs`` extra is not
installed), every relative link of the README reaches a page and a heading, the README stays a front door
(at most 250 lines, opening with the two set-up commands CI relies on), and every ``python scripts/...`` command
shown names a script that declares each option shown.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.algorithms import ALGORITHMS
from edgeprof.cli import app

from docs_text import DOCS, README, ROOT, edgeprof_commands, fenced_blocks, page, pages, shell_lines

SHRINK_MEASURE = ("--rounds", "1", "--tau", "2")
SHRINK_SWEEP = ("--taus", "1,2", "--repeats", "1", "--samples-per-client", "24")


@dataclass(frozen=True)
class Here:
    """Run by ``test_the_command_runs_as_shown``: ``given`` is what it needs first, ``smaller`` the options
    appended to make a long run short, ``codes`` the exit codes it may end with."""
    given: str = ""
    smaller: tuple[str, ...] = ()
    codes: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Elsewhere:
    """Run by the test ``path::function``."""
    test: str


FLOWER_APP = ("edgeprof flower-app-dir myapp --clients 4 --tau 50 --rounds 20 --participation 0.5 --dataset digits "
              "--backbone cnn-omniglot --out /srv/edgeprof/profiles")
FLOWER_QUICK_START = ("edgeprof flower-app-dir quickstart --insecure --clients 2 --participation 1 --rounds 2 --tau 5 "
                      "--out profiles")
FLOWER_CERTS = "edgeprof flower-certs certs --name localhost --name 127.0.0.1 --name server.lab --name 10.0.0.5"
TRACE_PAGE = "tests/test_trace_view.py::test_the_commands_the_power_trace_page_shows"
TO_TARGET_RUN = "tests/test_energy_to_target.py::test_a_small_digits_run_names_each_algorithms_energy_optimal_tau"
RUNS: dict[str, Here | Elsewhere] = {
    # the first command of the README and of Getting started, run exactly as shown
    "edgeprof measure --algo pflego --tau 50": Here(),
    "edgeprof measure --algo fedavg --tau 50": Here(smaller=SHRINK_MEASURE),
    "edgeprof measure --help": Here(),
    "edgeprof summary profiles/<run>.csv": Here(given="report"),
    "edgeprof export --backbone cnn-omniglot": Here(),
    "edgeprof algos": Here(),
    "edgeprof measure --algo pflego --tau 50 --execution calibrate": Here(smaller=SHRINK_MEASURE),
    "edgeprof measure --algo fedavg --tau 50 --execution contiguous:all": Here(smaller=SHRINK_MEASURE),
    "edgeprof measure --dataset synthetic --synthetic-samples 2000 --synthetic-classes 10": Here(smaller=SHRINK_MEASURE),
    "edgeprof measure --dataset mnist --data-dir data --split paper": Here(given="mnist", smaller=SHRINK_MEASURE),
    "edgeprof train --algos pflego,fedavg --taus 1,10 --seeds 0,1 --target-accuracy 0.8 --rounds 5 --clients 4 "
    "--participation 0.5 --threads 1 --run-name digits": Elsewhere(TO_TARGET_RUN),
    "edgeprof summary profiles/digits-*.csv": Elsewhere(TO_TARGET_RUN),
    "edgeprof sweep --algos pflego,fedavg --backbone mlp --taus 1,5,10 --run-name sweep-jetson": Here(
        smaller=SHRINK_SWEEP),
    "edgeprof train --algos pflego,fedavg --taus 1,10 --seeds 0,1 --target-accuracy 0.8 --rounds 5 --clients 4 "
    "--participation 0.5 --cost-from profiles/sweep-jetson.csv": Elsewhere(TO_TARGET_RUN),
    "edgeprof train --algos pflego,fedavg,fedper --rounds 100 --tau 25 --clients 20 --target-accuracy 0.95":
        Here(smaller=("--rounds", "2", "--tau", "2", "--no-progress")),
    # --check exits 8 when a verdict is not shown, which so short a sweep may well give
    "edgeprof sweep --algos pflego,fedavg --check": Here(smaller=SHRINK_SWEEP, codes=(0, 8)),
    "edgeprof sweep --algos pflego,fedavg --engines onnx,torch-reuse --taus 1,5,10,25,50,100 --repeats 3":
        Here(smaller=SHRINK_SWEEP),
    "edgeprof dashboard profiles/sweep-*.csv --out profiles --name report": Here(given="sweep"),
    "edgeprof dashboard profiles/<run>.csv": Here(given="report"),
    "edgeprof summary profiles/reference/sweep-cnn-omniglot-600.csv": Here(given="repository"),
    "edgeprof doctor": Here(),
    "edgeprof doctor --cpu-watts 12": Here(),
    "edgeprof measure --algo pflego --tau 50 --country FRA --idle-seconds 5":
        Here(smaller=(*SHRINK_MEASURE, "--idle-seconds", "0.5")),
    "edgeprof measure --backbone mynets:edge_cnn": Here(given="mynets", smaller=SHRINK_MEASURE),
    "edgeprof measure --backbone mynets:edge_cnn --algo pflego": Here(given="mynets", smaller=SHRINK_MEASURE),
    "edgeprof measure --backbone path/to/mynets.py:edge_cnn": Here(given="mynets", smaller=SHRINK_MEASURE),
    "edgeprof export --backbone mynets:edge_cnn --dataset cifar10": Here(given="mynets"),
    "edgeprof sweep --backbone mobilenet_v3_small --dataset cifar10 --data-dir data":
        Here(given="cifar10 and torchvision", smaller=SHRINK_SWEEP),
    "edgeprof measure --backbone examples.own_loop.model:factory --algo pflego":
        Elsewhere("tests/test_examples.py::test_the_own_loop_model_is_a_backbone_for_measure"),
    # the own loop's report, read back by the commands its page shows, in the test that runs the loop
    **{f"edgeprof {command} profiles/own-loop-<time>-<random>.csv{tail}": Elsewhere(
        "tests/test_examples.py::test_the_own_loops_report_is_read_back_by_summary_trace_and_dashboard")
       for command, tail in (("summary", ""), ("trace", " --window epoch --round 2"), ("dashboard", ""))},
    "edgeprof summary profiles/pytorch-mlp-<time>-<random>.csv": Here(given="monitor"),
    "edgeprof dashboard profiles/pytorch-mlp-<time>-<random>.csv": Here(given="monitor"),
    FLOWER_APP: Here(given="server folder"),
    FLOWER_QUICK_START: Here(),
    FLOWER_CERTS: Here(),
    "edgeprof summary /srv/edgeprof/profiles/<run>.csv": Here(given="server report"),
    # Flower's simulation runtime starts a SuperLink and Ray: about 20 s even for one round of two local steps
    "edgeprof flower-simulate --clients 50 --participation 0.1 --client-cpus 1 --threads 1 --tau 50 --rounds 20":
        Here(given="flower home", smaller=SHRINK_MEASURE),
    # docs/power-trace.md: traced runs, the text view and the dashboard, smaller, in the trace view's own test
    'edgeprof measure --algo pflego --tau 50 --trace':
        Elsewhere(TRACE_PAGE),
    'edgeprof measure --algo fedavg --tau 50 --trace --trace-hz 100':
        Elsewhere(TRACE_PAGE),
    'edgeprof trace profiles/<run>.csv':
        Elsewhere(TRACE_PAGE),
    'edgeprof trace profiles/<run>.csv --round 2 --kind server':
        Elsewhere(TRACE_PAGE),
    'edgeprof trace profiles/<run>.csv --round 3 --client 4':
        Elsewhere(TRACE_PAGE),
    'edgeprof dashboard profiles/<pflego-run>.csv profiles/<fedavg-run>.csv --out profiles --name trace':
        Elsewhere(TRACE_PAGE),
    'edgeprof measure --algo pflego --tau 50 --trace --out profiles/reference --run-name trace-pflego-tau50':
        Elsewhere(TRACE_PAGE),
    'edgeprof measure --algo fedavg --tau 50 --trace --out profiles/reference --run-name trace-fedavg-tau50':
        Elsewhere(TRACE_PAGE),
    'edgeprof dashboard profiles/reference/trace-pflego-tau50.csv profiles/reference/trace-fedavg-tau50.csv --out profiles/reference --name trace-dashboard --title "edgeprof reference power trace: PFLEGO and FedAvg at tau=50, digits, 2-core CPU"':
        Elsewhere(TRACE_PAGE),
    'edgeprof trace profiles/reference/trace-pflego-tau50.csv':
        Elsewhere(TRACE_PAGE),
    # docs/gpus.md: the GPU check's folder, unpacked where plotly is installed
    'edgeprof dashboard profiles/reference/gpu-h100/gpu-check-cnn-omniglot.csv --out profiles/reference/gpu-h100 --name dashboard-cnn-omniglot --title "edgeprof GPU check: cnn-omniglot"':
        Elsewhere("tests/test_gpu_check.py::test_a_dry_run_on_the_cpu_without_what_a_cuda_image_lacks_writes_every_figure"),
}
#: what ``flower-app-dir`` prints is also started on loopback, SuperLink, SuperNodes and submit, with TLS and without;
#: the TLS files are also served and checked by a TLS client
ALSO_RUN_ELSEWHERE = {
    FLOWER_APP: "tests/test_flower_commands.py::test_printed_commands_start_connect_and_finish_a_run_on_loopback",
    FLOWER_QUICK_START:
        "tests/test_flower_commands.py::test_printed_commands_start_connect_and_finish_a_run_on_loopback",
    FLOWER_CERTS: "tests/test_flower_certs.py::"
                  "test_the_four_files_chain_to_the_ca_name_every_given_name_and_keep_the_keys_private"}

SHOWN = sorted({command for _, command in edgeprof_commands()})
HERE = sorted(c for c in SHOWN if isinstance(RUNS.get(c), Here))
ELSEWHERE = sorted(c for c in SHOWN if isinstance(RUNS.get(c), Elsewhere))


# ------------------------------------------------------------------------------------------ the table itself

def test_every_shown_command_is_in_the_table_and_every_entry_is_shown():
    shown_on = {}
    for name, command in edgeprof_commands():
        shown_on.setdefault(command, name)

    assert len(SHOWN) >= 20  # the collection finds the commands the pages show
    assert sorted(c for c in SHOWN if c not in RUNS) == [], "a command the docs show that no test runs"
    assert sorted(c for c in RUNS if c not in shown_on) == [], "a table entry that no page shows"


def _test_source(reference: str) -> str:
    path, _, name = reference.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    assert found, f"{reference} does not exist"
    return ast.get_source_segment((ROOT / path).read_text(), found[0])


@pytest.mark.parametrize("command,reference",
                         [(c, RUNS[c].test) for c in ELSEWHERE] + sorted(ALSO_RUN_ELSEWHERE.items()))
def test_the_test_named_for_a_command_runs_its_subcommand_and_options(command, reference):
    source = _test_source(reference)
    argv = shlex.split(command)

    assert f'"{argv[1]}"' in source, f"{reference} does not run `edgeprof {argv[1]}`"
    assert [o for o in argv if o.startswith("--") and f'"{o}"' not in source] == []


# --------------------------------------------------------------------------------- the commands, run here

def _mynets_block() -> str:
    """The ``mynets.py`` the "Your own backbone" section shows."""
    (code,) = [body for info, body in fenced_blocks(page("docs/own-code.md"))
               if info == "python" and body.startswith("# mynets.py\n")]
    return code


def _write_mnist(folder: Path, train: int = 400, test: int = 100) -> None:
    """The four MNIST IDX files (random pixels, every class present in both parts) in ``folder``."""
    from test_data_files import write_idx

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", train), ("t10k", test)):
        write_idx(folder / f"{stem}-images-idx3-ubyte", rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8))
        write_idx(folder / f"{stem}-labels-idx1-ubyte", (np.arange(n) % 10).astype(np.uint8))


def _torchvision_imports() -> bool:
    try:
        import torchvision.models  # noqa: F401
    except Exception:  # not installed, or a build for another torch
        return False
    return True


def _miniature_torchvision():
    """A ``torchvision`` module whose ``models.mobilenet_v3_small`` has MobileNet's layout in miniature (the first
    convolution at ``features[0][0]``, a pooled feature map, a ``classifier``), for where the real one does not
    import: the command's path (sweep, CIFAR-10 files, the adaptation of a torchvision model) runs all the same."""
    import types

    from torch import nn

    class MiniMobileNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 3, 2, 1, bias=False), nn.BatchNorm2d(4),
                                                        nn.Hardswish()))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(4, 10), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(10, 1000))

        def forward(self, x):
            return self.classifier(self.avgpool(self.features(x)).flatten(1))

    fake = types.ModuleType("torchvision")
    fake.models = types.SimpleNamespace(mobilenet_v3_small=lambda **kwargs: MiniMobileNet())
    return fake


def _make_report(out: Path, name: str) -> Path:
    result = CliRunner().invoke(app, ["measure", "--dataset", "synthetic", "--synthetic-samples", "120",
                                      "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "3",
                                      "--participation", "1", *SHRINK_MEASURE, "--threads", "1", "--no-progress",
                                      "--run-name", name, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / f"{name}.csv"


def _given(what: str, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """Prepare what a command needs; returns the placeholders of its words and what they become."""
    if what == "report":
        return {"profiles/<run>.csv": str(_make_report(tmp_path / "profiles", "shown"))}
    if what == "server report":
        report = _make_report(tmp_path / "srv" / "edgeprof" / "profiles", "federation")
        return {"/srv/edgeprof/profiles/<run>.csv": str(report)}
    if what == "server folder":
        return {"/srv/edgeprof/profiles": str(tmp_path / "srv" / "edgeprof" / "profiles")}
    if what == "sweep":
        result = CliRunner().invoke(app, ["sweep", "--backbone", "mlp", *SHRINK_SWEEP, "--threads", "1",
                                          "--no-progress", "--out", "profiles"])
        assert result.exit_code == 0, result.output
        return {}
    if what == "repository":
        return {"profiles/reference/": f"{ROOT}/profiles/reference/"}
    if what == "mynets":
        for folder in (tmp_path, tmp_path / "path" / "to"):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "mynets.py").write_text(_mynets_block())
        monkeypatch.delitem(sys.modules, "mynets", raising=False)
        return {}
    if what == "mnist":
        _write_mnist(tmp_path / "data")
        return {}
    if what == "cifar10 and torchvision":
        from test_data_files import write_cifar

        if not _torchvision_imports():  # a miniature of its layout at its module boundary (the real one: vision leg)
            monkeypatch.setitem(sys.modules, "torchvision", _miniature_torchvision())
        write_cifar(tmp_path / "data" / "cifar-10-batches-py", per_batch=40)
        return {}
    if what == "monitor":
        spec = importlib.util.spec_from_file_location("profile_pytorch", ROOT / "examples" / "profile_pytorch.py")
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        csv = example.main(epochs=1, batches=2, out="profiles")
        return {"profiles/pytorch-mlp-<time>-<random>.csv": csv}
    if what == "flower home":
        monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
        return {}
    assert what == "", f"nothing prepares {what!r}"
    return {}


def _argv(command: str, filled: dict[str, str], smaller: tuple[str, ...]) -> list[str]:
    argv = []
    for word in shlex.split(command)[1:]:
        for placeholder, value in filled.items():
            word = word.replace(placeholder, value)
        if "*" in word:  # the shell's glob
            matches = sorted(str(p) for p in Path().glob(word))
            assert matches, f"{word} matches nothing"
            argv += matches
        else:
            argv.append(word)
    assert not [w for w in argv if "<" in w], f"a placeholder is left in {argv}"
    return argv + list(smaller)


def _option(argv: list[str], name: str, default: str) -> str:
    values = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == name]
    return values[-1] if values else default


def _complete_reports(folder: Path) -> list[dict]:
    sidecars = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    return [s for s in sidecars if s.get("status") == "complete" and s.get("rows")]


def _check_outcome(argv: list[str], output: str, tmp_path: Path) -> None:
    """What the command must have done, beyond its exit code."""
    sub = argv[0]
    if "--help" in argv:
        assert f" {sub} [OPTIONS]" in " ".join(output.split()) and "--algo" in output
    elif sub in ("measure", "train", "sweep", "flower-simulate"):
        out = tmp_path / _option(argv, "--out", "profiles")
        assert _complete_reports(out), f"no complete report in {out}: {output}"
        if sub == "flower-simulate":  # its summary, as measure's, says that the clients share this machine
            assert "median per" in output and "clients share one machine (Flower simulation)" in output, output
    elif sub == "export":
        assert list((tmp_path / _option(argv, "--out", "models")).glob("*.onnx")), output
    elif sub == "summary":
        assert "median per" in output and "report: " in output
    elif sub == "dashboard":
        pages_written = list(tmp_path.rglob("*.html"))
        assert pages_written and all(p.stat().st_size > 100_000 for p in pages_written), output
    elif sub == "algos":
        assert all(name in output for name in ALGORITHMS)
    elif sub == "doctor":
        assert "cpu_estimate" in output and "FOUND" in output
        if "--cpu-watts" in argv:
            assert "12 W per busy core" in output
    elif sub == "flower-app-dir":
        assert (tmp_path / argv[1] / "pyproject.toml").is_file() and "flower-superlink" in output
    elif sub == "flower-certs":
        assert sorted(p.name for p in (tmp_path / argv[1]).iterdir()) == ["ca.crt", "ca.key", "server.key",
                                                                          "server.pem"], output
    else:
        pytest.fail(f"no outcome check for `edgeprof {sub}`")


@pytest.mark.parametrize("command", HERE, ids=[c.replace(" ", "_")[9:70] for c in HERE])
def test_the_command_runs_as_shown(command, tmp_path, monkeypatch):
    run = RUNS[command]
    monkeypatch.chdir(tmp_path)
    filled = _given(run.given, tmp_path, monkeypatch)
    argv = _argv(command, filled, run.smaller)

    if argv[0] == "flower-simulate":  # Ray's processes: the installed script, in its own process
        pytest.importorskip("flwr", reason="the dev extra leaves Flower out on Python 3.10")
        done = subprocess.run([sys.executable, "-m", "edgeprof", *argv], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        code, output = done.returncode, done.stdout + done.stderr
    else:
        result = CliRunner().invoke(app, argv)
        code, output = result.exit_code, result.output

    assert code in run.codes, output
    _check_outcome(argv, output, tmp_path)


def test_the_readme_and_the_first_page_begin_with_the_two_commands():
    expected = ["bash scripts/setup.sh && .venv/bin/edgeprof measure --algo pflego --tau 50",
                "bash scripts/setup.sh && .venv/bin/python -m pytest"]
    text = README.read_text()

    info, body = fenced_blocks(text)[0]
    setup = text.index("\n## Set-up and the two commands\n")

    assert len(text.splitlines()) <= 250
    assert setup == text.index("\n## ")  # the first section of the README
    assert info == "bash" and shell_lines(f"```bash\n{body}```\n") == expected
    assert setup < text.index("```bash") < text.index("\n## ", setup + 1)  # the first block is that section's
    assert shell_lines(page("docs/index.md"))[:2] == expected
    # CI runs the README's test command (.ci/run), with its quiet flags
    assert ".venv/bin/python -m pytest" in (ROOT / ".ci" / "run").read_text()


def test_the_python_the_readme_and_first_page_ask_for_is_the_one_pyproject_allows_from():
    """The lowest CI leg builds its environment on the Python requires-python starts at (plain_install_check.sh):
    the version a reader is told is that one."""
    floor = re.search(r'^requires-python = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    for text in (README.read_text(), page("docs/index.md")):
        said = re.findall(r"\(Python (3\.\d+)\+", text)
        assert said and {f">={v}" for v in said} == {floor}, (said, floor)


def test_no_dated_notebook_in_the_readme():
    text = README.read_text()

    assert re.findall(r"\b20\d\d-\d\d-\d\d\b", text) == []
    assert re.findall(r"load average|GFLOP/s", text) == []


def _slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def test_every_relative_link_of_the_readme_reaches_a_page_and_a_heading():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link for link in links if not re.match(r"\w+://", link)]

    assert len(local) >= 10
    for link in local:
        target, _, anchor = link.partition("#")
        path = ROOT / target
        assert path.is_file(), link
        if anchor:
            headings = re.findall(r"^#{1,6} (.+)$", path.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, link


def test_every_docs_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()

    assert sorted(p.name for p in DOCS.glob("*.md") if f" {p.name}" not in nav) == []


def test_every_script_command_shown_names_a_script_and_only_options_it_declares():
    shown = [line for path in pages() for line in shell_lines(path.read_text())
             if re.search(r"\bpython (scripts|examples)/\S+\.py", line)]

    assert len(shown) >= 3
    for line in shown:
        words = shlex.split(line)
        script = next(w for w in words if w.endswith(".py"))
        source = (ROOT / script).read_text()
        options = [w for w in words[words.index(script):] if w.startswith("--")]
        assert [o for o in options if f'"{o}"' not in source] == [], line


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs and mkdocstrings are not installed (pip install -e '.[docs]')")

    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})

    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "begin_window" in api and "RunConfig" in api  # mkdocstrings rendered both modules
