"""AMD GPUs through a fake ``amdsmi`` module with the library's functions and exceptions: the energy accumulator
(both spellings of its dict), integrated power where there is none, a reset and a leap, permissions, the library
installed without its native part, the round's GPU found as NVML's is, and a profiled window's row."""

from __future__ import annotations

import sys
import types

import pytest

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters import amdsmi, discover
from edgeprof.meters.doctor import doctor_report, render_doctor
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import FakeClock, fake_amdsmi, fake_pynvml

NO_NVIDIA = fake_pynvml([], init_error=9)


@pytest.mark.parametrize("old_api", [False, True], ids=["energy_accumulator", "power (before ROCm 6.2.1)"])
def test_the_energy_accumulator_gives_counts_times_the_resolution(old_api):
    gpus = [{"counts": 1_000, "resolution_uj": 15.3}, {"counts": 7, "resolution_uj": 15.625}]
    meter = amdsmi.AmdSmiMeter(fake_amdsmi(gpus, old_api=old_api), clock_ns=FakeClock())
    gpus[0]["counts"] += 200_000
    gpus[1]["counts"] += 64

    reading = meter.read_j()
    meter.close()

    assert reading == pytest.approx({"gpu_amd_0": 200_000 * 15.3e-6, "gpu_amd_1": 0.001}, rel=1e-12)
    assert [(d.name, d.column, d.method, d.in_total) for d in meter.domains()] == [
        ("gpu_amd_0", "gpu", "counter", True), ("gpu_amd_1", "gpu", "counter", True)]
    assert meter.sampler is None and meter.update_period_s == amdsmi.COUNTER_PERIOD_S


def test_without_the_counter_the_instant_power_is_integrated_exactly():
    gpus = [{"counts": None, "current_w": 100, "average_w": 80}]
    clock = FakeClock()
    meter = amdsmi.AmdSmiMeter(fake_amdsmi(gpus), hz=20.0, clock_ns=clock, start_thread=False)  # t=0: 100 W
    clock.advance_s(0.5)
    gpus[0]["current_w"] = 200
    meter.sampler.sample()  # t=0.5: 200 W
    clock.advance_s(0.25)
    gpus[0]["current_w"] = 150

    reading = meter.read_j()  # t=0.75: 150 W
    info = meter.describe()
    meter.close()

    assert reading == {"gpu_amd_0": 118.75}  # (100+200)/2*0.5 + (200+150)/2*0.25
    assert meter.domains()[0].method == "integrated_power" and meter.update_period_s == 0.05
    assert info["gpus"][0]["power_reading"] == "current_socket_power" and info["sampling_hz"] == 20.0


def test_a_gpu_with_only_the_average_power_has_a_one_second_update_period_and_one_without_power_is_left_out():
    gpus = [{"counts": None, "average_w": 90}, {"counts": None}]
    with amdsmi.AmdSmiMeter(fake_amdsmi(gpus), start_thread=False) as meter:
        names = [d.name for d in meter.domains()]
        reading = meter.describe()["gpus"][0]["power_reading"]

    assert names == ["gpu_amd_0"] and reading == "average_socket_power"
    assert meter.update_period_s == amdsmi.POWER_AVERAGE_S == 1.0


@pytest.mark.parametrize(("step", "kind"), [(-5_000, "counter reset"), (10**9, "counter jump")],
                         ids=["reset", "jump"])
def test_an_implausible_counter_step_adds_nothing_and_is_flagged(step, kind):
    gpus = [{"counts": 1_000_000, "cap_w": 300}]  # bound: 600 W x (1 s + 1 s) = 1200 J = 78.4 M counts
    clock = FakeClock()
    meter = amdsmi.AmdSmiMeter(fake_amdsmi(gpus), clock_ns=clock)
    clock.advance_s(1.0)
    gpus[0]["counts"] += step

    first = meter.read_j()
    flags = meter.take_invalid()
    clock.advance_s(1.0)
    gpus[0]["counts"] += 10_000  # the next step, from the re-based counter, counts again
    second = meter.read_j()
    meter.close()

    assert first == {"gpu_amd_0": 0.0} and flags["gpu_amd_0"].kind == kind
    assert second["gpu_amd_0"] == pytest.approx(10_000 * 15.3e-6)
    assert meter.power_limits_w() == {"gpu_amd_0": 300.0}


def test_an_implausible_power_sample_is_not_integrated():
    gpus = [{"counts": None, "current_w": 100, "cap_w": 200}]  # bound: 400 W
    clock = FakeClock()
    meter = amdsmi.AmdSmiMeter(fake_amdsmi(gpus), clock_ns=clock, start_thread=False)
    clock.advance_s(0.5)
    gpus[0]["current_w"] = 5_000

    reading = meter.read_j()
    flags = meter.take_invalid()
    meter.close()

    assert reading == {"gpu_amd_0": 0.0} and flags["gpu_amd_0"].kind == "implausible power"


@pytest.mark.parametrize(("where", "status", "reason", "fix"), [
    ("init", 10, "no AMD GPU usable: AMD SMI init (is the amdgpu driver loaded?): permission denied", "render"),
    ("init", 34, "AMDSMI_STATUS_DRIVER_NOT_LOADED", "load the amdgpu driver"),
    ("read", 10, "AMD SMI error while listing GPUs: AMD SMI energy of GPU 0: permission denied", "render"),
], ids=["init-no-permission", "init-no-driver", "read-no-permission"])
def test_the_probe_says_why_and_how_to_fix(where, status, reason, fix):
    gpus = [{"counts": 0, "error": status if where == "read" else None}]
    smi = fake_amdsmi(gpus, init_error=status if where == "init" else None)

    result = amdsmi.probe(smi)

    assert not result.available and reason in result.reason and fix in result.fix
    assert "\n" not in result.reason
    assert smi.calls[-1] == "amdsmi_shut_down" or where == "init"


@pytest.mark.parametrize("missing", ["amdsmi_init", "amdsmi_get_processor_handles", "everything"])
def test_a_binding_without_the_functions_it_needs_is_the_probes_reason(tmp_path, missing):
    # Prepare: a binding that lacks a function, or a string given as the module (--meter-setting amdsmi_module=x)
    smi = "x" if missing == "everything" else fake_amdsmi([{"counts": 0}])
    if missing != "everything":
        delattr(smi, missing)

    # Execute
    result = amdsmi.probe(smi)
    rows = {r["meter"]: r for r in doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_NVIDIA,
                                                 amdsmi_module=smi)}

    # Verify: one line that names what is missing, not an AttributeError escaping the probe
    assert not result.available and "AttributeError" in result.reason and "\n" not in result.reason
    assert (missing if missing != "everything" else "amdsmi_init") in result.reason
    assert rows["amdsmi"]["status"] == "not found" and rows["amdsmi"]["reason"] == result.reason


def test_a_read_error_is_one_line_with_its_cause_and_close_shuts_down_once():
    gpus = [{"counts": 0}]
    smi = fake_amdsmi(gpus)
    meter = amdsmi.AmdSmiMeter(smi)
    gpus[0]["error"] = 10

    with pytest.raises(MeterPermissionError, match="AMD SMI energy of GPU 0: permission denied") as err:
        meter.read_j()
    meter.close()
    meter.close()

    assert isinstance(err.value.__cause__, smi.AmdSmiLibraryException) and "\n" not in str(err.value)
    assert smi.calls.count("amdsmi_shut_down") == 1


def _package(tmp_path, monkeypatch, name: str, init: str) -> None:
    """A package ``name`` on sys.path whose ``__init__`` is ``init`` (what an install on this machine holds)."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(init)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_the_library_without_its_native_part_is_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    # what amdsmi 7.0.2 does on import without libamd_smi.so: print two lines, then fail on a KeyError
    _package(tmp_path, monkeypatch, "amdsmi",
             "print('Could not load libamd_smi.so')\n"
             "print('Unable to find libamd_smi.so library try installing amd-smi-lib')\n"
             "_libraries = {}\n_libraries['libamd_smi.so']\n")

    result = amdsmi.probe()

    assert not result.available
    assert result.reason == "amdsmi is installed but its native library does not load (KeyError: 'libamd_smi.so')"
    assert result.fix == amdsmi.NATIVE_FIX and "ROCM_PATH" in result.fix
    assert capsys.readouterr().out == ""  # its prints do not reach the user


def test_without_the_library_the_probe_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi raises ModuleNotFoundError, as here

    result = amdsmi.probe()

    assert (result.available, result.reason) == (False, "amdsmi is not installed")
    assert "pip install 'edgeprof[amd]'" in result.fix and "ROCm" in result.fix


# --- the round's GPU ------------------------------------------------------------------------------------------


def props(bus: int | None = None, uuid: str = ""):
    """torch's device properties of a ROCm GPU (PCI address, HIP UUID), or of a torch that gives neither."""
    if bus is None:
        return types.SimpleNamespace(uuid=uuid) if uuid else None
    return types.SimpleNamespace(pci_domain_id=0, pci_bus_id=bus, pci_device_id=0, uuid=uuid)


TWO = [{"counts": 0, "bdf": "0000:03:00.0", "hip_uuid": "GPU-aaaa"}, {"counts": 0, "bdf": "0000:83:00.0",
                                                                      "hip_uuid": "GPU-bbbb"}]


@pytest.fixture
def rocm_torch(monkeypatch):
    """torch as an AMD machine has it, a ROCm build (``torch.version.hip`` set, ``cuda`` None): its ``cuda:N`` are
    AMD GPUs. Without it these tests would depend on the torch installed here: a CUDA build (CI's oldest-Python
    leg installs one) makes every ``cuda:N`` an NVIDIA GPU, and no AMD GPU the round's."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        version=types.SimpleNamespace(hip="6.2.41133", cuda=None)))


@pytest.mark.usefixtures("rocm_torch")
@pytest.mark.parametrize(("gpu", "properties", "environ", "round_index", "how"), [
    ("cuda:0", props(0x83), {"HIP_VISIBLE_DEVICES": "1"}, 1, "PCI 0000:83:00 (torch and AMD SMI)"),
    ("cuda:0", props(uuid="GPU-bbbb"), {}, 1, "UUID bbbb (torch and AMD SMI)"),
    ("cuda:0", None, {"HIP_VISIBLE_DEVICES": "1"}, 1, "HIP_VISIBLE_DEVICES='1', entry 0"),
    ("cuda:1", None, {"CUDA_VISIBLE_DEVICES": "1,0"}, 0, "CUDA_VISIBLE_DEVICES='1,0', entry 1"),
], ids=["pci", "uuid", "hip-visible", "cuda-visible"])
def test_the_rounds_gpu_is_in_column_gpu_and_the_others_beside_it(gpu, properties, environ, round_index, how):
    meter = amdsmi.AmdSmiMeter(fake_amdsmi([dict(g) for g in TWO]), gpu=gpu, device_properties=lambda n: properties,
                               environ=environ)
    domains = {d.name: (d.column, d.in_total) for d in meter.domains()}
    described = meter.describe()["round_gpu"]
    meter.close()

    other = 1 - round_index
    assert domains == {f"gpu_amd_{round_index}": ("gpu", True), f"gpu_amd_other_{other}": ("gpu_other", False)}
    assert described["amdsmi_index"] == round_index and described["how"].startswith(how)


@pytest.mark.usefixtures("rocm_torch")
@pytest.mark.parametrize(("gpus", "environ", "why"), [
    ([dict(TWO[0], name="AMD Instinct MI210"), dict(TWO[1], name="AMD Radeon 780M")], {},
     "HIP's order of unlike GPUs (AMD Instinct MI210, AMD Radeon 780M) need not be AMD SMI's"),
    (TWO, {"ROCR_VISIBLE_DEVICES": "1"}, "ROCR_VISIBLE_DEVICES hides GPUs below HIP"),
    (TWO, {"HIP_VISIBLE_DEVICES": "2"}, "HIP_VISIBLE_DEVICES='2' makes 0 of AMD SMI's 2 GPUs visible to torch"),
], ids=["unlike-models", "rocr-visible", "hidden"])
def test_a_device_that_cannot_be_matched_is_a_reason_with_the_fix(gpus, environ, why):
    result = amdsmi.probe(fake_amdsmi([dict(g) for g in gpus]), "cuda:0", device_properties=lambda n: None,
                          environ=environ)

    assert not result.available and why in result.reason and "cuda:0" in result.reason
    assert result.fix == amdsmi.MAPPING_FIX


@pytest.mark.parametrize(("gpu", "torch_version"), [("cpu", None), ("cuda:0", {"cuda": "12.4", "hip": None})],
                         ids=["host-device", "cuda-build-of-torch"])
def test_no_amd_gpu_is_the_rounds_on_the_cpu_or_under_a_cuda_build_of_torch(gpu, torch_version, monkeypatch):
    if torch_version is not None:  # a CUDA build of torch: its cuda:0 is an NVIDIA GPU
        fake_torch = types.SimpleNamespace(version=types.SimpleNamespace(**torch_version))
        monkeypatch.setitem(sys.modules, "torch", fake_torch)

    with amdsmi.AmdSmiMeter(fake_amdsmi([dict(g) for g in TWO]), gpu=gpu) as meter:
        domains = [(d.column, d.in_total) for d in meter.domains()]

    assert domains == [("gpu_other", False), ("gpu_other", False)]


def test_discovery_fills_the_rounds_gpu_in_a_profiled_windows_row_and_doctor_lists_it(tmp_path):
    gpus = [{"counts": 0, "bdf": "0000:03:00.0", "cap_w": 300}, {"counts": 0, "bdf": "0000:83:00.0"}]
    smi = fake_amdsmi(gpus)
    meters = discover(sysfs_root=str(tmp_path), nvml_module=NO_NVIDIA, amdsmi_module=smi, gpu=None, cpu_watts=2.0)
    meters.read_cost_s["amdsmi"] = 0.0  # read at the edges: the step below falls wholly inside the phase
    with meters, Profiler(meters, rss=PeakRss(tmp_path / "no-proc")).window("client") as win:
        with win.phase("local_steps"):
            gpus[0]["counts"] += 100_000
            gpus[1]["counts"] += 50_000
    row = row_from_window(win.result, {"run_id": "r", "kind": "client"})
    rows = {r["meter"]: r for r in doctor_report(sysfs_root=str(tmp_path), nvml_module=NO_NVIDIA, amdsmi_module=smi)}

    assert [m.name for m in meters.meters] == ["amdsmi", "cpu_estimate"]
    assert float(row["gpu_j"]) == pytest.approx(150_000 * 15.3e-6) and row["gpu_method"] == "counter"
    assert rows["amdsmi"]["status"] == "found" and rows["amdsmi"]["domains"] == ["gpu_amd_0", "gpu_amd_1"]
    assert "amdsmi        FOUND" in render_doctor(list(rows.values()))


def test_a_gpu_that_is_no_torch_device_is_refused_before_any_library_call():
    from edgeprof.errors import ConfigError

    smi = fake_amdsmi([{"counts": 0}])
    with pytest.raises(ConfigError, match="gpu='rocm:0' is not a torch device"):
        amdsmi.probe(smi, "rocm:0")
    assert smi.calls == []


def test_a_malformed_energy_dict_is_a_one_line_meter_error():
    smi = fake_amdsmi([{"counts": 0}])
    smi.amdsmi_get_energy_count = lambda handle: {"counter_resolution": 15.3}

    with pytest.raises(MeterError, match="without an integer energy_accumulator"):
        amdsmi.energy_count(smi, 0, 0)
