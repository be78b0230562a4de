"""edgeprof on a user's own Flower app: a tiny plain-PyTorch ClientApp that knows nothing of edgeprof, with
the mod added in one line, and Flower's stock FedAvg wrapped by ProfiledStrategy, run in-process through the
loopback Grid. The report has one row per client per round with time, energy and its method; the stock
strategy's result is exactly what it is without edgeprof."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

pytest.importorskip("flwr")

import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from test_flower_algorithms import LoopbackGrid  # noqa: E402

import edgeprof  # noqa: E402
from edgeprof.flower import ProfiledStrategy, energy_mod  # noqa: E402
from edgeprof.flower.energy import PROFILE_RECORD  # noqa: E402
from edgeprof.meters.discovery import MeterSet  # noqa: E402
from edgeprof.meters.estimate import CpuTimeEstimateMeter  # noqa: E402
from edgeprof.report.summary import flower_lines  # noqa: E402
from edgeprof.report.writer import read_report  # noqa: E402

NODES, ROUNDS, WATTS = (11, 22, 33), 2, 4.0


def plain_client_app(mods=()) -> ClientApp:
    """A quickstart-style ClientApp: a linear model, SGD on this node's synthetic data; no edgeprof in it."""
    app = ClientApp(mods=list(mods))

    def data(context: Context):
        gen = torch.Generator().manual_seed(int(context.node_config["partition-id"]))
        x = torch.randn(24, 5, generator=gen)
        return x, (x.sum(1) > 0).long()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = torch.nn.Linear(5, 2)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        x, y = data(context)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(3):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(
            {"train_loss": loss.item(), "num-examples": len(x)})}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        model = torch.nn.Linear(5, 2)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        x, y = data(context)
        accuracy = (model(x).argmax(1) == y).float().mean().item()
        return Message(RecordDict({"metrics": MetricRecord({"eval_acc": accuracy, "num-examples": len(x)})}),
                       reply_to=msg)

    return app


def contexts() -> dict[int, Context]:
    return {node: Context(run_id=1, node_id=node, node_config={"partition-id": i, "num-partitions": len(NODES)},
                          state=RecordDict(), run_config={}) for i, node in enumerate(NODES)}


def estimate_meters() -> MeterSet:
    return MeterSet([CpuTimeEstimateMeter(WATTS)])


def federate(client_app: ClientApp, strategy):
    """Two rounds of ``strategy`` over the nodes, every node sampled, the same random sequence each time."""
    random.seed(0)
    torch.manual_seed(0)
    initial = ArrayRecord(torch.nn.Linear(5, 2).state_dict())
    return strategy.start(grid=LoopbackGrid(client_app, contexts()), initial_arrays=initial, num_rounds=ROUNDS)


def test_the_mod_profiles_a_plain_app_and_the_wrapper_writes_one_report(tmp_path, task_identity):
    # Prepare: the same app and strategy, without edgeprof and with its two lines
    plain = federate(plain_client_app(), FedAvg(fraction_train=1.0, fraction_evaluate=1.0))
    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0), out=tmp_path, run_id="fl")
    # Execute
    profiled = federate(plain_client_app([energy_mod(meters=estimate_meters, carbon_intensity=500.0)]), strategy)
    report = read_report(tmp_path / "fl.csv")
    # Assert: the stock strategy's result is unchanged, arrays and metrics alike
    for got, want in zip(profiled.arrays.to_numpy_ndarrays(), plain.arrays.to_numpy_ndarrays(), strict=True):
        assert np.array_equal(got, want)
    assert dict(profiled.train_metrics_clientapp) == dict(plain.train_metrics_clientapp)
    assert dict(profiled.evaluate_metrics_clientapp) == dict(plain.evaluate_metrics_clientapp)
    # one client row per client per round, with time, energy and its method
    clients = report.where(kind="client")
    assert sorted((int(r["round"]), int(r["client"])) for r in clients) == [
        (t, c) for t in range(1, ROUNDS + 1) for c in range(len(NODES))]
    for row in clients:
        assert row["algo"] == "FedAvg" and row["window"] == "train" and row["n_samples"] == "24"
        assert float(row["wall_s"]) > 0 and row["energy_method"] == "estimate"
        assert float(row["energy_j"]) == pytest.approx(float(row["cpu_s"]) * WATTS, rel=1.1e-5)
        assert float(row["carbon_g"]) == pytest.approx(float(row["energy_j"]) / 3.6e6 * 500.0, rel=1e-4)
        assert math.isfinite(float(row["train_loss"])) and row["host"]
    assert len(report.where(kind="eval", window="evaluate")) == ROUNDS * len(NODES)
    servers = report.where(kind="server")
    assert [int(r["round"]) for r in servers] == [1, 2] and all(r["window"] == "aggregate_train" for r in servers)
    sidecar = report.sidecar
    assert sidecar["status"] == "complete" and sidecar["rounds_completed"] == ROUNDS
    assert sorted(c["node_id"] for c in sidecar["flower"]["clients"].values()) == sorted(NODES)
    assert sidecar["flower"]["rounds"]["1"]["train"] == {"replies": 3, "profiled": 3, "unprofiled": 0, "errors": 0,
                                                         "flagged": 0}
    assert sidecar["flower"]["flagged"] == {}
    assert sidecar["flower"]["notes"]  # every client reported this machine: attribution, said so
    assert [line for line in flower_lines(report) if line.startswith("note: clients [0, 1, 2] report the same host")]


@pytest.mark.parametrize("name", ["host", "device"])  # device: the argument's old name, still read
def test_a_reply_carries_time_energy_method_and_carbon(task_identity, monkeypatch, name):
    # Prepare: a phase marked inside the app's own code, a no-op without the mod
    monkeypatch.delenv("EDGEPROF_HOST", raising=False)
    monkeypatch.delenv("EDGEPROF_DEVICE", raising=False)
    app = ClientApp(mods=[energy_mod(meters=estimate_meters, carbon_intensity=500.0, **{name: "pi-4"})])

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        with edgeprof.phase("lookup"):
            sum(range(20000))
        return Message(RecordDict({"metrics": MetricRecord({"answer": 42.0})}), reply_to=msg)

    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=11, message_type=MessageType.QUERY)
    msg.metadata.__dict__["_message_id"] = "m1"
    # Execute
    reply = app(msg, contexts()[11])
    # Assert
    metrics, info = reply.content["metrics"], reply.content[PROFILE_RECORD]
    assert metrics["answer"] == 42.0
    assert {k for k in metrics if k.startswith("edgeprof.")} == {
        "edgeprof.wall_s", "edgeprof.cpu_s", "edgeprof.energy_j", "edgeprof.carbon_g"}
    assert metrics["edgeprof.energy_j"] == pytest.approx(info["energy_j"], rel=1e-5)
    assert info["energy_method"] == "estimate" and info["cpu_estimate_method"] == "estimate"
    assert info["energy_j"] == pytest.approx(info["cpu_s"] * WATTS, rel=1.1e-5)
    assert info["carbon_g"] == pytest.approx(info["energy_j"] / 3.6e6 * 500.0, rel=1e-4)
    assert info["lookup_s"] > 0 and info["message_type"] == MessageType.QUERY and info["host"] == "pi-4"
    assert "device" not in info


@pytest.mark.parametrize("node_config,host", [
    ({"host": "orin-2"}, "orin-2"),
    ({"device": "orin-2"}, "orin-2"),  # the key's old name, read where host is absent
    ({"host": "orin-2", "device": "old-name"}, "orin-2"),
    ({"compute-device": "cpu"}, None),  # where the rounds run names no machine: the host name
])
def test_the_node_configs_host_names_the_node_in_the_reply(task_identity, monkeypatch, node_config, host):
    # Prepare: the mod with no name of its own, so the node config's names the node
    import socket

    monkeypatch.delenv("EDGEPROF_HOST", raising=False)
    monkeypatch.delenv("EDGEPROF_DEVICE", raising=False)
    app = ClientApp(mods=[energy_mod(meters=estimate_meters, carbon_intensity=500.0)])

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"answer": 1.0})}), reply_to=msg)

    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=11, message_type=MessageType.QUERY)
    msg.metadata.__dict__["_message_id"] = "m1"
    context = Context(run_id=1, node_id=11, node_config=node_config, state=RecordDict(), run_config={})
    # Execute
    info = app(msg, context).content[PROFILE_RECORD]
    # Assert
    assert info["host"] == (host or socket.gethostname()) and "device" not in info


def test_without_the_wrapper_a_stock_strategy_still_aggregates_and_sees_the_energy(task_identity):
    result = federate(plain_client_app([energy_mod(meters=estimate_meters)]),
                      FedAvg(fraction_train=1.0, fraction_evaluate=1.0))

    assert result.arrays is not None and len(result.train_metrics_clientapp) == ROUNDS
    assert result.train_metrics_clientapp[ROUNDS]["edgeprof.energy_j"] > 0


def test_the_wrapper_needs_its_start_loop(tmp_path):
    strategy = ProfiledStrategy(FedAvg(), out=tmp_path)

    with pytest.raises(edgeprof.errors.EdgeprofError, match="inside start"):
        strategy.aggregate_train(1, [])
    assert strategy.weighted_by_key == "num-examples"  # the wrapped strategy's attributes show through


def test_a_traced_mod_sends_each_windows_trace_and_the_wrapper_writes_it_beside_the_report(tmp_path,
                                                                                          task_identity):
    from edgeprof.report.trace_file import read_trace

    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0), out=tmp_path, run_id="fl",
                                trace_hz=200)
    federate(plain_client_app([energy_mod(meters=estimate_meters, trace_hz=200)]), strategy)
    report = read_report(tmp_path / "fl.csv").where()
    section = __import__("json").loads((tmp_path / "fl.json").read_text())["trace"]
    rows = read_trace(tmp_path / section["file"])

    client_rows = [i for i, r in enumerate(report) if r["kind"] in ("client", "eval")]
    assert client_rows and {r["row"] for r in rows if r["kind"] != "server"} == set(client_rows)
    assert {r["window"] for r in rows} >= {"train", "evaluate"} and {r["method"] for r in rows} == {"estimate"}
    for index in client_rows:
        total = sum(r["w"] * r["dt_s"] for r in rows if r["row"] == index)
        # the client's joules travel as floats, the trace's at 9 digits; the report prints 6
        assert total == pytest.approx(float(report[index]["energy_j"]), rel=5e-6 + 1e-8), index


def test_an_untraced_server_takes_a_traced_clients_trace_out_of_the_reply(tmp_path, task_identity):
    from edgeprof.flower.energy import TRACE_RECORD

    seen = []
    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0), out=tmp_path, run_id="fl")
    inner_aggregate = strategy.inner.aggregate_train

    def aggregate(server_round, replies):
        replies = list(replies)
        seen.extend(TRACE_RECORD in m.content for m in replies)
        return inner_aggregate(server_round, replies)

    strategy.inner.aggregate_train = aggregate
    federate(plain_client_app([energy_mod(meters=estimate_meters, trace_hz=200)]), strategy)

    assert seen and not any(seen)  # the wrapped strategy sees the replies as the ClientApp returned them
    assert "trace" not in __import__("json").loads((tmp_path / "fl.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fl.csv", "fl.json"]


@pytest.mark.parametrize("bad", [
    {"w": [1.0]},  # fields missing
    "lengths",
    "method",
])
def test_a_trace_record_the_server_cannot_read_is_dropped_and_the_row_still_written(tmp_path, task_identity,
                                                                                  caplog, bad):
    from edgeprof.flower.energy import TRACE_RECORD
    from edgeprof.report.trace_file import read_trace

    def spoil(msg, context, call_next):
        reply = call_next(msg, context)
        record = dict(reply.content[TRACE_RECORD])
        if bad == "lengths":
            record["w"] = record["w"][:-1]
        elif bad == "method":
            record["method"] = ["made-up"] * len(record["method"])
        else:
            record = bad
        reply.content[TRACE_RECORD] = ConfigRecord(record)
        return reply

    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0), out=tmp_path, run_id="fl",
                                trace_hz=200)
    federate(plain_client_app([spoil, energy_mod(meters=estimate_meters, trace_hz=200)]), strategy)
    report = read_report(tmp_path / "fl.csv").where()
    section = __import__("json").loads((tmp_path / "fl.json").read_text())["trace"]
    rows = read_trace(tmp_path / section["file"])

    clients = [i for i, r in enumerate(report) if r["kind"] in ("client", "eval")]
    assert len(clients) == 2 * ROUNDS * len(NODES)  # every reply's row is written
    assert not any(r["row"] in clients for r in rows)  # none with the unreadable trace
    assert {r["kind"] for r in rows} == {"server"}  # the server's own windows are still traced
    assert "cannot read" in caplog.text


@pytest.mark.parametrize("fields", ["now", "before resolved and flag"])
def test_a_trace_record_round_trips_with_what_its_meter_resolved(task_identity, fields):
    """A traced mod's record carries each row's ``resolved`` and ``flag``; a node with an edgeprof from before those
    fields sends none, and its rows read as resolved and unflagged."""
    from edgeprof.flower.energy import TRACE_RECORD, take_trace, trace_record
    from edgeprof.measure.trace import TraceRow

    rows = (TraceRow(0.02, 0.02, "head_steps", "gpu_0", "gpu", True, 151.5, "counter", True, False, ""),
            TraceRow(0.3, 0.28, "joint_grad", "gpu_0", "gpu", True, 812.0, "counter", False, True,
                     "above the 700 W power limit"))
    record = trace_record(rows)
    if fields != "now":
        record = ConfigRecord({k: v for k, v in record.items() if k not in ("resolved", "flag")})
    msg = Message(RecordDict({TRACE_RECORD: record}), dst_node_id=1, message_type=MessageType.TRAIN)

    taken = take_trace(msg)

    expected = rows if fields == "now" else tuple(
        TraceRow(**{**r.__dict__, "resolved": True, "flag": ""}) for r in rows)
    assert taken == expected and TRACE_RECORD not in msg.content


def test_the_mod_over_a_slow_gpu_meter_writes_its_rows_before_it_closes_the_meters(tmp_path, task_identity):
    """A slow NVML (3-ms reads, found slow at start and read off the measured thread) whose energy cannot be read
    once NVML is shut down, as the real driver's: every client row still has its GPU joules, made while the meters
    were open."""
    from fixtures_sysfs import slow_stepping_pynvml

    from edgeprof.meters import discover

    def meters():
        mod = slow_stepping_pynvml(power_w=100.0, read_s=0.003)
        read = mod.nvmlDeviceGetTotalEnergyConsumption

        def energy_mj(handle):
            if not mod.initialised:
                raise mod.NVMLError(9)  # driver not loaded: shut down
            return read(handle)

        mod.nvmlDeviceGetTotalEnergyConsumption = energy_mj
        return discover(nvml_module=mod, cpu_watts=WATTS)

    strategy = ProfiledStrategy(FedAvg(fraction_train=1.0, fraction_evaluate=1.0), out=tmp_path, run_id="slow")
    federate(plain_client_app([energy_mod(meters=meters)]), strategy)
    clients = read_report(tmp_path / "slow.csv").where(kind="client")

    assert len(clients) == ROUNDS * len(NODES)
    assert all(r["gpu_method"] == "counter" and float(r["gpu_j"]) >= 0 for r in clients)
