"""How things end at the edges: a stop signal in the entry's first milliseconds, in a monitored program of the
user's own (one whose stop handlers were installed in C before Python started, too) and while threads of the
user's code still run; a device this machine lacks under Flower's simulation; a calibration cache that is no file,
or cannot be written.

Signals are real signals sent to real processes (the installed ``edgeprof`` script, a program that imports
edgeprof); the cache is a real folder holding a real FIFO; only the CUDA probe is faked (hardware).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from test_faults import _handlers_installed, _one_line

SCRIPT = Path(sys.executable).parent / "edgeprof"
FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--clients", "4",
        "--tau", "1", "--no-progress"]
STOPS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]


def _ended(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """The process's stdout and stderr once it has ended; a test failure (the process killed) if it hangs."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after {timeout:g} s:\n{err[-2000:]}")


def _until(proc: subprocess.Popen, ready, timeout: float = 180) -> None:
    """Wait until ``ready()`` (the process still running)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.05)


# ------------------------------------------------------------------------ a stop while the entry module loads

#: the installed console script, run as it is, with one addition: the moment the interpreter starts executing
#: edgeprof's entry module (its code already read) is written to stdout, so delays count from edgeprof's first
#: statement and not from Python's own start, which no entry point can reach (site, its .pth files)
GATED_SCRIPT = """
import importlib.abc, importlib.util, os, sys

class Marked(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        code = self.real.get_code(module.__name__)
        os.write(1, b"entry\\n")
        exec(code, module.__dict__)

class Gate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "edgeprof.__main__":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        spec.loader = Marked(spec.loader)
        return spec

sys.meta_path.insert(0, Gate())
script = sys.argv[0] = sys.argv.pop(1)
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__"})
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", STOPS)
def test_a_stop_in_the_entry_modules_first_milliseconds_ends_in_one_line(tmp_path, sig, code):
    """Before edgeprof.__main__ took over the signals first, one that landed while it imported edgeprof.host (and
    importlib.metadata, 10-40 ms) was Python's KeyboardInterrupt traceback. Outcomes only, whatever the load: the
    delays count from the moment its first statements have taken the signals over (a few microseconds of the
    interpreter's after the gate's line, but a loaded machine can deschedule the process between the two, and a
    signal in that gap is Python's, as in its own start: seen at 1 ms in the oldest-Python leg run beside the
    full suite)."""
    if not SCRIPT.is_file():
        pytest.skip(f"no installed console script at {SCRIPT} (pip install -e .)")
    name = signal.Signals(sig).name
    for delay in (0.001, 0.005, 0.01, 0.02, 0.04, 0.08):
        proc = subprocess.Popen([sys.executable, "-c", GATED_SCRIPT, str(SCRIPT), "measure", *FAST, "--backbone",
                                 "mlp", "--rounds", "2", "--out", str(tmp_path / f"d{delay}")], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "entry\n", proc.communicate()
        while not _handlers_installed(proc.pid):
            time.sleep(0.0005)
        time.sleep(delay)
        proc.send_signal(sig)
        _, stderr = _ended(proc)

        assert proc.returncode == code, (delay, stderr)
        assert _one_line(stderr).startswith(f"edgeprof: interrupted ({name})"), (delay, stderr)


# ------------------------------------------------------------------------ a stop while torch initialises

#: the installed console script, run as it is, with a Ctrl-C sent as torch's import reaches ``torch.distributed``
#: (whose ``_c10d_init`` runs Python code through pybind11): "held" on stdout when the signal's handler did not
#: run then; a handler that ran there would raise inside torch's import (or, inside the C++ call, abort the process)
IN_TORCH_SCRIPT = """
import importlib.abc, os, signal, sys

class Stop(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch.distributed":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10000):  # bytecode boundaries: a handler in place would run here
                pass
            os.write(1, b"held\\n")
        return None

sys.meta_path.insert(0, Stop())
script = sys.argv[0] = sys.argv.pop(1)
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__"})
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["measure", "export"])
def test_a_ctrl_c_while_torch_initialises_waits_for_it_and_ends_in_one_line(tmp_path, command):
    """A Ctrl-C in set-up that landed inside one of torch's initialisers (``_c10d_init``, autograd's: Python code
    run through pybind11) ended the process in SIGABRT with pybind11's "terminate called after throwing an instance
    of 'pybind11::error_already_set'" (5 of 800 runs stopped at random moments of set-up): a run's config is
    checked against the algorithm registry, whose modules import torch, before the drivers loaded the native
    libraries with the stop signals held. Every first import of torch in a command now holds them."""
    if not SCRIPT.is_file():
        pytest.skip(f"no installed console script at {SCRIPT} (pip install -e .)")
    args = ([*FAST, "--backbone", "mlp", "--rounds", "2", "--out", str(tmp_path / "out")] if command == "measure"
            else ["--backbone", "mlp", "--out", str(tmp_path / "models")])
    done = subprocess.run([sys.executable, "-c", IN_TORCH_SCRIPT, str(SCRIPT), command, *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)

    assert done.stdout.startswith("held\n"), (done.returncode, done.stderr[-3000:])
    assert done.returncode == 130, done.stderr[-3000:]
    assert _one_line(done.stderr).startswith("edgeprof: interrupted (SIGINT)"), done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "models").exists()


# ------------------------------------------------------------------------ a monitored program of the user's own

PROGRAM = """
import signal, sys, time
import edgeprof

out, mode = sys.argv[1], sys.argv[2]
asked = []
if mode == "own handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))
mon = edgeprof.monitor(out=out, name="prog", cpu_watts=10.0)
if mode == "never stopped":
    mon.start()
    while True:
        with mon.window("step"):
            time.sleep(0.01)
if mode == "stop in finally":
    mon.start()
    try:
        while True:
            with mon.window("step"):
                time.sleep(0.01)
    finally:
        mon.stop()
with mon:
    while not asked:
        with mon.window("step"):
            time.sleep(0.01)
print("the program's own handler ended the loop")
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode, sig, code, line", [
    ("with", signal.SIGTERM, 143, "edgeprof: interrupted (SIGTERM); the report keeps every window that finished"),
    ("with", signal.SIGHUP, 129, "edgeprof: interrupted (SIGHUP); the report keeps every window that finished"),
    ("never stopped", signal.SIGTERM, 143, "edgeprof: interrupted (SIGTERM); the report keeps every window that "
                                           "finished"),
    ("stop in finally", signal.SIGTERM, 143, "edgeprof: interrupted (SIGTERM); the report keeps every window that "
                                             "finished"),
    ("own handler", signal.SIGTERM, 0, None),
])
def test_a_monitored_program_stopped_by_a_signal_ends_in_one_line_or_as_it_handles_it(tmp_path, mode, sig, code,
                                                                                     line):
    """Uncaught, the stop the monitor raised was a traceback and exit 1; a handler of the program's own was
    replaced by the monitor's while it ran. Now the monitor chains to it: the program's handler runs and the
    program ends as it decides; the sidecar records the signal."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "profiles"
    proc = subprocess.Popen([sys.executable, str(script), str(out), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    _until(proc, lambda: any(len(p.read_bytes().splitlines()) > 3 for p in out.glob("*.csv")))

    proc.send_signal(sig)
    stdout, stderr = _ended(proc)

    assert proc.returncode == code, stderr
    (csv_path,) = out.glob("*.csv")
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())
    if line is None:  # the program's own handler: its loop ended, the monitor stopped as written
        assert stderr == "" and stdout == "the program's own handler ended the loop\n"
        assert (sidecar["status"], sidecar["reason"]) == ("interrupted", "interrupted (SIGTERM)")
        assert sidecar["monitor"]["signals"] == ["SIGTERM"]
        return
    assert _one_line(stderr) == (f"{line} ({csv_path})" if "keeps" in line else line)
    assert sidecar["status"] == "interrupted" and sidecar["reason"] == f"interrupted ({signal.Signals(sig).name})"


#: a library preloaded into the program (LD_PRELOAD) that, before the interpreter starts, installs in C a handler of
#: SIGTERM and SIGHUP, as an application embedding Python does (uWSGI): Python's getsignal gives None for both
HOST_LIBRARY = r"""
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void on_stop(int signum) {
    static const char line[] = "the host's handler took the signal\n";
    write(2, line, sizeof line - 1);
    _exit(70);
}
__attribute__((constructor)) static void install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_stop;
    sigaction(SIGTERM, &action, 0);
    sigaction(SIGHUP, &action, 0);
}
"""

HOSTED_PROGRAM = """
import os, signal, sys, time
import edgeprof

out, when = sys.argv[1], sys.argv[2]
assert signal.getsignal(signal.SIGTERM) is None and signal.getsignal(signal.SIGHUP) is None
with edgeprof.monitor(out=out, name="prog", cpu_watts=10.0) as mon:
    for step in range(3 if when == "after the monitor" else 10**6):
        with mon.window("step"):
            time.sleep(0.01)
print("monitored", signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP), flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the host's signal handler")
@pytest.mark.parametrize("when", ["while monitored", "after the monitor"])
def test_a_handler_set_outside_python_is_left_to_the_program_that_set_it(tmp_path, when):
    """In a process whose stop handlers were installed in C (Python's getsignal gives None) the monitor failed as it
    started, with a TypeError traceback: it held the signals around its first write and put back None, which
    Python's signal.signal refuses. Now such a handler is left alone: a SIGTERM while the monitor runs, or after,
    goes to it (here: one line and exit 70), and after the monitor it is still the host's."""
    library = tmp_path / "libhost.so"
    (tmp_path / "host.c").write_text(HOST_LIBRARY)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "host.c")], check=True)
    script = tmp_path / "prog.py"
    script.write_text(HOSTED_PROGRAM)
    out = tmp_path / "profiles"
    proc = subprocess.Popen([sys.executable, str(script), str(out), when], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "LD_PRELOAD": str(library)})
    if when == "while monitored":
        _until(proc, lambda: any(len(p.read_bytes().splitlines()) > 3 for p in out.glob("*.csv")))
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = _ended(proc)

    assert proc.returncode == 70 and stderr == "the host's handler took the signal\n", stderr
    (csv_path,) = out.glob("*.csv")
    rows = list(csv.reader(csv_path.open(newline="")))
    if when == "after the monitor":  # the monitor ran to its end and gave the host its handlers back untouched
        assert stdout == "monitored None None\n"
        assert len(rows) == 1 + 3
        assert json.loads(csv_path.with_suffix(".json").read_text())["status"] == "complete"
    else:  # the rows written before the host's handler ended the process are whole
        assert stdout == "" and len(rows) > 3
        assert all(len(row) == len(rows[0]) for row in rows[1:])

# ------------------------------------------------------------------------ threads the user's code left running

FACTORY = """
import threading, time
from torch import nn

def threaded(input_shape):
    threading.Thread(target=time.sleep, args=(600,), name="left-by-factory").start()
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 6), nn.Tanh())
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["mid-run", "after the run"])
def test_a_sigterm_ends_a_command_whose_backbone_left_a_thread_in_one_line(tmp_path, when):
    """Mid-run the stop's line came, then the process waited for the thread for ever; after the run, waiting for
    it, the SIGTERM was a traceback and exit 0."""
    if not SCRIPT.is_file():
        pytest.skip(f"no installed console script at {SCRIPT} (pip install -e .)")
    (tmp_path / "factory.py").write_text(FACTORY)
    rounds, csv_path = ("100000" if when == "mid-run" else "1"), tmp_path / "out" / "t.csv"
    proc = subprocess.Popen([str(SCRIPT), "measure", *FAST, "--backbone", f"{tmp_path / 'factory.py'}:threaded",
                             "--rounds", rounds, "--run-name", "t", "--out", str(csv_path.parent)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if when == "mid-run":
        _until(proc, lambda: csv_path.is_file() and len(csv_path.read_bytes().splitlines()) > 5)
    else:
        sidecar = csv_path.with_suffix(".json")
        _until(proc, lambda: sidecar.is_file() and '"complete"' in sidecar.read_text())
        time.sleep(0.5)  # the command returns; the interpreter's exit waits for the factory's thread

    proc.send_signal(signal.SIGTERM)
    _, stderr = _ended(proc)

    assert proc.returncode == 143, stderr
    line = _one_line(stderr)
    assert line.startswith("edgeprof: interrupted (SIGTERM)"), line
    if "after the command ended" in line:
        assert line.endswith("while waiting for the threads its code left running (left-by-factory)")


# ------------------------------------------------------------------------ a device Flower's simulation cannot use


@pytest.mark.parametrize("argv, expected", [
    (["--device", "cuda"], "--device cuda: no CUDA GPU here"),
    (["--device", "cuda:0", "--client-gpus", "0.5"], "--device cuda:0: no CUDA GPU here"),
])
def test_a_device_this_machine_cannot_use_is_refused_before_the_runtime_starts(tmp_path, monkeypatch, argv,
                                                                               expected):
    """It started Ray, every virtual client failed on it (seven tracebacks) and the simulation waited."""
    pytest.importorskip("flwr")
    from edgeprof.cli import app
    from edgeprof.flower.superlink import LocalSuperLink
    from edgeprof.nn import compute

    monkeypatch.setattr(compute.kind_of("cuda"), "unavailable", lambda device: f"--device {device}: no CUDA GPU here")
    monkeypatch.setattr(LocalSuperLink, "start", lambda self: pytest.fail("the SuperLink was started"))

    result = CliRunner().invoke(app, ["flower-simulate", *argv, "--out", str(tmp_path / "out")])

    assert result.exit_code == 2, result.output
    assert _one_line(result.stderr).startswith(f"edgeprof: error: {expected}")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ the calibration cache


def _calibrated(tmp_path: Path, monkeypatch) -> Path:
    """``measure --execution calibrate`` once with the node cache in ``tmp_path``; the calibration file it stored."""
    from edgeprof.cli import app

    monkeypatch.setenv("EDGEPROF_CACHE_DIR", str(tmp_path / "cache"))
    done = CliRunner().invoke(app, ["measure", *FAST, "--backbone", "mlp", "--rounds", "1", "--threads", "1",
                                    "--execution", "calibrate", "--out", str(tmp_path / "first")])
    assert done.exit_code == 0, done.output
    (stored,) = (tmp_path / "cache" / "execution").glob("*.json")
    return stored


def _execution(report: Path) -> dict:
    return json.loads(next(report.glob("*.json")).read_text())["numerics"]["compute"]["execution"]


@pytest.mark.slow
def test_a_calibration_cache_entry_that_is_a_fifo_is_ignored_unopened_with_one_note(tmp_path, monkeypatch):
    """Read as a file, a FIFO waited for a writer for ever before anything was written."""
    stored = _calibrated(tmp_path, monkeypatch)
    stored.unlink()
    os.mkfifo(stored)

    proc = subprocess.Popen([sys.executable, "-m", "edgeprof", "measure", *FAST, "--backbone", "mlp", "--rounds", "1",
                             "--threads", "1", "--execution", "auto", "--out", str(tmp_path / "auto")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "EDGEPROF_CACHE_DIR": str(tmp_path / "cache")})
    _, stderr = _ended(proc, timeout=120)

    assert proc.returncode == 0, stderr
    note = f"the stored calibration {stored} is a FIFO; ignored (the device's default plan is used)"
    assert _one_line(stderr) == f"edgeprof: note: {note}"
    execution = _execution(tmp_path / "auto")
    assert execution["source"].startswith("table") and execution["source"].endswith(note)


@pytest.mark.slow
def test_a_calibration_that_cannot_be_stored_says_so_and_the_run_goes_on(tmp_path, monkeypatch):
    """It was dropped without a word, and every later ``auto`` run silently took the table instead."""
    from edgeprof.cli import app

    stored = _calibrated(tmp_path, monkeypatch)
    folder = stored.parent
    for entry in folder.iterdir():
        entry.unlink()
    folder.rmdir()
    folder.write_text("")  # a file where the calibrations' folder goes: it cannot be created

    result = CliRunner().invoke(app, ["measure", *FAST, "--backbone", "mlp", "--rounds", "1", "--threads", "1",
                                      "--execution", "calibrate", "--out", str(tmp_path / "again")])

    assert result.exit_code == 0, result.output
    note = f"the calibration was not stored ({folder}: File exists); the next --execution auto will not find it"
    assert _one_line(result.stderr) == f"edgeprof: note: {note}"
    execution = _execution(tmp_path / "again")
    assert execution["source"].startswith("calibrated on this machine") and execution["source"].endswith(note)
