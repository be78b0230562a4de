"""The CPU-time estimate states what it resolves: the process CPU clock's lag for other threads (measured on fake
clocks with a known tick, and once on this machine) is its update period, flagged on short phases and windows;
its power limit is the usable cores times the watts per core."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest

from edgeprof.config import check_meter_options
from edgeprof.errors import ConfigError
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.meters import MeterSet, discover
from edgeprof.meters import cpu_clock
from edgeprof.meters.cpu_clock import (MAX_LAG_S, late_cpu_s, measure_cpu_clock_lag_s, process_cpu_clock_lag,
                                       process_cpu_clock_lag_s,
                                       usable_cpus)
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.meters.estimate import CpuTimeEstimateMeter
from fixtures_sysfs import fake_pynvml

NO_GPU = fake_pynvml([], init_error=9)
#: the wall time one read of a fake clock takes (a power of two: sums of it are exact)
READ_S = 2.0**-20


class TickedMachine:
    """A poller (the calling thread) and one helper thread, each always running, every clock read costing
    ``read_s`` of wall time and of the poller's CPU time.

    On ``cpus=2`` the helper has a CPU of its own and the process clock credits its time only at each
    ``tick_s`` of the wall clock (Linux's ``sum_exec_runtime`` at a scheduler tick). On ``cpus=1`` the poller
    is preempted every ``tick_s`` of its own time for ``tick_s``, while the helper runs, and the helper's time is
    credited as it stops (a context switch): never late.
    """

    def __init__(self, tick_s: float, cpus: int, read_s: float = READ_S) -> None:
        self.tick_s, self.cpus, self.read_s = tick_s, cpus, read_s
        self.wall = self.own = self.helper = 0.0

    def _read(self) -> None:
        self.wall += self.read_s
        self.own += self.read_s
        if self.cpus == 1 and self.own % self.tick_s == 0:  # the poller's slice is over: the helper's turn
            self.wall += self.tick_s
            self.helper += self.tick_s

    def wall_clock(self) -> float:
        self._read()
        return self.wall

    def thread_clock(self) -> float:
        self._read()
        return self.own

    def process_clock(self) -> float:
        self._read()
        credited = self.helper if self.cpus == 1 else math.floor(self.wall / self.tick_s) * self.tick_s
        return self.own + credited


class Busy:
    """Stands in for the helper thread: records that it was started and stopped."""

    def __init__(self) -> None:
        self.started = self.stopped = 0

    def __call__(self):
        self.started += 1
        return self.stop

    def stop(self) -> None:
        self.stopped += 1


@pytest.mark.parametrize(
    ("samples", "cpus", "late"),
    [
        # (wall_before_s, process_s, thread_s, wall_after_s): 4 ms of another thread's time in a 3 us step
        ([(0.0, 1.0, 0.5, 1e-6), (2e-6, 1.004 + 2e-6, 0.5 + 2e-6, 3e-6)], 2, 0.004 + 2e-6 - 2 * 3e-6),
        # the same 4 ms, but the poller was away 4 ms meanwhile and one CPU could have run it: nothing late
        ([(0.0, 1.0, 0.5, 1e-6), (0.004, 1.004, 0.5, 0.004 + 1e-6)], 1, 0.0),
        # on 2 CPUs, 4 ms arriving in a 1 ms step: at least 2 ms of it were used before
        ([(0.0, 1.0, 0.5, 0.0), (0.001, 1.004, 0.5, 0.001)], 2, 0.002),
        # the caller's own time jumping with the process's is not another thread's lag
        ([(0.0, 1.0, 0.5, 1e-6), (2e-6, 1.004, 0.504, 3e-6)], 2, 0.0),
        # the largest of several late arrivals
        ([(0.0, 1.0, 0.5, 0.0), (0.0, 1.001, 0.5, 0.0), (0.0, 1.004, 0.5, 0.0), (0.0, 1.0045, 0.5, 0.0)], 2, 0.003),
        ([(0.0, 1.0, 0.5, 0.0)], 2, 0.0),
    ],
    ids=["late-on-two-cpus", "preempted-on-one-cpu", "more-than-the-step-allows", "own-time", "largest", "one-sample"],
)
def test_late_cpu_time_is_what_arrived_beyond_what_could_have_run_in_the_step(samples, cpus, late):
    got = late_cpu_s(samples, cpus)

    assert got == pytest.approx(late, abs=1e-12)


@pytest.mark.parametrize("tick_s", [2.0**-10, 2.0**-8, 2.0**-7], ids=["~1ms", "~4ms", "~8ms"])
def test_the_lag_measured_on_a_ticked_clock_is_its_tick(tick_s):
    machine, busy = TickedMachine(tick_s, cpus=2), Busy()

    lag = measure_cpu_clock_lag_s(process_clock=machine.process_clock, thread_clock=machine.thread_clock,
                                  wall_clock=machine.wall_clock, busy=busy, cpus=2, duration_s=0.04, floor_s=1e-9)

    # seen in one step between samples, less what 2 CPUs could have run in its 7 reads: tick - 10 reads
    assert tick_s - 16 * READ_S <= lag <= tick_s
    assert (busy.started, busy.stopped) == (1, 1)


@pytest.mark.parametrize(
    ("machine", "duration_s", "floor_s", "lag"),
    [
        (TickedMachine(2.0**-8, cpus=1), 0.04, 1e-6, 1e-6),  # switches count the helper at once: the floor
        (TickedMachine(0.25, cpus=2, read_s=2.0**-12), 1.0, 1e-9, MAX_LAG_S),  # beyond the largest lag reported
    ],
    ids=["one-cpu", "beyond-the-range"],
)
def test_the_lag_is_kept_between_the_clocks_resolution_and_its_bound(machine, duration_s, floor_s, lag):
    got = measure_cpu_clock_lag_s(process_clock=machine.process_clock, thread_clock=machine.thread_clock,
                                  wall_clock=machine.wall_clock, busy=Busy(), cpus=machine.cpus,
                                  duration_s=duration_s, floor_s=floor_s)

    assert got == lag


def test_a_process_clock_that_runs_off_to_infinity_reads_as_the_largest_lag():
    machine, busy = TickedMachine(2.0**-8, cpus=2), Busy()
    reads = iter(range(100))

    def process_clock() -> float:
        return machine.process_clock() if next(reads, None) is not None else math.inf

    lag = measure_cpu_clock_lag_s(process_clock=process_clock, thread_clock=machine.thread_clock,
                                  wall_clock=machine.wall_clock, busy=busy, cpus=2, duration_s=0.04)

    assert lag == MAX_LAG_S and busy.stopped == 1


@pytest.mark.parametrize("measured,cpus,expected,how", [
    (None, 2, cpu_clock.ASSUMED_TICK_S, "assumed: no late CPU time"),  # none seen on two CPUs: a loaded machine
    (None, 1, None, "measured at start"),  # none seen on one CPU: there is none
    (0.0021, 2, 0.0021, "measured at start"),
])
def test_where_no_late_cpu_time_is_seen_on_several_cpus_a_scheduler_tick_is_assumed_and_said(
        monkeypatch, measured, cpus, expected, how):
    floor = time.get_clock_info("process_time").resolution
    monkeypatch.setattr(cpu_clock, "measure_cpu_clock_lag_s", lambda floor_s: floor_s if measured is None else measured)
    monkeypatch.setattr(cpu_clock, "usable_cpus", lambda: cpus)

    lag, said = process_cpu_clock_lag.__wrapped__()

    assert lag == (floor if expected is None else expected) and said.startswith(how)


def test_the_lag_on_this_machine_is_positive_bounded_and_measured_once_per_process():
    lag = measure_cpu_clock_lag_s()
    first, second = process_cpu_clock_lag_s(), process_cpu_clock_lag_s()

    assert 0 < lag <= MAX_LAG_S and 0 < first <= MAX_LAG_S
    assert second == first and process_cpu_clock_lag.cache_info().hits >= 1
    assert not [t for t in threading.enumerate() if t.name == "edgeprof-cpu-clock-lag"], "the helper thread is stopped"
    assert CpuTimeEstimateMeter(2.0).update_period_s == first


@pytest.mark.parametrize(("lag_s", "text"), [(0.004, "up to 4.00 ms late (given)"), (0.0, "up to 0.00 ms late (given)"),
                                             (None, None)],
                         ids=["4ms", "none", "measured"])
def test_the_estimate_reports_the_lag_as_its_update_period_and_resolution(lag_s, text):
    meter = CpuTimeEstimateMeter(3.0, cpu_time=lambda: 0.0, cpu_clock_lag_s=lag_s)
    info = meter.describe()
    expected = process_cpu_clock_lag_s() if lag_s is None else lag_s
    text = text or f"ms late ({process_cpu_clock_lag()[1]})"  # measured at start, or assumed where none was seen

    assert meter.update_period_s == meter.cpu_clock_lag_s == expected
    assert info["update_period_s"] == info["cpu_clock_lag_s"] == expected
    assert info["resolution"].startswith("process CPU clock: other threads' time arrives")
    assert text in info["resolution"]


@pytest.mark.parametrize(("lag_s", "short_phases", "short_window"),
                         [(0.0, (), False), (0.004, ("quick",), False), (0.02, ("quick", "long"), True)])
def test_phases_and_windows_shorter_than_the_lag_are_flagged(tmp_path, lag_s, short_phases, short_window):
    now = {"t": 0.0}
    meter = CpuTimeEstimateMeter(3.0, cpu_time=lambda: now["t"], cpu_clock_lag_s=lag_s)
    prof = Profiler(MeterSet([meter]), clock=lambda: now["t"], cpu_clock=lambda: now["t"],
                    thread_clock=lambda: 0.0, rss=PeakRss(tmp_path / "no-proc"))

    with prof.window("client") as win:
        with win.phase("quick"):
            now["t"] += 0.001
        with win.phase("long"):
            now["t"] += 0.010

    assert win.result.short_phases == short_phases and win.result.short_window is short_window


@pytest.mark.parametrize(("watts", "cores", "limit"), [(2.5, 4, 10.0), (12.0, 1, 12.0), (1.5, None, None)],
                         ids=["4-cores", "1-core", "this-machine"])
def test_the_power_limit_is_the_usable_cores_times_the_watts(watts, cores, limit):
    meter = CpuTimeEstimateMeter(watts, cpu_time=lambda: 0.0, cpu_clock_lag_s=0.004, cores=cores)
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = watts * allowed if limit is None else limit

    assert meter.power_limits_w() == {"cpu_estimate": expected} and meter.max_power_w == expected
    assert meter.describe()["max_power_w"] == expected and usable_cpus() == allowed


def test_the_lag_setting_reaches_the_estimate_and_doctor(tmp_path):
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, cpu_watts=2.0, cpu_clock_lag_s=0.002) as found:
        period = found.meters[0].update_period_s
    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU, cpu_clock_lag_s=0.002)
    text = render_doctor(rows)

    assert period == 0.002 and {r["meter"]: r for r in rows}["cpu_estimate"]["update_period_s"] == 0.002
    assert "update period: 0.002 s" in text and "other threads' time arrives up to 2.00 ms late (given)" in text


@pytest.mark.parametrize("lag", [-0.001, MAX_LAG_S * 2, math.nan, True, "4ms"])
def test_a_lag_setting_out_of_range_is_refused_in_one_line(lag):
    with pytest.raises(ConfigError, match=r"cpu_clock_lag_s must be in 0\.\.0\.1 s"):
        check_meter_options(cpu_clock_lag_s=lag)


@pytest.mark.parametrize(("kwargs", "match"),
                         [({"cpu_clock_lag_s": -1.0}, "lag"), ({"cpu_clock_lag_s": math.nan}, "lag"),
                          ({"cores": 0}, "cores")])
def test_the_estimate_refuses_a_lag_or_core_count_out_of_range(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CpuTimeEstimateMeter(3.0, cpu_time=lambda: 0.0, **kwargs)
