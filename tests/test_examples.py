"""The examples run as documented: the PyTorch loop profiled with the API as a script, and the stock-style
Flower app (the mod on its ClientApp, stock FedAvg wrapped on its ServerApp) in-process through the loopback
Grid; the docs page "Your own model and code" shows exactly their code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgeprof.report.writer import read_report

from docs_text import page

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_the_pytorch_example_runs_as_a_script(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / "profile_pytorch.py"), "--epochs", "2", "--batches", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    (csv,) = tmp_path.glob("pytorch-mlp-*.csv")
    report = read_report(csv)
    epochs, evaluations = report.where(window="epoch"), report.where(window="evaluate")
    assert [r["round"] for r in epochs] == ["1", "2"] and len(evaluations) == 2
    for row in epochs:
        assert all(row[f"{p}_s"] for p in ("forward", "backward", "step")) and row["energy_method"]
    assert report.sidecar["status"] == "complete" and report.sidecar["monitor"]["labels"]["model"] == "mlp"
    assert f"report: {csv}" in done.stdout


def test_the_flower_example_runs_in_process(tmp_path, monkeypatch, task_identity):
    pytest.importorskip("flwr")
    from flwr.app import Context, RecordDict
    from test_flower_algorithms import LoopbackGrid

    monkeypatch.syspath_prepend(str(EXAMPLES / "flower_app"))
    from flower_app import client_app, server_app

    nodes = {100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i, "num-partitions": 3},
                              state=RecordDict(), run_config={}) for i in range(3)}
    server = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                     run_config={"num-server-rounds": 2, "out": str(tmp_path)})

    server_app.main(LoopbackGrid(client_app.app, nodes), server)

    (csv,) = tmp_path.glob("flower-app-*.csv")
    report = read_report(csv)
    assert sorted((r["round"], r["client"]) for r in report.where(kind="client")) == [
        (str(t), str(c)) for t in (1, 2) for c in range(3)]
    assert all(r["energy_method"] and r["wall_s"] and r["algo"] == "FedAvg" for r in report.where(kind="client"))
    assert report.sidecar["status"] == "complete"


@pytest.mark.parametrize("path", ["profile_pytorch.py", "flower_app/flower_app/client_app.py",
                                  "flower_app/flower_app/server_app.py"])
def test_the_docs_show_the_examples_code(path):
    shown = page("docs/own-code.md")
    code = (EXAMPLES / path).read_text()
    body = code[code.index("\nfrom __future__ import annotations\n") + len("\nfrom __future__ import annotations\n"):]
    assert body.strip() in shown, f"docs/own-code.md does not show {path}"


# ------------------------------------------------------------------------ examples/own_loop: a loop of one's own

OWN_LOOP = EXAMPLES / "own_loop" / "train.py"


@pytest.fixture(scope="module")
def own_loop_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """A real run of the own loop, two epochs: the finished process and its report."""
    out = tmp_path_factory.mktemp("own-loop")
    done = subprocess.run([sys.executable, str(OWN_LOOP), "--epochs", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=out)
    assert done.returncode == 0, done.stderr
    (csv,) = out.glob("own-loop-*.csv")
    return done, csv


def test_the_own_loop_example_labels_its_windows_phases_and_evaluations(own_loop_run):
    """A real run of two epochs: each epoch window has the four phases and the train_loss set while it was open,
    each decorated evaluation a row of kind eval labelled with the accuracy it returned, the decorated load the
    number of training samples it returned, every row the run's labels."""
    done, csv = own_loop_run

    report = read_report(csv)
    assert [r["window"] for r in report.rows] == ["load", "epoch", "evaluate", "epoch", "evaluate"]
    epochs, evaluations = report.where(window="epoch"), report.where(window="evaluate")
    assert [r["round"] for r in epochs] == ["1", "2"] and all(r["kind"] == "window" for r in epochs)
    for row in epochs:
        assert all(float(row[f"{p}_s"]) > 0 for p in ("data", "forward", "backward", "step"))
        assert 0 < float(row["train_loss"]) < 3 and row["energy_method"]
    printed = [float(line.rsplit(" ", 1)[1].rstrip("%")) / 100 for line in done.stdout.splitlines()
               if line.startswith("epoch ")]
    assert [r["kind"] for r in evaluations] == ["eval", "eval"]
    assert [float(r["test_accuracy"]) for r in evaluations] == pytest.approx(printed, abs=1e-3)
    assert report.where(window="load")[0]["n_samples"] == str(1797 * 4 // 5)
    assert {r["labels"] for r in report.rows} == {'{"batch_size":64,"lr":0.05,"model":"small-cnn-bn"}'}
    assert report.sidecar["status"] == "complete" and report.sidecar["rounds_completed"] == 2
    assert report.sidecar["monitor"]["windows"] == {"load": 1, "epoch": 2, "evaluate": 2}


def test_the_own_loops_report_is_read_back_by_summary_trace_and_dashboard(own_loop_run, tmp_path):
    """The own loop's report read back as docs/own-code.md shows: summary, the trace of epoch 2 and of the eval
    windows, the dashboard."""
    from typer.testing import CliRunner

    from edgeprof.cli import app

    csv, out = own_loop_run[1], tmp_path
    runner = CliRunner()
    summary = runner.invoke(app, ["summary", str(csv)], terminal_width=200)
    trace = runner.invoke(app, ["trace", str(csv), "--window", "epoch", "--round", "2"], terminal_width=200)
    evals = runner.invoke(app, ["trace", str(csv), "--kind", "eval"], terminal_width=200)
    page = runner.invoke(app, ["dashboard", str(csv), "--out", str(out), "--name", "own-loop"])

    assert summary.exit_code == 0 and "median per window" in summary.stdout, summary.output
    assert all(part in summary.stdout for part in ("window load", "window epoch", "data", "forward", "backward",
                                                   "step", "eval window evaluate", "data: digits",
                                                   "labels: model=small-cnn-bn, dataset=digits, lr=0.05"))
    assert trace.exit_code == 0 and "window: window epoch, round 2" in trace.stdout, trace.output
    assert all(phase in trace.stdout for phase in ("data", "forward", "backward", "step", "whole window"))
    assert evals.exit_code == 0 and "eval window evaluate" in evals.stdout, evals.output
    assert page.exit_code == 0, page.output
    text = (out / "own-loop.html").read_text()
    assert 'href="#verdicts"' not in text and "eval evaluate" in text and "small-cnn-bn" in text
    assert "test accuracy of your own code against cumulative energy" in text
    assert "median seconds per phase of each window" in text and "window epoch, round" in text


def test_a_sigterm_runs_the_own_loops_handler_and_ends_it_with_143_and_an_interrupted_report(tmp_path):
    """The program's own SIGTERM handler (a checkpoint, then exit 143) runs under the monitor, which records the
    signal: no traceback, the report says interrupted (SIGTERM) and keeps the epochs that finished."""
    import json
    import signal
    import time

    proc = subprocess.Popen([sys.executable, str(OWN_LOOP), "--epochs", "500", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while not any(b",epoch," in p.read_bytes() for p in tmp_path.glob("own-loop-*.csv")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no epoch ended"
        time.sleep(0.05)

    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)

    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and stderr.strip() == ""
    assert f"SIGTERM: checkpoint saved to {tmp_path / 'own-loop-checkpoint.pt'}" in stdout
    assert (tmp_path / "own-loop-checkpoint.pt").stat().st_size > 0
    (csv,) = tmp_path.glob("own-loop-*.csv")
    sidecar = json.loads(csv.with_suffix(".json").read_text())
    assert (sidecar["status"], sidecar["reason"]) == ("interrupted", "interrupted (SIGTERM)")
    assert sidecar["monitor"]["signals"] == ["SIGTERM"]
    assert read_report(csv).where(window="epoch")


def test_the_own_loop_model_is_a_backbone_for_measure(tmp_path):
    """The example's model, by module and factory from the repository root, as the docs show it: a real PFLEGO
    run of one round on the digits."""
    import json

    from typer.testing import CliRunner

    from edgeprof.cli import app

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        mp.syspath_prepend(str(ROOT))
        result = CliRunner().invoke(app, ["measure", "--backbone", "examples.own_loop.model:factory", "--algo", "pflego",
                                          "--rounds", "1",
                                          "--tau", "2", "--threads", "1", "--no-progress", "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    (sidecar,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert sidecar["status"] == "complete" and sidecar["config"]["backbone"] == "examples.own_loop.model:factory"


@pytest.mark.slow
def test_the_flower_example_runs_with_flwr_run_as_documented_and_leaves_its_files_as_they_were(tmp_path):
    """The command own-code.md shows, on a copy of the example: Flower's own local SuperLink (simulation engine,
    started by ``flwr run`` with its home in tmp_path), 4 virtual clients, one report; the app's pyproject is in the
    form Flower reads today, so ``flwr run`` does not rewrite it (it migrated a federations section in place)."""
    import os
    import shlex
    import shutil
    import signal
    import socket

    from docs_text import fenced_blocks

    pytest.importorskip("flwr")
    flwr = Path(sys.executable).with_name("flwr")
    if not flwr.exists():
        pytest.skip("flwr's command is not installed beside this Python")
    with socket.socket() as probe:  # Flower's local SuperLink always takes this port: another one would be used
        if probe.connect_ex(("127.0.0.1", 39091)) == 0:
            pytest.skip("a local Flower SuperLink already runs on this machine (port 39091)")
    [block] = [body for _, body in fenced_blocks(page("docs/own-code.md")) if "flwr run examples/flower_app" in body]
    [env_and_command] = [ln for ln in block.replace("\\\n", " ").splitlines() if "flwr run" in ln]
    words = shlex.split(env_and_command)
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "home"),
           "PATH": f"{flwr.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    while "=" in words[0]:
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    app = tmp_path / "flower_app"
    shutil.copytree(EXAMPLES / "flower_app", app, ignore=shutil.ignore_patterns("__pycache__", "profiles"))
    pyproject = (app / "pyproject.toml").read_text()
    assert words[:3] == ["flwr", "run", "examples/flower_app"]
    try:
        done = subprocess.run([str(flwr), "run", str(app), *words[3:]], capture_output=True, text=True, timeout=400,
                              cwd=app, env=env, stdin=subprocess.DEVNULL)
    finally:  # the SuperLink flwr started stays in the background: end it (it is the one with its home in tmp_path)
        found = subprocess.run(["pgrep", "-f", f"flower-superlink.*{tmp_path}"], capture_output=True, text=True)
        for pid in found.stdout.split():
            os.kill(int(pid), signal.SIGTERM)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (csv,) = (app / "profiles").glob("flower-app-*.csv")
    assert f"edgeprof report: {csv.resolve()}" in done.stdout + done.stderr
    report = read_report(csv)
    assert report.sidecar["status"] == "complete" and report.sidecar["rounds_completed"] == 3
    assert sorted({r["client"] for r in report.where(kind="client")}) == ["0", "1", "2", "3"]
    assert (app / "pyproject.toml").read_text() == pyproject
