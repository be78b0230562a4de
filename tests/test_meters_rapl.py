"""RAPL through real powercap trees: layouts, nesting, exact joules, counter wrap, permission denied,
implausible steps (a counter that jumps, a zone without a range) and zone names that cannot be read."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest

from edgeprof.config import EnergySettings, RunConfig
from edgeprof.errors import MeterError
from edgeprof.meters import discover, rapl
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.meters.idle import measure_idle
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report import read_report
from edgeprof.report.schema import row_from_window
from edgeprof.session.run import base_row, open_run
from fixtures_sysfs import (BAD_LABELS, MAX_RANGE_UJ, FakeClock, build_rapl, fake_pynvml, rapl_zone, set_energy,
                            spoil_label)

NO_GPU = fake_pynvml([], init_error=9)

# layout -> {domain name: (column, in_total)}; core/uncore never reported
EXPECTED = {
    "one_socket": {"cpu_package_0": ("cpu_package", True)},
    "two_sockets": {"cpu_package_0": ("cpu_package", True), "cpu_package_1": ("cpu_package", True)},
    "dram": {"cpu_package_0": ("cpu_package", True), "dram_0": ("dram", True),
             "cpu_package_1": ("cpu_package", True), "dram_1": ("dram", True)},
    "psys": {"cpu_package_0": ("cpu_package", False), "dram_0": ("dram", False), "psys": ("psys", True)},
    "mmio_duplicate": {"cpu_package_0": ("cpu_package", True)},
}


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_domains_follow_the_nesting(tmp_path, layout):
    build_rapl(tmp_path, layout)

    with rapl.RaplMeter(tmp_path) as meter:
        got = {d.name: (d.column, d.in_total) for d in meter.domains()}

    assert got == EXPECTED[layout]
    assert all(d.method == "counter" for d in meter.domains())
    assert rapl.probe(tmp_path).available


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_window_and_report_totals_never_sum_nested_domains(tmp_path, layout):
    """The production path: a profiler window over the RAPL meter, then the window's report row."""
    zones = build_rapl(tmp_path, layout, energy_uj=1000)
    meter = rapl.RaplMeter(tmp_path)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))  # no clear_refs: lifetime peak

    with profiler.window("client") as win:
        for i, zone in enumerate(zones):  # every zone advances by a different amount: 1.5 J, 2.5 J, ...
            set_energy(tmp_path, zone, 1000 + 1_500_000 + 1_000_000 * i)
    row = row_from_window(win.result, {"run_id": "r"})

    by_domain = {z.domain.name: Fraction(1_500_000 + 1_000_000 * zones.index(z.path.name), 10**6)
                 for z in meter._zones}
    expected_total = sum(v for k, v in by_domain.items() if EXPECTED[layout][k][1])
    assert dict(win.result.span.energy_j) == {k: float(v) for k, v in by_domain.items()}
    assert win.result.energy_total_j == float(expected_total)
    assert float(row["energy_j"]) == float(expected_total)  # every total here has few digits: _fmt is exact
    assert float(row["cpu_package_j"]) == float(sum(v for k, v in by_domain.items() if k.startswith("cpu_package")))
    if layout == "psys":  # package and dram are inside psys: the total is psys alone
        assert win.result.energy_total_j == win.result.span.energy_j["psys"] < sum(by_domain.values())


def test_mmio_only_package_is_used_when_msr_zone_is_absent(tmp_path):
    rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 10)

    with rapl.RaplMeter(tmp_path) as meter:
        assert [d.name for d in meter.domains()] == ["cpu_package_0"]


def test_counter_wrap_between_reads_gives_exact_joules(tmp_path):
    # max_energy_range_uj is the largest value the counter shows: values 0..1_000_000, period 1_000_001
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=999_000, max_range_uj=1_000_000)
    meter = rapl.RaplMeter(tmp_path)

    set_energy(tmp_path, "intel-rapl:0", 500)  # 1000 up to max, 1 to wrap to 0, 500 more
    first = meter.read_j()["cpu_package_0"]
    set_energy(tmp_path, "intel-rapl:0", 300_000)
    second = meter.read_j()["cpu_package_0"]

    assert first == 1501 / 10**6
    assert second == (1501 + 299_500) / 10**6


def test_counter_that_does_not_move_gives_zero_not_a_wrap(tmp_path):
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=42, max_range_uj=1_000_000)
    meter = rapl.RaplMeter(tmp_path)

    assert meter.read_j() == {"cpu_package_0": 0.0}


def test_no_powercap_tree_is_reported_with_a_fix(tmp_path):
    result = rapl.probe(tmp_path)

    assert not result.available
    assert "no intel-rapl" in result.reason and "modprobe intel_rapl_msr" in result.fix


def test_counter_that_becomes_unreadable_raises_meter_error(tmp_path):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 10)
    meter = rapl.RaplMeter(tmp_path)
    (zone / "energy_uj").write_text("gone\n")  # the open counter no longer reads as a number

    with pytest.raises(MeterError, match="cannot read RAPL counter .*energy_uj"):
        meter.read_j()


def test_a_counter_is_opened_once_and_each_read_sees_the_file_now(tmp_path):
    """The meter keeps energy_uj open (one pread a reading); rewritten values are read; close gives it back."""
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 10)

    def counters_open() -> int:  # this process's descriptors of energy_uj (other threads' files may come and go)
        return sum(os.path.realpath(fd) == str((zone / "energy_uj").resolve())
                   for fd in map(str, Path("/proc/self/fd").iterdir()) if os.path.exists(fd))

    meter = rapl.RaplMeter(tmp_path)
    seen, during = [], []
    for uj in (1_000_010, 3_000_010, 3_500_010):
        (zone / "energy_uj").write_text(f"{uj}\n")
        seen.append(sum(meter.read_j().values()))
        during.append(counters_open())

    assert seen == [1.0, 3.0, 3.5]
    assert during == [1, 1, 1]  # opened once, no file opened per reading
    meter.close()
    meter.close()  # idempotent
    assert counters_open() == 0


def _probe_as_nobody(root: str) -> dict:
    """Run ``rapl.probe`` in a forked child that dropped root for ``nobody``; return its result."""
    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges for real, then run the production probe
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            result = rapl.probe(root)
            payload = {"available": result.available, "reason": result.reason, "fix": result.fix}
        except BaseException as err:  # report, never hang the parent
            payload = {"error": repr(err)}
        os.write(write_fd, json.dumps(payload).encode())
        os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def test_root_only_energy_uj_is_reported_with_the_fix():
    """Permission denied for real: the counter is 0400 root (as since Linux 5.10) and the probe runs as a
    non-root user (a forked child that setuid()s to ``nobody`` when the tests run as root, which can read
    any file), so the production ``open`` really gets EACCES."""
    base = tempfile.mkdtemp(prefix="edgeprof-rapl-")
    try:
        os.chmod(base, 0o755)
        zone = rapl_zone(Path(base), "intel-rapl:0", "package-0", 123)
        for p in [Path(base), *Path(base).rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o444)
        os.chmod(zone / "energy_uj", 0o400 if os.geteuid() == 0 else 0o000)

        if os.geteuid() == 0:
            try:
                pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("no 'nobody' user to drop root privileges to")
            result = _probe_as_nobody(base)
        else:
            probe = rapl.probe(base)
            result = {"available": probe.available, "reason": probe.reason, "fix": probe.fix}
    finally:
        shutil.rmtree(base)

    assert result.get("error") is None, result
    assert result["available"] is False
    assert "not readable by this user" in result["reason"]
    assert "chmod" in result["fix"] and 'SUBSYSTEM=="powercap"' in result["fix"]


# --- implausible steps: never written as a measurement ----------------------------------------------------------


def test_a_counter_that_jumps_back_is_an_invalid_window_not_the_whole_range(tmp_path):
    """Read as a wrap, a jump back by 1 mJ would be 262 kJ in one window; it is an invalid window instead,
    and the next window counts from the new value."""
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=5_000_000)
    clock = FakeClock()
    meters = MeterSet([rapl.RaplMeter(tmp_path, clock_ns=clock)])
    profiler = Profiler(meters, rss=PeakRss(tmp_path / "no-proc"))

    with profiler.window("client") as jumped:
        clock.advance_s(0.5)
        set_energy(tmp_path, "intel-rapl:0", 4_999_000)
    with profiler.window("client") as after:
        clock.advance_s(0.5)
        set_energy(tmp_path, "intel-rapl:0", 6_999_000)  # 2 J in 0.5 s
    rows = [row_from_window(w.result, {"run_id": "r"}, idle_power_w=1.0, carbon_g_per_kwh=100.0)
            for w in (jumped, after)]

    assert {k: rows[0][k] for k in ("cpu_package_j", "cpu_package_method", "energy_j", "energy_method",
                                    "energy_net_j", "carbon_g")} == {
        "cpu_package_j": "", "cpu_package_method": "invalid", "energy_j": "", "energy_method": "invalid",
        "energy_net_j": "", "carbon_g": ""}
    assert "fell from 5000000 to 4999000 uJ" in jumped.result.invalid["cpu_package_0"]
    assert "not a plausible wrap" in jumped.result.invalid["cpu_package_0"]
    assert rows[1]["energy_j"] == "2" and rows[1]["cpu_package_method"] == "counter" and not after.result.invalid
    [seen] = meters.describe()["invalid"]["cpu_package_0"]
    assert seen["kind"] == "counter jump" and seen["readings"] == 1 and "4999000" in seen["first"]


RANGE_J = (MAX_RANGE_UJ + 1) / 10**6  # energy a full period of the counter stands for


@pytest.mark.parametrize(
    ("last", "now", "limit_w", "elapsed_s", "joules"),
    [
        (MAX_RANGE_UJ - 1_000_000, 500_000, None, 0.001, 1.500001),  # a real wrap: 1.5 J, plausible at once
        (5_000_000, 4_999_000, None, 200.0, None),  # 262 kJ in 201 s is 1.3 kW, above the 1000 W default
        (5_000_000, 4_999_000, None, 300.0, RANGE_J - 0.001),  # 871 W over 301 s: a plausible wrap
        (5_000_000, 4_999_000, 100, 300.0, None),  # the zone's limit 100 W -> bound 200 W
        (5_000_000, 4_999_000, 100, 1400.0, RANGE_J - 0.001),  # 187 W over 1401 s
        (0, 10**9, None, 0.0, 1000.0),  # 1 kJ in (0 + 1) s: at the bound
        (0, 10**9 + 1, None, 0.0, None),  # a counter that leaps forward faster than any package draws
    ],
    ids=["wrap", "jump-back", "slow-wrap", "jump-back-under-limit", "slow-wrap-under-limit", "rise-at-bound",
         "leap"],
)
def test_a_step_is_counted_only_when_its_power_is_plausible(tmp_path, last, now, limit_w, elapsed_s, joules):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=last)
    if limit_w is not None:  # the long-term limit; the short-term one unknown (0), as many zones show it
        (zone / "constraint_0_max_power_uw").write_text(f"{limit_w * 10**6}\n")
        (zone / "constraint_1_max_power_uw").write_text("0\n")
    clock = FakeClock()
    meter = rapl.RaplMeter(tmp_path, clock_ns=clock)

    clock.advance_s(elapsed_s)
    set_energy(tmp_path, "intel-rapl:0", now)
    reading, flags = meter.read_j(), meter.take_invalid()

    assert reading == {"cpu_package_0": 0.0 if joules is None else joules}
    assert set(flags) == (set() if joules is not None else {"cpu_package_0"})
    assert meter.describe()["zones"][0]["max_power_w"] == (1000.0 if limit_w is None else 2.0 * limit_w)


@pytest.mark.parametrize("bad", [MAX_RANGE_UJ + 1, -5], ids=["above-range", "negative"])
def test_a_counter_outside_its_range_is_invalid_and_so_is_the_step_after_it(tmp_path, bad):
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=1000)
    meter = rapl.RaplMeter(tmp_path, clock_ns=FakeClock())

    steps = []
    for value in (bad, 3000, 5000):
        set_energy(tmp_path, "intel-rapl:0", value)
        steps.append((meter.read_j()["cpu_package_0"], set(meter.take_invalid())))

    assert steps == [(0.0, {"cpu_package_0"}), (0.0, {"cpu_package_0"}), (0.002, set())]


@pytest.mark.parametrize("range_uj", [0, -1])
@pytest.mark.parametrize(("layout", "zone", "status", "domains"),
                         [("two_sockets", "intel-rapl:1", "found", ["cpu_package_0"]),
                          ("one_socket", "intel-rapl:0", "not found", [])],
                         ids=["one-of-two", "the-only-one"])
def test_a_zone_without_a_counter_range_is_not_opened_and_doctor_says_why(tmp_path, range_uj, layout, zone,
                                                                         status, domains):
    build_rapl(tmp_path, layout)
    rapl_zone(tmp_path, zone, f"package-{zone[-1]}", 1000, max_range_uj=range_uj)

    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as found:
        set_energy(tmp_path, zone, 500)
        reading = found.read_j()
        described = found.describe()

    row = {r["meter"]: r for r in rows}["rapl"]
    why = f"zone {zone} (package-{zone[-1]}) left out: max_energy_range_uj is {range_uj}"
    assert row["status"] == status and row["domains"] == domains
    assert len(row["skipped"]) == 1 and row["skipped"][0].startswith(why)
    assert f"skipped:       {why}" in render_doctor(rows)
    assert [k for k in reading if k.startswith("cpu_package")] == domains  # opened without it: no ZeroDivisionError
    if status == "found":
        rapl_info = described["meters"][0]
        assert rapl_info["skipped"][0].startswith(why) and "partial" in rapl_info["total"]
    else:
        assert {"meter": "rapl"}.items() <= described["not_found"][0].items()
        assert described["not_found"][0]["skipped"][0].startswith(why)


# --- zone names that cannot be read: skipped with the reason, never a traceback --------------------------------

NEEDLES = {"not_utf8": "is not UTF-8", "directory": "is a directory", "dangling_link": "is missing or a dangling link"}


@pytest.mark.parametrize("how", BAD_LABELS)
@pytest.mark.parametrize(("layout", "zone", "status", "domains"),
                         [("two_sockets", "intel-rapl:1", "found", ["cpu_package_0"]),
                          ("one_socket", "intel-rapl:0", "not found", [])],
                         ids=["one-of-two", "the-only-one"])
def test_a_zone_whose_name_cannot_be_read_is_skipped_with_the_reason(tmp_path, how, layout, zone, status, domains):
    build_rapl(tmp_path, layout)
    spoil_label(tmp_path / "class" / "powercap" / zone / "name", how)

    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    with discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU) as found:
        names = [m.name for m in found.meters]

    row = {r["meter"]: r for r in rows}["rapl"]
    assert row["status"] == status and row["domains"] == domains
    [skipped] = row["skipped"]
    assert skipped.startswith(f"zone {zone} left out: {tmp_path / 'class/powercap' / zone / 'name'} {NEEDLES[how]}")
    assert f"skipped:       zone {zone} left out" in render_doctor(rows)
    assert names == (["rapl"] if status == "found" else ["cpu_estimate"])


def test_with_psys_skipped_the_packages_are_the_total(tmp_path):
    build_rapl(tmp_path, "psys")
    spoil_label(tmp_path / "class/powercap/intel-rapl:1/name", "not_utf8")

    with rapl.RaplMeter(tmp_path) as meter:
        got = {d.name: d.in_total for d in meter.domains()}

    assert got == {"cpu_package_0": True, "dram_0": True}


# --- where the reasons go: the idle baseline refuses, the final sidecar records --------------------------------


def test_an_implausible_step_during_the_idle_baseline_is_a_meter_error(tmp_path):
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=5_000_000)
    meters = MeterSet([rapl.RaplMeter(tmp_path)])

    with pytest.raises(MeterError, match="idle baseline not measured: cpu_package_0 gave an implausible reading"):
        measure_idle(meters, 1.0, sleep=lambda s: set_energy(tmp_path, "intel-rapl:0", 1_000))


def test_the_reason_of_an_invalid_window_reaches_the_runs_final_sidecar(tmp_path, monkeypatch):
    """The production session: real meters over a real tree, a counter that jumps back inside a window."""
    build_rapl(tmp_path / "sys", "one_socket", energy_uj=5_000_000)
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path / "sys"))
    cfg = RunConfig(out=tmp_path / "out", run_name="jump", progress=False, energy=EnergySettings(carbon_intensity=100.0))

    with open_run(cfg, run_id="jump", phases=()) as session:
        for round_index, energy_uj in enumerate((4_000_000, 6_000_000), start=1):  # a jump back, then 2 J
            with session.ctx.profiler.window("server") as win:
                set_energy(tmp_path / "sys", "intel-rapl:0", energy_uj)
            session.ctx.record(win, base_row(session.ctx, cfg, round_index, "server"))
    report = read_report(session.csv_path)

    first, second = report.rows
    assert (first["energy_j"], first["energy_method"], first["cpu_package_method"]) == ("", "invalid", "invalid")
    assert (second["energy_j"], second["energy_method"]) == ("2", "counter")
    [seen] = report.sidecar["meters"]["invalid"]["cpu_package_0"]
    assert seen["kind"] == "counter jump" and seen["readings"] == 1 and "fell from 5000000 to 4000000" in seen["first"]


def test_the_overhead_benchmark_prints_a_row_per_meter_set_and_the_read_ratio():
    """scripts/bench_overhead.py runs the production RAPL and NVML meters under the profiler (tiny sizes here)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_overhead.py"
    out = subprocess.run([sys.executable, str(script), "--windows", "5", "--zones", "1,3", "--gpus", "0,2",
                          "--trace-seconds", "0.2"], capture_output=True, text=True, timeout=120, check=True).stdout

    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["3"])]
    # the windows' table, then the power trace's: a row per meter set in each
    assert [(r[0], r[1]) for r in rows] == [("1", "0"), ("1", "2"), ("3", "0"), ("3", "2")] * 2
    assert all(float(v.rstrip("%")) > 0 for r in rows for v in r[2:])
    assert "power trace at 50 Hz" in out and "kept open + pread" in out and "ratio" in out


# --- a laptop's limits, a zone without a range, a psys that measures nothing, psys beside a GPU, the energy unit ---


def _laptop_limits(zone: Path) -> None:
    """A 15 W part as the kernel shows it: PL1's max power is the TDP, PL2's max power unknown (0), PL2's limit 44 W."""
    for name, value in {"constraint_0_max_power_uw": 15_000_000, "constraint_0_power_limit_uw": 15_000_000,
                        "constraint_1_max_power_uw": 0, "constraint_1_power_limit_uw": 44_000_000}.items():
        (zone / name).write_text(f"{value}\n")


@pytest.mark.parametrize(("watts", "counted"), [(44, True), (130, False)], ids=["at-PL2", "above-twice-PL2"])
def test_a_turbo_burst_at_the_short_term_limit_is_counted(tmp_path, watts, counted):
    # Prepare: a laptop package held at its 44 W short-term limit for 3 s (three times its TDP)
    _laptop_limits(rapl_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=1000))
    clock = FakeClock()
    meter = rapl.RaplMeter(tmp_path, clock_ns=clock)
    # Execute
    clock.advance_s(3.0)
    set_energy(tmp_path, "intel-rapl:0", 1000 + watts * 3_000_000)
    reading, flags = meter.read_j(), meter.take_invalid()
    # Assert: the bound is twice PL2's limit (88 W over elapsed + 1 s), not twice the TDP
    assert reading == {"cpu_package_0": watts * 3.0 if counted else 0.0}
    assert set(flags) == (set() if counted else {"cpu_package_0"})
    assert meter.describe()["zones"][0]["max_power_w"] == 88.0


def test_a_zone_without_a_range_file_is_left_out_and_the_others_measure(tmp_path):
    # Prepare: package-0 with a dram sub-zone whose max_energy_range_uj is missing
    build_rapl(tmp_path, "dram")
    (tmp_path / "class/powercap/intel-rapl:0:1/max_energy_range_uj").unlink()
    # Execute
    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU)
    with rapl.RaplMeter(tmp_path) as meter:
        names = [d.name for d in meter.domains()]
    # Assert
    row = {r["meter"]: r for r in rows}["rapl"]
    assert row["status"] == "found" and names == ["cpu_package_0", "cpu_package_1", "dram_1"]
    assert len(row["skipped"]) == 1 and row["skipped"][0].startswith("zone intel-rapl:0:1 (dram) left out:")
    assert "max_energy_range_uj" in row["skipped"][0]


def test_a_psys_that_reads_zero_since_boot_is_left_out_and_the_packages_are_the_total(tmp_path):
    # Prepare: a desktop board's psys that was never wired (0 while the package has counted since boot)
    build_rapl(tmp_path, "psys", energy_uj=7_000_000)
    set_energy(tmp_path, "intel-rapl:1", 0)
    meter = rapl.RaplMeter(tmp_path)
    # Execute
    set_energy(tmp_path, "intel-rapl:0", 9_000_000)
    set_energy(tmp_path, "intel-rapl:0:2", 7_500_000)
    reading = meter.read_j()
    described = meter.describe()
    meter.close()
    # Assert
    assert {d.name: d.in_total for d in meter.domains()} == {"cpu_package_0": True, "dram_0": True}
    assert reading == {"cpu_package_0": 2.0, "dram_0": 0.5}
    assert described["skipped"][0].startswith("zone intel-rapl:1 (psys) left out: its counter reads 0")
    assert described["total"].startswith("sum of packages and DRAM")


def test_a_psys_that_falls_behind_the_packages_inside_it_is_invalid_and_one_that_lags_recovers(tmp_path):
    # Prepare: psys and the package count together; then psys lags by one reading; then it stops
    build_rapl(tmp_path, "psys", energy_uj=1000)
    meter = rapl.RaplMeter(tmp_path, clock_ns=FakeClock())
    steps = []
    # Execute: (package uJ, psys uJ) after each reading
    for package, psys in ((3_001_000, 5_001_000), (6_001_000, 5_001_000), (9_001_000, 15_001_000),
                          (19_001_000, 25_001_000), (29_001_000, 25_001_000), (39_001_000, 25_001_000)):
        set_energy(tmp_path, "intel-rapl:0", package)
        set_energy(tmp_path, "intel-rapl:1", psys)
        reading, flags = meter.read_j(), meter.take_invalid()
        steps.append((reading["psys"], {k: v.kind for k, v in flags.items()}))
    # Assert: 5 J against 6 J falls short by more than a tenth of 6 J: flagged; caught up: counted again, the 10 J
    # of its next step included; stopped: flagged at every reading
    assert steps == [(5.0, {}), (5.0, {"psys": "implausible energy"}), (15.0, {}), (25.0, {}),
                     (25.0, {"psys": "implausible energy"}), (25.0, {"psys": "implausible energy"})]


def test_a_gpu_beside_psys_is_inside_the_platform_and_not_added_to_it(tmp_path):
    # Prepare: a laptop's psys and package, and its discrete GPU through NVML
    build_rapl(tmp_path, "psys", energy_uj=1000)
    gpus = [{"energy_mj": 0, "power_mw": 60_000, "limit_mw": 80_000, "name": "Fake Laptop GPU"}]
    with discover(sysfs_root=str(tmp_path), nvml_module=fake_pynvml(gpus)) as found:
        seconds = iter(range(100, 200))  # the profiler's clock: a second a read, so the window's watts are plausible
        profiler = Profiler(found, rss=PeakRss(tmp_path / "no-proc"), clock=lambda: float(next(seconds)))
        # Execute: the platform draws 95 J, the GPU 60 J of it, the package 25 J
        with profiler.window("client") as win:
            set_energy(tmp_path, "intel-rapl:1", 1000 + 95_000_000)
            set_energy(tmp_path, "intel-rapl:0", 1000 + 25_000_000)
            gpus[0]["energy_mj"] = 60_000
        described = found.describe()
    rows = doctor_report(sysfs_root=str(tmp_path), nvml_module=fake_pynvml(gpus))
    # Assert: the total is psys alone; the GPU's joules are reported beside it, said to be inside it
    assert win.result.span.energy_j["gpu_0"] == 60.0 and win.result.energy_total_j == 95.0
    nvml = {m["name"]: m for m in described["meters"]}["nvml"]
    assert nvml["domains"][0]["in_total"] is False and nvml["domains"][0]["inside"] == "psys"
    assert {r["meter"]: r for r in rows}["nvml"]["domains"] == ["gpu_0 (inside psys, not in total)"]
    from edgeprof.report.gpu_energy import rest_columns

    assert rest_columns({"meters": described}) == ()  # no column holds energy_j's rest beside the GPU: psys holds it


def test_each_zones_energy_unit_is_described_from_its_range(tmp_path):
    # Prepare: a Sapphire Rapids server's psys counts in joules (the kernel's range is (2^32 - 1) x 1e6 uJ)
    build_rapl(tmp_path, "psys")
    rapl_zone(tmp_path, "intel-rapl:1", "psys", 1000, max_range_uj=(2**32 - 1) * 10**6)
    # Execute
    with rapl.RaplMeter(tmp_path) as meter:
        resolution = meter.describe()["resolution"]
    # Assert: the package's 61 uJ (the fixtures' real range: 262,143,328,850 uJ) and psys's 1 J
    assert "package-0 61.03 uJ" in resolution and "psys 1e+06 uJ" in resolution


def test_a_window_in_which_a_one_joule_psys_counts_less_than_a_step_is_short(tmp_path):
    # Prepare: a Sapphire Rapids server's psys, whose counter moves in steps of 1 J, is the total; its package (61 uJ
    # steps) is inside it
    import time

    build_rapl(tmp_path, "psys", energy_uj=1000)
    rapl_zone(tmp_path, "intel-rapl:1", "psys", 10**6, max_range_uj=(2**32 - 1) * 10**6)
    meter = rapl.RaplMeter(tmp_path)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))
    package, psys = 1000, 10**6

    def draw(package_j: float, psys_steps: int) -> None:
        nonlocal package, psys
        package, psys = package + round(package_j * 1e6), psys + psys_steps * 10**6
        set_energy(tmp_path, "intel-rapl:0", package)
        set_energy(tmp_path, "intel-rapl:1", psys)
        time.sleep(0.06)  # far longer than RAPL's 1 ms update period

    # Execute: 60 ms in which psys has not stepped (the package drew 0.3 J); then a phase of no step and one of
    # three; then 60 ms of three steps
    with profiler.window("client") as unresolved:
        draw(0.3, 0)
    with profiler.window("client") as phased:
        with phased.phase("head"):
            draw(0.3, 0)
        with phased.phase("joint"):
            draw(1.0, 3)
    with profiler.window("client") as resolved:
        draw(1.0, 3)
    meter.close()
    # Assert: the first window and the first phase counted less than psys's step: not resolved, however long
    assert meter.energy_quantum_j == 1.0 and meter.describe()["energy_quantum_j"] == 1.0
    assert unresolved.result.wall_s > 0.05 and unresolved.result.short_window
    assert unresolved.result.span.energy_j["psys"] == 0.0 and not unresolved.result.span.invalid
    assert not phased.result.short_window and phased.result.short_phases == ("head",)
    assert not resolved.result.short_window and resolved.result.span.energy_j["psys"] == 3.0


def test_a_package_total_in_61_microjoule_steps_flags_no_window_by_its_joules(tmp_path):
    import time

    build_rapl(tmp_path, "one_socket", energy_uj=1000)
    meter = rapl.RaplMeter(tmp_path)
    profiler = Profiler(MeterSet([meter]), rss=PeakRss(tmp_path / "no-proc"))
    with profiler.window("client") as win:  # 2 ms at 0.1 W: 200 uJ, three of the counter's steps
        set_energy(tmp_path, "intel-rapl:0", 1200)
        time.sleep(0.002)
    meter.close()
    assert meter.energy_quantum_j == pytest.approx(61.03e-6, rel=1e-3) and not win.result.short_window
