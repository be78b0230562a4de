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
