"""The power trace: exact against the window's edges with fake clocks and counters, the phases it carries,
invalid and short intervals, the real tracer thread, and the trace file a traced run writes beside its report."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Mapping

import numpy as np
import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.meters.base import Domain, Invalid, Meter
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.estimate import CpuTimeEstimateMeter
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.measure.trace import TracePoint, trace_rows
from edgeprof.report import read_report
from edgeprof.report.trace_file import TRACE_COLUMNS, read_trace

PKG = Domain("cpu_package_0", "cpu_package", "counter", True)
GPU = Domain("gpu_0", "gpu", "integrated_power", True)
CORE = Domain("psys", "psys", "counter", False)
HZ = 50.0


class NoRss(PeakRss):
    def __init__(self):
        self.per_window = False

    def read_mb(self) -> float:
        return 1.0


class Machine:
    """A fake machine whose clock only moves when told, drawing a known power per domain meanwhile."""

    def __init__(self) -> None:
        self.t = 10.0
        self.energy = {"cpu_package_0": 5.0, "gpu_0": 0.0, "psys": 2.0}
        self.power = {"cpu_package_0": 0.0, "gpu_0": 0.0, "psys": 0.0}

    def run(self, seconds: float, **watts: float) -> None:
        self.power.update(watts)
        for d, w in self.power.items():
            self.energy[d] += w * seconds
        self.t += seconds


class MachineMeter(Meter):
    name = "machine"

    def __init__(self, machine: Machine, flag_on: Mapping[int, str] = {}):
        self.machine, self.flag_on, self.reads = machine, dict(flag_on), 0

    def domains(self):
        return (PKG, GPU, CORE)

    def read_j(self):
        self.reads += 1
        if self.reads in self.flag_on:
            self.flag_invalid(self.flag_on[self.reads], Invalid("counter jump", "scripted"))
        return dict(self.machine.energy)


def _profiler(machine: Machine, meter: Meter | None = None) -> Profiler:
    meter = meter or MachineMeter(machine)
    return Profiler(MeterSet([meter]), clock=lambda: machine.t, cpu_clock=lambda: machine.t,
                    thread_clock=lambda: 0.0, rss=NoRss())


def _by_domain(rows):
    out = defaultdict(list)
    for r in rows:
        out[r.domain].append(r)
    return out


# powers of two: every product and sum below is exact in binary floating point
STEP = 2.0**-6  # a tick every 1/64 s


def test_the_trace_integrates_to_the_windows_and_every_phases_energy_exactly():
    machine = Machine()
    prof = _profiler(machine)
    prof.windows.start_trace(HZ, thread=False)

    with prof.window("client") as win:
        machine.run(STEP, cpu_package_0=8.0, gpu_0=64.0, psys=4.0)
        prof.windows.trace_tick()
        with win.phase("cache_forward"):
            for watts in (16.0, 32.0, 16.0):
                machine.run(STEP, cpu_package_0=watts, gpu_0=128.0)
                prof.windows.trace_tick()
            machine.run(STEP / 2)
        machine.run(STEP, cpu_package_0=2.0, gpu_0=0.0, psys=1.0)  # the gap between phases
        with win.phase("head_steps"):
            machine.run(3 * STEP, cpu_package_0=32.0)
            prof.windows.trace_tick()
            machine.run(STEP)
    res = win.result
    rows = _by_domain(res.trace)

    assert set(rows) == {"cpu_package_0", "gpu_0", "psys"}
    for domain, series in rows.items():
        assert sum(r.w * r.dt_s for r in series) == res.span.energy_j[domain], domain
        for phase, span in res.phases.items():
            assert sum(r.w * r.dt_s for r in series if r.phase == phase) == span.energy_j[domain], (domain, phase)
        assert [r.t_s for r in series] == sorted({r.t_s for r in series}), "one row per interval, in time order"
        assert series[-1].t_s == res.wall_s and all(r.dt_s > 0 for r in series)
    # each interval's watts are the power the machine drew in it
    pkg = [(r.phase, r.w) for r in rows["cpu_package_0"]]
    assert pkg == [("", 8.0), ("cache_forward", 16.0), ("cache_forward", 32.0), ("cache_forward", 16.0),
                   ("cache_forward", 16.0), ("", 2.0), ("head_steps", 32.0), ("head_steps", 32.0)]
    assert {r.method for r in rows["gpu_0"]} == {"integrated_power"} and not any(r.in_total for r in rows["psys"])


def test_a_phase_shorter_than_two_sample_periods_is_flagged_in_the_trace():
    machine = Machine()
    prof = _profiler(machine)
    prof.windows.start_trace(HZ, thread=False)

    with prof.window("client") as win:
        with win.phase("joint_grad"):
            machine.run(1.5 / HZ, cpu_package_0=4.0)
        with win.phase("head_steps"):
            machine.run(2.5 / HZ, cpu_package_0=4.0)
    flagged = {r.phase: r.short_phase for r in win.result.trace}

    assert flagged == {"joint_grad": True, "head_steps": False}


def test_an_implausible_reading_makes_its_interval_invalid_and_only_it():
    machine = Machine()
    # reads: 1 window start | 2 tick | 3 tick (flagged: the step from read 2 to 3) | 4 window end
    prof = _profiler(machine, MachineMeter(machine, flag_on={3: "gpu_0"}))
    prof.windows.start_trace(HZ, thread=False)

    with prof.window("client") as win:
        for _ in range(3):
            machine.run(STEP, cpu_package_0=4.0, gpu_0=8.0)
            if _ < 2:
                prof.windows.trace_tick()
    gpu = _by_domain(win.result.trace)["gpu_0"]

    assert [r.method for r in gpu] == ["integrated_power", "invalid", "integrated_power"]
    assert math.isnan(gpu[1].w) and gpu[0].w == gpu[2].w == 8.0
    assert math.isnan(win.result.span.energy_j["gpu_0"])  # the row says the same


def test_samples_at_one_instant_merge_and_the_first_stays_the_start():
    sample = lambda t, e: __import__("edgeprof.measure.profiler", fromlist=["Sample"]).Sample(t, t, {"d": e})
    dom = (Domain("d", "cpu_package", "counter", True),)
    points = [TracePoint(sample(1.0, 0.0), None), TracePoint(sample(1.0, 1.0), "a"),
              TracePoint(sample(2.0, 3.0), "a"), TracePoint(sample(2.0, 4.0), None), TracePoint(sample(3.0, 6.0), None)]

    rows = trace_rows(points, dom, hz=HZ)

    assert [(r.t_s, r.dt_s, r.phase, r.w) for r in rows] == [(1.0, 1.0, "a", 4.0), (2.0, 1.0, "", 2.0)]
    assert sum(r.w * r.dt_s for r in rows) == 6.0


def test_no_tick_reads_a_meter_while_no_window_is_open():
    machine = Machine()
    meter = MachineMeter(machine)
    prof = _profiler(machine, meter)
    prof.windows.start_trace(HZ, thread=False)

    prof.windows.trace_tick()
    with prof.window("client"):
        prof.windows.trace_tick()
    prof.windows.trace_tick()

    assert meter.reads == 3  # start, one tick, end


def _busy(a: np.ndarray, reps: int) -> np.ndarray:
    for _ in range(reps):
        a = np.tanh(a @ a / a.shape[0])
    return a


def test_the_tracer_thread_samples_a_real_window_at_its_rate_and_integrates_to_its_estimate():
    hz, watts = 200.0, 3.0
    prof = Profiler(MeterSet([CpuTimeEstimateMeter(watts)]), rss=NoRss())
    prof.windows.start_trace(hz)
    a = np.random.default_rng(0).random((96, 96))
    try:
        with prof.window("client") as win:
            with win.phase("work"):
                while prof.windows._tracer.ticks < 20:  # noqa: SLF001 - work until the thread has ticked 20 times
                    a = _busy(a, 5)
    finally:
        ticks = prof.windows.stop_trace()
    res = win.result
    rows = res.trace

    assert ticks >= 20 and len(rows) >= 20  # one interval per tick at least (plus the edges)
    # the intervals are about one period long (a loaded machine stretches them: wall time passes anyway)
    assert np.median([r.dt_s for r in rows]) == pytest.approx(1 / hz, rel=0.5)
    # (c1 - c0) * W telescoping over the intervals: a few ulps of the process's CPU seconds per interval, times W
    assert sum(r.w * r.dt_s for r in rows) == pytest.approx(res.span.energy_j["cpu_estimate"], rel=1e-9)
    assert {r.method for r in rows} == {"estimate"}


SMALL = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
         "--clients", "4", "--participation", "0.5", "--rounds", "2", "--no-progress"]


@pytest.mark.parametrize("parquet", [True, False])
def test_a_traced_run_writes_its_trace_beside_the_report_and_each_window_integrates_to_its_row(
        tmp_path, monkeypatch, parquet):
    if not parquet:  # a machine without pyarrow keeps the CSV
        import builtins

        real_import = builtins.__import__

        def no_pyarrow(name, *args, **kwargs):
            if name.split(".")[0] == "pyarrow":
                raise ImportError("no pyarrow here")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    else:
        pytest.importorskip("pyarrow")

    result = CliRunner().invoke(app, ["measure", *SMALL, "--algo", "pflego", "--tau", "3", "--trace", "--trace-hz",
                                      "200", "--run-name", "t", "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    sidecar = json.loads((tmp_path / "t.json").read_text())
    section = sidecar["trace"]
    assert section["format"] == ("parquet" if parquet else "csv") and section["hz"] == 200.0
    assert section["file"] == f"t.trace.{section['format']}" and section["columns"] == list(TRACE_COLUMNS)
    assert section["notes"] == [] and section["ticks"] >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.csv", "t.json", section["file"]])
    rows = read_trace(tmp_path / section["file"])
    assert len(rows) == section["rows"]
    report = read_report(tmp_path / "t.csv").where()
    sums = defaultdict(float)
    for r in rows:
        sums[r["row"]] += r["w"] * r["dt_s"]
    assert set(sums) == set(range(len(report)))
    for index, row in enumerate(report):
        labels = {r["kind"] for r in rows if r["row"] == index}
        assert labels == {row["kind"]}
        # the report prints 6 significant digits (half a unit in the 6th: up to 5e-6 relative), the trace 9
        assert sums[index] == pytest.approx(float(row["energy_j"]), rel=5e-6 + 1e-8), index
    phases = {r["phase"] for r in rows if r["kind"] == "client"}
    assert {"cache_forward", "head_steps", "joint_grad"} <= phases
    assert {r["method"] for r in rows} == {"estimate"}


def test_the_trace_rate_is_checked_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["measure", *SMALL, "--trace", "--trace-hz", "5000", "--out", str(tmp_path)])

    assert result.exit_code == 2
    assert "trace rate must be in 1..1000 Hz" in result.output and not list(tmp_path.iterdir())


@pytest.mark.parametrize("parquet", [True, False])
def test_the_monitor_api_traces_its_windows_too(tmp_path, monkeypatch, parquet):
    import edgeprof

    if not parquet:
        monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)  # import pyarrow -> ImportError
    a = np.random.default_rng(1).random((64, 64))
    with edgeprof.monitor(tmp_path, run_id="mon", trace_hz=100, cpu_watts=2.0) as mon:
        for step in range(2):
            with mon.window("train_step", step=step) as win:
                with win.phase("forward"):
                    a = _busy(a, 40)
                a = _busy(a, 10)
    section = json.loads((tmp_path / "mon.json").read_text())["trace"]
    rows = read_trace(tmp_path / section["file"])
    report = read_report(tmp_path / "mon.csv").where()

    assert section["format"] == ("parquet" if parquet else "csv")
    assert {r["window"] for r in rows} == {"train_step"} and {r["row"] for r in rows} == {0, 1}
    assert {r["phase"] for r in rows} == {"forward", ""} and all(r["round"] is None for r in rows)
    for index, row in enumerate(report):
        total = sum(r["w"] * r["dt_s"] for r in rows if r["row"] == index)
        assert total == pytest.approx(float(row["energy_j"]), rel=5e-6 + 1e-8)


#: intervals twice as long as NVML's and the Jetson rails' update period (0.1 s): each is resolved on its own
LONG_STEP = 2.0**-2


@pytest.mark.parametrize("step", [STEP, LONG_STEP])
def test_an_nvml_energy_counter_through_a_fake_pynvml_is_traced_as_a_counter(step):
    """The production NVML meter over a fake pynvml: an interval spanning two of the counter's update periods (0.1 s)
    gets its millijoules over its seconds; shorter ones are gathered until they do (here the whole window: 47 ms),
    each drawn at that span's mean power and marked unresolved."""
    from edgeprof.meters import nvml
    from fixtures_sysfs import fake_pynvml

    gpus = [{"energy_mj": 1_000_000, "power_mw": 50_000}]
    machine = Machine()
    prof = _profiler(machine, nvml.NvmlMeter(fake_pynvml(gpus)))
    prof.windows.start_trace(HZ, thread=False)
    drawn_mj = (3_000, 7_000, 1_000)  # per interval of `step` seconds

    with prof.window("client") as win:
        for mj in drawn_mj:
            gpus[0]["energy_mj"] += mj
            machine.run(step)
            if mj != drawn_mj[-1]:
                prof.windows.trace_tick()
    rows = win.result.trace

    assert [(r.domain, r.method) for r in rows] == [("gpu_0", "counter")] * 3
    # one division and one product per interval, each within half an ulp: a few ulps over the three
    resolved = step >= 2 * nvml.COUNTER_PERIOD_S
    expected = [mj / 1000 / step for mj in drawn_mj] if resolved else [sum(drawn_mj) / 1000 / (3 * step)] * 3
    assert [r.w for r in rows] == pytest.approx(expected, rel=1e-15)
    assert [r.resolved for r in rows] == [resolved] * 3 and {r.flag for r in rows} == {""}
    assert sum(r.w * r.dt_s for r in rows) == pytest.approx(win.result.span.energy_j["gpu_0"], rel=4e-16 * 3)
    assert win.result.span.energy_j["gpu_0"] == pytest.approx(11.0, rel=1e-15)


@pytest.mark.parametrize("command", [
    ["sweep", "--backbone", "mlp", "--clients", "4", "--samples-per-client", "20", "--algos", "pflego,fedavg",
     "--taus", "1,3", "--repeats", "1", "--no-progress", "--run-name", "t"],
    ["train", "--algos", "pflego", "--rounds", "2", "--tau", "2", *SMALL[:-3], "--no-progress", "--run-name", "t"],
])
def test_sweep_and_train_trace_every_window_they_write(tmp_path, command):
    result = CliRunner().invoke(app, [*command, "--trace", "--trace-hz", "200", "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    (sidecar,) = tmp_path.glob("*.json")
    section = json.loads(sidecar.read_text())["trace"]
    rows = read_trace(tmp_path / section["file"])
    report = read_report(sidecar.with_suffix(".csv")).where()
    measured = {i for i, r in enumerate(report) if r["kind"] in ("client", "server")}
    assert measured and {r["row"] for r in rows} == measured


def test_a_rapl_counter_in_a_sysfs_tree_is_traced_as_a_counter(tmp_path):
    """The production RAPL meter reading a powercap tree: each interval's watts are its microjoules over its seconds,
    across a wrap of the counter."""
    from edgeprof.meters import rapl
    from fixtures_sysfs import rapl_zone, set_energy

    top = 2**20
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=top - 3_000, max_range_uj=top)
    machine = Machine()
    prof = _profiler(machine, rapl.RaplMeter(tmp_path))
    prof.windows.start_trace(HZ, thread=False)
    counter, drawn_uj = top - 3_000, (2_000, 4_000, 1_000)  # the second step wraps past max_energy_range_uj

    with prof.window("client") as win:
        for i, uj in enumerate(drawn_uj):
            counter = (counter + uj) % (top + 1)  # the counter runs 0..max_energy_range_uj inclusive
            set_energy(tmp_path, "intel-rapl:0", counter)
            machine.run(STEP)
            if i < len(drawn_uj) - 1:
                prof.windows.trace_tick()
    rows = win.result.trace

    assert {(r.column, r.method) for r in rows} == {("cpu_package", "counter")} and len(rows) == 3
    assert [r.w for r in rows] == pytest.approx([uj / 1e6 / STEP for uj in drawn_uj], rel=1e-15)
    assert sum(r.w * r.dt_s for r in rows) == pytest.approx(sum(drawn_uj) / 1e6, rel=1e-15)


@pytest.mark.parametrize("step", [STEP, LONG_STEP])
def test_jetson_rails_in_a_sysfs_tree_are_traced_as_integrated_power(tmp_path, step):
    """The production Jetson meter over a nano's rails, its sampler on the same fake clock as the profiler: each
    interval's watts are the trapezoid of the rail's power at its two ends (the meter samples at every read), where
    the interval spans two of the rails' sample periods (10 Hz); shorter intervals share their span's mean power."""
    from edgeprof.meters import jetson
    from fixtures_sysfs import FakeClock, build_jetson, set_rails

    build_jetson(tmp_path, "nano")
    clock = FakeClock()
    powers_mw = (4000, 6000, 2000, 2000)  # the input rail at the window's start, two ticks, then until its end
    set_rails(tmp_path, "nano", {"POM_5V_IN": (powers_mw[0], 1000)})
    meter = jetson.JetsonMeter(tmp_path, hz=10, clock_ns=clock, start_thread=False)
    prof = Profiler(MeterSet([meter]), clock=lambda: clock() / 1e9, cpu_clock=lambda: 0.0,
                    thread_clock=lambda: 0.0, rss=NoRss())
    prof.windows.start_trace(HZ, thread=False)

    with prof.window("client") as win:
        for i, mw in enumerate(powers_mw[1:]):
            clock.advance_s(step)
            set_rails(tmp_path, "nano", {"POM_5V_IN": (mw, 1000)})  # iio: mW (the second value unused)
            if i < 2:
                prof.windows.trace_tick()
        clock.advance_s(step)  # the end reads 2 W again, 2 steps after the last tick
    total = [r for r in win.result.trace if r.domain == "board_total"]

    assert {r.method for r in total} == {"integrated_power"} and meter.update_period_s == 0.1
    # trapezoids between consecutive samples (the rail read at each end), in watts: 5, 4 and (two steps) 2 W
    resolved = step >= 2 * meter.update_period_s
    expected = [5.0, 4.0, 2.0] if resolved else [(5.0 + 4.0 + 2 * 2.0) / 4] * 3
    assert [r.w for r in total] == pytest.approx(expected, rel=1e-9)
    assert [r.resolved for r in total] == [resolved] * 3
    assert sum(r.w * r.dt_s for r in total) == pytest.approx(win.result.span.energy_j["board_total"], rel=1e-12)


def test_an_interrupted_run_keeps_the_trace_of_every_window_it_wrote(tmp_path, stop_at_client_round):
    stop_at_client_round(4)
    result = CliRunner().invoke(app, ["measure", *SMALL[:-3], "--rounds", "5", "--no-progress", "--tau", "2",
                                      "--trace", "--trace-hz", "200", "--run-name", "t", "--out", str(tmp_path)])

    assert result.exit_code == 130, result.output
    sidecar = json.loads((tmp_path / "t.json").read_text())
    assert sidecar["status"] == "interrupted" and sidecar["trace"]["rows"] > 0
    rows = read_trace(tmp_path / sidecar["trace"]["file"])
    report = read_report(tmp_path / "t.csv").where()
    assert {r["row"] for r in rows} == set(range(len(report))) and len(report) == sidecar["rows"]
    for index, row in enumerate(report):
        total = sum(r["w"] * r["dt_s"] for r in rows if r["row"] == index)
        assert total == pytest.approx(float(row["energy_j"]), rel=5e-6 + 1e-8), index


def test_a_meter_failing_in_a_tick_stops_the_tracer_and_is_kept_for_the_sidecar():
    import time

    import threading

    class FailsOnce(MachineMeter):
        ticks_read = 0

        def read_j(self):
            if threading.current_thread().name == "edgeprof-trace":  # the tracer's first read fails
                self.ticks_read += 1
                raise OSError("counter unreadable for a moment")
            return super().read_j()

    machine = Machine()
    meter = FailsOnce(machine)
    prof = Profiler(MeterSet([meter]), rss=NoRss())
    prof.windows.start_trace(1000.0)
    with prof.window("client") as win:
        deadline = time.monotonic() + 10
        while prof.windows._tracer.error is None and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.001)
    prof.windows.stop_trace()

    # the tick that read failed and ended the thread (the ticks that returned found no window open yet)
    assert "counter unreadable" in str(prof.windows.trace_error) and meter.ticks_read == 1
    # the window's own edges still measured it: one interval, start to end
    assert [r.domain for r in win.result.trace] == ["cpu_package_0", "gpu_0", "psys"]
