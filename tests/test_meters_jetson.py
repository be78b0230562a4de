"""Jetson INA3221 rails from real hwmon (JetPack 5+) and iio (JetPack 4) trees, with a fake clock; negative
readings (never integrated: the window's rail is invalid) and rail labels that cannot be read."""

from __future__ import annotations

from fractions import Fraction

import pytest

from edgeprof.meters import discover, jetson
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import BAD_LABELS, FakeClock, rail_dir, build_jetson, fake_pynvml, set_rails, spoil_label

NO_GPU = fake_pynvml([], init_error=9)

# board -> {domain: (column, in_total)}
EXPECTED = {
    "orin_nano": {"board_total": ("board_total", True), "board_vdd_cpu_gpu_cv": ("board_cpu", False),
                  "board_vdd_soc": ("board_soc", False)},
    "xavier_nx": {"board_total": ("board_total", True), "board_vdd_cpu_gpu_cv": ("board_cpu", False),
                  "board_vdd_soc": ("board_soc", False)},
    "nano": {"board_total": ("board_total", True), "board_pom_5v_gpu": ("board_gpu", False),
             "board_pom_5v_cpu": ("board_cpu", False)},
    "agx_orin": {"board_vdd_gpu_soc": ("board_gpu", True), "board_vdd_cpu_cv": ("board_cpu", True),
                 "board_vin_sys_5v0": ("board_soc", True)},
}


def _power_mw(board: str, setting: tuple[int, int]) -> Fraction:
    layout = jetson_layout(board)
    a, b = setting
    return Fraction(a * b, 1000) if layout == "hwmon" else Fraction(a)


def jetson_layout(board: str) -> str:
    from fixtures_sysfs import JETSON_BOARDS

    return JETSON_BOARDS[board][0]


@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_rails_map_to_domains_and_the_total_rail_is_never_summed_with_sub_rails(tmp_path, board):
    build_jetson(tmp_path, board)

    with jetson.JetsonMeter(tmp_path, start_thread=False) as meter:
        got = {d.name: (d.column, d.in_total) for d in meter.domains()}
        info = meter.describe()

    assert got == EXPECTED[board]
    assert all(d.method == "integrated_power" for d in meter.domains())
    assert info["partial_total"] is (board == "agx_orin")
    if board == "agx_orin":
        assert "no total input rail" in info["total"] and "partial" in info["total"]


@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_trapezoidal_energy_is_exact_with_a_fake_clock(tmp_path, board):
    labels = build_jetson(tmp_path, board)
    # three samples per rail: (mV, mA) for hwmon, (mW, -) for iio; different per rail
    steps = [
        {lab: (5000 + 10 * i, 400 + 100 * i) if jetson_layout(board) == "hwmon" else (2000 + 500 * i, 0)
         for i, lab in enumerate(labels)},
        {lab: (5100, 800 + 7 * i) if jetson_layout(board) == "hwmon" else (3100 + 11 * i, 0)
         for i, lab in enumerate(labels)},
        {lab: (4900, 333) if jetson_layout(board) == "hwmon" else (1234 + i, 0)
         for i, lab in enumerate(labels)},
    ]
    durations = [0.1, 0.25, 0.037]  # seconds between samples
    clock = FakeClock()
    set_rails(tmp_path, board, steps[0])
    meter = jetson.JetsonMeter(tmp_path, hz=10, clock_ns=clock, start_thread=False)  # sample at t=0
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))

    with profiler.window("client") as win:  # its first reading samples t=0 again: a zero-length trapezoid
        for step, dt in zip(steps[1:], durations[:2]):
            clock.advance_s(dt)
            set_rails(tmp_path, board, step)
            meter.sampler.sample()
        clock.advance_s(durations[2])
    reading = win.result.span.energy_j  # the last reading samples t=0.387 s with step 2's powers still set

    names = [d.name for d in meter.domains()]
    powers = [steps[0], steps[1], steps[2], steps[2]]
    expected = {}
    for name, lab in zip(names, labels):
        p = [_power_mw(board, s[lab]) / 1000 for s in powers]  # W
        expected[name] = sum((p[i] + p[i + 1]) / 2 * Fraction(round(d * 1e9), 10**9)
                             for i, d in enumerate(durations))
    assert dict(reading) == {k: float(v) for k, v in expected.items()}
    if board == "agx_orin":  # no input rail: the total is the (partial) sum of the rails
        assert win.result.energy_total_j == sum(reading.values())
    else:  # sub-rails are inside the input rail and never added to it
        assert win.result.energy_total_j == reading["board_total"] < sum(reading.values())


def test_nc_channels_are_skipped(tmp_path):
    build_jetson(tmp_path, "orin_nano", extra_nc=True)

    labels = [r.label for r in jetson.find_rails(tmp_path)]

    assert labels == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]


def test_not_a_jetson_is_reported_with_a_fix(tmp_path):
    result = jetson.probe(tmp_path)

    assert not result.available and "not a Jetson" in result.reason and "ina3221" in result.fix


def test_sampler_thread_integrates_at_the_configured_rate(tmp_path):
    build_jetson(tmp_path, "nano")
    set_rails(tmp_path, "nano", {"POM_5V_IN": (4000, 0), "POM_5V_GPU": (1000, 0), "POM_5V_CPU": (500, 0)})
    meter = jetson.JetsonMeter(tmp_path, hz=200)
    try:
        import time

        time.sleep(0.1)
        reading = meter.read_j()
    finally:
        meter.close()

    assert meter.sampler.samples > 5  # the thread sampled on its own
    # constant power: energy = 4 W * elapsed, elapsed between 0.1 s and a generous bound
    assert 0.4 <= reading["board_total"] <= 4.0
    assert reading["board_total"] / reading["board_pom_5v_gpu"] == pytest.approx(4.0)


# --- negative readings: never integrated, the window's rail is invalid --------------------------------------------


def _steady(board: str, labels: list[str]) -> dict[str, tuple[int, int]]:
    return {lab: (5000, 400) if jetson_layout(board) == "hwmon" else (2000, 0) for lab in labels}


@pytest.mark.parametrize(
    ("board", "rail", "bad"),
    [("orin_nano", "VDD_CPU_GPU_CV", (5000, -3)),  # hwmon: a negative current on a sub-rail
     ("orin_nano", "VDD_IN", (-5000, 3)),  # a negative voltage on the input rail (the total)
     ("orin_nano", "VDD_IN", (-5000, -3)),  # both negative: the product is positive, the sample is not
     ("xavier_nx", "VDD_SOC", (-700, 0))],  # iio: a negative power
    ids=["negative-current", "negative-voltage", "both-negative", "iio-negative-power"],
)
def test_a_negative_reading_makes_the_windows_rail_invalid(tmp_path, board, rail, bad):
    labels = build_jetson(tmp_path, board)
    set_rails(tmp_path, board, _steady(board, labels))
    clock = FakeClock()
    meter = jetson.JetsonMeter(tmp_path, hz=10, clock_ns=clock, start_thread=False)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))

    with profiler.window("client") as spoiled:  # the bad sample, with good ones on both sides
        clock.advance_s(0.1)
        set_rails(tmp_path, board, {rail: bad})
        meter.sampler.sample()
        clock.advance_s(0.1)
        set_rails(tmp_path, board, _steady(board, labels))
        meter.sampler.sample()
        clock.advance_s(0.1)
    with profiler.window("client") as clean:
        clock.advance_s(0.2)
    rows = [row_from_window(w.result, {"run_id": "r"}) for w in (spoiled, clean)]

    domain = meter.domains()[labels.index(rail)]
    assert (rows[0][f"{domain.column}_j"], rows[0][f"{domain.column}_method"]) == ("", "invalid")
    assert "negative" in spoiled.result.invalid[domain.name] and set(spoiled.result.invalid) == {domain.name}
    assert (rows[0]["energy_j"] == "") is domain.in_total  # a nested rail leaves the total as it is
    assert rows[0]["energy_method"] == ("invalid" if domain.in_total else "integrated_power")
    assert not clean.result.invalid and rows[1][f"{domain.column}_method"] == "integrated_power"
    assert float(rows[1][f"{domain.column}_j"]) > 0


def test_a_bad_sample_at_a_windows_edge_invalidates_both_windows_it_touches(tmp_path):
    labels = build_jetson(tmp_path, "orin_nano")
    set_rails(tmp_path, "orin_nano", _steady("orin_nano", labels))
    clock = FakeClock()
    meter = jetson.JetsonMeter(tmp_path, clock_ns=clock, start_thread=False)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))

    with profiler.window("client") as first:  # its last reading samples the negative current
        clock.advance_s(0.1)
        set_rails(tmp_path, "orin_nano", {"VDD_IN": (5000, -1)})
    with profiler.window("client") as second:  # its trapezoid from that sample is left out too
        clock.advance_s(0.1)
        set_rails(tmp_path, "orin_nano", _steady("orin_nano", labels))
    with profiler.window("client") as third:
        clock.advance_s(0.1)

    assert [set(w.result.invalid) for w in (first, second, third)] == [{"board_total"}, {"board_total"}, set()]
    assert third.result.span.energy_j["board_total"] == pytest.approx(0.2)  # 2 W for 0.1 s


# --- rail labels that cannot be read: skipped with the reason, never a traceback -------------------------------


@pytest.mark.parametrize("how", BAD_LABELS)
@pytest.mark.parametrize(
    ("board", "spoiled", "status", "domains"),
    [("orin_nano", ["in2_label"], "found", ["board_total", "board_vdd_soc"]),
     ("orin_nano", ["in1_label"], "found", ["board_vdd_cpu_gpu_cv", "board_vdd_soc"]),
     ("xavier_nx", ["rail_name_0", "rail_name_1", "rail_name_2"], "not found", [])],
    ids=["one-rail", "the-input-rail", "every-rail"],
)
def test_a_rail_whose_label_cannot_be_read_is_skipped_with_the_reason(tmp_path, how, board, spoiled, status, domains):
    build_jetson(tmp_path, board)
    for name in spoiled:
        spoil_label(rail_dir(tmp_path, board) / name, how)

    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as found:
        names = [m.name for m in found.meters]
    text = render_doctor(rows)

    row = {r["meter"]: r for r in rows}["jetson"]
    assert row["status"] == status and [d.split()[0] for d in row["domains"]] == domains
    assert [s.split(" left out: ")[0] for s in row["skipped"]] == [f"rail {name}" for name in spoiled]
    assert all(str(rail_dir(tmp_path, board)) in s for s in row["skipped"])
    assert all(f"skipped:       rail {name} left out" in text for name in spoiled)
    assert names == (["jetson"] if status == "found" else ["cpu_estimate"])
    if status == "found" and "board_total" not in domains:  # the total is partial, and not said to be absent
        assert "no total input rail among the readable rails (see skipped)" in row["notes"] and "partial" in row["notes"]


# --- readings the monitor cannot produce, and the monitor's own update period ----------------------------------


@pytest.mark.parametrize(
    ("bad", "why"),
    [((5000, 32761), "curr1_input reads 32761 mA, above the 32760 mA its shunt lets the monitor read"),
     ((32768, 100), "in1_input reads 32768 mV, above the monitor's 32760 mV full scale")],
    ids=["current-over-the-shunts-full-scale", "voltage-over-the-bus-full-scale"],
)
def test_a_reading_above_the_monitors_full_scale_makes_the_windows_rail_invalid(tmp_path, bad, why):
    # Prepare: an Orin Nano's rails through 5 mOhm shunts: 163.8 mV / 5 mOhm = 32.76 A full scale, 32.76 V bus
    labels = build_jetson(tmp_path, "orin_nano", shunt_uohm=5000)
    set_rails(tmp_path, "orin_nano", _steady("orin_nano", labels))
    clock = FakeClock()
    meter = jetson.JetsonMeter(tmp_path, hz=10, clock_ns=clock, start_thread=False)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))
    # Execute: one window sees the bad sample between good ones; the next sees readings at the full scale itself
    with profiler.window("client") as spoiled:
        clock.advance_s(0.1)
        set_rails(tmp_path, "orin_nano", {"VDD_IN": bad})
        meter.sampler.sample()
        clock.advance_s(0.1)
        set_rails(tmp_path, "orin_nano", {"VDD_IN": (32760, 32760)})
        meter.sampler.sample()
    with profiler.window("client") as at_full_scale:
        clock.advance_s(0.1)
    # Assert: the bad sample is never integrated; the full scale is a reading like any other (1073.2 W for 0.1 s)
    assert set(spoiled.result.invalid) == {"board_total"} and why in spoiled.result.invalid["board_total"]
    assert not at_full_scale.result.invalid
    assert at_full_scale.result.span.energy_j["board_total"] == pytest.approx(32.76 * 32.76 * 0.1, rel=1e-12)
    rails = {r["label"]: r for r in meter.describe()["rails"]}
    assert rails["VDD_IN"]["max_w"] == pytest.approx(32.76 * 32.76, abs=5e-4)  # described to the mW


def test_without_shunt_files_only_the_bus_voltage_is_bounded_and_an_iio_rail_says_it_has_no_bound(tmp_path):
    build_jetson(tmp_path / "hwmon", "orin_nano", shunt_uohm=None)
    build_jetson(tmp_path / "iio", "xavier_nx")
    hwmon = jetson.JetsonMeter(tmp_path / "hwmon", start_thread=False)
    iio = jetson.JetsonMeter(tmp_path / "iio", start_thread=False)
    try:
        set_rails(tmp_path / "hwmon", "orin_nano", {"VDD_IN": (5000, 10**6)})  # a current no bound is known for
        set_rails(tmp_path / "iio", "xavier_nx", {"VDD_IN": (10**7, 0)})  # 10 kW: the iio layout has no bound
        assert hwmon._open[0].read_uw() == 5000 * 10**6 and iio._open[0].read_uw() == 10**10
        set_rails(tmp_path / "hwmon", "orin_nano", {"VDD_IN": (40000, 1)})
        assert "full scale" in hwmon._open[0].read_uw().reason
        hwmon_rail, iio_rail = hwmon.describe()["rails"][0], iio.describe()["rails"][0]
    finally:
        hwmon.close()
        iio.close()
    assert hwmon_rail["max_w"] is None and "no readable shunt1_resistor" in hwmon_rail["max_from"]
    assert iio_rail["max_w"] is None and "does not expose its shunt resistors" in iio_rail["max_from"]


@pytest.mark.parametrize(("update_ms", "hz", "period_s"), [(140, 100, 0.14), (6, 100, 0.01), (None, 100, 0.01)],
                         ids=["monitor-slower-than-sampling", "sampling-slower", "no-update-interval-file"])
def test_the_update_period_is_the_monitors_conversion_where_it_is_longer_than_the_sampling(tmp_path, update_ms, hz,
                                                                                           period_s):
    build_jetson(tmp_path, "orin_nano", update_ms=update_ms)
    meter = jetson.JetsonMeter(tmp_path, hz=hz, start_thread=False)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))
    try:
        with profiler.window("client") as win:  # a real 50 ms window: shorter than a 140 ms conversion only
            import time

            time.sleep(0.05)
        text = meter.describe()["resolution"]
    finally:
        meter.close()
    assert meter.update_period_s == pytest.approx(period_s, rel=1e-12)
    assert win.result.short_window == (period_s > 0.05)
    assert ("converts every 140 ms (update_interval)" in text) == (update_ms == 140)
