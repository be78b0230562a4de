"""Apple silicon through a fake ``zeus_apple_silicon`` module with the library's classes: IOReport's cumulative
counters per part of the SoC (in the total, beside it, not reported), a reset, a leap and a channel that goes away,
the probe on a machine that is no Mac, the library missing or without its native extension, IOReport refusing, a chip
the library does not know, and discovery standing the CPU estimate down with the SoC's columns in a window's row."""

from __future__ import annotations

import sys

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters import apple, discover
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import FakeClock, fake_pynvml, fake_zeus_apple_silicon

NO_GPU = fake_pynvml([], init_error=9)
MAC = ("darwin", "arm64")
#: an M3 Pro's channels as the library reports them (every AppleEnergyMetrics field present)
M3_PRO = {"cpu_total_mj": 50_000, "efficiency_cores_mj": [10, 11, 12, 13, 14, 15], "performance_cores_mj": [20] * 6,
          "efficiency_cluster_mj": [700], "performance_cluster_mj": [900], "efficiency_core_manager_mj": 3,
          "performance_core_manager_mj": 4, "dram_mj": 8_000, "gpu_mj": 12_000, "gpu_sram_mj": 500, "ane_mj": 100}


def test_each_counter_is_a_domain_with_exact_joules_and_nested_ones_stay_out_of_the_total():
    counters = dict(M3_PRO)
    meter = apple.AppleSiliconMeter(fake_zeus_apple_silicon(counters), clock_ns=FakeClock())
    counters.update(cpu_total_mj=50_000 + 1_234, gpu_mj=12_000 + 56, ane_mj=100 + 7, dram_mj=8_000 + 89,
                    gpu_sram_mj=500 + 3, efficiency_cluster_mj=[9_999])

    reading = meter.read_j()
    info = meter.describe()
    meter.close()

    assert reading == {"soc_cpu": 1.234, "soc_gpu": 0.056, "soc_ane": 0.007, "soc_dram": 0.089, "soc_gpu_sram": 0.003}
    assert [(d.name, d.column, d.method, d.in_total) for d in meter.domains()] == [
        ("soc_cpu", "soc_cpu", "counter", True), ("soc_gpu", "soc_gpu", "counter", True),
        ("soc_ane", "soc_ane", "counter", True), ("soc_dram", "soc_dram", "counter", True),
        ("soc_gpu_sram", "soc_gpu_sram", "counter", False)]
    assert info["total"].startswith("sum of soc_cpu, soc_gpu, soc_ane, soc_dram;")
    assert meter.update_period_s == apple.UPDATE_PERIOD_S == 0.01


def test_a_chip_without_a_channel_reports_the_others():
    counters = {"cpu_total_mj": 1_000, "gpu_mj": 2_000, "ane_mj": 3}  # no DRAM, no GPU SRAM (as on an M1)
    with apple.AppleSiliconMeter(fake_zeus_apple_silicon(counters)) as meter:
        names = [d.name for d in meter.domains()]
    assert names == ["soc_cpu", "soc_gpu", "soc_ane"]


@pytest.mark.parametrize(("change", "kind"), [({"gpu_mj": 11_000}, "counter reset"),
                                              ({"gpu_mj": 12_000 + 5_000_000}, "counter jump"),
                                              ({"gpu_mj": None}, "counter missing")],
                         ids=["reset", "jump", "missing"])
def test_an_implausible_step_adds_nothing_and_is_flagged(change, kind):
    counters = dict(M3_PRO)
    clock = FakeClock()
    meter = apple.AppleSiliconMeter(fake_zeus_apple_silicon(counters), clock_ns=clock)
    clock.advance_s(1.0)  # the bound: 500 W x (1 s + 1 s) = 1000 J
    counters.update(change, cpu_total_mj=50_500)

    reading = meter.read_j()
    flags = meter.take_invalid()
    meter.close()

    assert reading["soc_gpu"] == 0.0 and flags["soc_gpu"].kind == kind
    assert reading["soc_cpu"] == 0.5 and "soc_cpu" not in flags


@pytest.mark.parametrize(("system", "reason", "fix"), [
    (("linux", "x86_64"), "not an Apple silicon Mac (linux, x86_64)", apple.INSTALL_FIX),
    (("darwin", "x86_64"), "this Python runs as x86_64 on macOS (an Intel Mac, or Rosetta)", apple.ARM64_FIX),
], ids=["linux", "rosetta-or-intel-mac"])
def test_on_a_machine_that_is_no_apple_silicon_the_library_is_not_imported(monkeypatch, system, reason, fix):
    monkeypatch.delitem(sys.modules, "zeus_apple_silicon", raising=False)

    result = apple.probe(system=system)

    assert not result.available and result.reason.startswith(reason)
    assert result.fix == fix and "pip install 'edgeprof[apple]'" in result.fix
    assert "zeus_apple_silicon" not in sys.modules


def _package(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    """zeus_apple_silicon as installed on this machine: its files under a folder on sys.path."""
    (tmp_path / "zeus_apple_silicon").mkdir()
    for name, text in files.items():
        (tmp_path / "zeus_apple_silicon" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "zeus_apple_silicon", raising=False)


@pytest.mark.parametrize(("files", "reason", "fix"), [
    (None, "zeus-apple-silicon is not installed", apple.INSTALL_FIX),
    # the package's own __init__ without its compiled zeus_ext (built on another Python, or the build failed)
    ({"__init__.py": "from .zeus_ext import AppleEnergyMonitor, AppleEnergyMetrics\n"},
     "zeus-apple-silicon is installed but its native extension does not load (ModuleNotFoundError: No module named "
     "'zeus_apple_silicon.zeus_ext')", apple.NATIVE_FIX),
], ids=["not-installed", "no-native-extension"])
def test_on_a_mac_the_probe_tells_a_missing_library_from_a_broken_one(tmp_path, monkeypatch, files, reason, fix):
    if files is None:
        monkeypatch.setitem(sys.modules, "zeus_apple_silicon", None)  # import raises ModuleNotFoundError
    else:
        _package(tmp_path, monkeypatch, files)

    result = apple.probe(system=MAC)

    assert (result.available, result.reason, result.fix) == (False, reason, fix)


@pytest.mark.parametrize(("module", "reason", "fix"), [
    (fake_zeus_apple_silicon(M3_PRO, init_error="Failed to create IOReport subscription."),
     "IOReport refused the energy subscription (RuntimeError: Failed to create IOReport subscription.)",
     "check that this is an M-series Mac"),
    (fake_zeus_apple_silicon({}), "IOReport gives no energy channel zeus-apple-silicon knows",
     "pip install -U zeus-apple-silicon"),
], ids=["ioreport-refuses", "unknown-chip"])
def test_the_probe_says_why_the_counters_cannot_be_read(module, reason, fix):
    result = apple.probe(module)

    assert not result.available and result.reason.startswith(reason) and result.fix.startswith(fix)


def test_a_failing_read_is_a_one_line_meter_error_with_its_cause():
    module = fake_zeus_apple_silicon(dict(M3_PRO))
    meter = apple.AppleSiliconMeter(module)
    meter._monitor.get_cumulative_energy = lambda: (_ for _ in ()).throw(RuntimeError("Failed to convert\nCFString"))

    with pytest.raises(MeterError, match=r"IOReport energy reading failed \(RuntimeError: Failed to convert CFString"):
        meter.read_j()
    meter.close()


def test_discovery_stands_the_estimate_down_and_a_windows_row_has_the_socs_columns(tmp_path):
    counters = dict(M3_PRO)
    module = fake_zeus_apple_silicon(counters)
    meters = discover(sysfs_root=str(tmp_path), nvml_module=NO_GPU, apple_module=module)
    meters.read_cost_s["apple"] = 0.0  # read at the edges: the steps below fall wholly inside the phase
    with meters, Profiler(meters, rss=PeakRss(tmp_path / "no-proc")).window("client") as win:
        with win.phase("local_steps"):
            counters.update(cpu_total_mj=52_000, gpu_mj=12_300, ane_mj=100, dram_mj=8_400, gpu_sram_mj=600)
    row = row_from_window(win.result, {"run_id": "r", "kind": "client"})
    described = {p["meter"]: p["reason"] for p in meters.describe()["not_used"]}
    rows = {r["meter"]: r for r in doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_GPU, apple_module=module)}

    assert [m.name for m in meters.meters] == ["apple"]
    assert described == {"cpu_estimate": "not needed: CPU energy is measured by IOReport (Apple silicon)"}
    assert {c: float(row[f"{c}_j"]) for c in ("soc_cpu", "soc_gpu", "soc_ane", "soc_dram", "soc_gpu_sram")} == {
        "soc_cpu": 2.0, "soc_gpu": 0.3, "soc_ane": 0.0, "soc_dram": 0.4, "soc_gpu_sram": 0.1}
    assert float(row["energy_j"]) == pytest.approx(2.7) and row["energy_method"] == "counter"  # SRAM beside
    assert not row.get("cpu_estimate_j") and float(row["local_steps_j"]) == pytest.approx(2.7)
    assert rows["apple"]["domains"] == ["soc_cpu", "soc_gpu", "soc_ane", "soc_dram", "soc_gpu_sram (not in total)"]
    assert "apple         FOUND" in render_doctor(list(rows.values()))
