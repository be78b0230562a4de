"""The server treats every node's numbers as untrusted (issue 34): a roll-call answer, a training reply or an
evaluation with a value that is not finite, out of range or inconsistent with the run leaves its node (or reply)
out with one line saying which and why; the ServerApp never crashes and no honest client's alpha changes.

Roll calls and whole runs go through the real ServerApp code and the real ClientApp in this process (the
loopback Grid of ``test_flower_algorithms.py``), with one node answering through ``hostile_client.py``;
evaluations through Flower Message objects built as in ``test_flower_strategy.py``."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, MetricRecord, RecordDict  # noqa: E402
from hostile_client import HOSTILE_KEY, HOSTILE_PROFILE, HOSTILE_VALUE, make_hostile_app  # noqa: E402
from test_flower_algorithms import LoopbackGrid  # noqa: E402
from test_flower_strategy import SHAPES, cfg_for, directory, grad_reply, grads, reply  # noqa: E402

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.flower import strategy as st  # noqa: E402
from edgeprof.flower.config import FlowerSettings, to_run_config  # noqa: E402

HOSTILE = 999  # the hostile node's id; honest node p has id 1000 + p


def run_cfg(out, clients: int = 4, **kw) -> RunConfig:
    settings = dict(algo="pflego", tau=2, rounds=2, clients=clients, participation=1.0, dataset="synthetic",
                    backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=4, threads=1, out=out,
                    run_name="hostile", progress=False)
    return RunConfig(**{**settings, **kw}).resolved()


def grid_of(cfg: RunConfig, settings: FlowerSettings, honest: list[int], hostile: dict | None,
            hostile_first: bool = False) -> LoopbackGrid:
    """Honest nodes for partitions ``honest``; with ``hostile`` (its node config), one more node, asked last
    (or first)."""
    run_config = to_run_config(cfg, settings)

    def context(node: int, node_config: dict) -> Context:
        return Context(run_id=1, node_id=node, node_config={"num-partitions": cfg.clients, **node_config},
                       state=RecordDict(), run_config=run_config)

    nodes = [(1000 + p, context(1000 + p, {"partition-id": p})) for p in honest]
    if hostile is not None:
        nodes.insert(0 if hostile_first else len(nodes), (HOSTILE, context(HOSTILE, hostile)))
    return LoopbackGrid(make_hostile_app(), dict(nodes))


def honest_sizes(cfg: RunConfig) -> list[int]:
    from edgeprof.rounds.simulate import load_clients

    return [c.n_train for c in load_clients(cfg)]


def roll_call(cfg, settings, hostile, **kw) -> st.Directory:
    from edgeprof.flower.server_app import roll_call as server_roll_call

    return server_roll_call(grid_of(cfg, settings, [0, 1, 2], hostile, **kw), cfg, settings, poll_s=0.0)


def hostile(key: str, value, partition: int = 3) -> dict:
    return {"partition-id": partition, HOSTILE_KEY: key, HOSTILE_VALUE: value}


@pytest.mark.parametrize("key, value, reason", [
    ("num-examples", math.inf, "num-examples must be a positive integer up to 150, got inf"),
    ("num-examples", -1000, "num-examples must be a positive integer"),
    ("num-examples", 0, "num-examples must be a positive integer"),
    ("num-examples", 2.5, "num-examples must be a positive integer"),
    ("num-examples", math.nan, "num-examples must be a positive integer"),
    ("num-examples", 10**9, "num-examples must be a positive integer up to 150"),  # more than the data set holds
    ("num-examples", [1.0, 2.0], "num-examples must be a positive integer"),
    ("num-classes", 10**9, "num-classes must be a class count in 1..4"),
    ("num-classes", 10**5, "num-classes must be a class count in 1..4"),
    ("num-classes", 0, "num-classes must be a class count in 1..4"),
    ("partition-id", math.inf, "partition-id must be a partition id in 0..3, got inf"),
    ("partition-id", -1, "partition-id must be a partition id in 0..3"),
    ("partition-id", 4, "partition-id must be a partition id in 0..3"),
    ("partition-id", 0.5, "partition-id must be a partition id in 0..3"),
    ("partition-id", 1, "partition 1 is already served by node 1001"),
])
def test_a_roll_call_answer_out_of_range_leaves_its_node_out_and_no_honest_alpha_moves(
        tmp_path, task_identity, caplog, key, value, reason):
    # Prepare: honest nodes for partitions 0..2 and a node for partition 3 that lies about one value
    cfg, settings = run_cfg(tmp_path), FlowerSettings(node_wait_s=0.0)
    without = roll_call(cfg, settings, None)
    # Execute
    with caplog.at_level(logging.WARNING, logger="edgeprof.flower"):
        directory = roll_call(cfg, settings, hostile(key, value))
    # Assert: the liar is left out, in one line naming it and why; the honest nodes keep their alpha and K_i
    assert {p: i.node_id for p, i in directory.nodes.items()} == {0: 1000, 1: 1001, 2: 1002}
    assert len(directory.refused) == 1 and directory.refused[0][0] == HOSTILE and reason in directory.refused[0][1]
    lines = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(lines) == 1 and f"node {HOSTILE}" in lines[0] and reason in lines[0]
    assert [directory.alpha(p) for p in range(3)] == [without.alpha(p) for p in range(3)]
    assert directory.num_outputs == without.num_outputs <= 4  # at most the data set's 4 classes
    assert directory.describe()["refused"] == [{"node_id": HOSTILE, "reason": directory.refused[0][1]}]


@pytest.mark.parametrize("content, reason", [
    (RecordDict({"metrics": ConfigRecord({"partition-id": "3", "num-examples": "30"})}), "no MetricRecord"),
    (RecordDict({"metrics": MetricRecord({"partition-id": 3, "num-examples": 30}),
                 "host": ConfigRecord({"host": "x" * 10_000})}), "host must be printable text"),
    (RecordDict({"metrics": MetricRecord({"partition-id": 3, "num-examples": 30}),
                 "device": ConfigRecord({"device": "gpu\x1b[2J"})}), "device must be printable text"),  # the old name
])
def test_a_roll_call_answer_of_the_wrong_kind_leaves_its_node_out(content, reason):
    from edgeprof.flower.node_checks import NodeLimits, RejectedReply, read_node_info

    with pytest.raises(RejectedReply, match=reason):
        read_node_info(reply(HOSTILE, content), NodeLimits(4, 4, 150))


@pytest.mark.parametrize("hostile_first", [False, True])
def test_a_sum_above_total_samples_leaves_the_largest_claim_out_whatever_the_order(
        tmp_path, task_identity, caplog, hostile_first):
    # Prepare: total-samples is the federation's true sum; partition 3's node claims 50 more than it holds
    cfg = run_cfg(tmp_path)
    sizes = honest_sizes(cfg)
    settings = FlowerSettings(node_wait_s=0.0, total_samples=sum(sizes))
    # Execute
    with caplog.at_level(logging.WARNING, logger="edgeprof.flower"):
        directory = roll_call(cfg, settings, hostile("num-examples", sizes[3] + 50), hostile_first=hostile_first)
    # Assert: the claim is left out, whichever node answered first; the honest alphas are N_i / total
    assert sorted(directory.nodes) == [0, 1, 2]
    assert [n for n, _ in directory.refused] == [HOSTILE] and "above total-samples" in directory.refused[0][1]
    assert [directory.alpha(p) for p in range(3)] == [sizes[p] / sum(sizes) for p in range(3)]
    assert "above total-samples" in caplog.text


@pytest.fixture(scope="module")
def honest_run(tmp_path_factory):
    """theta and the sidecar of a run of three partitions with no node serving partition 2."""
    from flwr.supercore.task_identity import TaskIdentity

    from edgeprof.flower.server_app import run_server

    out = tmp_path_factory.mktemp("honest")
    cfg = run_cfg(out, clients=3, participation=0.67)
    settings = FlowerSettings(node_wait_s=0.0, total_samples=sum(honest_sizes(cfg)))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("_run_id", "_node_id", "_task_id"):
            mp.setattr(TaskIdentity, name, 1)
        run_id = run_server(grid_of(cfg, settings, [0, 1], None), to_run_config(cfg, settings))
    return np.load(out / f"{run_id}.theta.npz"), json.loads((out / f"{run_id}.json").read_text())


@pytest.mark.parametrize("key, value", [("num-examples", math.inf), ("num-examples", -1000),
                                        ("num-classes", 10**9), ("partition-id", math.inf)])
def test_a_hostile_node_changes_nothing_in_a_whole_run(tmp_path, task_identity, honest_run, key, value):
    """The real ServerApp code (roll call, strategy, reporter) with the hostile node beside two honest ones: the run
    completes, its report names the node left out, and theta is that of the run without the node."""
    from edgeprof.flower.server_app import run_server

    cfg = run_cfg(tmp_path, clients=3, participation=0.67)
    settings = FlowerSettings(node_wait_s=0.0, total_samples=sum(honest_sizes(cfg)))
    # Execute
    run_id = run_server(grid_of(cfg, settings, [0, 1], hostile(key, value, partition=2)), to_run_config(cfg, settings))
    # Assert
    theta, sidecar = np.load(tmp_path / f"{run_id}.theta.npz"), json.loads((tmp_path / f"{run_id}.json").read_text())
    want_theta, want = honest_run
    assert sidecar["status"] == "complete"
    refused = sidecar["flower"]["alpha"]["refused"]
    assert len(refused) == 1 and refused[0]["node_id"] == HOSTILE and key in refused[0]["reason"]
    assert sidecar["flower"]["alpha"]["nodes"] == want["flower"]["alpha"]["nodes"]
    assert sidecar["flower"]["rounds"] == want["flower"]["rounds"]
    for name in want_theta.files:
        np.testing.assert_array_equal(theta[name], want_theta[name])


# ------------------------------------------------------------------------------------- evaluation replies


def eval_reply(pid: int, node: int | None = None, **values):
    """An EVALUATE reply of partition ``pid`` (node 100 + pid) with honest values unless ``values`` say otherwise."""
    metrics = {"partition-id": pid, "eval-train-loss": 0.5 + pid / 10, "eval-test-accuracy": 0.25 * pid,
               "eval-n-train": directory().nodes[pid].n_train, "eval-n-test": 5}
    metrics.update({k.replace("_", "-"): v for k, v in values.items()})
    return reply(100 + pid if node is None else node, RecordDict({"metrics": MetricRecord(metrics)}))


def global_strategy() -> st.EdgeprofStrategy:
    return st.make_strategy(cfg_for(evaluate=True, eval_protocol="global", synthetic_samples=150), directory())


@pytest.mark.parametrize("values, reason", [
    ({"eval_test_accuracy": 7.0}, "eval-test-accuracy must be an accuracy in [0, 1], got 7.0"),
    ({"eval_test_accuracy": -0.5}, "eval-test-accuracy must be an accuracy in [0, 1]"),
    ({"eval_n_test": -5}, "eval-n-test must be a positive integer"),
    ({"eval_n_test": 0}, "eval-n-test must be a positive integer"),
    ({"eval_n_test": 2.5}, "eval-n-test must be a positive integer"),
    ({"eval_train_loss": -3.0}, "eval-train-loss must be a finite loss >= 0"),
    ({"eval_train_loss": math.inf}, "eval-train-loss must be a finite loss >= 0"),
    ({"eval_n_train": 10**6}, "eval-n-train must be this node's num-examples (40)"),  # would weight its loss
])
def test_an_evaluation_out_of_range_is_rejected_and_the_score_is_the_honest_clients(caplog, values, reason):
    # Prepare: partitions 0..2 evaluate honestly, partition 3 sends one bad value
    from edgeprof.rounds.evaluation import global_score

    honest = global_strategy()
    want = honest.aggregate_evaluate(1, [eval_reply(p) for p in range(3)])
    s = global_strategy()
    # Execute
    with caplog.at_level(logging.WARNING, logger="edgeprof.flower"):
        got = s.aggregate_evaluate(1, [eval_reply(p) for p in range(3)] + [eval_reply(3, **values)])
    # Assert: the score is the honest clients' alone; the reply's rejection is one line naming node 103
    assert dict(got) == dict(want) and got["clients"] == 3
    assert (got["train-loss"], got["test-accuracy"]) == global_score(honest.evaluated[1])
    assert s.rejected[1] == [("node 103", f"evaluation: {s.rejected[1][0][1].split(': ', 1)[1]}")]
    assert reason in s.rejected[1][0][1] and "node 103" in caplog.text and reason in caplog.text


def test_a_training_reply_whose_local_evaluation_is_out_of_range_trains_but_is_not_scored():
    """The ``paper`` protocol: the gradient of the reply is used (its training values are sound), its accuracy is not."""
    s = st.make_strategy(cfg_for(evaluate=True, eval_protocol="paper"), directory())
    s.theta = [np.ones(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 1]
    honest = grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": 10, "train-loss": 0.5,
                                               "eval-train-loss": 0.5, "eval-test-accuracy": 0.6,
                                               "eval-n-train": 10, "eval-n-test": 5})
    bad = grad_reply(1, grads(1), metrics={"partition-id": 1, "num-examples": 30, "train-loss": 0.5,
                                           "eval-train-loss": 0.5, "eval-test-accuracy": 7.0,
                                           "eval-n-train": 30, "eval-n-test": 5})
    s.aggregate_train(1, [honest, bad])

    assert s.accepted[1] == [0, 1]
    assert s.paper_score(1, [honest, bad]) == pytest.approx((0.5, 0.6))
    assert [who for who, _ in s.rejected[1]] == ["node 101"] and "accuracy in [0, 1]" in s.rejected[1][0][1]


# ------------------------------------------------------------------------------------------- the reporter


@pytest.mark.parametrize("metrics", [
    {"partition-id": 0, "num-examples": math.inf, "train-loss": math.inf},
    {"partition-id": 0, "num-examples": [1.0], "train-loss": [0.5]},
])
def test_a_profiled_reply_with_hostile_numbers_is_a_row_without_them_not_a_crash(tmp_path, metrics):
    # Prepare: a reply with a profile (so the reporter writes its row) and numbers no count can be made of
    from edgeprof.flower.energy import PROFILE_RECORD
    from edgeprof.flower.report import ProfiledStrategy, RunRows
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.report import columns_for, read_report
    from edgeprof.session.run import Energy, RunContext
    from edgeprof.report.writer import ReportWriter

    s = st.make_strategy(cfg_for(), directory())
    s.theta = [np.ones(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 1]
    bad, good = grad_reply(0, grads(0), metrics=metrics), grad_reply(1, grads(1))
    for msg in (bad, good):
        msg.content[PROFILE_RECORD] = ConfigRecord({"wall_s": 1.0, "energy_j": 2.0, "host": "d"})
    with ReportWriter(tmp_path / "r.csv", columns_for(("cache_forward", "head_steps", "joint_grad"))) as w:
        ctx = RunContext("r", "laptop", w, Profiler(MeterSet([])), Energy())
        # Execute
        arrays, _ = ProfiledStrategy(s, rows=RunRows(ctx, s)).aggregate_train(1, [bad, good])
    # Assert: both rows written, the hostile one without a sample count or loss; only client 1 is averaged in
    rows = {r["client"]: r for r in read_report(tmp_path / "r.csv").where(kind="client")}
    assert (rows["0"]["n_samples"], rows["0"]["train_loss"]) == ("", "") and rows["1"]["n_samples"] == "30"
    assert s.accepted[1] == [1] and arrays is not None


def honest_profile(tmp_path) -> dict:
    """The profile edgeprof's mod attaches to a reply (:func:`edgeprof.flower.energy.profile_mod`), made by the real
    profiler over real RAPL counters (a sysfs tree the meter reads), a window with two phases."""
    from fixtures_sysfs import build_rapl, set_energy

    from edgeprof.flower.energy import profile_cells
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import discover
    from edgeprof.report.schema import row_from_window

    build_rapl(tmp_path, "one_socket")
    meters = discover(sysfs_root=str(tmp_path))
    profiler = Profiler(meters)
    try:
        with profiler.window("train") as win:
            with win.phase("cache_forward"):
                set_energy(tmp_path, "intel-rapl:0", 2_000_000)
            with win.phase("joint_grad"):
                set_energy(tmp_path, "intel-rapl:0", 3_000_000)
        result = win.result
    finally:
        profiler.close()
        meters.close()
    cells = profile_cells(row_from_window(result, {}, carbon_g_per_kwh=400.0))
    return {**cells, "host": "jetson-7", "carbon_source": "override", "message_type": "train"}


def test_an_honest_profile_passes_the_servers_check_as_it_came(tmp_path):
    from edgeprof.flower.node_checks import checked_profile

    profile = honest_profile(tmp_path)
    assert profile["energy_method"] == "counter" and "cache_forward_j" in profile and "carbon_g" in profile
    assert checked_profile(profile) == (profile, [])


@pytest.mark.parametrize("cells,gone,marked,phrase", [
    ({"round": 99, "client": 7, "run_id": "theirs", "algo": "fedavg", "kind": "server"},
     ["round", "client", "run_id", "algo", "kind"], {}, "the server's own cells"),
    ({"wall_s": -1.0}, ["wall_s"], {}, "wall_s = -1.0 is not a finite number >= 0"),
    ({"cpu_s": math.inf}, ["cpu_s"], {}, "cpu_s = inf is not a finite number >= 0"),
    ({"joint_grad_s": math.nan}, ["joint_grad_s"], {}, "joint_grad_s = nan"),
    ({"peak_rss_mb": "lots"}, ["peak_rss_mb"], {}, "peak_rss_mb = 'lots'"),
    ({"short_window": 3.0}, ["short_window"], {}, "short_window = 3.0 is not 0 or 1"),
    ({"short_window": True}, ["short_window"], {}, "short_window = True"),
    ({"cpu_package_j": -5.0}, ["cpu_package_j"], {}, "cpu_package_j = -5.0 is not a finite number >= 0"),
    ({"energy_method": "magic"}, ["energy_j", "carbon_g", "cache_forward_j", "joint_grad_j"],
     {"energy_method": "invalid"}, "energy_method = 'magic' is not a method a meter names"),
    ({"energy_method": "counter+"}, ["energy_j", "carbon_g", "cache_forward_j", "joint_grad_j"],
     {"energy_method": "invalid"},
     "energy_j, carbon_g, cache_forward_j, joint_grad_j: joules that do not say how they were obtained"),
    ({"cpu_package_method": 3.0}, ["cpu_package_j"], {"cpu_package_method": "invalid"},
     "cpu_package_method = 3.0 is not a method a meter names"),
    ({"cpu_package_method": "invalid"}, ["cpu_package_j"], {"cpu_package_method": "invalid"},
     "cpu_package_j: joules that do not say how they were obtained (cpu_package_method is 'invalid')"),
    ({"host": "a\nb"}, ["host"], {}, "host = 'a\\nb' is not printable text of at most 200 characters"),
    ({"host": "h" * 201}, ["host"], {}, "is not printable text of at most 200"),
    ({"device_kind": 4.0}, ["device_kind"], {}, "device_kind = 4.0 is not printable text"),
])
def test_a_profile_cell_the_server_cannot_believe_is_left_out_or_marked_invalid(tmp_path, cells, gone, marked,
                                                                                phrase):
    from edgeprof.flower.node_checks import checked_profile

    honest = honest_profile(tmp_path)
    # Execute: the honest profile with the hostile cells in it
    checked, problems = checked_profile({**honest, **cells})
    # Assert: those cells (and the joules that hang on them) are out, the marked ones say invalid, the rest is
    # the honest profile as it came, and one phrase says why
    assert not set(gone) & set(checked) and {k: checked[k] for k in marked} == marked
    untouched = set(honest) - set(gone) - set(marked) - set(cells)
    assert {k: checked[k] for k in untouched} == {k: honest[k] for k in untouched}
    assert any(phrase in p for p in problems), problems


def test_a_hostile_profile_is_a_row_of_only_what_the_server_believes_said_in_the_log_and_the_sidecar(
        tmp_path, caplog):
    # Prepare: one honest reply, one whose profile names another row and draws joules of no known method
    from edgeprof.flower.energy import PROFILE_RECORD
    from edgeprof.flower.report import ProfiledStrategy, RunRows
    from edgeprof.flower.server_app import flower_section
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.report import columns_for, read_report
    from edgeprof.report.writer import ReportWriter
    from edgeprof.session.run import Energy, RunContext

    honest = honest_profile(tmp_path / "sysfs")
    s = st.make_strategy(cfg_for(), directory())
    s.theta = [np.ones(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 1]
    bad, good = grad_reply(0, grads(0)), grad_reply(1, grads(1))
    bad.content[PROFILE_RECORD] = ConfigRecord({**honest, "round": 99, "client": 7, "energy_method": "magic"})
    good.content[PROFILE_RECORD] = ConfigRecord(honest)
    with ReportWriter(tmp_path / "r.csv", columns_for(("cache_forward", "head_steps", "joint_grad"))) as w:
        ctx = RunContext("r", "laptop", w, Profiler(MeterSet([])), Energy())
        reporter = ProfiledStrategy(s, rows=RunRows(ctx, s))
        # Execute
        with caplog.at_level(logging.WARNING, logger="edgeprof.flower"):
            arrays, _ = reporter.aggregate_train(1, [bad, good])
    # Assert: the hostile row is round 1's, client 0's, with its seconds and no joules; the honest one whole
    rows = {r["client"]: r for r in read_report(tmp_path / "r.csv").where(kind="client")}
    assert set(rows) == {"0", "1"} and rows["0"]["round"] == rows["1"]["round"] == "1"
    assert (rows["0"]["energy_j"], rows["0"]["energy_method"], rows["0"]["carbon_g"], rows["0"]["cache_forward_j"]) \
        == ("", "invalid", "", "")
    assert rows["0"]["wall_s"] == rows["1"]["wall_s"] != ""
    assert rows["0"]["cpu_package_j"] == rows["1"]["cpu_package_j"] != ""
    assert rows["1"]["energy_method"] == "counter" and float(rows["1"]["energy_j"]) == pytest.approx(
        float(honest["energy_j"]), rel=1e-5)
    (line,) = [r.getMessage() for r in caplog.records if "profile" in r.getMessage()]
    assert line.startswith("round 1: node 100's profile: round, client: the server's own cells") and \
        "energy_method = 'magic'" in line and line.endswith("its row is written without them")
    assert reporter.rounds[1]["train"]["flagged"] == 1 and arrays is not None
    section = flower_section(s, FlowerSettings(), reporter.flagged)
    assert section["rounds"]["1"]["profiles_flagged"] == [{"node": 100, "window": "train",
                                                           "reason": line.split("profile: ", 1)[1].rsplit(";", 1)[0]}]


def test_a_node_whose_profile_lies_trains_and_its_rows_keep_only_what_the_server_believes(tmp_path, task_identity):
    """The real ServerApp code with edgeprof's own ClientApp on three nodes, one of which writes another row's names
    and joules of no method over its profile: the run completes with every reply used, that node's rows are its
    own partition's and rounds', with its seconds and no joules, and ``edgeprof summary`` says so."""
    from typer.testing import CliRunner

    from edgeprof.cli import app as cli
    from edgeprof.flower.server_app import run_server
    from edgeprof.report import read_report

    cfg = run_cfg(tmp_path, clients=3)
    settings = FlowerSettings(node_wait_s=0.0)
    lie = json.dumps({"round": 99, "client": 7, "energy_method": "measured", "wall_s": -1.0})
    # Execute
    run_id = run_server(grid_of(cfg, settings, [0, 1], {"partition-id": 2, HOSTILE_PROFILE: lie}),
                        to_run_config(cfg, settings))
    # Assert
    report = read_report(tmp_path / f"{run_id}.csv")
    sidecar = report.sidecar
    assert sidecar["status"] == "complete" and len(report.rows) == sidecar["rows"]  # no row damaged
    clients = report.where(kind="client")
    assert sorted((r["round"], r["client"]) for r in clients) == [(str(r), str(p)) for r in (1, 2) for p in range(3)]
    liar, honest = [r for r in clients if r["client"] == "2"], [r for r in clients if r["client"] != "2"]
    assert all((r["energy_j"], r["energy_method"], r["wall_s"]) == ("", "invalid", "") and r["cpu_s"] for r in liar)
    assert all(r["energy_method"] and r["energy_method"] != "invalid" and float(r["wall_s"]) > 0 for r in honest)
    for r in ("1", "2"):
        rnd = sidecar["flower"]["rounds"][r]
        assert rnd["accepted"] == [0, 1, 2] and [f["node"] for f in rnd["profiles_flagged"]] == [HOSTILE]
        (flag,) = rnd["profiles_flagged"]
        assert flag["reason"].startswith("round, client: the server's own cells") and "energy_method = 'measured'" \
            in flag["reason"] and "wall_s = -1.0" in flag["reason"]
    result = CliRunner().invoke(cli, ["summary", str(tmp_path / f"{run_id}.csv")], terminal_width=200)
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("profiles flagged:")]
    assert line.startswith(f"profiles flagged: 2 row(s) written without cells the server could not believe (round 1, "
                           f"node {HOSTILE}: round, client: the server's own cells")


# ------------------------------------------------------------------------------------ a real deployment


@pytest.mark.slow
def test_a_hostile_supernode_on_loopback_is_left_out_and_the_federation_runs_as_without_it(
        request, tmp_path_factory, tmp_path):
    """A SuperLink and three SuperNodes (real processes), the Flower app's ClientApp ``hostile_client:app``: nodes 0
    and 1 answer honestly, node 2 answers the roll call with num-examples = -1000. The run completes; the sidecar and
    the ServerApp's log name the node left out; theta is the in-process run's with partition 2's updates dropped
    (total-samples keeps every alpha_i = N_i / sum_j N_j)."""
    from pathlib import Path

    from test_flower_e2e import in_process, load_theta, start_federation

    from edgeprof.flower.config import write_app_dir

    tests = Path(__file__).resolve().parent
    fed = start_federation(request, tmp_path_factory, [
        "partition-id=0 num-partitions=3", "partition-id=1 num-partitions=3",
        f"partition-id=2 num-partitions=3 {HOSTILE_KEY}='num-examples' {HOSTILE_VALUE}=-1000"],
        extra_env={"PYTHONPATH": ":".join([str(tests), str(tests.parent)])})
    cfg = run_cfg(tmp_path, clients=3, participation=0.67, tau=2, rounds=2, seed=3)
    settings = FlowerSettings(round_timeout_s=90, node_wait_s=20, total_samples=sum(honest_sizes(cfg)))
    app = write_app_dir(tmp_path / "app", to_run_config(cfg, settings))
    app.write_text(app.read_text().replace('"edgeprof.flower.client_app:app"', '"hostile_client:app"'))
    # Execute
    run_id = fed.run_app(app)
    sidecar = fed.wait_done(tmp_path / f"{cfg.run_name}.json", 240)
    # Assert
    assert sidecar["status"] == "complete", fed.log_tail()
    refused = sidecar["flower"]["alpha"]["refused"]
    assert len(refused) == 1 and "num-examples must be a positive integer" in refused[0]["reason"]
    assert sorted(sidecar["flower"]["alpha"]["nodes"]) == ["0", "1"]
    log = fed.flwr("log", run_id, "loopback", "--show")  # the ServerApp's log
    assert f"node {refused[0]['node_id']} left out of the federation: roll call: num-examples" in log.stdout, \
        log.stdout[-3000:] + log.stderr
    accepted = {int(t): r["accepted"] for t, r in sidecar["flower"]["rounds"].items()}
    assert all(2 not in a for a in accepted.values())
    for got, want in zip(load_theta(tmp_path, cfg.run_name), in_process(cfg, accepted), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
