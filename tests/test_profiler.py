"""Profiler windows against a fake clock and fake cumulative counters, to the microjoule."""

from __future__ import annotations

from typing import Mapping

import pytest

from edgeprof.meters.base import Domain, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.profiler import PeakRss, Profiler


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
    prof = Profiler(meters, clock=Ticker(0.5), cpu_clock=Ticker(0.25), rss=NoRss())

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
    # each sample reads the wall clock twice (before and after the meters) and the RSS bookkeeping
    # twice more at each end: the window spans the 10 ticks between its first and last sample
    assert res.wall_s == pytest.approx(10 * 0.5)
    assert res.phases["a"].wall_s == pytest.approx(2 * 0.5)
    assert res.cpu_s == pytest.approx(5 * 0.25)
    # overhead: 6 samples + 2 RSS steps, one tick each
    assert res.overhead_s == pytest.approx(8 * 0.5)


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


def test_real_clock_overhead_is_small_relative_to_work():
    from edgeprof.meters.estimate import CpuTimeEstimateMeter

    prof = Profiler(MeterSet([CpuTimeEstimateMeter(5.0)]))
    with prof.window("client") as win:
        for name in ("a", "b", "c"):
            with win.phase(name):
                sum(i * i for i in range(200_000))
    res = win.result
    assert 0 < res.overhead_s < res.wall_s
    assert res.overhead_s / res.wall_s < 0.05
    assert res.energy_total_j == pytest.approx(res.cpu_s * 5.0, rel=0.05, abs=1e-3)
