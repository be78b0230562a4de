"""The compute seam: a fake device kind plugged into the registry runs a round of every algorithm.

The fake kind keeps tensors in host memory (there is no second device here) but records every placement, every
copy back to the host and every synchronisation, so the tests can assert what a GPU kind would be asked to do:
the module placed before any data, each client's images copied once per run (not once per round), results read
back to the host through the seam.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeprof.algorithms import ALGORITHMS
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.nn import compute as computelib
from edgeprof.nn.compute import Compute, DeviceKind


class RecordingKind(DeviceKind):
    """A device kind that records what the seam asks of it; its tensors are copies in host memory."""

    name = "fake"
    keeps_data = True

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def to_device(self, t, device):
        self.log.append(("to_device", device, tuple(t.shape)))
        return t.clone()  # a copy, as a real device's would be: the host array is not shared

    def to_host(self, t):
        self.log.append(("to_host", tuple(t.shape)))
        return t

    def place_module(self, module, device):
        self.log.append(("module", device, type(module).__name__))
        return module

    def synchronize(self, device):
        self.log.append(("sync", device))

    def count(self, event: str, shape=None) -> int:
        return sum(1 for e in self.log if e[0] == event and (shape is None or e[-1] == shape))


@pytest.fixture
def fake(monkeypatch):
    kind = RecordingKind()
    monkeypatch.setitem(computelib.KINDS, "fake", kind)
    return kind


def _federation(algo: str, device: str = "fake:1"):
    from edgeprof.federation import Federation
    from edgeprof.simulate import load_clients

    cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=2,
                    participation=1.0, backbone="mlp", tau=3, threads=1, device=device).resolved()
    return Federation(cfg, load_clients(cfg))


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_runs_through_a_fake_device_kind(fake, algo):
    federation = _federation(algo)
    client = federation.clients[0]
    shape = tuple(client.x_train.shape)

    first = [federation.client_round(0) for _ in range(2)]
    federation.server_step(first)
    again = federation.client_round(0)
    result = federation.evaluate(0)

    assert federation.runtime.compute.device == "fake:1" and federation.runtime.compute.kind is fake
    assert fake.log[0][0] == "module", "the backbone is placed on the device before anything else"
    assert all(e[1] == "fake:1" for e in fake.log if e[0] in ("to_device", "module", "sync"))
    # the client's images reach the device once per run, however many rounds and evaluations use them
    assert fake.count("to_device", shape) == 1
    assert fake.count("to_device", tuple(client.y_train.shape)) >= 1
    assert fake.count("to_host") > 0, "results come back to the host through the seam"
    assert np.isfinite(again.loss) and 0.0 <= result.test_accuracy <= 1.0
    assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in again.payload)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_a_round_through_the_fake_kind_equals_the_cpu_round(fake, algo):
    """The seam only moves tensors: the same seeded round gives the same reply on the fake kind as on the CPU."""
    on_cpu = _federation(algo, device="cpu").client_round(0)
    on_fake = _federation(algo).client_round(0)

    assert on_fake.loss == on_cpu.loss
    for a, b in zip(on_fake.payload, on_cpu.payload):
        np.testing.assert_array_equal(a, b)


def test_the_cpu_kind_shares_host_memory_and_keeps_nothing():
    compute = Compute()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    images = compute.images(x)
    assert images.data_ptr() == x.__array_interface__["data"][0]
    assert compute._kept == {}


def test_a_trained_leaf_never_shares_the_callers_array():
    head = np.ones((2, 3), dtype=np.float32)
    w = Compute().tensor(head, requires_grad=True)
    w.data.sub_(1.0)
    assert head.sum() == 6.0


@pytest.mark.parametrize("device,message", [("tpu", "device must be one of cpu"), ("cpu:x", "KIND:N"),
                                            ("cpu:²", "KIND:N")])
def test_an_unknown_device_is_one_line(device, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(device=device).resolved()


def test_the_sidecar_records_the_runs_compute(tmp_path):
    from edgeprof.report.session import numerics

    compute = Compute(threads=1)
    got = numerics(compute)
    assert got["compute"] == {"kind": "cpu", "device": "cpu", "threads": 1,
                              "execution": {"requested": "contiguous:all", "memory_format": "contiguous",
                                            "chunk": "all", "source": "given"}}
    assert got["execution"] == [compute.plan.describe()]
