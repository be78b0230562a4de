"""Profiler windows against fake clocks and fake cumulative counters, to the microjoule; its own overhead
on a fake machine; the CPU estimate against the real process clock; implausible readings flagged by a meter
invalidate exactly the windows and phases that span them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

from edgeprof.meters.base import Domain, Invalid, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.estimate import CpuTimeEstimateMeter
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window


class ScriptedMeter(Meter):
    """Returns the next scripted cumulative reading on each read."""

    name = "scripted"

    def __init__(self, readings, domains, update_period_s=0.0):
        self._readings = iter(readings)
        self._domains = domains
        self.update_period_s = update_period_s

    def domains(self):
        return self._domains

    def read_j(self) -> Mapping[str, float]:
        return next(self._readings)


class Ticker:
    """A fake clock that advances by a fixed step per call."""

    def __init__(self, step: float, start: float = 100.0):
        self.now, self.step = start, step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value


class NoRss(PeakRss):
    def __init__(self):
        self.per_window = False

    def read_mb(self) -> float:
        return 42.0


PKG = Domain("cpu_package_0", "cpu_package", "counter", True)
DRAM = Domain("dram_0", "dram", "counter", True)
CORE = Domain("psys", "psys", "counter", False)


def test_window_and_phase_energy_to_the_microjoule():
    # reads: window start, phase a start/end, phase b start/end, window end
    readings = [
        {"cpu_package_0": 10.000000, "dram_0": 1.0, "psys": 50.0},
        {"cpu_package_0": 10.000001, "dram_0": 1.0, "psys": 50.0},
        {"cpu_package_0": 12.500001, "dram_0": 1.25, "psys": 60.0},
        {"cpu_package_0": 12.500002, "dram_0": 1.25, "psys": 60.0},
        {"cpu_package_0": 13.000003, "dram_0": 1.5, "psys": 70.0},
        {"cpu_package_0": 13.000004, "dram_0": 1.5, "psys": 71.0},
    ]
    meters = MeterSet([ScriptedMeter(readings, (PKG, DRAM, CORE))])
    prof = Profiler(meters, clock=Ticker(0.5), cpu_clock=Ticker(0.25), thread_clock=Ticker(0.125), rss=NoRss())

    with prof.window("client") as win:
        with win.phase("a"):
            pass
        with win.phase("b"):
            pass
    res = win.result

    assert res.span.energy_j["cpu_package_0"] == pytest.approx(3.000004, abs=1e-9)
    assert res.energy_total_j == pytest.approx(3.000004 + 0.5, abs=1e-9)  # psys not in total
    assert res.phases["a"].energy_j["cpu_package_0"] == pytest.approx(2.5, abs=1e-9)
    assert res.phases["b"].energy_j["dram_0"] == pytest.approx(0.25, abs=1e-9)
    assert res.peak_rss_mb == 42.0
    # each edge reads the wall clock three times (its entry, its sample, its exit): the window spans the 15 ticks
    # between its first and last sample, a phase the 3 between its two
    assert res.wall_s == pytest.approx(15 * 0.5)
    assert res.phases["a"].wall_s == pytest.approx(3 * 0.5)
    assert res.cpu_s == pytest.approx(5 * 0.25)
    # overhead: the 4 phase edges, each timed from its entry to its exit (two wall ticks, one thread-clock tick),
    # and the part of the window's own edges inside it: from its start sample on, up to its end sample (one wall
    # tick each; one thread-clock tick, the edge's mark before its sample)
    assert res.overhead_s == 4 * 0.125 + 2 * 0.125
    assert res.overhead_wall_s == 4 * 2 * 0.5 + 2 * 0.5


def test_repeated_phase_accumulates_and_short_window_is_flagged():
    readings = [{"cpu_package_0": float(i)} for i in range(6)]
    meters = MeterSet([ScriptedMeter(readings, (PKG,), update_period_s=1000.0)])
    prof = Profiler(meters, clock=Ticker(0.001), cpu_clock=Ticker(0.0), rss=NoRss())

    with prof.window("client") as win:
        for _ in range(2):
            with win.phase("x"):
                pass

    assert win.result.phases["x"].energy_j["cpu_package_0"] == pytest.approx(2.0)
    assert win.result.short_window is True


def test_a_held_window_is_written_as_the_mean_of_one_round():
    """A window that held 4 repeats of a round: every cost cell of the row (seconds, CPU seconds, joules per column
    and in total, net joules, carbon, overhead, each phase's) is the window's divided by 4, the same window
    written unheld gives the totals, and short_window still judges the whole window."""
    readings = [{"cpu_package_0": 8.0 * i, "dram_0": 2.0 * i} for i in range(10)]
    meters = MeterSet([ScriptedMeter(readings, (PKG, DRAM), update_period_s=0.5)])
    prof = Profiler(meters, clock=Ticker(0.125), cpu_clock=Ticker(0.0625), thread_clock=Ticker(0.03125), rss=NoRss())
    with prof.window("client") as win:
        for _ in range(4):
            with win.phase("x"):
                pass
    whole = row_from_window(win.result, {"run_id": "r"}, idle_power_w=2.0, carbon_g_per_kwh=360.0)
    held = row_from_window(win.result, {"run_id": "r"}, idle_power_w=2.0, carbon_g_per_kwh=360.0, held_rounds=4)

    assert whole["held_rounds"] == "" and held["held_rounds"] == "4"
    for cell in ("wall_s", "cpu_s", "energy_j", "energy_net_j", "carbon_g", "cpu_package_j", "dram_j",
                 "profiler_overhead_s", "x_s", "x_cpu_s", "x_j"):
        assert float(held[cell]) == pytest.approx(float(whole[cell]) / 4, rel=1e-5), cell  # _fmt's 6 digits
    assert float(whole["energy_j"]) == 90.0 and float(held["energy_j"]) == 22.5  # (8 + 2) J x 9 reads apart
    assert held["short_window"] == whole["short_window"] == "0", "the whole window is longer than 0.5 s"
    assert held["energy_method"] == whole["energy_method"] == "counter"


class FakeMachine:
    """One thread on a machine: wall, process-CPU and thread-CPU clocks that move only when it runs or waits."""

    def __init__(self) -> None:
        self.wall_s, self.cpu_s, self.thread_s = 1000.0, 100.0, 10.0

    def run(self, cpu_s: float, preempted_s: float = 0.0) -> None:
        """Compute for ``cpu_s`` on this thread, and spend ``preempted_s`` off the CPU (another process ran)."""
        self.wall_s += cpu_s + preempted_s
        self.cpu_s += cpu_s
        self.thread_s += cpu_s


class CostlyMeter(Meter):
    """A counter whose read costs ``read_cpu_s`` of thread CPU; read number ``preempt_on`` is preempted."""

    name = "costly"

    def __init__(self, machine: FakeMachine, read_cpu_s: float, preempt_on: int | None, preempted_s: float):
        self.machine, self.read_cpu_s = machine, read_cpu_s
        self.preempt_on, self.preempted_s = preempt_on, preempted_s
        self.reads = 0

    def domains(self):
        return (PKG,)

    def read_j(self) -> Mapping[str, float]:
        self.reads += 1
        self.machine.run(self.read_cpu_s, self.preempted_s if self.reads == self.preempt_on else 0.0)
        return {"cpu_package_0": float(self.reads)}


class CostlyRss(PeakRss):
    """Resetting and reading the peak RSS each cost ``cpu_s`` of thread CPU."""

    def __init__(self, machine: FakeMachine, cpu_s: float):
        self.machine, self.cost_s, self.per_window = machine, cpu_s, True

    def reset(self) -> None:
        self.machine.run(self.cost_s)

    def read_mb(self) -> float:
        self.machine.run(self.cost_s)
        return 42.0


# powers of two, so every sum below is exact in binary floating point
READ_CPU_S, RSS_CPU_S, WORK_CPU_S, PREEMPTED_S = 2.0**-10, 2.0**-9, 2.0**-2, 2.0**-3


@pytest.mark.parametrize(
    ("preempted_in", "extra_wall_overhead_s", "extra_window_wall_s"),
    [("nowhere", 0.0, 0.0), ("meter_read", PREEMPTED_S, PREEMPTED_S), ("body", 0.0, PREEMPTED_S)],
)
def test_overhead_is_the_thread_cpu_time_of_the_bookkeeping_whatever_the_preemption(
        preempted_in, extra_wall_overhead_s, extra_window_wall_s):
    machine = FakeMachine()
    # reads: window start, phase a start/end, phase b start/end, window end; the 4th read is preempted
    meter = CostlyMeter(machine, READ_CPU_S, preempt_on=4 if preempted_in == "meter_read" else None,
                        preempted_s=PREEMPTED_S)
    prof = Profiler(MeterSet([meter]), clock=lambda: machine.wall_s, cpu_clock=lambda: machine.cpu_s,
                    thread_clock=lambda: machine.thread_s, rss=CostlyRss(machine, RSS_CPU_S))

    with prof.window("client") as win:
        with win.phase("a"):
            machine.run(WORK_CPU_S, PREEMPTED_S if preempted_in == "body" else 0.0)
        with win.phase("b"):
            machine.run(WORK_CPU_S)
    res = win.result

    # inside the window: its start sample's read (after its clock reading) and the 4 phase edges' reads; the peak
    # RSS reset before its start, and its end sample's read and RSS read after its end, are outside it
    bookkeeping_s = 5 * READ_CPU_S
    assert meter.reads == 6
    assert res.overhead_s == bookkeeping_s
    assert res.overhead_wall_s == bookkeeping_s + extra_wall_overhead_s
    # the window runs from its first sample to its last: 2 work units and 5 of the 6 meter reads
    assert res.wall_s == 2 * WORK_CPU_S + 5 * READ_CPU_S + extra_window_wall_s
    assert res.cpu_s == 2 * WORK_CPU_S + 5 * READ_CPU_S


def _busy(a: np.ndarray, reps: int) -> np.ndarray:
    for _ in range(reps):
        a = np.tanh(a @ a / a.shape[0])
    return a


@pytest.mark.parametrize("watts_per_core", [1.5, 12.0])
def test_cpu_estimate_is_the_windows_own_cpu_seconds_times_the_watts(watts_per_core):
    """Real process CPU clock, real work: the estimate must equal its definition in the window and in
    every phase, including short ones (a phase entered twice, a phase that does almost nothing)."""
    prof = Profiler(MeterSet([CpuTimeEstimateMeter(watts_per_core)]), rss=NoRss())
    a = np.random.default_rng(0).random((96, 96))

    with prof.window("client") as win:
        for name, reps in (("cache_forward", 200), ("head_steps", 5), ("joint_grad", 100), ("head_steps", 5),
                           ("idle", 0)):
            with win.phase(name):
                a = _busy(a, reps)
    with prof.window("server") as server:
        a = _busy(a, 50)

    spans = {"client": win.result.span, "server": server.result.span,
             **{f"client/{k}": v for k, v in win.result.phases.items()}}
    for name, span in spans.items():
        assert span.cpu_s >= 0, name
        # (c1 - c0) * W against (c1 - s) * W - (c0 - s) * W: a few ulps of the process's CPU seconds times W
        assert span.energy_j["cpu_estimate"] == pytest.approx(span.cpu_s * watts_per_core, rel=1e-9, abs=1e-12), name
    assert win.result.phases["joint_grad"].cpu_s > 0
    assert win.result.energy_total_j == pytest.approx(win.result.cpu_s * watts_per_core, rel=1e-9)


class FlaggingMeter(ScriptedMeter):
    """A scripted meter that flags domains as implausible on given reads: {read number: {domain: detail}}."""

    def __init__(self, readings, domains, flags):
        super().__init__(readings, domains)
        self._flags, self._reads = flags, 0

    def read_j(self) -> Mapping[str, float]:
        self._reads += 1
        for domain, detail in self._flags.get(self._reads, {}).items():
            self.flag_invalid(domain, Invalid("counter jump", detail))
        return super().read_j()


def test_a_flagged_reading_invalidates_exactly_the_windows_and_phases_that_span_it():
    # reads: 1 window start | 2-3 phase a | 4-5 phase b | 6-7 phase a again | 8 window end | 9, 10 next window
    readings = [{"cpu_package_0": float(i), "dram_0": 10.0 * i, "psys": 100.0 * i} for i in range(10)]
    flags = {1: {"cpu_package_0": "before the window"}, 5: {"cpu_package_0": "fell in b"},
             7: {"psys": "fell in a"}, 9: {"dram_0": "at the next window's start"}}
    meters = MeterSet([FlaggingMeter(readings, (PKG, DRAM, CORE), flags)])
    prof = Profiler(meters, clock=Ticker(0.5), cpu_clock=Ticker(0.25), rss=NoRss())

    with prof.window("client") as win:
        for name in ("a", "b", "a"):
            with win.phase(name):
                pass
    with prof.window("client") as after:
        pass
    res, row = win.result, row_from_window(win.result, {"run_id": "r"})

    assert dict(res.invalid) == {"cpu_package_0": "counter jump: fell in b", "psys": "counter jump: fell in a"}
    assert set(res.phases["a"].invalid) == {"psys"} and set(res.phases["b"].invalid) == {"cpu_package_0"}
    assert res.span.energy_j["dram_0"] == 70.0 and np.isnan(res.span.energy_j["cpu_package_0"])
    assert np.isnan(res.energy_total_j)
    assert {k: row[k] for k in ("energy_j", "energy_method", "cpu_package_j", "cpu_package_method", "dram_j",
                                "dram_method", "psys_j", "psys_method", "a_j", "b_j")} == {
        "energy_j": "", "energy_method": "invalid", "cpu_package_j": "", "cpu_package_method": "invalid",
        "dram_j": "70", "dram_method": "counter", "psys_j": "", "psys_method": "invalid",
        "a_j": "22", "b_j": ""}  # a: (1 + 10) J twice; psys is not in the total, so a's total stands
    assert not after.result.invalid and after.result.energy_total_j == 11.0  # a flag at its first reading is before it
    assert meters.describe()["invalid"] == {
        "cpu_package_0": [{"kind": "counter jump", "readings": 2, "first": "before the window"}],
        "psys": [{"kind": "counter jump", "readings": 1, "first": "fell in a"}],
        "dram_0": [{"kind": "counter jump", "readings": 1, "first": "at the next window's start"}]}


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists() or not hasattr(os, "fork"),
                    reason="needs Linux's /proc/self/clear_refs and fork")
# tests before this one leave native threads in the process (torch's intra-op pool after its first op, one that
# importing ONNX Runtime starts), so Python 3.12+ warns at the fork (the plain-install leg on 3.13: four OS threads,
# one Python thread); the child takes none of their locks: it allocates, writes one pipe and leaves with os._exit
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_the_peak_rss_files_stay_open_and_a_forked_child_reads_its_own():
    """PeakRss keeps /proc/self's two files open (one write resets the peak, one pread reads it); a forked child
    opens them again, so its reading is its own peak, not its parent's."""
    rss = PeakRss()
    rss.reset()
    before = rss.read_mb()
    grown = np.ones(40_000_000)  # 305 MiB touched
    assert rss.read_mb() >= before + 250
    del grown
    rss.reset()
    assert rss.read_mb() < before + 250, "the reset brought the peak back to what the process holds now"
    parent = rss.read_mb()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own 610 MiB peak, read through the same object
        try:
            rss.reset()
            child = np.ones(80_000_000)
            os.write(write, f"{rss.read_mb():.1f} {child.size}".encode())
        finally:
            os._exit(0)
    os.close(write)
    child_mb = float(os.read(read, 64).decode().split()[0])
    os.waitpid(pid, 0)
    assert child_mb >= 600 and rss.read_mb() == pytest.approx(parent, abs=50), (child_mb, parent)


def _vm_hwm_mb() -> float:
    """VmHWM from /proc/self/status, read here apart from PeakRss."""
    text = Path("/proc/self/status").read_text()
    return int(text.split("VmHWM:")[1].split("kB")[0]) / 1024.0


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_the_cheap_peak_read_is_the_reset_high_water_mark(monkeypatch):
    """Where getrusage's peak is above every peak read just after a reset, it is the high-water mark: across a growth
    and a reset PeakRss agrees with /proc/self/status to the pages that move between the two reads (a peak at the
    bound is read from status: the spawned child below)."""
    preads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: (preads.append(a[0]), real(*a))[1])
    rss = PeakRss()
    rss.reset()
    grown = np.ones(40_000_000)  # 305 MiB touched
    fast, status = rss.read_mb(), _vm_hwm_mb()
    assert preads == [], "a peak above the bound was read from status"
    assert fast == pytest.approx(status, abs=4.0)
    del grown
    rss.reset()
    again, status = rss.read_mb(), _vm_hwm_mb()
    assert again == pytest.approx(status, abs=4.0) and again < fast - 250
    import threading  # memory another thread touched: the peak is the process memory's, whichever thread reads it

    worker = threading.Thread(target=lambda: np.ones(30_000_000).sum())  # 229 MiB
    preads.clear()
    worker.start()
    worker.join()
    other, status = rss.read_mb(), _vm_hwm_mb()
    assert preads == [] and other == pytest.approx(status, abs=4.0) and other > again + 200


CHILD = """
import json, resource, sys
sys.path.insert(0, {root!r})
from edgeprof.measure.profiler import PeakRss
rss = PeakRss()
rss.reset()
text = open("/proc/self/status").read()
print(json.dumps({{"getrusage_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                  "peak_mb": rss.read_mb(), "status_mb": int(text.split("VmHWM:")[1].split("kB")[0]) / 1024.0}}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/self/clear_refs")
def test_a_process_spawned_by_a_large_one_reads_its_own_peak_not_its_parents():
    """Linux's getrusage peak of a process spawned by a large one starts at that one's peak, and no reset lowers it:
    PeakRss then reads the child's own high-water mark from /proc/self/status, never the parent's figure."""
    import json
    import subprocess
    import sys

    large = np.ones(60_000_000)  # 458 MiB touched in this (the parent) process
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(Path(__file__).resolve().parents[1]))],
                         capture_output=True, text=True, check=True)
    del large
    child = json.loads(out.stdout)
    assert child["getrusage_mb"] > 400, "getrusage carries the parent's peak (the case this guards against)"
    assert child["peak_mb"] == pytest.approx(child["status_mb"], abs=4.0) and child["peak_mb"] < 300, child
