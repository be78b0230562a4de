"""Flower deployments that fail loudly and reports that say what happened (issue 37, items 7 and 8), through the
real ServerApp and ClientApp code in this process (the loopback Grid of ``test_flower_algorithms.py``, Flower's own
Message and Context objects): a run no node serves ends failed after the roll call with its reason in one line; a
node's refusal leaves it out at once; a node says which data it trains on; ``edgeprof summary`` and the dashboard
read how the run ended, what was rejected and each device from a real sidecar. The real processes are
``test_flower_fail_loud_e2e.py``'s."""

from __future__ import annotations

import io
import json
import logging
import re

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, MetricRecord, RecordDict  # noqa: E402
from test_flower_algorithms import LoopbackGrid  # noqa: E402
from test_flower_strategy import reply  # noqa: E402

from edgeprof.cli import app as cli  # noqa: E402
from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.flower.client_app import make_client_app  # noqa: E402
from edgeprof.flower.config import FlowerSettings, to_run_config  # noqa: E402
from edgeprof.flower.node_checks import NodeLimits, RejectedReply, data_of  # noqa: E402
from edgeprof.flower.server_app import NoNodeError, roll_call, run_server, unserved  # noqa: E402
from edgeprof.flower.strategy import Directory  # noqa: E402
from edgeprof.flower.node_checks import NodeInfo  # noqa: E402

MISMATCH = "node has num-partitions=2 but the run has clients=3"


def run_cfg(out, **kw) -> RunConfig:
    settings = dict(algo="pflego", tau=2, rounds=2, clients=3, participation=1.0, dataset="synthetic", backbone="mlp",
                    synthetic_samples=150, synthetic_classes=4, seed=4, threads=1, out=out, run_name="loud",
                    progress=False)
    return RunConfig(**{**settings, **kw}).resolved()


class CountingGrid(LoopbackGrid):
    """The loopback Grid, counting the messages each node was sent; nodes in ``dead_after`` (node -> round) stop
    replying after that round, as a killed SuperNode whose replies never come."""

    def __init__(self, client_app, contexts, dead_after: dict | None = None) -> None:
        super().__init__(client_app, contexts)
        self.sent: dict[int, int] = {n: 0 for n in contexts}
        self.dead_after = dead_after or {}

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        for msg in messages:
            self.sent[msg.metadata.dst_node_id] += 1
        alive = [m for m in messages if not (m.metadata.group_id.isdecimal() and int(m.metadata.group_id)
                                             > self.dead_after.get(m.metadata.dst_node_id, 10**9))]
        return super().send_and_receive(alive, timeout=timeout)


def grid_of(cfg: RunConfig, settings: FlowerSettings, node_configs: dict[int, dict],
            grid: type[CountingGrid] = CountingGrid, **kw) -> CountingGrid:
    run_config = to_run_config(cfg, settings)
    return grid(make_client_app(), {node: Context(run_id=1, node_id=node, node_config=node_config,
                                                  state=RecordDict(), run_config=run_config)
                                    for node, node_config in node_configs.items()}, **kw)


# ------------------------------------------------------------------------------- item 7: failing loudly


def test_a_run_no_node_serves_ends_failed_after_the_roll_call_with_its_reason(tmp_path, task_identity):
    # Prepare: two nodes started for a federation of 2, a run of 3 clients
    cfg, settings = run_cfg(tmp_path), FlowerSettings(node_wait_s=0.5)
    grid = grid_of(cfg, settings, {7: {"partition-id": 0, "num-partitions": 2},
                                   8: {"partition-id": 1, "num-partitions": 2}})
    # Execute
    with pytest.raises(NoNodeError) as raised:
        run_server(grid, to_run_config(cfg, settings))
    # Assert: the reason is one line naming the cause and a node's own words; the sidecar says failed with it
    reason = str(raised.value)
    assert reason == (f"no node serves any of the 3 partitions after node-wait 0.5 s: 2 node(s) left out, node 7: "
                      f"the node refused the roll call: edgeprof: ConfigError: {MISMATCH} (and 1 more)")
    sidecar = json.loads((tmp_path / "loud.json").read_text())
    assert (sidecar["status"], sidecar["reason"], sidecar["rounds_completed"], sidecar["rows"]) == (
        "failed", reason, 0, 0)
    assert [r["node_id"] for r in sidecar["flower"]["alpha"]["refused"]] == [7, 8]
    assert sidecar["flower"]["rounds"] == {} and not (tmp_path / "loud.theta.npz").exists()
    assert grid.sent == {7: 1, 8: 1}  # a node that refused is not asked again


@pytest.mark.parametrize("nodes, refused, want", [
    ({}, [], "no node serves any of the 3 partitions after node-wait 20 s: no node answered the roll call; check "
             "that each SuperNode connects to this SuperLink and that its num-partitions matches the run's clients (3)"),
    ({}, [(5, "roll call: num-examples must be a positive integer up to 150, got -1")],
     "no node serves any of the 3 partitions after node-wait 20 s: 1 node(s) left out, node 5: roll call: "
     "num-examples must be a positive integer up to 150, got -1"),
    ({2: NodeInfo(2, 9, 40)}, [(5, "refused")], None),  # one partition served: the run goes on
])
def test_the_run_fails_only_when_no_partition_is_served(tmp_path, nodes, refused, want):
    directory = Directory(3)
    directory.nodes.update(nodes)
    directory.refused.extend(refused)

    got = unserved(run_cfg(tmp_path), FlowerSettings(node_wait_s=20.0), directory)

    assert got == want


@pytest.mark.parametrize("error, one_line", [(NoNodeError("no node serves any of the 3 partitions"), True),
                                             (ValueError("a bug"), False)])
def test_flowers_log_of_a_failed_serverapp_is_one_line_for_an_edgeprof_error_only(error, one_line):
    """Flower's runtime logs ``ServerApp raised an exception`` with the traceback; an edgeprof error is one line."""
    from flwr.supercore.logger import log

    from edgeprof.flower.server_app import _OneLineFailure

    flwr_logger, stream = logging.getLogger("flwr"), io.StringIO()
    handler, flt = logging.StreamHandler(stream), _OneLineFailure()
    flwr_logger.addHandler(handler)
    flwr_logger.addFilter(flt)
    try:
        try:
            raise error
        except Exception as err:  # noqa: BLE001 - as Flower's run_serverapp catches it
            log(logging.ERROR, "%s raised an exception", "ServerApp", exc_info=err)
    finally:
        flwr_logger.removeHandler(handler)
        flwr_logger.removeFilter(flt)
    text = stream.getvalue()
    if one_line:
        assert text == "ServerApp failed: edgeprof: NoNodeError: no node serves any of the 3 partitions\n"
    else:
        assert text.startswith("ServerApp raised an exception\nTraceback") and "ValueError: a bug" in text


# -------------------------------------------------------------------- item 8: which data a node trains on


def test_a_node_says_which_data_it_trains_on_and_its_rows_name_that_data_set(tmp_path, task_identity, caplog):
    # Prepare: partition 0 trains on its own MNIST-format folder, partitions 1 and 2 on theirs of the run's data
    from test_data_files import write_idx_set

    own = tmp_path / "device0"
    write_idx_set(own, seed=5, num_classes=3)
    cfg, settings = run_cfg(tmp_path / "out", clients=3), FlowerSettings(node_wait_s=0.0)
    grid = grid_of(cfg, settings, {10 + p: {"partition-id": p, "num-partitions": 3} for p in range(3)})
    grid.contexts[10].node_config.update({"data-dir": str(own), "dataset": "mnist"})
    # Execute
    with caplog.at_level(logging.INFO, logger="flwr"):
        directory = roll_call(grid, cfg, settings, poll_s=0.0)
        run_id = run_server(grid, to_run_config(cfg, settings))
    # Assert: the roll call records each node's data, the node's log says it, the rows name the data set
    nodes = directory.describe()["nodes"]
    assert {k: v for k, v in nodes["0"]["data"].items() if k != "sha256"} == {
        "dataset": "mnist", "source": "own", "folder": str(own), "n_test": 8 - nodes["0"]["n_train"]}
    assert nodes["1"]["data"]["source"] == "partition" and nodes["1"]["data"]["folder"] == ""
    assert len({nodes[p]["data"]["sha256"] for p in "012"}) == 3
    assert all(re.fullmatch(r"[0-9a-f]{64}", nodes[p]["data"]["sha256"]) for p in "012")
    assert (f"edgeprof: partition 0 trains on its own data: mnist in {own} ({nodes['0']['n_train']} train, "
            f"{nodes['0']['data']['n_test']} test samples, sha256 {nodes['0']['data']['sha256'][:12]})") in caplog.text
    from edgeprof.report import read_report

    report = read_report(tmp_path / "out" / f"{run_id}.csv")
    assert {r["dataset"] for r in report.where(kind="client", client="0")} == {"mnist"}
    assert {r["dataset"] for r in report.where(kind="client", client="1")} == {"synthetic"}
    assert report.sidecar["flower"]["alpha"]["nodes"]["0"]["data"] == nodes["0"]["data"]


GOOD = {"dataset": "mnist", "source": "own", "folder": "/data", "n-test": 2, "sha256": "a" * 64}


@pytest.mark.parametrize("change, reason", [
    ({"dataset": "imagenet"}, "data: dataset must be one of"),
    ({"source": "elsewhere"}, "data: source must be one of partition, own"),
    ({"folder": "/data\x1b[2J"}, "data: folder must be printable text"),
    ({"folder": "x" * 1001}, "data: folder must be printable text of at most 1000 characters"),
    ({"sha256": "zz"}, "data: sha256 must be 64 hexadecimal digits"),
    ({"n-test": -1}, "n-test must be a whole number up to 150"),
    ({"n-test": 10**9}, "n-test must be a whole number up to 150"),
])
def test_a_data_record_out_of_range_leaves_its_node_out(task_identity, change, reason):
    msg = reply(3, RecordDict({"metrics": MetricRecord({"partition-id": 0, "num-examples": 5}),
                               "data": ConfigRecord({**GOOD, **change})}))

    with pytest.raises(RejectedReply, match=re.escape(reason)):
        data_of(msg, NodeLimits(3, 4, 150))


# ------------------------------------------------------------- item 8: summary and dashboard of a real run


@pytest.fixture
def killed_run(tmp_path, task_identity):
    """A real run's report (3 rounds, 3 partitions, every client sampled) whose node 12 (partition 2) stops replying
    after round 1, as a killed SuperNode."""
    cfg, settings = run_cfg(tmp_path, rounds=3), FlowerSettings(node_wait_s=0.0)
    grid = grid_of(cfg, settings, {10 + p: {"partition-id": p, "num-partitions": 3, "host": f"dev-{p}"}
                                   for p in range(3)}, dead_after={12: 1})
    run_id = run_server(grid, to_run_config(cfg, settings))
    return tmp_path / f"{run_id}.csv"


def test_summary_says_how_the_run_ended_what_was_not_used_and_each_host(killed_run):
    result = CliRunner().invoke(cli, ["summary", str(killed_run)], env={"COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    assert "run: complete, 2 of 9 sampled replies not used (0 rejected, 2 never came)" in result.output
    table = result.output[result.output.index("Flower: per host"):]
    hosts = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]]
               for line in table.splitlines() if line.startswith("│ dev-")}
    assert sorted(hosts) == ["dev-0", "dev-1", "dev-2"]
    assert hosts["dev-2"][1] == "2" and hosts["dev-2"][2].startswith("partition of synthetic")
    assert hosts["dev-2"][3] == "1" and hosts["dev-2"][-1] == "2"  # one round, two replies that never came
    assert hosts["dev-0"][3] == "3" and hosts["dev-0"][-1] == "0"


def test_summary_of_a_run_no_node_served_says_why_before_its_error(tmp_path, task_identity):
    cfg, settings = run_cfg(tmp_path), FlowerSettings(node_wait_s=0.0)
    with pytest.raises(NoNodeError):
        run_server(grid_of(cfg, settings, {7: {"partition-id": 0, "num-partitions": 2}}), to_run_config(cfg, settings))

    result = CliRunner().invoke(cli, ["summary", str(tmp_path / "loud.csv")])

    assert result.exit_code == 7
    lines = result.output.splitlines()
    assert lines[0].startswith("run: failed: no node serves any of the 3 partitions after node-wait 0 s: ")
    assert MISMATCH in lines[0] and "has no usable row" in lines[-1]


def test_the_dashboard_has_a_flower_section_that_shows_a_killed_nodes_replies(killed_run):
    pytest.importorskip("plotly")
    import html as html_lib

    from edgeprof.report import read_report
    from edgeprof.report.dashboard import render

    page = render([read_report(killed_run)])

    section = page[page.index('<section id="flower">'):]
    section = section[:section.index("</section>")]
    rounds = [[html_lib.unescape(c) for c in re.findall(r"<td>(.*?)</td>", tr)]
              for tr in re.findall(r"<tr>(.*?)</tr>", section[section.index('class="flower-rounds"'):])]
    assert [r[:5] for r in rounds if r] == [["1", "0, 1, 2", "0, 1, 2", "-", "0"], ["2", "0, 1, 2", "0, 1", "2", "0"],
                                      ["3", "0, 1, 2", "0, 1", "2", "0"]]
    assert "complete</b>, 2 of 9 sampled replies not used (0 rejected, 2 never came)" in section
    assert 'class="estimate"' in section  # not drawn as a clean complete
    nodes = re.search(r'class="flower-nodes">.*?</table>', section, re.S).group(0)
    assert all(f"dev-{p}" in nodes for p in range(3)) and "partition of synthetic" in nodes
    runs = page[page.index('<section id="runs">'):page.index('<section id="flower">')]
    assert "complete, 2 of 9 sampled replies not used" in html_lib.unescape(runs)


class StoppedGrid(CountingGrid):
    """The loopback Grid, where Flower's stop (``SystemExit(0)`` under the ServerApp) lands as round ``stop_in``'s
    messages are sent, after the round sampled its clients."""

    def __init__(self, client_app, contexts, stop_in: int) -> None:
        super().__init__(client_app, contexts)
        self.stop_in = stop_in

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if any(m.metadata.group_id == str(self.stop_in) for m in messages):
            raise SystemExit(0)
        return super().send_and_receive(messages, timeout=timeout)


def test_a_round_a_stop_cut_off_is_under_way_and_its_replies_are_not_counted_as_never_come(tmp_path, task_identity):
    """Stopped in round 3: that round's sampled clients were not waited for. The summary and the dashboard counted
    them as replies that never came, as a node that died would be."""
    pytest.importorskip("plotly")
    import html as html_lib

    from edgeprof.report import read_report
    from edgeprof.report.dashboard import render

    cfg, settings = run_cfg(tmp_path, rounds=5), FlowerSettings(node_wait_s=0.0)
    grid = grid_of(cfg, settings, {10 + p: {"partition-id": p, "num-partitions": 3} for p in range(3)},
                   grid=StoppedGrid, stop_in=3)
    with pytest.raises(SystemExit):
        run_server(grid, to_run_config(cfg, settings))
    csv_path = tmp_path / "loud.csv"
    sidecar = json.loads(csv_path.with_suffix(".json").read_text())
    assert (sidecar["status"], sidecar["rounds_completed"]) == ("interrupted", 2)
    assert sidecar["flower"]["rounds"]["3"]["sampled"] == [0, 1, 2]  # sampled before the stop

    result = CliRunner().invoke(cli, ["summary", str(csv_path)], env={"COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("run: "))
    assert line == ("run: interrupted (the process was asked to exit: SystemExit 0); round 3 was under "
                    "way when the run ended (its 3 sampled replies were not awaited)"), line
    table = result.output[result.output.index("Flower: per host"):]
    host = next(ln for ln in table.splitlines() if ln.startswith("│ ") and "│ 0, 1, 2 " in ln)  # this machine
    assert host.split("│")[-2].strip() == "0", table  # the one host's replies not used: none
    page = render([read_report(csv_path)])
    section = html_lib.unescape(page[page.index('<section id="flower">'):])
    rounds = [re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", section)]
    assert ["3", "0, 1, 2", "-", "under way when the run ended", "0"] in [r[:5] for r in rounds], rounds
    assert "never came" not in section[:section.index("</section>")]


WATCHED_CHILD = """
import concurrent.futures, os, sys, time
from flwr.supercore.app_utils import start_parent_process_monitor
from flwr.supercore.exit import register_signal_handlers
from flwr.supercore.telemetry import EventType
from edgeprof.flower.server_app import SuperLinkGone, parent_watch

out = sys.argv[1]
# as Flower's runtime starts a deployed ServerApp's process: its stop handlers, then its watch on the parent
register_signal_handlers(event_type=EventType.FLWR_SERVERAPP_RUN_LEAVE, exit_message="Task stopped by user.")
start_parent_process_monitor(os.getppid())
try:
    with parent_watch():
        with open(out, "w") as f:
            f.write("ready\\n")
        # the main thread waits as Flower's push of a round's messages does: on a pool's futures, with no timeout
        pool = concurrent.futures.ThreadPoolExecutor(1)
        for _ in concurrent.futures.as_completed([pool.submit(time.sleep, 60)]):
            pass
    ended = "not stopped"
except SuperLinkGone as err:
    ended = f"stopped: {err}"
with open(out, "a") as f:
    f.write(ended + "\\n")
os._exit(0)
"""


def test_a_serverapp_blocked_in_a_wait_takes_flowers_stop_once_its_parent_is_gone(tmp_path):
    """Real processes, Flower's own stop handlers and parent watch: a ServerApp's process whose parent is killed and
    reaped ends its run with SuperLinkGone within seconds, though its main thread is blocked in a wait with no
    timeout. Flower's stop is a SIGINT raised in its watch thread, which Python runs in the main thread only when
    that thread next runs Python code: before the wake (parent_watch), the stop waited out the wait (the CI run
    saw a report end 27 s after its SuperLink was reaped; here, 60 s)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "ended.txt"
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    # Arrange: a parent (standing in for the SuperLink) that starts the ServerApp's process and waits
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]])\n"
                               "time.sleep(300)", WATCHED_CHILD, str(out)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (out.is_file() and out.read_text().startswith("ready")):
            assert time.monotonic() < deadline and parent.poll() is None, "the watched process did not start"
            time.sleep(0.1)
        # Execute: the parent is killed and reaped; the ServerApp's process is left blocked in its wait
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        gone_at = time.monotonic()
        while len(out.read_text().splitlines()) < 2 and time.monotonic() - gone_at < 90:
            time.sleep(0.1)
        taken = time.monotonic() - gone_at
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    # Assert: the stop was taken, as the run's end, seconds after the parent went (Flower's watch looks every 0.2
    # s; a loaded runner may add a few seconds), not after the 60 s wait
    lines = out.read_text().splitlines()
    assert lines[1:] and lines[1].startswith("stopped: the SuperLink went away"), lines
    assert taken < 15, taken
