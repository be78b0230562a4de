"""The console script ends without the interpreter's teardown, and loses nothing by it.

``edgeprof`` (the script pyproject.toml installs, ``edgeprof.__main__:main``) ends with ``os._exit`` once the command
has returned and its output is flushed: these tests run that real script and check the exit code, the report and
sidecar on disk, and what was printed; and that a ``measure`` run never imports scikit-learn, scipy or pandas
(nor the optional plotly and flwr), read from ``python -X importtime``, which lists every module imported.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_faults import _whole_rows

SCRIPT = Path(sys.executable).parent / "edgeprof"
SMALL = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
         "--clients", "4", "--participation", "0.5", "--tau", "2", "--no-progress"]
#: what ``measure`` must never import: each costs seconds or is an optional extra
NEVER_IMPORTED = ("sklearn", "scipy", "pandas", "plotly", "flwr")

#: the console script's own code, run with ``python -c`` so that it can be watched: an object whose finalizer
#: only the interpreter's teardown runs, and an exit handler, which the fast exit runs too
WATCHED = """
import atexit, sys
class Teardown:
    def __del__(self):
        print("torn down", flush=True)
kept = Teardown()
atexit.register(lambda: print("exit handler", flush=True))
sys.argv[0] = "edgeprof"
from edgeprof.cli import main
main()
"""


def _script() -> Path:
    if not SCRIPT.is_file():
        pytest.skip(f"no installed console script at {SCRIPT} (pip install -e .)")
    assert "edgeprof.__main__ import main" in SCRIPT.read_text(), "reinstall: the script predates edgeprof.__main__:main"
    return SCRIPT


def _complete(csv_path: Path, status: str, rounds: int) -> dict:
    """The report's rows are whole and as many as the final sidecar (of ``status``) counts."""
    rows = _whole_rows(csv_path)
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())
    assert sidecar["status"] == status and sidecar["rows"] == len(rows) - 1
    assert sidecar["rounds_completed"] == rounds == sum(1 for r in rows[1:] if ",server," in r)
    return sidecar


@pytest.mark.slow
def test_the_console_script_exits_0_with_its_report_whole_on_disk(tmp_path):
    done = subprocess.run([str(_script()), "measure", *SMALL, "--rounds", "2", "--run-name", "fast",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    _complete(tmp_path / "fast.csv", "complete", rounds=2)
    assert done.stdout.rstrip().endswith(f"report: {tmp_path / 'fast.csv'}")  # the last line was flushed
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_console_script_keeps_the_documented_codes_of_an_error_and_a_signal(tmp_path):
    bad = subprocess.run([str(_script()), "measure", *SMALL, "--tau", "0", "--out", str(tmp_path / "bad")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "edgeprof: error: " in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "bad").exists()  # bad input leaves no report

    csv_path = tmp_path / "stopped.csv"
    proc = subprocess.Popen([str(_script()), "measure", *SMALL, "--rounds", "100000", "--run-name", "stopped",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (csv_path.is_file() and len(csv_path.read_bytes().splitlines()) > 5):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)

    assert proc.returncode == 143, stderr
    assert "\nedgeprof: interrupted (SIGTERM); " in f"\n{stderr}" and "Traceback" not in stderr, stderr
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())
    assert sidecar["status"] == "interrupted" and sidecar["rows"] == len(_whole_rows(csv_path)) - 1


@pytest.mark.slow
def test_main_skips_the_teardown_but_runs_the_exit_handlers(tmp_path):
    done = subprocess.run([sys.executable, "-c", WATCHED, "measure", *SMALL, "--rounds", "1", "--run-name", "w",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [f"report: {tmp_path / 'w.csv'}", "exit handler"]
    assert "torn down" not in done.stdout  # os._exit: no teardown of the interpreter
    _complete(tmp_path / "w.csv", "complete", rounds=1)


def test_main_falls_back_to_the_normal_exit_while_another_thread_runs(tmp_path):
    # the thread outlives main() on a loaded machine too (imports can take seconds there): main must see it running
    code = WATCHED.replace("from edgeprof.cli", "import threading; threading.Thread(target=__import__('time')"
                           ".sleep, args=(8,)).start()\nfrom edgeprof.cli")
    done = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("edgeprof ") and "torn down" in done.stdout


@pytest.mark.slow
def test_measure_imports_no_scikit_learn_scipy_or_pandas(tmp_path):
    entry = "import sys; sys.argv[0] = 'edgeprof'; from edgeprof.cli import main; main()"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", entry, "measure", "--dataset", "digits",
                           "--backbone", "mlp", "--clients", "4", "--rounds", "1", "--tau", "1", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-2000:]
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*([\w.]+)$", done.stderr, re.M)}
    assert {"torch", "numpy", "onnxruntime", "edgeprof"} <= imported  # the listing is read right
    assert not imported & set(NEVER_IMPORTED), sorted(imported & set(NEVER_IMPORTED))
    assert len(list(tmp_path.glob("*.csv"))) == 1
