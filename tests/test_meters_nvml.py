"""NVML through a fake ``pynvml`` module: energy counter, integrated power, errors, shutdown."""

from __future__ import annotations

import sys
import types

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters import nvml
from fixtures_sysfs import FakeClock, fake_pynvml


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


@pytest.mark.parametrize("initialised", [True, False])
def test_sync_waits_for_cuda_only_when_torch_initialised_it(monkeypatch, initialised):
    calls = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_initialized=lambda: initialised, synchronize=lambda: calls.append("sync")))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    meter = nvml.NvmlMeter(fake_pynvml([{"energy_mj": 0, "power_mw": 1}]))

    meter.sync()
    meter.close()

    assert calls == (["sync"] if initialised else [])
