"""A deployment that no node can serve fails loudly (issue 37, item 7), on real processes: a SuperLink and two
SuperNodes on 127.0.0.1 whose ``num-partitions`` (2) disagrees with the run's ``clients`` (3), the run submitted with
``flwr run``. The run ends after the roll call, before round 1: the sidecar says ``failed`` with a one-line reason
naming the cause, the SuperLink records the run as failed (the ServerApp exited non-zero), the ServerApp's log says it
in one line, and each node's refusal is one line in its own log, with no traceback."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("flwr")

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.flower.config import FlowerSettings  # noqa: E402
from test_flower_e2e import start_federation  # noqa: E402

pytestmark = pytest.mark.slow

MISMATCH = "node has num-partitions=2 but the run has clients=3"


def _run_status(fed, timeout: float = 60) -> str:
    """The SuperLink's status of the run submitted last, once it has finished (``flwr ls --format json``)."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        out = fed.flwr("ls", "loopback", "--run-id", fed.run_id, "--format", "json")
        runs = json.loads(out.stdout).get("runs", []) if out.stdout.strip().startswith("{") else []
        status = runs[0].get("status", "") if runs else out.stdout + out.stderr
        if status.startswith("finished"):
            return status
        time.sleep(1)
    return status


def test_a_run_no_node_serves_ends_failed_after_the_roll_call_in_one_line(request, tmp_path_factory, tmp_path):
    # Prepare: two SuperNodes started for a federation of 2, a run of 3 clients with a short node-wait
    fed = start_federation(request, tmp_path_factory, ["partition-id=0 num-partitions=2",
                                                       "partition-id=1 num-partitions=2"])
    cfg = RunConfig(algo="pflego", tau=2, rounds=50, clients=3, participation=1.0, dataset="synthetic",
                    backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=3, threads=1,
                    out=tmp_path / "out", run_name="unserved", progress=False).resolved()
    started = time.monotonic()
    # Execute
    csv_path, sidecar_path = fed.submit("unserved", cfg, FlowerSettings(round_timeout_s=60.0, node_wait_s=8.0))
    sidecar = fed.wait_done(sidecar_path, timeout=180)
    took = time.monotonic() - started
    status = _run_status(fed)
    server_log = fed.flwr("log", fed.run_id, "loopback", "--show").stdout
    # Assert: failed after the roll call, with no round run, in one line naming the cause and a node's own line
    assert sidecar["status"] == "failed", fed.log_tail()
    reason = sidecar["reason"]
    assert "\n" not in reason and reason.startswith("no node serves any of the 3 partitions after node-wait 8 s: "), \
        reason
    assert "2 node(s) left out" in reason and MISMATCH in reason, reason
    assert sidecar["rounds_completed"] == 0 and sidecar["rows"] == 0 and sidecar["flower"]["rounds"] == {}
    assert [r["reason"] for r in sidecar["flower"]["alpha"]["refused"]] == [
        f"the node refused the roll call: edgeprof: ConfigError: {MISMATCH}"] * 2
    assert not (csv_path.parent / "unserved.theta.npz").exists()
    assert took < 8 + 120, took  # not the 50 rounds of a run that goes on with nobody
    # the SuperLink shows a failed run (the ServerApp process exited non-zero), its log says why in one line
    assert status == "finished:failed", (status, server_log[-3000:])
    failures = [line for line in server_log.splitlines() if "ServerApp failed: edgeprof: NoNodeError" in line]
    assert len(failures) == 1 and reason in failures[0], server_log[-3000:]
    assert "Traceback" not in server_log, server_log[-3000:]
    # each node refused in one line of its own log, and said it once (asked once)
    for pid in (0, 1):
        node_log = (fed.logs / f"supernode-{pid}.log").read_text(errors="replace")
        refusals = [line for line in node_log.splitlines() if MISMATCH in line]
        assert len(refusals) == 1, node_log[-3000:]
        assert "Traceback" not in node_log and "Exit Code" not in node_log, node_log[-3000:]
