"""What edgeprof guarantees about reproducibility, and the BLAS pin of the numpy head that it relies on.

Guaranteed: the same seed, thread count and machine (CPU kernel family, library versions) give a bitwise
identical run. Not guaranteed: the same bits across kernel families or library versions; across thread counts,
only what tests/test_thread_count.py checks (PFLEGO in the Table 1 setting, 1 and 2 threads, on the machine that
runs it); see docs/reproduction.md, "PFLEGO at the paper's rho: thread count and reproducibility".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from edgeprof.nn import head as headlib

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    """The thread counts of numpy's own BLAS (what its matrix products call; scipy, once imported, brings a BLAS of
    its own that numpy never calls, so which tests ran before cannot change what is counted here)."""
    here = Path(np.__file__).resolve().parent
    numpys = (here, here.parent / "numpy.libs")
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"
            and any(Path(info["filepath"]).resolve().is_relative_to(d.resolve()) for d in numpys)]


@pytest.fixture
def torch_threads():
    """Restores torch's intra-op thread count (conftest sets 1) after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _pflego_run(threads: int, engine: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Three rounds of a small PFLEGO federation through the in-process driver: (theta, every client's head)."""
    from edgeprof.config import RunConfig

    return run_in_process(RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=240, synthetic_classes=4,
                                    clients=4, participation=0.5, tau=5, rounds=3, backbone="mlp", seed=7,
                                    threads=threads, engine=engine))


def run_in_process(cfg) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``cfg.rounds`` rounds of ``cfg``'s federation through the in-process driver, at ``cfg.threads`` threads:
    (the global arrays, every client's head) after the last round (tests/test_thread_count.py uses it too)."""
    from edgeprof.algorithms.participants import participant_rng, sample_participants
    from edgeprof.nn.compute import set_threads
    from edgeprof.rounds.simulate import build_federation, load_clients

    set_threads(cfg.threads)
    federation = build_federation(cfg, load_clients(cfg))
    rng = participant_rng(cfg)
    try:
        for _ in range(cfg.rounds):
            who = sample_participants(rng, federation.num_clients, cfg.participation, cfg.participation_mode)
            federation.server_step([federation.client_round(c) for c in who])
        return [a.copy() for a in federation.global_arrays], [p[0].copy() for p in federation.personal]
    finally:
        federation.close()


@pytest.mark.parametrize("engine", ["onnx", "torch-reuse"])
@pytest.mark.parametrize("threads", [1, 2])
def test_same_seed_and_thread_count_give_a_bitwise_identical_run(torch_threads, threads, engine):
    from edgeprof.host import max_threads

    if threads > max_threads():
        pytest.skip(f"{threads} threads need {threads} cores")
    theta_a, heads_a = _pflego_run(threads, engine)
    theta_b, heads_b = _pflego_run(threads, engine)

    for a, b in zip(theta_a + heads_a, theta_b + heads_b):
        assert a.tobytes() == b.tobytes()
    from edgeprof.nn.backbones import build_backbone, get_params

    initial = get_params(build_backbone("mlp", (1, 28, 28), seed=7))
    assert any(not np.array_equal(a, b) for a, b in zip(theta_a, initial))  # the rounds did move theta


class _BlasSpy(np.ndarray):
    """An array that records numpy's BLAS thread counts whenever it takes part in a matrix product."""

    seen: list[list[int]] = []

    def __matmul__(self, other):
        _BlasSpy.seen.append(_blas_threads())
        return np.asarray(self) @ other

    def __rmatmul__(self, other):
        _BlasSpy.seen.append(_blas_threads())
        return other @ np.asarray(self)


@pytest.mark.parametrize("call", [
    lambda h, f, y: headlib.gradient_steps(h, f, y, 0.1, 2),
    lambda h, f, y: headlib.loss_and_grad(h, f, y),
    lambda h, f, y: headlib.predict(h, f),
], ids=["gradient_steps", "loss_and_grad", "predict"])
def test_head_runs_numpy_blas_on_one_thread_and_restores_the_callers_setting(rng, call):
    if not _blas_threads():
        pytest.skip("numpy has no BLAS library that threadpoolctl can see")
    feats_b = headlib.with_bias(rng.normal(size=(30, 8)).astype(np.float32)).view(_BlasSpy)
    labels = rng.integers(0, 3, size=30)
    head = headlib.init_head(3, 8, rng)
    _BlasSpy.seen = []

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        call(head, feats_b, labels)
        after = _blas_threads()

    assert _BlasSpy.seen and all(threads == [1] * len(threads) for threads in _BlasSpy.seen)
    assert after == [2] * len(after)


def test_nested_pins_keep_one_thread_until_the_outermost_ends():
    if not _blas_threads():
        pytest.skip("numpy has no BLAS library that threadpoolctl can see")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with headlib.one_blas_thread():
            with headlib.one_blas_thread():
                inner = _blas_threads()
            between = _blas_threads()
        after = _blas_threads()

    assert inner == between == [1] * len(inner)
    assert after == [2] * len(after)


def test_head_steps_on_a_large_local_set_do_not_depend_on_the_callers_blas_threads(rng):
    # from about 1,500 samples OpenBLAS splits the sum over samples between its threads (measured with
    # scripts/bench_head_blas.py): without the pin these two heads differ in the last bits
    feats_b = headlib.with_bias(np.maximum(rng.normal(size=(3000, 200)), 0).astype(np.float32))
    labels = rng.integers(0, 2, size=3000)
    head = headlib.init_head(2, 200, rng)

    heads = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            heads.append(headlib.gradient_steps(head, feats_b, labels, 0.189, 24))

    assert heads[0].tobytes() == heads[1].tobytes()
