"""Proof that an algorithm is one place: a toy algorithm defined entirely in this file, registered with one
line, runs in-process (``edgeprof measure``'s loop) and through the real ServerApp and ClientApp code with
Flower's own Message and Context objects, with no other change to the package; both give the same global
arrays and the same personal state to 1e-6. It follows the architecture page's "Add an algorithm" recipe.

The toy: plain local SGD on a personal linear head only. Each client computes its features once with the
initial backbone, takes tau gradient steps on its own head (shifted by the shared scalar), keeps the head and
replies one number (the mean absolute weight of its head); the server averages those by N_i into the scalar.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

from edgeprof.algorithms import ALGORITHMS, aggregation, register, unregister  # noqa: E402
from edgeprof.algorithms.contract import AlgorithmSpec, ClientResult, EvalResult, ServerState  # noqa: E402
from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.nn import head as headlib  # noqa: E402

from docs_text import page  # noqa: E402
from test_flower_algorithms import LoopbackGrid  # noqa: E402

ARCHITECTURE_PAGE = "docs/architecture.md"  # where the recipe is


# --- the toy algorithm: client program, server program, evaluation, declaration ----------------------------
def toy_client(rt, shared, personal, data, s):
    with s.phase("head_sgd"):
        feats = headlib.with_bias(rt.features(data.x_train, rt.initial_params))
        head = headlib.gradient_steps(personal[0] + shared[0].mean(), feats, data.y_train, s.beta, s.tau)
    loss, _ = headlib.loss_and_grad(head, feats, data.y_train)
    return ClientResult([np.abs(head).mean(keepdims=True).reshape(1)], [head], loss, len(data.y_train))


def toy_server(rt, state, replies, s):
    return ServerState(aggregation.weighted_average([r.arrays for r in replies], [r.n_samples for r in replies]))


def toy_evaluate(rt, shared, personal, data, s):
    feats = headlib.with_bias(rt.features(data.x_train, rt.initial_params))
    loss, _ = headlib.loss_and_grad(personal[0], feats, data.y_train)
    return EvalResult(data.client_id, loss, 0.0, len(data.y_train), len(data.y_test))


TOY = AlgorithmSpec(
    name="toyhead", paper="(a test's toy)", phases=("head_sgd",), client=toy_client, server=toy_server,
    init_global=lambda rt: [np.zeros(1, dtype=np.float32)], evaluate=toy_evaluate, server_kind="average",
    evaluation="the personal head on the initial backbone's features", hyperparams={"beta": 0.3},
    personal="a linear head", init_personal=lambda rt, data, _g: [np.zeros((data.num_classes, rt.feature_dim + 1),
                                                                            dtype=np.float32)],
    cost=(1.0, 0.1),
)


@pytest.fixture
def toy():
    register(TOY)  # the one line that makes it an edgeprof algorithm
    yield TOY
    unregister(TOY.name)


def _cfg(out) -> RunConfig:
    return RunConfig(algo="toyhead", tau=3, rounds=2, clients=3, participation=0.67, dataset="synthetic",
                     backbone="mlp", synthetic_samples=150, synthetic_classes=4, seed=4, threads=1, out=out,
                     run_name="toy", progress=False, evaluate=True).resolved()


def test_the_toy_is_registered_only_while_the_fixture_holds_it(toy):
    assert "toyhead" in ALGORITHMS and ALGORITHMS["toyhead"] is TOY
    assert _cfg(Path(".")).beta == 0.3  # its own defaults, not the fallback rates
    with pytest.raises(ValueError, match="already registered"):
        register(TOY)


def test_toy_runs_in_process_and_on_flower_with_the_same_result(toy, tmp_path, task_identity):
    from edgeprof.flower.client_app import PERSONAL_KEY, make_client_app
    from edgeprof.flower.config import FlowerSettings, to_run_config
    from edgeprof.flower.server_app import run_server
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.report import read_report
    from edgeprof.rounds.simulate import build_federation, load_clients, run

    # in-process: the measure loop writes its report (phases, eval rows) ...
    report = read_report(run(_cfg(tmp_path / "measure")).csv_path)
    assert len(report.where(kind="eval")) == 2 and all(r["head_sgd_s"] for r in report.where(kind="client"))
    # ... and the same federation driven step by step keeps the state to compare
    cfg = _cfg(tmp_path / "flower")
    federation = build_federation(cfg, load_clients(cfg))
    rng, trained = participant_rng(cfg), set()
    for _ in range(cfg.rounds):
        sampled = sample_participants(rng, cfg.clients, cfg.participation, cfg.participation_mode)
        federation.server_step([federation.client_round(c) for c in sampled])
        trained |= set(sampled)
    # Flower: the real ServerApp and ClientApp, Flower's Message and Context objects
    run_config = to_run_config(cfg, FlowerSettings(node_wait_s=0.0))
    contexts = {50 + pid: Context(run_id=1, node_id=50 + pid, node_config={"partition-id": pid, "num-partitions": 3},
                                  state=RecordDict(), run_config=run_config) for pid in range(3)}
    run_id = run_server(LoopbackGrid(make_client_app(), contexts), run_config)

    assert json.loads((cfg.out / f"{run_id}.json").read_text())["status"] == "complete"
    got = np.load(cfg.out / f"{run_id}.theta.npz")
    np.testing.assert_allclose(got["arr_0"], federation.global_arrays[0], atol=1e-6, rtol=0)
    assert not np.allclose(federation.global_arrays[0], 0.0)  # the server program did move the shared array
    for pid in range(3):
        state = contexts[50 + pid].state
        assert (PERSONAL_KEY in state) == (pid in trained) and set(state.keys()) <= {PERSONAL_KEY}
        if pid in trained:
            np.testing.assert_allclose(state[PERSONAL_KEY].to_numpy_ndarrays()[0], federation.personal[pid][0],
                                       atol=1e-6, rtol=0)


def _recipe(title: str) -> list[str]:
    text = page(ARCHITECTURE_PAGE)
    block = re.search(rf"^### {re.escape(title)}\n\n(.*?)(?=\n\n|\n###)", text, re.M | re.S).group(1)
    return block.splitlines()


def test_the_docs_recipe_is_what_this_file_does():
    lines = _recipe("Add an algorithm")
    text = " ".join(lines)

    assert len(lines) <= 10
    for name in ("AlgorithmSpec", "client", "server", "init_global", "evaluate", "register", "REGISTRY"):
        assert name in text, name
    from edgeprof import algorithms

    assert callable(algorithms.register) and isinstance(algorithms.REGISTRY, dict)
