"""Every registered algorithm on Flower: the real ServerApp code (:func:`edgeprof.flower.server_app.run_server`:
roll call, strategy, reporting wrapper) drives the real ClientApp (mod and client rounds) through Flower's own
Message, RecordDict and Context objects, with a loopback Grid that hands each message to the ClientApp in this
process (no Ray, no SuperLink); after 2 rounds the shared weights, and every personal state, equal those of the
in-process loop with the same seed and client sampling. The Ray engine runs the same apps in
``test_flower_simulation.py``; separate processes in ``test_flower_e2e.py``."""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable
from uuid import uuid4

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from edgeprof.algorithms import ALGORITHMS  # noqa: E402
from edgeprof.config import RunConfig  # noqa: E402

CLIENTS = 3
SEED = 4  # with 3 clients, 2 per round: rounds sample [0, 1] then [0, 2], so client 0 keeps its state
# across rounds and client 2 first trains in round 2 (its personal state must start as in-process)


class LoopbackGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process, one Flower Context (and state) per node."""

    def __init__(self, client_app, contexts: dict[int, Context]) -> None:
        self.client_app = client_app
        self.contexts = contexts

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        from flwr.supercore.run import Run

        return Run.create_empty(run_id=1)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages):
        raise NotImplementedError("send_and_receive delivers directly")

    def pull_messages(self, message_ids):
        raise NotImplementedError("send_and_receive delivers directly")

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's InMemoryGrid does on push
            replies.append(self.client_app(msg, self.contexts[msg.metadata.dst_node_id]))
        return replies


def tiny_cfg(algo: str, out) -> RunConfig:
    # beta well above the default, so a personal state or fixed head that differs shows in the shared weights
    return RunConfig(algo=algo, tau=2, rounds=2, clients=CLIENTS, participation=0.67, dataset="synthetic",
                     backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=SEED, beta=0.3, threads=1,
                     out=out, run_name=algo, progress=False).resolved()


def shared_weights(federation) -> list[np.ndarray]:
    """The in-process global arrays: PFLEGO's and FedRecon's theta, the baselines' weights or body."""
    return federation.global_arrays


def personal_states(federation) -> tuple[str, list] | None:
    """(context.state key, per-client arrays) of what the algorithm keeps on the client, or None."""
    if federation.spec.personal:  # PFLEGO's W_i, the [W_i, b_i] of FedPer, FedRep, FedSim, FedAlt, Ditto's v_i
        return "edgeprof.personal", federation.personal
    assert federation.personal == [None] * federation.num_clients
    return None  # FedAvg, FedProx, FedBABU (fixed head), FedRecon (stateless clients)


def in_process(cfg: RunConfig):
    """The algorithm after cfg.rounds rounds of the in-process loop; and the participants of every round."""
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.rounds.simulate import build_federation, load_clients

    algorithm = build_federation(cfg, load_clients(cfg))
    rng = participant_rng(cfg)
    sampled = {}
    for t in range(1, cfg.rounds + 1):
        sampled[t] = sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)
        algorithm.server_step([algorithm.client_round(c) for c in sampled[t]])
    return algorithm, sampled


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_algorithm_on_flower_matches_the_in_process_run(algo, tmp_path, task_identity):
    # Prepare: one Context per node, node ids unlike partition ids so the directory's mapping matters
    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server

    cfg = tiny_cfg(algo, tmp_path)
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    contexts = {1000 + 7 * pid: Context(run_id=1, node_id=1000 + 7 * pid, node_config={
        "partition-id": pid, "num-partitions": CLIENTS}, state=RecordDict(), run_config=run_config)
        for pid in range(CLIENTS)}
    # Execute
    run_id = run_server(LoopbackGrid(make_client_app(), contexts), run_config)
    # Assert: every sampled client replied and was accepted, in the in-process sampling
    algorithm, sampled = in_process(cfg)
    sidecar = json.loads((tmp_path / f"{run_id}.json").read_text())
    assert sidecar["status"] == "complete"
    assert {int(t): r["accepted"] for t, r in sidecar["flower"]["rounds"].items()} == sampled
    # the shared weights equal the in-process ones
    got = np.load(tmp_path / f"{run_id}.theta.npz")
    want = shared_weights(algorithm)
    assert len(got.files) == len(want)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{i}"], w, atol=1e-5, rtol=0)
    # what stays on the client equals the in-process personal state, for the clients that trained
    personal = personal_states(algorithm)
    trained = set().union(*sampled.values())
    for pid in range(CLIENTS):
        state = contexts[1000 + 7 * pid].state
        if personal is None:
            assert not any(k.startswith("edgeprof.") for k in state)
            continue
        key, arrays = personal
        assert (key in state) == (pid in trained)
        if pid in trained:
            for g, w in zip(state[key].to_numpy_ndarrays(), arrays[pid], strict=True):
                np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("protocol", ["global", "paper"])
@pytest.mark.parametrize("algo", ["pflego", "fedavg", "ditto"])
def test_evaluation_on_flower_matches_in_process(algo, protocol, tmp_path, task_identity):
    """Flower's eval rows (EVALUATE messages, or the local evaluation in training replies) equal the
    in-process loop's under the same protocol."""
    import dataclasses

    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from edgeprof.report import read_report
    from edgeprof.rounds.simulate import run

    cfg = dataclasses.replace(tiny_cfg(algo, tmp_path), evaluate=True, eval_protocol=protocol)
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    contexts = {1000 + 7 * pid: Context(run_id=1, node_id=1000 + 7 * pid, node_config={
        "partition-id": pid, "num-partitions": CLIENTS}, state=RecordDict(), run_config=run_config)
        for pid in range(CLIENTS)}

    flower_report = read_report(tmp_path / f"{run_server(LoopbackGrid(make_client_app(), contexts), run_config)}.csv")
    local_report = read_report(run(dataclasses.replace(cfg, run_name=f"{algo}-local")).csv_path)

    got, want = (sorted(r.where(kind="eval"), key=lambda r: int(r["round"])) for r in (flower_report, local_report))
    assert len(got) == len(want) == cfg.rounds
    for g, w in zip(got, want):
        assert g["eval_protocol"] == w["eval_protocol"] == protocol
        assert float(g["test_accuracy"]) == pytest.approx(float(w["test_accuracy"]), abs=1e-6)
        assert float(g["train_loss"]) == pytest.approx(float(w["train_loss"]), rel=1e-5)


def test_a_traced_run_config_traces_every_client_round_and_server_step(tmp_path, task_identity):
    """trace-hz in the run config: each ClientApp sends its window's trace, the ServerApp writes it with its own."""
    from edgeprof.config import EnergySettings
    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from edgeprof.report import read_report
    from edgeprof.report.trace_file import read_trace

    cfg = dataclasses.replace(tiny_cfg("pflego", tmp_path), energy=EnergySettings(trace_hz=200.0))
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    assert run_config["trace-hz"] == 200.0
    contexts = {pid: Context(run_id=1, node_id=pid, node_config={"partition-id": pid, "num-partitions": CLIENTS},
                             state=RecordDict(), run_config=run_config) for pid in range(CLIENTS)}

    run_id = run_server(LoopbackGrid(make_client_app(), contexts), run_config)
    report = read_report(tmp_path / f"{run_id}.csv").where()
    section = json.loads((tmp_path / f"{run_id}.json").read_text())["trace"]
    rows = read_trace(tmp_path / section["file"])

    measured = [i for i, r in enumerate(report) if r["kind"] in ("client", "server")]
    assert {r["row"] for r in rows} == set(measured) and section["hz"] == 200.0
    assert {"cache_forward", "head_steps", "joint_grad"} <= {r["phase"] for r in rows if r["kind"] == "client"}
    for index in measured:
        total = sum(r["w"] * r["dt_s"] for r in rows if r["row"] == index)
        assert total == pytest.approx(float(report[index]["energy_j"]), rel=5e-6 + 1e-8), index


def test_a_node_config_trace_hz_0_keeps_that_device_from_tracing(tmp_path, task_identity):
    from edgeprof.config import EnergySettings
    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from edgeprof.report import read_report
    from edgeprof.report.trace_file import read_trace

    cfg = dataclasses.replace(tiny_cfg("fedavg", tmp_path), participation=1.0, energy=EnergySettings(trace_hz=200.0))
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    contexts = {pid: Context(run_id=1, node_id=pid, node_config={
        "partition-id": pid, "num-partitions": CLIENTS, **({"trace-hz": 0} if pid == 0 else {})},
        state=RecordDict(), run_config=run_config) for pid in range(CLIENTS)}

    run_id = run_server(LoopbackGrid(make_client_app(), contexts), run_config)
    report = read_report(tmp_path / f"{run_id}.csv").where()
    rows = read_trace(tmp_path / json.loads((tmp_path / f"{run_id}.json").read_text())["trace"]["file"])

    traced = {report[r["row"]]["client"] for r in rows if r["kind"] == "client"}
    assert traced == {str(pid) for pid in range(1, CLIENTS)}  # every device but the one that opted out
