"""The Flower strategies on constructed replies: equation (4) with missing clients, rejection of bad replies,
sampling identical to the in-process loop, the reporting wrapper's rows, and the run-config round trip."""

from __future__ import annotations

import logging

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, Error, Message, MessageType, Metadata, MetricRecord, RecordDict  # noqa: E402

from edgeprof.algorithms import ALGORITHMS  # noqa: E402
from edgeprof.config import EnergySettings, RunConfig  # noqa: E402
from edgeprof.flower import strategy as st  # noqa: E402

SHAPES = [(3, 2), (3,)]
N = {0: 10, 1: 30, 2: 20, 3: 40}  # N_i of four clients


def cfg_for(**kw) -> RunConfig:
    base = dict(algo="pflego", clients=4, participation=0.5, rho=0.1, beta=0.1, server_optimizer="sgd",
                dataset="synthetic", backbone="mlp")
    return RunConfig(**{**base, **kw})


def directory() -> st.Directory:
    d = st.Directory(4)
    for pid, n in N.items():
        d.add(st.NodeInfo(pid, 100 + pid, n, 2, f"dev{pid}"))
    return d


def reply(node: int, content: RecordDict | Error, round_: int = 1) -> Message:
    meta = Metadata(run_id=1, message_id="m", src_node_id=node, dst_node_id=0, reply_to_message_id="x",
                    group_id=str(round_), created_at=0.0, ttl=60.0, message_type=MessageType.TRAIN)
    if isinstance(content, Error):
        return Message(error=content, metadata=meta)
    return Message(content=content, metadata=meta)


def grad_reply(pid: int, arrays, *, n=None, node=None, metrics=None) -> Message:
    m = MetricRecord(metrics if metrics is not None else {"partition-id": pid, "num-examples": n or N[pid],
                                                          "train-loss": 0.5})
    return reply(100 + pid if node is None else node, RecordDict({"arrays": ArrayRecord(list(arrays)), "metrics": m}))


def grads(seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


@pytest.fixture
def pflego_strategy():
    s = st.make_strategy(cfg_for(), directory())
    s.theta = [np.ones(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 1]
    return s


def test_pflego_aggregation_is_equation_4_with_missing_clients_as_zero(pflego_strategy):
    # Prepare: clients 0 and 1 sampled (r = 2 of I = 4); only client 1 replies
    g1 = grads(1)
    # Execute
    arrays, metrics = pflego_strategy.aggregate_train(1, [grad_reply(1, g1)])
    # Assert: SGD step rho * (I/r) * alpha_1 * g_1, alpha_1 = 30/100, computed independently here
    expected = [np.ones(sh) - 0.1 * (4 / 2) * (30 / 100) * g for sh, g in zip(SHAPES, g1)]
    for got, want in zip(arrays.to_numpy_ndarrays(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert metrics["replies-accepted"] == 1 and pflego_strategy.accepted[1] == [1]


@pytest.mark.parametrize("bad, reason", [
    (lambda: grad_reply(0, [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]), "shape"),
    (lambda: grad_reply(0, grads(0)[:1]), "1 arrays, expected 2"),
    (lambda: grad_reply(0, [np.full((3, 2), np.nan, np.float32), np.zeros(3, np.float32)]), "NaN"),
    (lambda: grad_reply(0, [np.full((3, 2), np.inf, np.float32), np.zeros(3, np.float32)]), "NaN or infinite"),
    (lambda: grad_reply(0, [np.zeros((3, 2), np.int64), np.zeros(3, np.int64)]), "dtype"),
    (lambda: grad_reply(0, grads(0), node=101), "which is node 100"),  # node 101 claims partition 0
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0}), "'num-examples' missing"),
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": -3}), "roll-call N_i"),
    # N_i other than the roll call's (it would move client 1's alpha), a fractional partition, a hostile loss
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": 10**6}),
     "num-examples must be 10, this node's roll-call N_i, got 1000000"),
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0.5, "num-examples": 10}),
     "partition-id must be a partition id in 0..3, got 0.5"),
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": 10, "train-loss": [1.0]}),
     "train-loss must be a finite loss >= 0"),
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": 10, "train-loss": -3.0}),
     "train-loss must be a finite loss >= 0, got -3.0"),
    (lambda: grad_reply(0, grads(0), metrics={"partition-id": 0, "num-examples": 10, "train-loss": float("inf")}),
     "train-loss must be a finite loss >= 0, got inf"),
    (lambda: reply(100, RecordDict({"metrics": MetricRecord({"partition-id": 0, "n-samples": 10})})),
     "no ArrayRecord"),
    (lambda: reply(100, Error(code=1, reason="boom")), "client error: boom"),
    (lambda: grad_reply(2, grads(2)), "not sampled"),
])
def test_malformed_reply_is_rejected_with_a_logged_reason(pflego_strategy, caplog, bad, reason):
    # Prepare: one good reply from client 1 and one bad reply
    g1 = grads(1)
    # Execute
    with caplog.at_level(logging.WARNING, logger="edgeprof.flower"):
        arrays, _ = pflego_strategy.aggregate_train(1, [bad(), grad_reply(1, g1)])
    # Assert: the bad one is logged and left out; theta moved by client 1's gradient alone
    assert reason in caplog.text
    assert len(pflego_strategy.rejected[1]) == 1 and reason in pflego_strategy.rejected[1][0][1]
    expected = [np.ones(sh) - 0.1 * 2 * 0.3 * g for sh, g in zip(SHAPES, g1)]
    for got, want in zip(arrays.to_numpy_ndarrays(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_no_valid_reply_leaves_the_model_unchanged(pflego_strategy):
    arrays, metrics = pflego_strategy.aggregate_train(1, [grad_reply(0, grads(0)[:1])])
    assert arrays is None and metrics["replies-rejected"] == 1


def test_alpha_denominator_is_the_configured_total_when_given():
    d = directory()
    d.total_samples = 200
    assert d.alpha(1) == pytest.approx(30 / 200)
    del d.nodes[3]  # client 3 never showed up: without a configured total the sum over known clients is used
    d.total_samples = 0
    assert d.alpha(1) == pytest.approx(30 / 60)


@pytest.mark.parametrize("algo", ["fedavg", "fedprox", "ditto", "fedper", "fedrep", "fedbabu", "fedsim", "fedalt"])
def test_averaging_strategies_average_the_weights_by_n(algo):
    s = st.make_strategy(cfg_for(algo=algo), directory())
    s.theta = [np.zeros(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 3]
    w0, w3 = grads(0), grads(3)
    arrays, _ = s.aggregate_train(1, [grad_reply(3, w3), grad_reply(0, w0)])
    for got, a, b in zip(arrays.to_numpy_ndarrays(), w0, w3):
        np.testing.assert_allclose(got, (10 * a + 40 * b) / 50, rtol=1e-6)


def test_fedrecon_strategy_steps_the_server_optimizer_on_the_pseudo_gradient():
    # Prepare: SGD(rho = 0.1) on theta = 1; clients 0 and 3 return theta_0 and theta_3
    s = st.make_strategy(cfg_for(algo="fedrecon"), directory())
    s.theta = [np.ones(sh, np.float32) for sh in SHAPES]
    s.sampled[1] = [0, 3]
    w0, w3 = grads(0), grads(3)
    # Execute
    arrays, _ = s.aggregate_train(1, [grad_reply(3, w3), grad_reply(0, w0)])
    # Assert: theta - rho * (theta - (N_0 theta_0 + N_3 theta_3) / (N_0 + N_3))
    for got, a, b in zip(arrays.to_numpy_ndarrays(), w0, w3):
        np.testing.assert_allclose(got, 1 - 0.1 * (1 - (10 * a + 40 * b) / 50), rtol=1e-6)


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_one_strategy_drives_every_registered_algorithm_by_its_declaration(algo):
    strategy = st.make_strategy(cfg_for(algo=algo), directory())

    spec = ALGORITHMS[algo]
    assert type(strategy) is st.EdgeprofStrategy and strategy.spec is spec
    assert strategy.missing_replies == spec.missing_replies
    assert (strategy.runtime() is not None) and ((strategy._optimizer is not None) == spec.has_optimizer)


def test_an_unregistered_algorithm_is_a_config_error_on_flower():
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import from_run_config

    with pytest.raises(ConfigError, match="unknown algorithm 'fedfoo'"):
        from_run_config({"algo": "fedfoo"})


def test_configure_train_samples_like_the_in_process_loop(task_identity):
    # Prepare: a strategy over four partitions, one of them without a node
    from edgeprof.algorithms.participants import participant_rng, sample_participants

    cfg = cfg_for(seed=7)
    s = st.make_strategy(cfg, directory())
    del s.directory.nodes[2]  # partition 2 has no node: sampled, but no message
    rng = participant_rng(cfg)
    arrays = ArrayRecord([np.zeros(sh, np.float32) for sh in SHAPES])
    for t in range(1, 6):
        # Execute
        messages = list(s.configure_train(t, arrays, ConfigRecord(), grid=None))
        # Assert
        expected = sample_participants(rng, 4, 0.5, "fixed")
        assert s.sampled[t] == expected
        assert [m.metadata.dst_node_id for m in messages] == [100 + p for p in expected if p != 2]
        assert all(m.content["config"]["scale"] == 2.0 for m in messages)


@pytest.mark.parametrize(("split", "r"), [("balanced", 3), ("paper", 2)])
def test_configure_train_samples_r_of_the_split_like_the_in_process_loop(task_identity, split, r):
    # Prepare: I=4, pi=0.65: round(2.6) = 3 clients, the reference code's int(2.6) = 2
    from edgeprof.algorithms.participants import participant_rng, sample_participants

    cfg = cfg_for(participation=0.65, split=split)
    s = st.make_strategy(cfg, directory())
    rng = participant_rng(cfg)
    arrays = ArrayRecord([np.zeros(sh, np.float32) for sh in SHAPES])
    for t in range(1, 4):
        # Execute
        messages = list(s.configure_train(t, arrays, ConfigRecord(), grid=None))
        # Assert
        assert s.sampled[t] == sample_participants(rng, 4, 0.65, "fixed", cfg.participant_rounding)
        assert len(messages) == r and all(m.content["config"]["scale"] == pytest.approx(4 / r) for m in messages)


@pytest.mark.parametrize("wire,name", [("one record", "host"), ("one record", "device"),
                                       ("older two records", "device")])
def test_reporting_strategy_writes_client_rows_with_their_host_and_a_server_row(tmp_path, pflego_strategy, wire, name):
    """The profile in the mods' one wire format, and in the older two-record one (read once, for compatibility);
    the machine named ``host``, or ``device`` as an older mod names it."""
    # Prepare
    from edgeprof.flower.energy import OLD_INFO, OLD_METRICS, PROFILE_RECORD
    from edgeprof.flower.report import ProfiledStrategy, RunRows
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.measure.profiler import Profiler
    from edgeprof.report import columns_for, read_report
    from edgeprof.report.writer import ReportWriter
    from edgeprof.session.run import Energy, RunContext

    msg = grad_reply(1, grads(1))
    numbers = {"wall_s": 1.5, "energy_j": 12.0, "joint_grad_s": 0.25, "short_window": 0.0, "not_a_column": 1.0}
    labels = {name: "jetson-7", "energy_method": "integrated_power"}
    if wire == "one record":
        msg.content[PROFILE_RECORD] = ConfigRecord({**numbers, **labels})
    else:
        msg.content[OLD_METRICS] = MetricRecord(numbers)
        msg.content[OLD_INFO] = ConfigRecord(labels)
    with ReportWriter(tmp_path / "r.csv", columns_for(("cache_forward", "head_steps", "joint_grad"))) as w:
        ctx = RunContext("r", "laptop", w, Profiler(MeterSet([])), Energy())
        # Execute
        ProfiledStrategy(pflego_strategy, rows=RunRows(ctx, pflego_strategy)).aggregate_train(1, [msg])
    # Assert
    report = read_report(tmp_path / "r.csv")
    (client,), (server,) = report.where(kind="client"), report.where(kind="server")
    assert "device" not in report.columns and (client["host"], client["client"], client["n_samples"]) == (
        "jetson-7", "1", "30")
    assert (client["wall_s"], client["energy_j"], client["energy_method"], client["joint_grad_s"]) == \
        ("1.5", "12", "integrated_power", "0.25")
    assert (server["host"], server["round"], server["n_participants"], server["n_samples"]) == ("laptop", "1", "2", "30")


def test_run_config_round_trip():
    from edgeprof.flower.config import FlowerSettings, from_run_config, to_run_config

    cfg = cfg_for(tau=3, threads=None, energy=EnergySettings(country="FRA"), progress=False).resolved()
    run_config = to_run_config(cfg, FlowerSettings(round_timeout_s=9.0, total_samples=50))
    assert all(v is not None for v in run_config.values())
    back, settings = from_run_config(run_config)
    assert back == cfg and settings == FlowerSettings(round_timeout_s=9.0, total_samples=50)


@pytest.mark.parametrize("key, value, expected", [
    ("round-timeout", float("nan"), "round-timeout must be a number of seconds above 0 and at most 86400, got nan"),
    ("round-timeout", 0.0, "round-timeout must be a number of seconds above 0"),
    ("node-wait", float("inf"), "node-wait must be a number of seconds >= 0, at most 86400, got inf"),
    ("node-wait", -1.0, "node-wait must be a number of seconds >= 0"),
    ("total-samples", -5, "total-samples must be >= 0"),
])
def test_a_run_config_no_server_could_wait_by_is_refused(key, value, expected):
    """``flwr run -c "round-timeout=nan"`` would make the server wait forever: refused in one line."""
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import FlowerSettings, from_run_config, to_run_config

    run_config = {**to_run_config(cfg_for(progress=False).resolved(), FlowerSettings()), key: value}

    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        from_run_config(run_config)


@pytest.mark.parametrize("split", ["balanced", "paper"])
def test_the_split_survives_the_run_config(split):
    from edgeprof.flower.config import from_run_config, to_run_config

    cfg = cfg_for(split=split, progress=False).resolved()
    run_config = to_run_config(cfg)
    back, _ = from_run_config(run_config)
    assert run_config["split"] == split and back.split == split and back == cfg


@pytest.mark.parametrize("mu", [0.0, None, 0.1])
def test_fedprox_mu_survives_the_run_config_even_at_zero(mu):
    from edgeprof.flower.config import from_run_config, to_run_config

    cfg = cfg_for(algo="fedprox", mu=mu, progress=False).resolved()
    back, _ = from_run_config(to_run_config(cfg))
    assert back.mu == cfg.mu == (0.25 if mu is None else mu)  # unset: Table 6's 0.25, as in-process


def test_unknown_run_config_key_is_a_config_error():
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import from_run_config

    with pytest.raises(ConfigError, match="taux"):
        from_run_config({"taux": 3})


def test_import_edgeprof_does_not_import_flower():
    import subprocess
    import sys

    code = "import sys, edgeprof, edgeprof.cli, edgeprof.rounds.simulate, edgeprof.flower.config; print('flwr' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("key", ["num-examples", "n-samples"])
def test_replies_count_examples_under_flowers_key_and_the_old_one(pflego_strategy, key):
    msg = grad_reply(1, grads(1), metrics={"partition-id": 1, key: 30, "train-loss": 0.5})

    arrays, metrics = pflego_strategy.aggregate_train(1, [msg])

    assert arrays is not None and metrics["replies-accepted"] == 1
    assert pflego_strategy.directory.nodes[1].n_train == 30


@pytest.mark.parametrize("key,value,accepts", [
    ("tau", 2.7, "a whole number"), ("tau", "3", "a whole number"), ("rounds", True, "a whole number"),
    ("simulation", "false", "true or false"), ("evaluate", 1, "true or false"), ("beta", "fast", "a number"),
    ("participation", True, "a number"), ("backbone", 7, "text"), ("data-dir", 5, "text"),
    ("round-timeout", "10", "a number"), ("total-samples", 1.5, "a whole number"), ("threads", "2", "a whole number"),
    ("cpu-watts", "lots", "a number"), ("country", 250, "text"),
])
def test_a_run_config_value_of_the_wrong_type_is_one_line_naming_the_key(key, value, accepts):
    """A hostile or mistyped value (a TOML file, ``flwr run -c``) is never coerced (``simulation = "false"`` is not
    true, ``tau = 2.7`` is not 2) and never a raw ValueError or TypeError."""
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import from_run_config, to_run_config

    good = to_run_config(cfg_for(tau=3))
    with pytest.raises(ConfigError) as err:
        from_run_config({**good, key: value})

    assert str(err.value).startswith(f"run-config key {key} takes {accepts}, got {value!r}")
    assert "\n" not in str(err.value)
