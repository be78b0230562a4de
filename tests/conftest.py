"""Shared fixtures: small real backbones, small clients, a quiet environment."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest
import torch

# the per-node ONNX export cache of the test run (and of every process it starts), never the user's
# (removed when the run ends, so runs leave no folders behind in the system's temp folder)
os.environ["EDGEPROF_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="edgeprof-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
if len(_CACHE) < 40:  # Ray's sessions too (a socket path under it must stay below 108 bytes)
    os.environ.setdefault("RAY_TMPDIR", _CACHE)

torch.set_num_threads(1)

# Triton's kernels (PFLEGO's head steps, edgeprof/nn/head_kernel.py) run in Triton's interpreter on the CPU where
# there is no GPU: the switch must be set before triton is first imported (its own library is decorated then)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def task_identity(monkeypatch):
    """Flower messages need a task identity outside a running ServerApp / ClientApp process (a test that asks for
    it is skipped where Flower is not installed, as the dev extra leaves it out on Python 3.10)."""
    TaskIdentity = pytest.importorskip("flwr.supercore.task_identity").TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def make_clients(rng: np.random.Generator, sizes=(7, 5, 9), classes=(2, 3, 2), shape=(1, 4, 4)):
    """Tiny ClientData objects with random images and local labels covering every class."""
    from edgeprof.data import ClientData

    clients = []
    for cid, (n, k) in enumerate(zip(sizes, classes)):
        x = rng.random((n,) + shape, dtype=np.float32)
        y = np.arange(n, dtype=np.int64) % k
        rng.shuffle(y)
        clients.append(ClientData(cid, np.arange(k, dtype=np.int64) + cid, x, y, x[:2].copy(), y[:2].copy()))
    return clients


@pytest.fixture
def tiny_clients(rng):
    return make_clients(rng)


@pytest.fixture
def stop_at_client_round(monkeypatch):
    """``stop_at_client_round(n)``: the n-th client round of any federation raises KeyboardInterrupt (Ctrl-C)."""
    from edgeprof.rounds.federation import Federation

    real, calls = Federation.client_round, []

    def arm(n: int) -> None:
        def stopped(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt()
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Federation, "client_round", stopped)

    return arm
