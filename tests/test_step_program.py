"""The baselines' local step as one captured device program (edgeprof.nn.step_program), through fake device kinds.

:class:`~test_compute.CapturingKind` captures in host memory as the CUDA kind does (a warm-up run, then a replay
that runs the step again) and logs every capture and replay with the profiler window and phase open at that moment,
so these tests show where capture and replay happen and that a replayed run gives the eager run's results; what only
a real CUDA graph can show (static outputs, the shared memory pool on a GPU) is in scripts/gpu_cases.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from edgeprof.algorithms import ALGORITHMS, fedrep
from edgeprof.config import RunConfig
from edgeprof.nn.step_program import NAME
from edgeprof.nn.head_program import TUNING_REPLAYS
from test_compute import capturing, fake  # noqa: F401 - fixtures used by name
from edgeprof.nn.tolerances import float32_atol

TAU = 3
#: the baselines whose local steps go through the step programs, and the steps one client round takes
STEPS_PER_ROUND = {"fedavg": TAU, "fedprox": TAU, "ditto": 2 * TAU, "fedbabu": TAU, "fedper": TAU,
                   "fedrep": TAU + fedrep.body_steps(TAU), "fedsim": TAU, "fedalt": 2 * TAU}
#: how many step programs (trained parameters and settings) one client's round meets
MODES = {"fedavg": 1, "fedprox": 1, "ditto": 2, "fedbabu": 1, "fedper": 1, "fedrep": 2, "fedsim": 1, "fedalt": 2}


def _cfg(algo: str, device: str, **changes) -> RunConfig:
    base = dict(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=3,
                participation=1.0, backbone="mlp", tau=TAU, threads=1, device=device)
    return RunConfig(**{**base, **changes})


def _run_keeping_federation(monkeypatch, cfg: RunConfig):
    """A whole ``measure`` run of ``cfg``; (its result, the federation it ran)."""
    from edgeprof.rounds import simulate

    built = []
    build = simulate.build_federation
    monkeypatch.setattr(simulate, "build_federation", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    return simulate.run(cfg), built[0]


def _assert_states_close(got, want) -> None:
    """Global arrays and every personal state of two federations equal to float32 rounding."""
    pairs = list(zip(got.state.arrays, want.state.arrays))
    pairs += [(a, b) for mine, theirs in zip(got.personal, want.personal) if theirs is not None
              for a, b in zip(mine, theirs)]
    assert pairs
    for a, b in pairs:
        # tau steps of a forward and a backward through the MLP's layers, for each of the run's 2 rounds
        np.testing.assert_allclose(a, b, rtol=0, atol=float32_atol(b, fan_in=64, depth=2 * (2 * TAU + 4)) + 1e-7)


@pytest.mark.parametrize("algo", sorted(STEPS_PER_ROUND))
def test_a_run_captures_its_steps_in_set_up_and_replays_them_only_in_its_step_phases(capturing, fake, monkeypatch,
                                                                                     tmp_path, algo):
    """A whole run (3 clients, 2 rounds) on a kind that captures: every step program is captured before any window
    opens, once per client and mode, all into one memory pool; every replay happens inside a client window's step
    phase, tau a phase; nothing runs eagerly; the result equals the same run on an eager kind."""
    cfg = _cfg(algo, "capfake:0", rounds=2, progress=False, out=tmp_path, run_name="captured")
    eager_cfg = dataclasses.replace(cfg, device="fake:0", run_name="eager")

    result, replayed = _run_keeping_federation(monkeypatch, cfg)
    _, eager = _run_keeping_federation(monkeypatch, eager_cfg)

    captures = [e for e in capturing.log if e[0] == "capture"]
    assert [e[1] for e in captures] == [(None, None)] * (3 * MODES[algo])
    assert len({id(e[2]) for e in captures}) == 1 and captures[0][2] is not None
    replays = capturing.at("replay")
    assert len(replays) == 2 * 3 * STEPS_PER_ROUND[algo]
    assert {phase for window, phase in replays} == set(ALGORITHMS[algo].phases)
    assert {window for window, phase in replays} == {"client"}
    programs = json.loads(result.sidecar_path.read_text())["numerics"]["compute"]["programs"][NAME]
    assert (programs["local_steps"], programs["captures"], programs["eager_runs"], programs["step_replays"]) == (
        "one captured device graph per step, replayed tau times", 3 * MODES[algo], 0, len(replays))
    assert sum(k["programs"] for k in programs["keys"]) == 3 * MODES[algo]
    _assert_states_close(replayed, eager)


def _one_client(algo: str = "fedprox", **changes):
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = _cfg(algo, "capfake:0", clients=1, **changes).resolved()
    return cfg, build_federation(cfg, load_clients(cfg))


@pytest.mark.parametrize("change,recaptured", [("tau", False), ("lr", True), ("mu", True), ("samples", True)])
def test_a_new_tau_replays_the_same_program_and_new_numbers_or_data_capture_another(capturing, change, recaptured):
    """A step program does not depend on tau: preparing another tau captures nothing and its round replays the
    same graph (tau times); a new lr or mu (numbers in the graph) or another local set is another key, captured
    in set-up; no round runs eagerly."""
    cfg, federation = _one_client()
    registry = federation.runtime.compute.programs(NAME, None)
    for _ in range(2):
        federation.client_round(0)
    new = dataclasses.replace(cfg, **{"tau": dict(tau=7), "lr": dict(beta=cfg.beta * 3), "mu": dict(mu=cfg.mu * 2),
                                      "samples": {}}[change])
    if change == "samples":  # the same client with fewer samples: other arrays, another shape
        client = federation.clients[0]
        federation.clients[0] = dataclasses.replace(client, x_train=client.x_train[:-5], y_train=client.y_train[:-5])
    before = len(capturing.at("capture"))

    federation.prepare(federation.settings_for(new))
    federation.client_round(0, settings=federation.settings_for(new))

    assert before == 1 and len(capturing.at("capture")) == registry.captures == 1 + recaptured
    assert registry.builds == 1 + recaptured and registry.eager_runs == 0 and registry.replays == 3
    assert registry.step_replays == 2 * TAU + new.tau


@pytest.mark.parametrize("algo", sorted(STEPS_PER_ROUND))
def test_the_capture_warm_up_leaves_no_trace_in_the_module_or_a_round(capturing, algo):
    """The warm-up takes a real step: after set-up the runtime's module holds the weights it held before, and the
    first round of a prepared federation (replayed) equals that of one never prepared (run eagerly)."""
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = _cfg(algo, "capfake:0").resolved()
    clients = load_clients(cfg)
    prepared, unprepared = Federation(cfg, clients), Federation(cfg, clients)
    before = [p.detach().clone() for p in prepared.runtime.backbone.parameters()]

    prepared.prepare()
    after = [p.detach().clone() for p in prepared.runtime.backbone.parameters()]
    got, want = prepared.client_round(0), unprepared.client_round(0)

    assert len(capturing.at("capture")) == 3 * MODES[algo]
    assert all(bool((a == b).all()) for a, b in zip(after, before))
    registries = [f.runtime.compute.programs(NAME, None) for f in (prepared, unprepared)]
    assert [(r.replays, r.eager_runs) for r in registries] == [(MODES[algo], 0), (0, MODES[algo])]
    assert got.loss == pytest.approx(want.loss, rel=1e-6)
    for a, b in zip([*got.payload, *(prepared.personal[0] or [])], [*want.payload, *(unprepared.personal[0] or [])]):
        np.testing.assert_allclose(a, b, rtol=0, atol=float32_atol(b, fan_in=64, depth=2 * TAU + 2) + 1e-7)


@pytest.mark.parametrize("device,how", [
    ("capfake:0", "eager torch on the device (nothing prepared before the windows)"),
    ("fake:0", "eager torch on the device (this device kind captures no graphs)"),
])
def test_a_round_without_a_prepared_program_runs_eagerly_and_captures_nothing(capturing, fake, device, how):
    """A federation whose driver never called prepare (a capturing kind), or a kind that captures nothing: the round
    runs the steps eagerly, counted, and the sidecar's entry says why; no capture inside the round."""
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import load_clients

    cfg = _cfg("fedavg", device, clients=1).resolved()
    federation = Federation(cfg, load_clients(cfg))

    update = federation.client_round(0)

    described = federation.runtime.compute.describe()["programs"][NAME]
    assert capturing.at("capture") == [] and capturing.at("replay") == []
    assert (described["local_steps"], described["eager_runs"], described["captures"]) == (how, 1, 0)
    assert np.isfinite(update.loss)


@pytest.mark.parametrize("algo", ["pflego", "fedavg"])
def test_a_flower_node_captures_in_its_set_up_window_and_replays_in_its_rounds(capturing, tmp_path, task_identity,
                                                                               algo):
    """On Flower, the node's set-up (the mod's ``setup`` window, before the round's ``client`` window) captures the
    algorithm's step graphs; the rounds replay them; nothing is captured inside a round's window."""
    from flwr.app import Context, RecordDict

    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from test_flower_algorithms import LoopbackGrid, tiny_cfg

    run_config = to_run_config(tiny_cfg(algo, tmp_path), FlowerSettings(node_wait_s=0.0))
    contexts = {pid + 1: Context(run_id=1, node_id=pid + 1, state=RecordDict(), run_config=run_config, node_config={
        "partition-id": pid, "num-partitions": 3, "compute-device": "capfake:0", "warmup": "0"}) for pid in range(3)}

    run_server(LoopbackGrid(make_client_app(), contexts), run_config)

    captures, replays = capturing.at("capture"), capturing.at("replay")
    assert captures and {window for window, _ in captures} == {"setup"}
    # PFLEGO's head steps also time each split's replays in set-up (edgeprof.nn.head_program.SPLITS): those lie
    # in the setup window too, every other replay in a round's client window
    assert replays and {window for window, _ in replays} <= {"client", "setup"}
    assert {window for window, _ in replays if window != "setup"} == {"client"}
    tuning = sum(1 for window, _ in replays if window == "setup")
    assert tuning == (0 if algo != "pflego" else len(captures) * TUNING_REPLAYS), (algo, tuning, len(captures))
