"""A plain ``pip install .`` (no extras, today's releases) runs the main job: the installed ``edgeprof`` script of
another virtual environment, run from outside the checkout so that only what was installed is used.

``.ci/plain_install_check.sh`` builds that environment (torch first, then ``pip install .`` with no extras,
so the resolver picks the newest typer, rich, pydantic, ... the project's bounds allow) and runs this file with
``EDGEPROF_PLAIN_VENV`` pointing at it and ``EDGEPROF_REQUIRE_PLAIN=1``, which turns the skip below into a failure.
In the ordinary suite (no such environment) every test here is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgeprof.report import read_report

VENV = os.environ.get("EDGEPROF_PLAIN_VENV", "")
if not VENV:
    if os.environ.get("EDGEPROF_REQUIRE_PLAIN") == "1":
        raise RuntimeError("EDGEPROF_REQUIRE_PLAIN=1 but EDGEPROF_PLAIN_VENV names no environment")
    pytest.skip("no plain environment (.ci/plain_install_check.sh builds one and runs this file)",
                allow_module_level=True)

PYTHON = Path(VENV) / "bin" / "python"
SCRIPT = Path(VENV) / "bin" / "edgeprof"
SMALL = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
         "--clients", "4", "--participation", "0.5", "--no-progress"]


def _run(*args: str, cwd: Path, exe: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def _plain_python(code: str, cwd: Path) -> str:
    done = _run("-c", code, cwd=cwd, exe=PYTHON)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("plain")


def test_the_environment_is_plain_and_edgeprof_comes_from_it(outside):
    where = _plain_python("import edgeprof, os; print(os.path.realpath(edgeprof.__file__))", outside)
    assert where.startswith(os.path.realpath(VENV)), f"edgeprof imported from {where}, not the plain venv"
    missing = _plain_python(
        "import importlib.util as u; print(','.join(n for n in ('plotly', 'flwr', 'torchvision', 'pytest') "
        "if u.find_spec(n) is None))", outside)
    assert missing.split(",") == ["plotly", "flwr", "torchvision", "pytest"], "extras leaked into the plain venv"
    print(_plain_python("from importlib.metadata import version as v; print('typer', v('typer'), '| rich', "
                        "v('rich'), '| pydantic', v('pydantic'), '| torch', v('torch'))", outside))


def test_help_of_the_group_and_of_every_command(outside):
    from typer.main import get_command

    from edgeprof.cli import app

    names = sorted(get_command(app).commands)
    assert {"measure", "summary", "doctor", "dashboard", "algos", "sweep", "train", "export"} <= set(names)
    top = _run("--help", cwd=outside)
    assert top.returncode == 0 and all(n in top.stdout for n in names), top.stderr
    for name in names:
        done = _run(name, "--help", cwd=outside)
        assert done.returncode == 0 and "Usage:" in done.stdout and not done.stderr.strip(), (name, done.stderr)
    version = _run("--version", cwd=outside)
    assert version.returncode == 0 and version.stdout.startswith("edgeprof "), version.stderr


def test_algos_lists_every_algorithm(outside):
    from edgeprof.algorithms import ALGORITHMS

    done = _run("algos", cwd=outside)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if "phases:" in line}
    assert listed == set(ALGORITHMS)


def test_doctor_lists_the_cpu_estimate(outside):
    done = _run("doctor", cwd=outside)
    assert done.returncode == 0, done.stderr
    assert "estimate" in done.stdout.lower() and "Traceback" not in done.stderr


def test_the_main_job_then_its_summary(outside):
    """The README's first command, as it is: ``edgeprof measure --algo pflego --tau 50`` on the embedded digits."""
    done = _run("measure", "--algo", "pflego", "--tau", "50", "--no-progress", "--run-name", "main", "--out",
                str(outside / "reports"), cwd=outside)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    sidecar = json.loads((outside / "reports" / "main.json").read_text())
    assert sidecar["status"] == "complete" and sidecar["config"]["dataset"] == "digits"
    rounds = read_report(outside / "reports" / "main.csv").where(kind="client")
    assert rounds and all(float(r["energy_j"]) > 0 and r["tau"] == "50" for r in rounds)
    summary = _run("summary", str(outside / "reports" / "main.csv"), cwd=outside)
    assert summary.returncode == 0 and "pflego" in summary.stdout, summary.stderr


def test_a_small_sweep_runs_and_judges(outside):
    done = _run("sweep", "--backbone", "mlp", "--clients", "4", "--samples-per-client", "20", "--no-progress",
                "--algos", "pflego,fedavg", "--taus", "1,4", "--repeats", "2", "--run-name", "sweep", "--out",
                str(outside / "sweep"), cwd=outside)
    assert done.returncode == 0, done.stderr
    assert (outside / "sweep" / "sweep.csv").is_file() and "pflego" in done.stdout


def test_flower_simulate_says_in_one_line_that_flwr_is_missing(outside):
    done = _run("flower-simulate", "--rounds", "1", "--tau", "1", "--clients", "2", "--out", str(outside / "fl"),
                cwd=outside)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "flwr" in lines[0] and "edgeprof[flower]" in lines[0], lines[0]


def test_dashboard_says_in_one_line_that_plotly_is_missing(outside):
    report = outside / "small" / "small.csv"
    made = _run("measure", *SMALL, "--tau", "2", "--run-name", "small", "--out", str(report.parent), cwd=outside)
    assert made.returncode == 0, made.stderr
    done = _run("dashboard", str(report), "--out", str(outside / "pages"), cwd=outside)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("edgeprof: error:") and "plotly" in lines[0] and "edgeprof[dashboard]" in lines[0]
    assert not (outside / "pages").exists() or not any((outside / "pages").iterdir())
