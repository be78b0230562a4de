"""The compute seam and the window engine together: a device is synchronised at every window and phase edge,
just before that edge's meter reading, and nowhere else; each window records the device's kind and its peak
device memory (reset per window); phases shorter than the meters' update period are flagged.

Checked with a fake device (a recorder with the Device protocol) under the real profiler and window engine, and
with a fake device kind registered in the compute seam under whole in-process runs of PFLEGO and FedAvg."""

from __future__ import annotations

import csv
from typing import Mapping, Optional

import pytest

from edgeprof.config import RunConfig
from edgeprof.meters.base import Domain, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.nn import compute as computelib
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.measure.windows import current_window
from test_compute import RecordingKind


class LoggingMeter(Meter):
    """A meter whose every reading is an event in the shared log (one joule more each time)."""

    name = "logging"

    def __init__(self, log: list, update_period_s: float = 0.0) -> None:
        self.log, self.update_period_s, self.joules = log, update_period_s, 0.0

    def domains(self):
        return (Domain("fake_cpu", "cpu_estimate", "estimate"),)

    def read_j(self) -> Mapping[str, float]:
        self.log.append("read")
        self.joules += 1.0
        return {"fake_cpu": self.joules}


class FakeDevice:
    """The Device protocol, recording into the shared log; peak memory grows by 10 MiB per window."""

    device = "fakegpu:0"
    kind_name = "fakegpu"

    def __init__(self, log: list) -> None:
        self.log, self.resets, self.peak = log, 0, 0.0

    def sync(self) -> None:
        self.log.append("sync")

    def reset_peak_memory(self) -> None:
        self.resets += 1
        self.peak += 10.0

    def peak_memory_mb(self) -> Optional[float]:
        return self.peak


class NoRss(PeakRss):
    def __init__(self):
        self.per_window = True

    def reset(self):
        pass

    def read_mb(self):
        return 0.0


def test_the_device_is_synchronised_once_before_each_edge_reading_and_never_inside_a_phase():
    log: list = []
    device = FakeDevice(log)
    profiler = Profiler(MeterSet([LoggingMeter(log)]), device=device, rss=NoRss())

    for _ in range(2):
        with profiler.window("client") as win:
            log.append("work")
            for name in ("cache_forward", "head_steps", "joint_grad"):
                with win.phase(name):
                    log.extend(["work", "work"])

    edges = 2 * (2 + 2 * 3)  # two windows: their own two edges and two per phase
    assert log.count("sync") == log.count("read") == edges
    assert all(log[i + 1] == "read" for i, e in enumerate(log) if e == "sync")  # each sync just before its reading
    inside = [log[i + 1] for i, e in enumerate(log[:-1]) if e == "work"]
    assert set(inside) <= {"work", "sync"} and log.count("work") == 2 * 7  # work is followed by more work or an edge
    assert win.result.device_kind == "fakegpu" and device.resets == 2 and win.result.device_peak_mem_mb == 20.0


def test_phases_shorter_than_the_meters_update_period_are_flagged():
    clock = iter(range(0, 1000, 1)).__next__  # one second a clock read
    log: list = []
    profiler = Profiler(MeterSet([LoggingMeter(log, update_period_s=4.0)]), clock=lambda: float(clock()),
                        rss=NoRss())

    with profiler.window("client") as win:
        with win.phase("quick"):
            pass
        with win.phase("slow"):
            for _ in range(5):
                clock()

    assert win.result.short_phases == ("quick",) and not win.result.short_window


def _run(tmp_path, algo: str, device: str) -> list[dict]:
    from edgeprof.rounds.simulate import run

    cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=3,
                    participation=1.0, backbone="mlp", tau=3, rounds=2, threads=1, device=device, progress=False,
                    out=tmp_path, run_name=f"{algo}-{device.replace(':', '')}")
    result = run(cfg)
    return list(csv.DictReader(result.csv_path.open()))


class EdgeRecordingKind(RecordingKind):
    """The recording kind, noting at each synchronisation which window and phase are open, and a peak memory."""

    def __init__(self) -> None:
        super().__init__()
        self.edges: list[tuple] = []
        self.resets = 0

    def synchronize(self, device):
        super().synchronize(device)
        win = current_window()
        self.edges.append((win.name if win else None, win.open_phase if win else None))

    def reset_peak_memory(self, device):
        self.resets += 1

    def peak_memory_mb(self, device):
        return 64.0 + self.resets


@pytest.mark.parametrize("algo,phases", [("pflego", ("cache_forward", "head_steps", "joint_grad")),
                                         ("fedavg", ("local_steps",))])
def test_a_run_on_a_fake_device_synchronises_it_at_the_edges_of_every_window_and_phase_only(
        tmp_path, monkeypatch, algo, phases):
    kind = EdgeRecordingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)

    rows = _run(tmp_path, algo, "fake:0")

    clients = [r for r in rows if r["kind"] == "client"]
    servers = [r for r in rows if r["kind"] == "server"]
    # a client window: opened (no window open yet), each phase entered with none open and left with it open,
    # closed; the server window: opened and closed
    client_window = [(None, None)] + [e for p in phases for e in (("client", None), ("client", p))] + [
        ("client", None)]
    expected = []
    for _ in range(2):
        expected += client_window * 3 + [(None, None), ("server", None)]
    assert kind.edges == expected
    assert kind.count("sync") == len(expected)  # nothing else synchronised the device
    assert {r["device_kind"] for r in rows} == {"fake"}
    peaks = [float(r["gpu_peak_mem_mb"]) for r in clients + servers]
    assert sorted(peaks) == [64.0 + n for n in range(1, len(rows) + 1)]  # reset once per window, read at its end


def test_on_the_cpu_the_kind_is_recorded_and_no_device_memory_is_claimed(tmp_path):
    rows = _run(tmp_path, "pflego", "cpu")

    assert {r["device_kind"] for r in rows} == {"cpu"} and {r["gpu_peak_mem_mb"] for r in rows} == {""}


def test_a_flower_node_names_itself_and_picks_its_compute_device_with_two_keys():
    """``host`` is the node's name in the report; ``compute-device`` is where its rounds run (each node its
    own); a compute device no kind knows is one ConfigError line."""
    pytest.importorskip("flwr")  # the dev extra leaves Flower out on Python 3.10
    from edgeprof.errors import ConfigError
    from edgeprof.flower.config import node_overrides
    from edgeprof.flower.mod import host_name

    node = {"host": "jetson-3", "compute-device": "cpu", "threads": 1}
    cfg = node_overrides(RunConfig(device="auto"), node)

    assert cfg.device == "cpu" and cfg.threads == 1 and host_name(node) == "jetson-3"
    assert node_overrides(RunConfig(device="cpu"), {"host": "pi-4"}).device == "cpu"  # a name moves nothing
    assert node_overrides(RunConfig(device="cpu"), {"device": "pi-4"}).device == "cpu"  # nor its old key
    with pytest.raises(ConfigError, match="device must be"):
        node_overrides(RunConfig(), {"compute-device": "tpu:0"})


@pytest.mark.parametrize("device,gpu", [("cpu", "cpu"), ("cuda:1", "cuda:1"), ("fake:0", "cpu")])
def test_the_device_kind_tells_nvml_which_gpu_runs_the_round(monkeypatch, device, gpu):
    """A CUDA device is matched to its NVML GPU; any other kind (the CPU, a fake one) leaves every GPU beside it."""
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", RecordingKind())

    assert computelib.kind_of(device).nvml_device(device) == gpu
