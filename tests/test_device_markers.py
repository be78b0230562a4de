"""Phase edges on a device that queues its work: a marker in the queue, never a wait for it.

On an H100 a wait for the device at each of PFLEGO's phase edges made a profiled round 21..33% slower than the same
round unprofiled (the host could no longer queue the next phase while the device ran this one). A device that can
mark its queue (a CUDA GPU: ``Compute.can_mark``) now gets a marker at each phase edge, and the edge's time is the
moment the device reached it, resolved when the window ends.

Checked with a fake device under the real profiler, window engine, series thread and trace: its work is a
timeline in real time (``launch`` queues seconds of work and returns at once, a marker is reached when the work
queued before it is done, ``sync`` sleeps until the queue is empty), and a meter of it counts joules while it is
busy. The window waits for the device at its two edges only, each phase spans the device's work of that phase
(not the host's microseconds queueing it), the hardware meter is read off the measured thread and its joules per
phase are the device's, the CPU-time estimate stays at the host's edges, and a trace labels its samples with the
phase the device was in.
"""

from __future__ import annotations

import threading
import time
from typing import Mapping, Optional

import pytest

from edgeprof.meters.base import Domain, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.estimate import CpuTimeEstimateMeter
from edgeprof.measure.profiler import Profiler
from test_trace import NoRss

BUSY_W = 200.0  # what the fake device draws while it works (it draws nothing while idle)


class QueueDevice:
    """The profiler's Device protocol with a queue on ``time.perf_counter``'s timeline: ``launch(s)`` queues ``s``
    seconds of work behind what is queued and returns at once; ``mark()`` is the moment the device will reach it
    (when the work queued before it is done); ``sync()`` sleeps until the queue is empty."""

    device = "fakegpu:0"
    kind_name = "fakegpu"

    def __init__(self, can_mark: bool = True) -> None:
        self._can_mark = can_mark
        self.busy: list[tuple[float, float]] = []  # (start, end) of each piece of work
        self.syncs = self.marks = 0
        self.released: list = []  # markers given back once read (the real kind records those events again)
        self._lock = threading.Lock()

    def can_mark(self) -> bool:
        return self._can_mark

    def launch(self, seconds: float) -> None:
        with self._lock:
            start = max(time.perf_counter(), self.busy[-1][1] if self.busy else 0.0)
            self.busy.append((start, start + seconds))

    def queue_end(self) -> float:
        with self._lock:
            return max(time.perf_counter(), self.busy[-1][1] if self.busy else 0.0)

    def mark(self) -> float:
        self.marks += 1
        return self.queue_end()

    def seconds_between(self, first: float, second: float) -> float:
        return second - first

    def release(self, markers) -> None:
        self.released.extend(markers)

    def sync(self) -> None:
        self.syncs += 1
        wait = self.queue_end() - time.perf_counter()
        if wait > 0:
            time.sleep(wait)

    def busy_seconds(self, t0: float, t1: float) -> float:
        """The device's working seconds between two moments."""
        with self._lock:
            return sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in self.busy)

    def reset_peak_memory(self) -> None:
        pass

    def peak_memory_mb(self) -> Optional[float]:
        return 1.0


class DeviceMeter(Meter):
    """The device's own energy counter: :data:`BUSY_W` times its working seconds so far (a cheap read)."""

    name = "fakegpu_meter"

    def __init__(self, device: QueueDevice) -> None:
        self.device, self.opened = device, time.perf_counter()

    def domains(self):
        return (Domain("gpu_0", "gpu", "counter", True),)

    def read_j(self) -> Mapping[str, float]:
        return {"gpu_0": BUSY_W * self.device.busy_seconds(self.opened, time.perf_counter())}


def _profiler(device: QueueDevice) -> Profiler:
    meters = MeterSet([DeviceMeter(device), CpuTimeEstimateMeter(watts_per_core=10.0, cpu_clock_lag_s=0.0)])
    return Profiler(meters, device=device, rss=NoRss())


#: the device's seconds of work in each phase, queued by the host in microseconds
WORK_S = {"cache_forward": 0.06, "head_steps": 0.03, "joint_grad": 0.09}


def _round(win, device: QueueDevice) -> None:
    for name, seconds in WORK_S.items():
        with win.phase(name):
            device.launch(seconds)


def test_a_windows_markers_go_back_to_the_device_once_its_figures_are_made_and_only_then():
    """The start marker and every phase edge's, each given back once, when the window's figures are made (they are
    read there); none while the window is open or ended but not yet read."""
    device = QueueDevice()
    profiler = _profiler(device)
    try:
        with profiler.window("client") as win:
            _round(win, device)
            assert device.released == []
        markers = [win.start_marker, *win.markers.values()]
        assert device.released == [] and len(markers) == 1 + 2 * len(WORK_S)
        win.result  # noqa: B018
    finally:
        profiler.close()
    assert device.released == markers


def test_a_marked_device_is_waited_for_at_the_window_edges_only_and_each_phase_spans_its_device_work():
    device = QueueDevice()
    profiler = _profiler(device)
    try:
        host_start = time.perf_counter()
        with profiler.window("client") as win:
            _round(win, device)
            host_queued = time.perf_counter() - host_start  # the host is done queueing long before the device
        result = win.result
        described = profiler.describe()
    finally:
        profiler.close()

    assert profiler.marks and device.syncs == 2 and device.marks == 1 + 2 * len(WORK_S)
    assert win.markers == {} and win.start_marker is None, "the device's events are let go once read"
    assert host_queued < 0.5 * sum(WORK_S.values()), "the host waited for the device inside the window"
    # each phase lasts its device work (a marker is reached when the work before it is done); scheduling slack
    # of the host (its edges' microseconds) is the only difference
    slack = 0.01
    for name, seconds in WORK_S.items():
        assert result.phases[name].wall_s == pytest.approx(seconds, abs=slack), name
    assert result.wall_s == pytest.approx(sum(WORK_S.values()), abs=slack)
    # the hardware meter is read by the series thread, so a phase's joules are the device's between the moments it
    # reached the phase's edges: 200 W x its work, within what the series' period resolves on either side
    assert described["read_off_thread"] == ["fakegpu_meter"] and described["read_at_edges"] == ["cpu_estimate"]
    assert described["phase_edges"] == "device markers, resolved at the window's end"
    resolution = BUSY_W * 2 * (profiler.series.period_s + slack) if profiler.series else 0.0
    for name, seconds in WORK_S.items():
        assert result.phases[name].energy_j["gpu_0"] == pytest.approx(BUSY_W * seconds, abs=resolution), name
    assert result.span.energy_j["gpu_0"] == pytest.approx(BUSY_W * sum(WORK_S.values()), abs=resolution)
    # the CPU-time estimate stays at the host's edges: a phase's estimate is exactly its CPU seconds x its watts
    for name in WORK_S:
        span = result.phases[name]
        assert span.energy_j["cpu_estimate"] == pytest.approx(10.0 * span.cpu_s, rel=1e-9, abs=1e-12)
    # the window's own edges read the clocks alone: the estimate is made from their CPU seconds all the same
    assert result.span.cpu_s > 0
    assert result.span.energy_j["cpu_estimate"] == pytest.approx(10.0 * result.span.cpu_s, rel=1e-9, abs=1e-12)


def test_a_device_that_cannot_mark_its_queue_is_waited_for_at_every_edge():
    device = QueueDevice(can_mark=False)
    profiler = _profiler(device)
    try:
        with profiler.window("client") as win:
            _round(win, device)
        result = win.result
        described = profiler.describe()
    finally:
        profiler.close()

    assert not profiler.marks and device.marks == 0 and device.syncs == 2 + 2 * len(WORK_S)
    assert described["phase_edges"] == "device synchronised" and described["read_at_edges"] == [
        "fakegpu_meter", "cpu_estimate"]
    for name, seconds in WORK_S.items():  # waited for, the phases span the same work
        assert result.phases[name].wall_s == pytest.approx(seconds, abs=0.01), name


def test_the_trace_of_a_marked_window_labels_each_sample_with_the_phase_the_device_was_in():
    """The host queues both phases at once and then ticks the trace while the device works through them: a tick
    taken while the device runs the first phase is that phase's, though the host left it long before; the trace
    still integrates to every phase's joules."""
    device = QueueDevice()
    profiler = _profiler(device)
    profiler.windows.start_trace(50.0, thread=False)
    ticks = []
    try:
        with profiler.window("client") as win:
            with win.phase("first"):
                device.launch(0.08)
            with win.phase("second"):
                device.launch(0.08)
            for wait in (0.04, 0.12):  # the middle of the first phase's work, then of the second's
                while time.perf_counter() < win.start.wall_s + wait:  # the host busy (CPU seconds) meanwhile
                    pass
                ticks.append(time.perf_counter() - win.start.wall_s)
                profiler.windows.trace_tick()
        result = win.result
    finally:
        profiler.close()

    # every domain's trace integrates to each phase's figure, the CPU estimate's too: the CPU clock at a marked
    # edge is the host's interpolated at the moment the device reached it, so no interval steps back in CPU time
    # (the host passed both edges before it spun, and a tick lies between them on the device's timeline)
    assert not [r for r in result.trace if r.flag], [r for r in result.trace if r.flag][:3]
    for domain in ("gpu_0", "cpu_estimate"):
        for name, span in result.phases.items():
            drawn = sum(r.w * r.dt_s for r in result.trace if r.domain == domain and r.phase == name)
            assert drawn == pytest.approx(span.energy_j[domain], rel=1e-9, abs=1e-9), (domain, name)
    assert result.phases["first"].cpu_s > 0.02, "the host's CPU seconds while the device ran the first phase"
    rows = [r for r in result.trace if r.domain == "gpu_0"]
    labels = [(round(r.t_s, 3), r.phase) for r in rows]
    # the intervals ending at the two ticks: the first lies in the first phase, the second in the second
    at = {min(rows, key=lambda r: abs(r.t_s - t)).phase for t in ticks[:1]}
    assert at == {"first"}, labels
    assert min(rows, key=lambda r: abs(r.t_s - ticks[1])).phase == "second", labels
    for name, span in result.phases.items():
        drawn = sum(r.w * r.dt_s for r in rows if r.phase == name)
        assert drawn == pytest.approx(span.energy_j["gpu_0"], rel=1e-9, abs=1e-9), name
    assert sum(r.w * r.dt_s for r in rows) == pytest.approx(result.span.energy_j["gpu_0"], rel=1e-9, abs=1e-9)
