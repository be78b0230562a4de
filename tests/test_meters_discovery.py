"""Discovery order and fallbacks, EDGEPROF_SYSFS_ROOT, the estimate table, the idle baseline, doctor."""

from __future__ import annotations

from typing import Mapping

import pytest

from edgeprof.errors import ConfigError, MeterError
from edgeprof.meters import Backend, Domain, Meter, MeterSet, ProbeResult, discover, registry
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.meters.estimate import (DEFAULT_WATTS_PER_CORE, CpuTimeEstimateMeter, detect_cpu_model,
                                      watts_per_core_for)
from edgeprof.meters.idle import measure_idle
from edgeprof.meters.rapl import RaplMeter
from edgeprof.measure.profiler import PeakRss, Profiler, bound_slack_s
from edgeprof.meters.nvml import NvmlMeter
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import FakeClock, build_jetson, build_rapl, fake_pynvml, rapl_zone, set_energy

NO_GPU = fake_pynvml([], init_error=9)
ONE_GPU = fake_pynvml([{"energy_mj": 0, "power_mw": 1}])


@pytest.mark.parametrize(
    ("rapl_layout", "board", "nvml_module", "meters", "estimate_used"),
    [
        (None, None, NO_GPU, ["cpu_estimate"], True),
        ("one_socket", None, NO_GPU, ["rapl"], False),
        ("dram", None, ONE_GPU, ["rapl", "nvml"], False),
        (None, None, ONE_GPU, ["nvml", "cpu_estimate"], True),
        (None, "orin_nano", NO_GPU, ["jetson"], False),
        (None, "agx_orin", NO_GPU, ["jetson"], False),
    ],
    ids=["nothing", "rapl", "rapl+gpu", "gpu-only", "jetson", "agx-orin"],
)
def test_order_and_estimate_fallback(tmp_path, rapl_layout, board, nvml_module, meters, estimate_used):
    if rapl_layout:
        build_rapl(tmp_path, rapl_layout)
    if board:
        build_jetson(tmp_path, board)

    with discover(sysfs_root=str(tmp_path), nvml_module=nvml_module, cpu_watts=3.0) as found:
        names = [m.name for m in found.meters]
        probes = {p.meter: p for p in found.probes}
        not_found = {row["meter"] for row in found.describe()["not_found"]}

    assert names == meters
    assert [p.meter for p in found.probes] == ["rapl", "nvml", "amdsmi", "jetson", "apple", "cpu_estimate"]
    assert probes["cpu_estimate"].available is estimate_used
    for missing in {"rapl", "nvml", "amdsmi", "jetson", "apple"} - set(names):
        assert missing in not_found and probes[missing].reason and probes[missing].fix
    if estimate_used:
        assert found.methods[-1] == "estimate"
        assert found.meters[-1].watts_per_core == 3.0


def test_unreadable_rapl_falls_through_to_the_next_meter(tmp_path):
    zones = build_rapl(tmp_path, "one_socket")
    (tmp_path / "class/powercap" / zones[0] / "energy_uj").unlink()  # a counter that cannot be read

    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as found:
        names = [m.name for m in found.meters]
        rapl_probe = found.probes[0]

    assert names == ["cpu_estimate"]
    assert not rapl_probe.available and "energy_uj" in rapl_probe.reason


def test_sysfs_root_comes_from_the_environment(tmp_path, monkeypatch):
    build_rapl(tmp_path, "two_sockets", energy_uj=0)
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path))

    found = discover(nvml_module=NO_GPU)
    set_energy(tmp_path, "intel-rapl:1", 2_000_000)
    reading = found.read_j()
    found.close()

    assert reading == {"cpu_package_0": 0.0, "cpu_package_1": 2.0}
    assert found.update_period_s == 0.001


class SteadyGpuMeter(Meter):
    """A GPU counter that advances ``joules_per_read`` on every read, over the named domains."""

    def __init__(self, name: str, domain_names: tuple[str, ...], joules_per_read: float) -> None:
        self.name = name
        self._domains = tuple(Domain(n, "gpu", "counter") for n in domain_names)
        self._per_read_j, self._reads = joules_per_read, 0

    def domains(self) -> tuple[Domain, ...]:
        return self._domains

    def read_j(self) -> Mapping[str, float]:
        self._reads += 1
        return {d.name: self._reads * self._per_read_j for d in self._domains}


@pytest.mark.parametrize(
    "meters",
    [[("nvml", ("gpu_0",), 1.0), ("nvml_b", ("gpu_0",), 100.0)],
     [("nvml", ("gpu_0", "gpu_1", "gpu_0"), 1.0)]],
    ids=["two-meters", "one-meter"],
)
def test_two_domains_with_one_name_are_rejected(meters):
    opened = [SteadyGpuMeter(*m) for m in meters]

    with pytest.raises(MeterError, match="'gpu_0'.*unique"):
        MeterSet(opened)


def test_distinct_gpu_domains_each_count_once_in_a_window(tmp_path):
    meters = MeterSet([SteadyGpuMeter("nvml", ("gpu_0",), 1.0), SteadyGpuMeter("nvml_b", ("gpu_1",), 100.0)])

    with Profiler(meters, rss=PeakRss(tmp_path / "no-proc")).window("client") as win:
        pass

    assert dict(win.result.span.energy_j) == {"gpu_0": 1.0, "gpu_1": 100.0}
    assert win.result.energy_total_j == 101.0


@pytest.mark.parametrize(("cpu_s", "estimate_j"), [(None, (7.5 - 2.0) * 4.0), (3.25, (3.25 - 2.0) * 4.0)],
                         ids=["own-clock", "supplied"])
def test_estimate_takes_a_supplied_cpu_time_and_other_meters_ignore_it(tmp_path, cpu_s, estimate_j):
    build_rapl(tmp_path, "one_socket", energy_uj=0)
    cpu_clock = iter([2.0, 7.5])  # at opening, then at a stand-alone read
    meters = MeterSet([RaplMeter(tmp_path), CpuTimeEstimateMeter(4.0, cpu_time=lambda: next(cpu_clock),
                                                              cpu_clock_lag_s=0.004)])
    set_energy(tmp_path, "intel-rapl:0", 2_500_000)

    reading = meters.read_j(cpu_s=cpu_s)

    assert reading == {"cpu_package_0": 2.5, "cpu_estimate": estimate_j}


@pytest.mark.parametrize(
    ("model", "watts", "needle"),
    [
        ("Cortex-A57", 1.5, "Jetson Nano"),
        ("Cortex-A78AE", 2.0, "Orin"),
        ("Carmel", 2.5, "Xavier"),
        ("Intel(R) Core(TM) i7-8550U CPU @ 1.80GHz", 7.0, "laptop"),
        ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 12.0, "Xeon"),
        ("AMD Ryzen 9 5950X 16-Core Processor", 11.0, "desktop"),
        ("Some Unknown RISC-V", DEFAULT_WATTS_PER_CORE, "default"),
    ],
)
def test_watts_per_core_table(model, watts, needle):
    got, source = watts_per_core_for(model)

    assert got == watts and needle in source and "estimate" in source


def test_discover_uses_the_table_for_the_cpu_model(tmp_path):
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, cpu_model="Cortex-A57") as found:
        meter = found.meters[0]

    assert meter.watts_per_core == 1.5 and "Jetson Nano" in meter.describe()["watts_source"]


@pytest.mark.parametrize(
    ("cpuinfo", "model"),
    [("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU\n", "Intel(R) Xeon(R) CPU"),
     ("processor\t: 0\nCPU part\t: 0xd07\nprocessor\t: 1\nCPU part\t: 0xd07\n", "Cortex-A57")],
)
def test_cpu_model_from_cpuinfo(tmp_path, cpuinfo, model):
    (tmp_path / "cpuinfo").write_text(cpuinfo)

    assert detect_cpu_model(str(tmp_path)) == model


def test_idle_baseline_power_from_a_fake_clock(tmp_path):
    build_rapl(tmp_path, "psys", energy_uj=0)
    found = discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    now = {"t": 100.0}

    def sleep(seconds):
        now["t"] += seconds
        set_energy(tmp_path, "intel-rapl:1", 8_000_000)  # psys: 8 J in 2 s
        set_energy(tmp_path, "intel-rapl:0", 5_000_000)  # package inside psys: 5 J

    baseline = measure_idle(found, 2.0, sleep=sleep, clock=lambda: now["t"])
    found.close()

    assert baseline.power_w["psys"] == 4.0 and baseline.power_w["cpu_package_0"] == 2.5
    assert baseline.total_power_w == 4.0  # psys only: nested package not added
    assert baseline.net_j(gross_j=10.0, wall_s=1.5) == 4.0 and not baseline.disabled


def _rapl_pl1_15w(tmp_path, clock):
    """A package whose PL1 is 15 W: its steps are held to 30 W x (elapsed + 1 s)."""
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=0)
    (zone / "constraint_0_power_limit_uw").write_text("15000000\n")
    return RaplMeter(tmp_path, clock_ns=clock), "cpu_package_0", 30.0, \
        lambda joules: set_energy(tmp_path, "intel-rapl:0", round(joules * 1e6))


def _nvml_700w(tmp_path, clock):
    """A GPU whose power limit is 700 W: its counter's steps are held to 1400 W x (elapsed + 1 s)."""
    gpus = [{"energy_mj": 0, "power_mw": 60_000, "limit_mw": 700_000, "name": "H100"}]
    return NvmlMeter(fake_pynvml(gpus), clock_ns=clock, start_thread=False), "gpu_0", 1400.0, \
        lambda joules: gpus[0].update(energy_mj=round(joules * 1e3))


@pytest.mark.parametrize("share", [0.99, 1.6], ids=["just-under-the-bound", "a-glitch-the-step-slack-let-through"])
@pytest.mark.parametrize("build", [_rapl_pl1_15w, _nvml_700w], ids=["rapl", "nvml"])
def test_an_idle_power_above_what_the_meter_can_show_is_a_meter_error_not_a_baseline(tmp_path, build, share):
    # Prepare: a real meter on a fake clock; over the 1 s idle it counts share x its plausible-power bound, which
    # its own step check lets through (it allows a second of slack for when a counter updated)
    clock = FakeClock()
    meter, domain, bound_w, count = build(tmp_path, clock)
    assert meter.power_bounds_w()[domain] == bound_w

    def sleep(seconds):
        clock.advance_s(seconds)
        count(share * bound_w * seconds)

    # Execute, Verify: an honest idle is measured as counted; a glitch is refused with the domain and its bound
    with MeterSet([meter]) as meters:
        if share < 1:
            baseline = measure_idle(meters, 1.0, sleep=sleep, clock=lambda: clock.t_ns / 1e9)
            assert baseline.power_w[domain] == pytest.approx(share * bound_w, rel=1e-6)
        else:
            with pytest.raises(MeterError, match=rf"idle baseline not measured: {domain} drew {share * bound_w:.4g} W "
                                                 rf"while idle over 1 s, above the {bound_w:g} W its readings can"):
                measure_idle(meters, 1.0, sleep=sleep, clock=lambda: clock.t_ns / 1e9)


class _Rss(PeakRss):
    def __init__(self):
        self.per_window = False

    def read_mb(self) -> float:
        return 1.0


@pytest.mark.parametrize(("reads", "seconds", "glitch"), [
    (50, 1.0, False),  # an honest second at 0.99 x the bound, read 50 times (a trace at 50 Hz): counted
    (50, 1.0, True),  # 50 steps, each the most its own check lets through (bound x (elapsed + 1 s)): 51 x the bound
    (1, 0.01, True),  # one such step in a 10-ms window: 100 x the bound
], ids=["honest-50-reads", "steps-that-each-pass-add-up", "one-step-in-a-short-window"])
@pytest.mark.parametrize("build", [_rapl_pl1_15w, _nvml_700w], ids=["rapl", "nvml"])
def test_a_window_above_what_its_meter_can_show_is_invalid_even_when_each_step_passed(
        tmp_path, build, reads, seconds, glitch):
    # Prepare: a real meter and a real profiler on one fake clock; a window whose phases read the meter `reads`
    # times, each step counting 0.99 x the bound over its own time, or the most the meter's step check allows
    clock = FakeClock()
    meter, domain, bound_w, count = build(tmp_path, clock)
    meters = MeterSet([meter])
    prof = Profiler(meters, clock=lambda: clock.t_ns / 1e9, cpu_clock=lambda: clock.t_ns / 1e9,
                    thread_clock=lambda: 0.0, rss=_Rss())
    step_s, joules = seconds / reads, 0.0
    per_step = 0.999 * bound_w * (step_s + 1.0) if glitch else 0.99 * bound_w * step_s

    # Execute
    with prof.window("client") as win:
        for _ in range(reads):
            clock.advance_s(step_s)
            joules += per_step
            count(joules)
            with win.phase("step"):
                pass
    row = row_from_window(win.result, {"run_id": "r"})
    column = meter.domains()[0].column
    invalid = meters.describe()["invalid"]
    meters.close()

    # Verify: the meter's own check let every step through; the window's total is what was counted, or, above its
    # bound x (wall + slack), invalid: no number in the row, and the sidecar's meters.invalid says why
    assert not [k for k in invalid.get(domain, []) if k["kind"] != "above bound"]
    if not glitch:
        assert float(row["energy_j"]) == pytest.approx(joules, rel=1e-6)
        assert row["energy_method"] == "counter" and domain not in invalid
    else:
        assert joules > bound_w * (seconds + bound_slack_s(meter.update_period_s))
        assert row["energy_j"] == "" and row["energy_method"] == "invalid"
        assert row[f"{column}_j"] == "" and row[f"{column}_method"] == "invalid"
        assert win.result.invalid[domain].startswith(f"above bound: {joules:.4g} J in {seconds:.4g} s, above the "
                                                     f"{bound_w:g} W its readings can plausibly show")
        assert invalid[domain] == [{"kind": "above bound", "readings": 1,
                                    "first": win.result.invalid[domain].removeprefix("above bound: ")}]


def test_idle_zero_seconds_is_a_disabled_baseline(tmp_path):
    found = discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU)

    baseline = measure_idle(found, 0, sleep=lambda s: pytest.fail("must not sleep"))

    assert baseline.disabled and baseline.total_power_w == 0.0
    assert baseline.power_w == {"cpu_estimate": 0.0}
    with pytest.raises(ConfigError):
        measure_idle(found, -1)


def test_doctor_lists_found_and_missing_meters_with_fixes(tmp_path):
    build_rapl(tmp_path, "dram")
    build_jetson(tmp_path, "agx_orin")

    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    text = render_doctor(rows)

    by_meter = {r["meter"]: r for r in rows}
    assert by_meter["rapl"]["status"] == "found" and by_meter["rapl"]["methods"] == ["counter"]
    assert "dram_1" in by_meter["rapl"]["domains"] and by_meter["rapl"]["update_period_s"] == 0.001
    assert by_meter["jetson"]["sampling_hz"] == 10.0
    assert "no total input rail" in by_meter["jetson"]["notes"]
    assert by_meter["nvml"]["status"] == "not found" and by_meter["nvml"]["fix"]
    assert by_meter["cpu_estimate"]["status"] == "not used"
    assert "RAPL" in text and "NOT FOUND" in text and "fix:" in text and "this board has no total input rail" in text


def _broken(err: Exception):
    def fail(ctx):
        raise err
    return fail


@pytest.mark.parametrize("where", ["probe", "open"])
@pytest.mark.parametrize("err", [OSError(5, "Input/output error"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")],
                         ids=["os-error", "not-utf8"])
def test_a_backend_that_trips_over_a_strange_tree_is_a_reason_not_a_traceback(tmp_path, where, err):
    fine = lambda ctx: ProbeResult("strange", True, domains=("strange",))  # noqa: E731
    backend = Backend(name="strange", title="a strange meter", columns=("strange",),
                      probe=_broken(err) if where == "probe" else fine, open=_broken(err))

    with registry.registered(backend):
        rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    row = {r["meter"]: r for r in rows}["strange"]

    assert row["status"] == "not found" and type(err).__name__ in row["reason"]
    assert row["reason"].startswith("probe failed" if where == "probe" else "probe passed but opening failed")
