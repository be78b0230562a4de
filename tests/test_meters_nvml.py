"""NVML through a fake ``pynvml`` module: energy counter, integrated power, errors, shutdown, implausible
readings (a counter that resets or leaps, a negative power) and exceptions that are not ``NVMLError``."""

from __future__ import annotations

import sys
import types

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters import discover, nvml, nvml_gpus
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.doctor import doctor_report
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import LIMIT_CALLS, FakeClock, fake_pynvml


def test_energy_counter_gives_exact_joules():
    gpus = [{"energy_mj": 1_000_000, "power_mw": 50_000}, {"energy_mj": 5, "power_mw": 60_000}]
    mod = fake_pynvml(gpus)
    meter = nvml.NvmlMeter(mod)
    gpus[0]["energy_mj"] += 12_345
    gpus[1]["energy_mj"] += 7

    reading = meter.read_j()
    meter.close()

    assert reading == {"gpu_0": 12.345, "gpu_1": 0.007}
    assert [(d.name, d.column, d.method, d.in_total) for d in meter.domains()] == [
        ("gpu_0", "gpu", "counter", True), ("gpu_1", "gpu", "counter", True)]
    assert meter.sampler is None


def test_without_the_counter_power_samples_are_integrated_exactly():
    gpus = [{"energy_mj": None, "power_mw": 100_000}, {"energy_mj": 0, "power_mw": 1}]
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml(gpus), clock_ns=clock, start_thread=False)  # sample at t=0: 100 W
    clock.advance_s(0.5)
    gpus[0]["power_mw"] = 200_000
    meter.sampler.sample()  # t=0.5: 200 W
    clock.advance_s(0.25)
    gpus[0]["power_mw"] = 150_123
    gpus[1]["energy_mj"] = 2_500

    reading = meter.read_j()  # t=0.75: 150.123 W
    meter.close()

    # (100+200)/2*0.5 + (200+150.123)/2*0.25 = 75 + 43.765375
    assert reading == {"gpu_0": 118.765375, "gpu_1": 2.5}
    assert {d.name: d.method for d in meter.domains()} == {"gpu_0": "integrated_power", "gpu_1": "counter"}
    assert meter.describe()["sampling_hz"] == 10.0


def test_without_the_counter_the_instant_power_is_integrated_where_the_gpu_answers_it():
    """A GPU whose instant power field answers: its samples are that field (not nvmlDeviceGetPowerUsage's
    one-second average), integrated exactly, and the update period is the sampling period, not a second."""
    gpus = [{"energy_mj": None, "power_mw": 50_000, "instant_mw": 100_000}]
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml(gpus), hz=20.0, clock_ns=clock, start_thread=False)  # t=0: 100 W
    clock.advance_s(0.5)
    gpus[0]["instant_mw"] = 200_000
    meter.sampler.sample()  # t=0.5: 200 W instant, while the average still says 50 W

    reading = meter.read_j()  # t=0.5: 200 W
    info = meter.describe()
    meter.close()

    assert reading == {"gpu_0": 75.0}  # (100 + 200) / 2 * 0.5
    assert meter.update_period_s == 0.05 and info["gpus"][0]["power_reading"] == "NVML_FI_DEV_POWER_INSTANT"
    assert "instant power (NVML_FI_DEV_POWER_INSTANT) sampled at 20 Hz" in info["power"]


def test_without_the_counter_or_the_instant_field_the_average_is_integrated_and_windows_under_a_second_are_short():
    with nvml.NvmlMeter(fake_pynvml([{"energy_mj": None, "power_mw": 50_000}]), start_thread=False) as meter:
        info = meter.describe()
    assert meter.update_period_s == nvml.POWER_AVERAGE_S == 1.0
    assert info["gpus"][0]["power_reading"] == "nvmlDeviceGetPowerUsage" and "average" in info["power"]


@pytest.mark.parametrize("value_type,member,value,want", [
    (1, "uiVal", 123_456, 123_456.0), (5, "siVal", 80_000, 80_000.0), (0, "dVal", 512.5, 512.5),
    (3, "ullVal", 7, 7.0)])
def test_the_instant_field_is_read_from_the_member_its_value_type_names(value_type, member, value, want):
    """Drivers differ in the type they give the field (seen: unsigned and signed int); the member read is the
    one ``valueType`` names, and a field the GPU does not answer is None."""
    field = types.SimpleNamespace(nvmlReturn=0, valueType=value_type,
                                  value=types.SimpleNamespace(**{m: -1 for m in nvml_gpus.VALUE_MEMBERS.values()}))
    setattr(field.value, member, value)
    mod = types.SimpleNamespace(NVML_FI_DEV_POWER_INSTANT=186, nvmlDeviceGetFieldValues=lambda h, ids: [field])
    assert nvml_gpus.instant_power_mw(mod, 0) == want
    field.nvmlReturn = 3
    assert nvml_gpus.instant_power_mw(mod, 0) is None
    assert nvml_gpus.instant_power_mw(types.SimpleNamespace(), 0) is None, "a binding without field values"


def test_an_instant_field_that_stops_answering_is_a_one_line_meter_error():
    gpus = [{"energy_mj": None, "power_mw": 50_000, "instant_mw": 100_000}]
    meter = nvml.NvmlMeter(fake_pynvml(gpus), clock_ns=FakeClock(), start_thread=False)
    gpus[0]["instant_mw"] = None
    with pytest.raises(MeterError, match="NVML instant power of GPU 0: .* no longer answered") as err:
        meter.sampler.sample()
        meter.read_j()
    meter.close()
    assert "\n" not in str(err.value)


def test_close_shuts_nvml_down_once():
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1}])
    meter = nvml.NvmlMeter(mod)

    meter.close()
    meter.close()

    assert mod.calls.count("nvmlShutdown") == 1 and not mod.initialised


def test_read_error_is_translated_with_its_cause():
    gpus = [{"energy_mj": 0, "power_mw": 1}]
    mod = fake_pynvml(gpus)
    meter = nvml.NvmlMeter(mod)

    def lost(handle):
        raise mod.NVMLError(15)

    mod.nvmlDeviceGetTotalEnergyConsumption = lost
    with pytest.raises(MeterError) as info:
        meter.read_j()
    meter.close()

    assert isinstance(info.value.__cause__, mod.NVMLError)


@pytest.mark.parametrize(
    ("module", "reason"),
    [
        (fake_pynvml([], init_error=9), "no NVIDIA GPU usable"),
        (fake_pynvml([]), "found no GPU"),
        (fake_pynvml([{"energy_mj": None, "power_mw": None}]), "found no GPU"),
    ],
    ids=["driver-not-loaded", "no-gpu", "gpu-without-power"],
)
def test_probe_reports_why_nvml_is_unusable(module, reason):
    result = nvml.probe(module)

    assert not result.available and reason in result.reason and result.fix


def test_probe_lists_gpus_and_shuts_down():
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1}, {"energy_mj": None, "power_mw": 1}])

    result = nvml.probe(mod)

    assert result.available and result.domains == ("gpu_0", "gpu_1")
    assert mod.calls[-1] == "nvmlShutdown"


def test_reading_the_meters_never_synchronises_cuda(monkeypatch):
    """Only the compute seam waits for the device: a reading of the meter set (the trace's ticks, the slow meters'
    series, the idle baseline) never calls torch.cuda.synchronize, even where torch has initialised CUDA."""
    calls = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_initialized=lambda: True, synchronize=lambda *a: calls.append("sync")))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    gpus = [{"energy_mj": 0, "power_mw": 1}]
    meters = MeterSet([nvml.NvmlMeter(fake_pynvml(gpus))])

    gpus[0]["energy_mj"] += 5
    reading = meters.read()
    meters.close()

    assert reading.energy_j == {"gpu_0": 0.005} and calls == [] and not hasattr(nvml.NvmlMeter, "sync")


# --- implausible readings: never written as a measurement ------------------------------------------------------


def test_a_counter_reset_is_an_invalid_window_not_negative_joules(tmp_path):
    gpus = [{"energy_mj": 5_400_000, "power_mw": 1}, {"energy_mj": 0, "power_mw": 1}]
    clock = FakeClock()
    meters = MeterSet([nvml.NvmlMeter(fake_pynvml(gpus), clock_ns=clock)])
    profiler = Profiler(meters, rss=PeakRss(tmp_path / "no-proc"))

    with profiler.window("client") as reset:  # read naively: -5,400 J
        clock.advance_s(1)
        gpus[0]["energy_mj"], gpus[1]["energy_mj"] = 0, 100_000
    with profiler.window("client") as after:
        clock.advance_s(1)
        gpus[0]["energy_mj"], gpus[1]["energy_mj"] = 250_000, 150_000
    rows = [row_from_window(w.result, {"run_id": "r"}) for w in (reset, after)]
    meters.close()

    assert {k: rows[0][k] for k in ("gpu_j", "gpu_method", "energy_j", "energy_method")} == {
        "gpu_j": "", "gpu_method": "invalid", "energy_j": "", "energy_method": "invalid"}
    assert set(reset.result.invalid) == {"gpu_0"} and "back from 5400000 to 0 mJ" in reset.result.invalid["gpu_0"]
    assert dict(after.result.span.energy_j) == {"gpu_0": 250.0, "gpu_1": 50.0} and rows[1]["energy_j"] == "300"
    assert [e["kind"] for e in meters.describe()["invalid"]["gpu_0"]] == ["counter reset"]


@pytest.mark.parametrize(
    ("limit_mw", "rise_mj", "valid"),
    [(300_000, 1_200_000, True), (300_000, 1_200_001, False),  # bound 2 x 300 W over (1 + 1) s: 1200 J
     (None, 4_000_000, True), (None, 4_000_001, False)],  # no limit known: 2000 W over 2 s
)
def test_a_counter_rising_faster_than_the_gpu_can_draw_is_invalid(limit_mw, rise_mj, valid):
    gpus = [{"energy_mj": 0, "power_mw": 1, "limit_mw": limit_mw}]
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml(gpus), clock_ns=clock)

    clock.advance_s(1)
    gpus[0]["energy_mj"] = rise_mj
    reading, flags = meter.read_j(), meter.take_invalid()
    meter.close()

    assert reading == {"gpu_0": rise_mj / 1000 if valid else 0.0}
    assert [f.kind for f in flags.values()] == ([] if valid else ["counter jump"])


def test_a_negative_power_sample_is_not_integrated():
    gpus = [{"energy_mj": None, "power_mw": 100_000}]
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml(gpus), clock_ns=clock, start_thread=False)

    clock.advance_s(0.5)
    gpus[0]["power_mw"] = -5
    spoiled = meter.read_j(), meter.take_invalid()
    clock.advance_s(0.5)
    gpus[0]["power_mw"] = 100_000
    still = meter.read_j(), meter.take_invalid()  # the trapezoid from the negative sample
    clock.advance_s(0.5)
    clean = meter.read_j(), meter.take_invalid()
    meter.close()

    assert [set(flags) for _, flags in (spoiled, still, clean)] == [{"gpu_0"}, {"gpu_0"}, set()]
    assert "negative" in str(spoiled[1]["gpu_0"]) and clean[0] == {"gpu_0": 50.0}


# --- exceptions that are not NVMLError: one line, never a traceback ---------------------------------------------


def _raise(*args):
    raise RuntimeError("driver gone\nsee dmesg")


@pytest.mark.parametrize("function", ["nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"])
def test_any_exception_of_the_binding_while_reading_is_a_one_line_meter_error(function):
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1}, {"energy_mj": None, "power_mw": 1}])
    meter = nvml.NvmlMeter(mod, clock_ns=FakeClock(), start_thread=False)
    setattr(mod, function, _raise)

    with pytest.raises(MeterError) as info:
        meter.read_j()
    meter.close()

    assert "\n" not in str(info.value) and "RuntimeError: driver gone see dmesg" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize("function", ["nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                                      "nvmlDeviceGetTotalEnergyConsumption"])
def test_any_exception_of_the_binding_while_probing_is_the_probes_reason(tmp_path, function):
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1}])
    setattr(mod, function, _raise)

    result = nvml.probe(mod)
    with discover(sysfs_root=str(tmp_path), nvml_module=mod) as found:
        names = [m.name for m in found.meters]
    with pytest.raises(MeterError, match="RuntimeError: driver gone see dmesg"):
        nvml.NvmlMeter(mod)
    row = {r["meter"]: r for r in doctor_report(sysfs_root=str(tmp_path), nvml_module=mod)}["nvml"]

    assert not result.available and "RuntimeError: driver gone see dmesg" in result.reason
    assert names == ["cpu_estimate"] and row["status"] == "not found" and "RuntimeError" in row["reason"]


@pytest.mark.parametrize(("answering", "what"), [
    (LIMIT_CALLS, "the largest power limit"),
    (LIMIT_CALLS[1:], "the enforced power limit"),
    (LIMIT_CALLS[2:], "the power management limit"),
    (LIMIT_CALLS[3:], "the default power limit"),
], ids=["constraints", "enforced", "management", "default"])
def test_a_gpu_that_does_not_say_its_largest_limit_is_bounded_by_the_first_limit_it_says(answering, what):
    # Prepare: a 400-W GPU whose driver answers only some of NVML's limit functions
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1, "limit_mw": 400_000, "limit_calls": answering}])

    # Execute
    with nvml.NvmlMeter(mod, start_thread=False) as meter:
        [gpu] = meter.describe()["gpus"]
        limits, bounds = meter.power_limits_w(), meter.power_bounds_w()

    # Verify: the bound is twice that limit and says which one it is, not the 2000-W default
    assert (gpu["power_limit_w"], gpu["max_power_w"]) == (400.0, 800.0)
    assert gpu["max_power_source"] == f"2 x {what} (400 W)"
    assert limits == {"gpu_0": 400.0} and bounds == {"gpu_0": 800.0}


def test_a_gpu_name_or_power_limit_that_fails_is_only_a_label():
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": 1}])
    mod.nvmlDeviceGetName = _raise
    for call in LIMIT_CALLS:
        setattr(mod, f"nvmlDeviceGet{call}", _raise)

    with nvml.NvmlMeter(mod) as meter:
        [gpu] = meter.describe()["gpus"]

    assert nvml.probe(mod).available
    assert gpu["name"] == "unknown GPU" and gpu["max_power_w"] == nvml_gpus.DEFAULT_MAX_POWER_W
