"""A plain install runs the main job: with codecarbon, plotly, flwr and pynvml unimportable, `edgeprof
measure` still writes its report, with empty carbon columns and one note, never an exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgeprof.report import read_report

BLOCKED = ("codecarbon", "plotly", "flwr", "pynvml")

#: a meta-path finder in front of every other: importing (or finding) a blocked package fails as if absent
RUN_WITHOUT = f"""
import importlib.abc, sys
BLOCKED = {BLOCKED!r}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
if sys.argv[1] == "--import":
    __import__(sys.argv[2])
else:
    from edgeprof.cli import app
    sys.argv[0] = "edgeprof"
    app()
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT, *args], capture_output=True, text=True, timeout=300)


def test_the_blocker_makes_each_package_unimportable():
    for name in BLOCKED:
        done = _run("--import", name)
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, name


def test_measure_runs_without_the_optional_packages(tmp_path):
    done = _run("measure", "--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4",
                "--backbone", "mlp", "--clients", "4", "--rounds", "2", "--tau", "2", "--no-progress",
                "--run-name", "plain", "--out", str(tmp_path))

    assert done.returncode == 0, done.stderr
    notes = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("edgeprof: note: no carbon figures"), done.stderr
    assert "codecarbon" in notes[0] and "Traceback" not in done.stderr
    report = read_report(tmp_path / "plain.csv")
    clients = report.where(kind="client")
    assert len(clients) == 2 * 1 and all(r["energy_j"] and r["carbon_g"] == "" for r in clients)
    sidecar = json.loads(Path(tmp_path / "plain.json").read_text())
    assert sidecar["status"] == "complete" and sidecar["energy"]["carbon"]["g_per_kwh"] is None
    assert any("codecarbon" in n for n in sidecar["notes"])


def test_commands_of_a_missing_extra_name_it_in_one_line(tmp_path):
    """dashboard without plotly, flower-simulate without flwr: one line naming the extra, exit 2, no traceback."""
    _run("measure", "--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone",
         "mlp", "--clients", "4", "--tau", "1", "--no-progress", "--run-name", "r", "--out", str(tmp_path))
    for args, extra in ((("dashboard", str(tmp_path / "r.csv"), "--out", str(tmp_path / "page")), "dashboard"),
                        (("flower-simulate", "--rounds", "1", "--clients", "2", "--out", str(tmp_path / "f")),
                         "flower")):
        done = _run(*args)
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("edgeprof: error:") and f"pip install 'edgeprof[{extra}]'" in lines[0], lines[0]
    assert not (tmp_path / "page").exists() and not (tmp_path / "f").exists()
