"""Measuring without disturbing, and drawing only what the meters resolve.

A fake pynvml behaves as NVML does on a data-centre GPU (fixtures_sysfs.slow_stepping_pynvml): each energy read
costs 3 ms (a sleep, releasing the GIL like the binding's ctypes call) and the counter moves every 100 ms. The
production discovery, profiler, window engine and trace read it: the meter is found slow and read off the measured
thread, a round's wall time is that of the same round with no GPU meter, the energy of a window is its power x wall
within what the counter resolves, and the trace draws no interval as measured outside 0.5x..1.5x the constant
power. Trace ticks never synchronise the device (the fake device kind counts) nor hold the engine's lock while they
read a meter; a phase shorter than the update period is flagged in every round, not on the sum of held rounds.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from typing import Mapping

import pytest

from edgeprof.config import EnergySettings, RunConfig
from edgeprof.meters import discover
from edgeprof.meters.base import Domain, Meter
from edgeprof.meters.discovery import SLOW_READ_S, MeterSet
from edgeprof.measure.profiler import PeakRss, Profiler
from fixtures_sysfs import fake_pynvml, slow_stepping_pynvml

POWER_W = 100.0  # the fake GPU's constant power
PERIOD_S = 0.1  # its energy counter's update period
READ_S = 0.003  # the cost of one energy read


class NoRss(PeakRss):
    def __init__(self):
        self.per_window = False

    def read_mb(self) -> float:
        return 1.0


def _slow_meters() -> tuple[MeterSet, object]:
    mod = slow_stepping_pynvml(power_w=POWER_W, period_s=PERIOD_S, read_s=READ_S)
    return discover(nvml_module=mod, cpu_watts=5.0), mod


def _no_gpu() -> MeterSet:
    return discover(nvml_module=fake_pynvml([], init_error=9), cpu_watts=5.0)


def test_a_slow_meter_is_found_at_start_and_read_off_the_measured_thread():
    meters, mod = _slow_meters()
    with meters:
        profiler = Profiler(meters, rss=NoRss())
        mod.energy_reads.clear()
        with profiler.window("client") as win:
            for name in ("cache_forward", "head_steps", "joint_grad"):
                with win.phase(name):
                    time.sleep(0.002)
        during = list(mod.energy_reads)
        result = win.result  # made once the series has passed the window's end
        profiler.close()
        described = {m["name"]: m for m in meters.describe()["meters"]}

    assert meters.read_cost_s["nvml"] >= READ_S > SLOW_READ_S > meters.read_cost_s["cpu_estimate"]
    assert [m.name for m in meters.slow_meters()] == ["nvml"]
    assert "off the measured thread" in described["nvml"]["read"]
    assert described["cpu_estimate"]["read"] == "at every window and phase edge"
    # 8 edges, none of which read the GPU: every energy read meanwhile was the series thread's
    assert set(during) <= {"edgeprof-counter-series"} and set(mod.energy_reads) == {"edgeprof-counter-series"}
    assert profiler.cost["edges"] == 8 and profiler.describe()["read_off_thread"] == ["nvml"]
    assert result.span.energy_j["gpu_0"] >= 0 and "gpu_0" not in result.invalid


def test_a_windows_energy_from_the_series_is_its_power_times_its_wall_within_what_the_counter_resolves():
    """The series is read every ``S`` seconds, and the counter lags by up to one period: an edge's figure is off by
    at most P x (period + S) one way and P x S the other, so a window's by at most P x (period + 2 S)."""
    meters, _ = _slow_meters()
    with meters:
        profiler = Profiler(meters, rss=NoRss())
        results = []
        for seconds in (0.35, 0.6):
            with profiler.window("client") as win:
                time.sleep(seconds)
            results.append(win.result)
        series_s = profiler.series.period_s + 2 * READ_S
        profiler.close()

    for res in results:
        assert abs(res.span.energy_j["gpu_0"] - POWER_W * res.wall_s) <= POWER_W * (PERIOD_S + 2 * series_s)
        assert not res.short_window


def test_a_pflego_round_with_a_slow_gpu_meter_takes_the_time_it_takes_without_one():
    """One federation, two profilers (the slow fake NVML, and no GPU meter) taking turns round by round on the same
    client, so that drift cancels: the median ratio of neighbouring rounds is below 1.05 (on the old code, reading the
    3-ms counter at each of the 8 edges, a ~10-ms round took about three times as long)."""
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=300, synthetic_classes=5, clients=2,
                    participation=1.0, backbone="mlp", tau=20, threads=1, device="cpu").resolved()
    federation = build_federation(cfg, load_clients(cfg))
    settings = federation.settings_for(cfg)
    slow, _ = _slow_meters()
    plain = _no_gpu()
    profilers = {"slow": Profiler(slow, device=federation.runtime.compute),
                 "plain": Profiler(plain, device=federation.runtime.compute)}
    walls: dict[str, list[float]] = {"slow": [], "plain": []}
    try:
        for _ in range(5):  # warm-up, both sides
            federation.client_round(0, settings=settings)
        for i in range(120):
            side = ("slow", "plain")[i % 2]
            with profilers[side].window("client") as win:
                federation.client_round(0, win.phase, settings)
            walls[side].append(win.result.wall_s)
    finally:
        for profiler in profilers.values():
            profiler.close()
        slow.close()
        plain.close()
        federation.close()

    # each slow round against the plain round right after it: the median of those ratios
    ratio = statistics.median(a / b for a, b in zip(walls["slow"], walls["plain"]))
    medians = statistics.median(walls["slow"]), statistics.median(walls["plain"])
    assert ratio < 1.05, (ratio, medians)
    assert profilers["slow"].series is not None and profilers["plain"].series is None


@pytest.mark.parametrize("hz", [50.0, 4.0])
def test_the_trace_of_a_slow_stepping_counter_draws_nothing_as_measured_outside_half_to_one_and_a_half_its_power(hz):
    """Ticks over a counter that moves every 100 ms: at 50 Hz, differenced interval by interval, it reads 0 W, then
    5x the power. Gathered into spans of at least two periods, every row is within 0.5x..1.5x the power; only an
    interval of two periods or more (at 4 Hz: 250 ms) is drawn as measured (resolved); the rows still add up to the
    window's energy, and the 10-ms phase is flagged short."""
    meters, _ = _slow_meters()
    with meters:
        profiler = Profiler(meters, rss=NoRss())
        profiler.windows.start_trace(hz)
        with profiler.window("client") as win:
            with win.phase("long"):
                time.sleep(0.6)
            with win.phase("quick"):
                time.sleep(0.01)
            time.sleep(0.3)
        profiler.windows.stop_trace()
        result = win.result
        profiler.close()
    rows = [r for r in result.trace if r.domain == "gpu_0"]

    assert len(rows) >= 0.9 * hz, "a tick every 1/hz over ~0.9 s"
    assert all(0.5 * POWER_W <= r.w <= 1.5 * POWER_W for r in rows), sorted(r.w for r in rows)
    assert all(r.dt_s >= 2 * PERIOD_S for r in rows if r.resolved) and any(not r.resolved for r in rows)
    assert any(r.resolved for r in rows) == (hz == 4.0)
    assert sum(r.w * r.dt_s for r in rows) == pytest.approx(result.span.energy_j["gpu_0"], rel=1e-9)
    assert {r.flag for r in rows} == {""}
    assert result.short_phases == ("quick",)


def test_a_trace_row_above_the_power_limit_or_below_zero_is_flagged():
    from edgeprof.measure.profiler import Sample
    from edgeprof.measure.trace import TracePoint, trace_rows

    gpu = Domain("gpu_0", "gpu", "counter")
    points = [TracePoint(Sample(t, 0.0, {"gpu_0": j}), None) for t, j in ((0.0, 0.0), (1.0, 900.0), (2.0, 800.0),
                                                                           (3.0, 1000.0))]

    rows = trace_rows(points, (gpu,), hz=1.0, periods_s={"gpu_0": 0.1}, limits_w={"gpu_0": 700.0})

    assert [r.w for r in rows] == [900.0, -100.0, 200.0] and all(r.resolved for r in rows)
    assert [r.flag for r in rows] == ["above the 700 W power limit", "negative power", ""]


class _Stepping(Meter):
    """A counter with an update period, read against a fake clock."""

    name = "stepping"
    update_period_s = 0.1

    def domains(self):
        return (Domain("gpu_0", "gpu", "counter"),)

    def read_j(self) -> Mapping[str, float]:
        return {"gpu_0": 0.0}


def test_a_phase_shorter_than_the_update_period_is_flagged_in_each_round_of_a_held_window():
    """30 held rounds of a 10-ms phase add up to 0.3 s, three update periods, yet no round's phase is resolved."""
    now = [0.0]
    profiler = Profiler(MeterSet([_Stepping()]), clock=lambda: now[0], cpu_clock=lambda: 0.0,
                        thread_clock=lambda: 0.0, rss=NoRss())

    with profiler.window("client") as win:
        for _ in range(30):
            with win.phase("head_steps"):
                now[0] += 0.01
            with win.phase("joint_grad"):
                now[0] += 0.2

    assert win.result.phases["head_steps"].wall_s == pytest.approx(0.3)
    assert win.result.short_phases == ("head_steps",)


class _Recorder(Meter):
    """A cheap meter that notes, on each read by the tracer's thread, whether the engine's lock is free."""

    name = "recorder"

    def __init__(self) -> None:
        self.engine = None
        self.lock_free_in_ticks: list[bool] = []

    def domains(self):
        return (Domain("cpu_estimate", "cpu_estimate", "estimate"),)

    def read_j(self) -> Mapping[str, float]:
        if threading.current_thread().name == "edgeprof-trace" and self.engine is not None:
            free = []

            def probe():
                got = self.engine._lock.acquire(blocking=False)  # noqa: SLF001
                free.append(got)
                if got:
                    self.engine._lock.release()  # noqa: SLF001

            other = threading.Thread(target=probe)
            other.start()
            other.join()
            self.lock_free_in_ticks.append(free[0])
        return {"cpu_estimate": 0.0}


def test_a_trace_tick_reads_its_meters_without_holding_the_engines_lock():
    meter = _Recorder()
    profiler = Profiler(MeterSet([meter]), rss=NoRss())
    meter.engine = profiler.windows
    profiler.windows.start_trace(500.0)
    with profiler.window("client"):
        deadline = time.monotonic() + 5
        while len(meter.lock_free_in_ticks) < 5 and time.monotonic() < deadline:
            time.sleep(0.002)
    profiler.windows.stop_trace()

    assert len(meter.lock_free_in_ticks) >= 5 and all(meter.lock_free_in_ticks)


@pytest.mark.parametrize("algo", ["pflego", "fedavg"])
def test_trace_ticks_never_synchronise_the_device(tmp_path, monkeypatch, algo):
    """A traced run on the fake device kind at 1 kHz: the device is synchronised at the window and phase edges only,
    exactly as often as in the same run untraced, though the tracer ticked."""
    import csv
    import json

    from edgeprof.nn import compute as computelib
    from edgeprof.rounds.simulate import run
    from test_device_sync import EdgeRecordingKind

    counts = {}
    for hz in (0.0, 1000.0):
        kind = EdgeRecordingKind()
        monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)
        cfg = RunConfig(algo=algo, dataset="synthetic", synthetic_samples=60, synthetic_classes=3, clients=3,
                        participation=1.0, backbone="mlp", tau=30, rounds=2, threads=1, device="fake:0",
                        progress=False, out=tmp_path, run_name=f"{algo}-{hz:g}", energy=EnergySettings(trace_hz=hz))
        result = run(cfg)
        rows = list(csv.DictReader(result.csv_path.open()))
        counts[hz] = (kind.count("sync"), len(rows))
        if hz:
            ticks = json.loads(result.sidecar_path.read_text())["trace"]["ticks"]

    assert ticks > 0 and counts[1000.0] == counts[0.0]


def _slow_run_config(tmp_path, mod, **extra) -> RunConfig:
    return RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=120, synthetic_classes=3, clients=3,
                     participation=1.0, backbone="mlp", tau=5, rounds=3, threads=1, device="cpu", progress=False,
                     out=tmp_path, run_name="slow", energy=EnergySettings(meters={"nvml_module": mod}), **extra)


def test_a_run_with_a_slow_meter_writes_every_row_in_order_once_its_series_has_passed_it(tmp_path):
    """Rows wait for the series (one round at most) and keep their order; the sidecar says how each meter was read
    and what the profiler cost on the measured thread."""
    import csv
    import json

    from edgeprof.rounds.simulate import run

    mod = slow_stepping_pynvml(power_w=POWER_W, period_s=PERIOD_S, read_s=READ_S)
    result = run(_slow_run_config(tmp_path, mod, evaluate=True))
    rows = list(csv.DictReader(result.csv_path.open()))
    sidecar = json.loads(result.sidecar_path.read_text())

    assert [r["kind"] for r in rows] == (["client"] * 3 + ["server", "eval"]) * 3
    assert [r["round"] for r in rows] == [str(t) for t in (1, 2, 3) for _ in range(5)]
    measured = [r for r in rows if r["kind"] != "eval"]
    assert all(r["gpu_other_method"] == "counter" and float(r["gpu_other_j"]) >= 0 for r in measured)
    assert sidecar["status"] == "complete" and sidecar["profiler"]["read_off_thread"] == ["nvml"]
    assert sidecar["profiler_overhead"] == "wall" and sidecar["profiler"]["edges"] > 0
    assert {m["name"]: m["read"] for m in sidecar["meters"]["meters"]}["nvml"].startswith("off the measured thread")


def test_an_interrupted_run_with_a_slow_meter_keeps_every_window_that_ended(tmp_path, stop_at_client_round):
    import csv
    import json

    from edgeprof.rounds.simulate import run

    stop_at_client_round(5)
    mod = slow_stepping_pynvml(power_w=POWER_W, period_s=PERIOD_S, read_s=READ_S)
    with pytest.raises(KeyboardInterrupt):
        run(_slow_run_config(tmp_path, mod))
    rows = list(csv.DictReader((tmp_path / "slow.csv").open()))
    sidecar = json.loads((tmp_path / "slow.json").read_text())

    assert [r["kind"] for r in rows] == ["client"] * 3 + ["server", "client"]
    assert sidecar["status"] == "interrupted" and sidecar["rows"] == 5 and sidecar["rounds_completed"] == 1


def test_doctor_prints_each_meters_read_cost_and_how_a_run_reads_it():
    from edgeprof.meters.doctor import doctor_report, render_doctor

    rows = {r["meter"]: r for r in doctor_report(nvml_module=slow_stepping_pynvml(power_w=POWER_W, read_s=READ_S))}
    text = render_doctor(list(rows.values()))

    assert rows["nvml"]["read_cost_s"] >= READ_S and rows["nvml"]["update_period_s"] == PERIOD_S
    assert rows["nvml"]["read"].startswith("off the measured thread")
    assert rows["cpu_estimate"]["read_cost_s"] < SLOW_READ_S and rows["cpu_estimate"]["read"].startswith("at every")
    nvml_block = text[text.index("nvml "):]
    assert re.search(r"read cost: +\d+(\.\d+)? ms a read \(read off the measured thread", nvml_block), nvml_block


def test_on_a_device_whose_queue_is_marked_every_hardware_meter_is_described_as_read_off_thread():
    """One rule (MeterSet.off_thread) says which meters a profiler reads off the measured thread, and the sidecar's
    description follows it: on a marking device a cheap hardware meter is read off-thread too (so described), the
    CPU-time estimate still at the edges; on the CPU the cheap one is read at the edges, its line saying where
    that changes."""
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.base import Domain, Meter
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.meters.estimate import CpuTimeEstimateMeter

    class CheapRails(Meter):
        name = "rails"

        def domains(self):
            return (Domain("cpu_package_0", "cpu_package", "counter"),)

        def read_j(self):
            return {"cpu_package_0": 0.0}

    class Marking:
        kind_name = "fake"

        def can_mark(self):
            return True

    meters = MeterSet([CheapRails(), CpuTimeEstimateMeter()])
    meters.read_cost_s.update(rails=1e-6, cpu_estimate=1e-6)
    for marks in (True, False):
        described = {m["name"]: m["read"] for m in meters.describe(marks=marks)["meters"]}
        assert described["cpu_estimate"] == "at every window and phase edge"
        if marks:
            assert described["rails"].startswith("off the measured thread")
        else:
            assert described["rails"].startswith("at every window and phase edge (off the measured thread where")
    assert [m.name for m in meters.off_thread(marks=True)] == ["rails"] and meters.off_thread() == ()
    assert [m.name for m in Profiler(meters, device=Marking())._slow] == ["rails"]


def test_a_slow_meter_that_fails_mid_run_keeps_every_window_its_series_had_passed(tmp_path, monkeypatch):
    """The series thread's error fails the run, but the windows that ended before its last good reading are
    resolved from the readings it has and written; the sidecar says how the run ended."""
    import csv
    import json

    from edgeprof.errors import MeterError
    from edgeprof.rounds.federation import Federation
    from edgeprof.rounds.simulate import run

    mod = slow_stepping_pynvml(power_w=POWER_W, period_s=PERIOD_S, read_s=READ_S)
    counting, broken, calls = mod.nvmlDeviceGetTotalEnergyConsumption, threading.Event(), []

    def energy_mj(handle):
        if broken.is_set():
            raise mod.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST, as a GPU fallen off the bus reads
        return counting(handle)

    mod.nvmlDeviceGetTotalEnergyConsumption = energy_mj
    real = Federation.client_round

    def client_round(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # round 2's second client: the series reads a few more times, then the GPU is lost
            time.sleep(5 * PERIOD_S)
            broken.set()
            time.sleep(3 * PERIOD_S)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Federation, "client_round", client_round)
    with pytest.raises(MeterError, match="sampler failed"):
        run(_slow_run_config(tmp_path, mod))
    rows = list(csv.DictReader((tmp_path / "slow.csv").open()))
    sidecar = json.loads((tmp_path / "slow.json").read_text())

    assert [r["kind"] for r in rows] == ["client"] * 3 + ["server", "client"]
    assert all(r["gpu_other_method"] == "counter" and float(r["gpu_other_j"]) >= 0 for r in rows)
    assert sidecar["status"] == "failed" and sidecar["rows"] == 5 and "sampler failed" in sidecar["reason"]
