"""A hostile run config on a real deployment (SuperLink and SuperNodes on 127.0.0.1, ``flwr run``): a backbone
path that escapes a node's ``allow-backbones`` folder is refused there, in one line, before any of its code runs,
and the server records that node's failed reply; the federation goes on with the node that allows the file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr")

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.flower.config import FlowerSettings  # noqa: E402
from test_flower_e2e import start_federation  # noqa: E402

pytestmark = pytest.mark.slow

REFUSAL = "imports no backbone code a run config names"
#: a backbone file whose top-level code leaves a marker named after the process group it ran in (each SuperNode
#: and the SuperLink lead a group of their own; a node's ClientApp processes are in its group)
EVIL = """import math, os
from pathlib import Path
from torch import nn
(Path({markers!r}) / f"group-{{os.getpgrp()}}").touch()


def f(shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 6))
"""


def test_a_backbone_path_out_of_a_nodes_folder_is_refused_there_and_runs_nothing(
        request, tmp_path_factory, tmp_path):
    # Prepare: node 0 allows its folder nets/, node 1 allows evil/; the run names evil/evil.py through nets/..
    nets, evil, markers = tmp_path / "nets", tmp_path / "evil", tmp_path / "markers"
    for folder in (nets, evil, markers):
        folder.mkdir()
    (evil / "evil.py").write_text(EVIL.format(markers=str(markers)))
    fed = start_federation(request, tmp_path_factory, [
        f"partition-id=0 num-partitions=2 allow-backbones='{nets}/*.py:*'",
        f"partition-id=1 num-partitions=2 allow-backbones='{evil}/*.py:*'"])
    cfg = RunConfig(algo="pflego", tau=2, rounds=2, clients=2, participation=1.0, dataset="synthetic",
                    synthetic_samples=120, synthetic_classes=3, backbone=f"{nets}/../evil/evil.py:f", seed=3,
                    threads=1, out=tmp_path / "out", run_name="escape", progress=False).resolved()
    # Execute
    _, sidecar_path = fed.submit("escape", cfg, FlowerSettings(round_timeout_s=60.0, node_wait_s=15.0))
    sidecar = fed.wait_done(sidecar_path, timeout=240)
    # Assert: the run completed on node 1 alone; node 0's refusal is one line in its log and a failed reply, which
    # leaves node 0 out
    assert sidecar["status"] == "complete", fed.log_tail()
    flower = sidecar["flower"]
    assert flower["alpha"]["missing_partitions"] == [0], json.dumps(flower)
    assert all(r["accepted"] == [1] for r in flower["rounds"].values()), json.dumps(flower)
    node_log = (fed.logs / "supernode-0.log").read_text(errors="replace")
    refusals = [line for line in node_log.splitlines() if REFUSAL in line]
    assert refusals and all(cfg.backbone in line for line in refusals), fed.log_tail()
    assert "Traceback" not in node_log, node_log[-3000:]  # the refusal is its one line, not a Flower traceback
    server_log = fed.flwr("log", fed.run_id, "loopback", "--show").stdout
    assert any("left out of the federation: the node refused the roll call: edgeprof: ConfigError:" in line
               and REFUSAL in line for line in server_log.splitlines()), server_log[-3000:]
    # no code of the file ran on node 0; it did run on node 1, which allows it (the marker works)
    ran = {p.name for p in markers.iterdir()}
    assert f"group-{fed.nodes[0].pid}" not in ran and f"group-{fed.nodes[1].pid}" in ran, (ran, fed.log_tail())
