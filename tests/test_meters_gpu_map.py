"""The GPU that runs the round is the GPU that is measured: torch device -> NVML GPU (PCI address, UUID,
CUDA_VISIBLE_DEVICES in its index, UUID and MIG forms), the round's GPU in ``gpu_j`` and the others beside the
total in ``gpu_other_j``, integrated power labelled, windows shorter than NVML's update period flagged.
NVML is a fake ``pynvml``; torch's device properties are small stand-ins (no CUDA needed)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from edgeprof.errors import ConfigError, MeterError
from edgeprof.meters import discover, gpu_map, nvml
from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.doctor import doctor_report
from edgeprof.measure.profiler import PeakRss, Profiler
from edgeprof.report.schema import row_from_window
from fixtures_sysfs import FakeClock, fake_pynvml

UUIDS = ["GPU-A1B2C3D4-0000-1111-2222-333344445555", "GPU-C3D4E5F6-0000-1111-2222-333344445555",
         "GPU-A1FFFFFF-0000-1111-2222-333344445555"]
BUSES = ["00000000:17:00.0", "00000000:65:00.0", "00000001:B3:00.0"]
MIG = "MIG-0c4d1e2f-3a4b-5c6d-7e8f-9a0b1c2d3e4f"


def fake_pynvml_with_ids(gpus: list[dict]) -> types.ModuleType:
    """:func:`fake_pynvml` plus PCI bus ids (bytes, as older bindings return them), UUIDs and MIG devices:
    each GPU dict may carry ``bus_id``, ``uuid`` and ``migs`` (UUIDs of its MIG devices)."""
    mod = fake_pynvml(gpus)

    def max_mig(handle):
        if not gpus[handle].get("migs"):
            raise mod.NVMLError(mod.NVML_ERROR_NOT_SUPPORTED)
        return len(gpus[handle]["migs"])

    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h]["bus_id"].encode())
    mod.nvmlDeviceGetUUID = lambda h: gpus[h[0]]["migs"][h[1]] if isinstance(h, tuple) else gpus[h]["uuid"]
    mod.nvmlDeviceGetMaxMigDeviceCount = max_mig
    mod.nvmlDeviceGetMigDeviceHandleByIndex = lambda h, slot: (h, slot)
    return mod


def three_gpus(energy=(0, 0, 0), names=("Fake GPU",) * 3, migs=((), (MIG,), ())) -> list[dict]:
    return [{"energy_mj": e, "power_mw": 1, "name": n, "bus_id": b, "uuid": u, "migs": list(m)}
            for e, n, b, u, m in zip(energy, names, BUSES, UUIDS, migs)]


def nvml_gpus(names=("Fake GPU",) * 3) -> list[gpu_map.NvmlGpu]:
    return [gpu_map.NvmlGpu(i, gpu_map.pci_from_nvml(BUSES[i]), UUIDS[i], names[i], (MIG,) if i == 1 else ())
            for i in range(3)]


def props(pci=None, uuid=None) -> types.SimpleNamespace:
    """torch's device properties as far as the mapping reads them (``pci``: domain, bus, device)."""
    out = types.SimpleNamespace(name="Fake GPU", uuid=uuid)
    if pci is not None:
        out.pci_domain_id, out.pci_bus_id, out.pci_device_id = pci
    return out


# --- the pure mapping ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("device", "ordinal"), [
    ("cuda:1", 1), ("CUDA:0", 0), ("cuda", 3), (2, 2), (torch.device("cuda:4"), 4), ("cpu", None),
    (torch.device("cpu"), None), ("mps", None)])
def test_a_torch_device_gives_its_ordinal(device, ordinal):
    assert gpu_map.parse_device(device, current=3) == ordinal


@pytest.mark.parametrize("device", ["cuda:x", "gpu1", "cuda:-1", -1, True, "cuda:1:2"])
def test_what_is_no_torch_device_is_one_config_line(device):
    with pytest.raises(ConfigError) as info:
        gpu_map.parse_device(device)

    assert "\n" not in str(info.value) and "is not a torch device" in str(info.value)


@pytest.mark.parametrize(("bus_id", "pci"), [
    ("00000000:3B:00.0", (0, 0x3B, 0)), (b"0000:3b:00.0", (0, 0x3B, 0)), ("00000001:AF:1E.0", (1, 0xAF, 0x1E)),
    (b"00000000:17:00.0\0\0", (0, 0x17, 0)), ("not a bus", None), (None, None)])
def test_nvml_bus_ids_in_either_spelling(bus_id, pci):
    assert gpu_map.pci_from_nvml(bus_id) == pci


@pytest.mark.parametrize(("value", "key"), [
    ("GPU-A1B2C3D4-0000-1111-2222-333344445555", "a1b2c3d4-0000-1111-2222-333344445555"),
    ("a1b2c3d4-0000-1111-2222-333344445555", "a1b2c3d4-0000-1111-2222-333344445555"),
    (bytes.fromhex("a1b2c3d4000011112222333344445555"), "a1b2c3d4-0000-1111-2222-333344445555"),
    (MIG, "0c4d1e2f-3a4b-5c6d-7e8f-9a0b1c2d3e4f"), (None, "")])
def test_uuids_compare_in_one_spelling(value, key):
    assert gpu_map.uuid_key(value) == key


@pytest.mark.parametrize(("value", "entries"), [
    (None, None), ("2,0", [2, 0]), ("1gpu2,2ampere", [1, 2]), ("0,-1,2", [0]), ("0,0", []), ("", []),
    ("GPU-a1,GPU-c3", ["GPU-a1", "GPU-c3"]), ("GPU-a1,1", ["GPU-a1"]), (f"{MIG},{MIG}", [])])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, entries):
    assert gpu_map.parse_visible(value) == entries


@pytest.mark.parametrize(("torch_props", "index", "how"), [
    (props(pci=(1, 0xB3, 0)), 2, "PCI 0001:b3:00"),
    (props(pci=(0, 0x17, 0), uuid="c3d4e5f6-0000-1111-2222-333344445555"), 0, "PCI 0000:17:00"),  # PCI first
    (props(uuid="c3d4e5f6-0000-1111-2222-333344445555"), 1, "UUID c3d4e5f6"),
    (props(uuid=bytes.fromhex("a1ffffff000011112222333344445555")), 2, "UUID a1ffffff"),
])
def test_torch_ids_map_whatever_cuda_visible_devices_says(torch_props, index, how):
    mapped = gpu_map.map_device(0, nvml_gpus(), torch_props, visible="1")

    assert (mapped.nvml_index, mapped.mig) == (index, False) and mapped.how.startswith(how)


@pytest.mark.parametrize(("torch_props", "visible"), [
    (props(pci=(0, 0x65, 0), uuid=MIG[4:]), None),  # torch's PCI address of a MIG instance is its GPU's
    (props(uuid=MIG), None),
    (None, MIG[:12]),  # a MIG-<uuid> prefix
    (None, f"MIG-{UUIDS[1]}/1/0"),  # the older MIG-GPU-<gpu uuid>/<gi>/<ci> form
])
def test_a_mig_instance_maps_to_its_whole_gpu(torch_props, visible):
    mapped = gpu_map.map_device(0, nvml_gpus(), torch_props, visible=visible)

    assert (mapped.nvml_index, mapped.mig) == (1, True)


@pytest.mark.parametrize(("visible", "ordinal", "index"), [
    ("2,0", 0, 2), ("2,0", 1, 0), (None, 1, 1), ("1,7,0", 0, 1), ("GPU-c3,GPU-A1B", 0, 1), ("GPU-c3,GPU-A1B", 1, 0)])
def test_without_torch_ids_cuda_visible_devices_reorders(visible, ordinal, index):
    mapped = gpu_map.map_device(ordinal, nvml_gpus(), None, visible=visible)

    assert mapped.nvml_index == index and "torch gave no PCI address or UUID" in mapped.how


@pytest.mark.parametrize(("torch_props", "visible", "ordinal", "why"), [
    (None, "2,0", 2, "CUDA_VISIBLE_DEVICES='2,0' makes 2 of NVML's 3 GPUs visible"),
    (None, "1,7,0", 1, "makes 1 of NVML's 3 GPUs"),  # 7 names no GPU: CUDA ends the list there
    (None, "", 0, "makes 0 of NVML's 3 GPUs"),
    (None, "GPU-a1", 0, "names 0 devices NVML has"),  # two UUIDs start with a1: ambiguous
    (props(pci=(0, 0x99, 0)), None, 0, "torch reports PCI 0000:99:00, where NVML has 0 GPUs"),
    (props(uuid="deadbeef-0000-1111-2222-333344445555"), None, 0, "no NVML GPU or MIG device has it"),
])
def test_an_unmappable_device_is_one_line(torch_props, visible, ordinal, why):
    with pytest.raises(MeterError) as info:
        gpu_map.map_device(ordinal, nvml_gpus(), torch_props, visible=visible)

    message = str(info.value)
    assert "\n" not in message and message.startswith(f"cannot tell which NVML GPU runs torch device cuda:{ordinal}")
    assert why in message


def test_an_index_of_unlike_gpus_needs_pci_bus_order():
    names = ("NVIDIA A100", "NVIDIA T4", "NVIDIA T4")

    with pytest.raises(MeterError, match="set CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        gpu_map.map_device(0, nvml_gpus(names), None, visible="2,0")
    mapped = gpu_map.map_device(0, nvml_gpus(names), None, visible="2,0", device_order="PCI_BUS_ID")

    assert mapped.nvml_index == 2 and "PCI_BUS_ID order" in mapped.how


# --- the meter: the round's GPU in gpu_j, the others beside the total --------------------------------------


def _round(tmp_path, meter: nvml.NvmlMeter, gpus: list[dict], added_mj: tuple[int, ...]) -> dict[str, str]:
    """One profiled window in which each GPU's counter rises by ``added_mj``, as a report row."""
    meters = MeterSet([meter])
    profiler = Profiler(meters, rss=PeakRss(tmp_path / "no-proc"))
    with profiler.window("client") as win:
        for gpu, mj in zip(gpus, added_mj):
            gpu["energy_mj"] += mj
    meters.close()
    return row_from_window(win.result, {"run_id": "r"})


@pytest.mark.parametrize(("gpu", "environ", "device_props", "round_index"), [
    ("cuda:0", {"CUDA_VISIBLE_DEVICES": "2,0"}, None, 2),
    ("cuda:1", {"CUDA_VISIBLE_DEVICES": "2,0"}, None, 0),
    ("cuda:1", {"CUDA_VISIBLE_DEVICES": "GPU-a1f,GPU-c3"}, None, 1),
    ("cuda:0", {"CUDA_VISIBLE_DEVICES": "0"}, lambda i: props(pci=(0, 0x65, 0)), 1),  # torch's PCI address wins
])
def test_the_round_gpu_is_gpu_j_and_the_others_are_beside_the_total(tmp_path, gpu, environ, device_props,
                                                                    round_index):
    gpus = three_gpus()
    meter = nvml.NvmlMeter(fake_pynvml_with_ids(gpus), gpu=gpu, environ=environ, device_properties=device_props)
    added = (1_000, 20_000, 300_000)

    row = _round(tmp_path, meter, gpus, added)

    others = [i for i in range(3) if i != round_index]
    assert [(d.name, d.column, d.in_total) for d in meter.domains()] == [
        (f"gpu_{i}", "gpu", True) if i == round_index else (f"gpu_other_{i}", "gpu_other", False) for i in range(3)]
    assert float(row["gpu_j"]) == added[round_index] / 1000 and row["gpu_method"] == "counter"
    assert float(row["gpu_other_j"]) == pytest.approx(sum(added[i] for i in others) / 1000)
    assert float(row["energy_j"]) == added[round_index] / 1000  # the other GPUs are not the round's
    assert meter.describe()["round_gpu"]["nvml_index"] == round_index


def test_without_a_device_every_gpu_counts_as_before(tmp_path):
    gpus = three_gpus()
    meter = nvml.NvmlMeter(fake_pynvml_with_ids(gpus), environ={"CUDA_VISIBLE_DEVICES": "2"})

    row = _round(tmp_path, meter, gpus, (1_000, 2_000, 3_000))

    assert {d.column for d in meter.domains()} == {"gpu"} and row["energy_j"] == "6" and "gpu_other_j" not in row
    assert meter.describe()["round_gpu"]["device"] is None


def test_a_round_on_the_cpu_leaves_every_gpu_beside_the_total():
    with nvml.NvmlMeter(fake_pynvml_with_ids(three_gpus()), gpu="cpu") as meter:
        domains = meter.domains()

    assert [(d.name, d.in_total) for d in domains] == [(f"gpu_other_{i}", False) for i in range(3)]


def test_a_mig_instance_says_its_figures_are_the_whole_gpus():
    with nvml.NvmlMeter(fake_pynvml_with_ids(three_gpus()), gpu="cuda:0", environ={"CUDA_VISIBLE_DEVICES": MIG}) as m:
        info = m.describe()["round_gpu"]

    assert info["nvml_index"] == 1 and "whole GPU" in info["mig"]


def test_torch_properties_are_read_when_torch_is_imported(monkeypatch):
    asked = []
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, current_device=lambda: 1,
                                 get_device_properties=lambda i: asked.append(i) or props(pci=(1, 0xB3, 0)))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))

    with nvml.NvmlMeter(fake_pynvml_with_ids(three_gpus()), gpu="cuda", environ={}) as meter:
        info = meter.describe()["round_gpu"]

    assert asked == [1] and info["nvml_index"] == 2 and info["how"] == "PCI 0001:b3:00 (torch and NVML)"


def test_an_unmappable_round_gpu_is_one_line_and_leaves_nvml_shut(tmp_path):
    mod = fake_pynvml_with_ids(three_gpus())
    env = {"CUDA_VISIBLE_DEVICES": "2,0"}

    with pytest.raises(MeterError) as info:
        nvml.NvmlMeter(mod, gpu="cuda:2", environ=env)
    result = nvml.probe(mod, "cuda:2", environ=env)

    assert "\n" not in str(info.value) and "cuda:2" in str(info.value) and not mod.initialised
    assert not result.available and "the round's GPU cannot be measured" in result.reason
    assert result.fix == nvml.MAPPING_FIX


def test_discovery_and_doctor_say_why_the_round_gpu_is_not_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    mod = fake_pynvml_with_ids(three_gpus())

    with discover(sysfs_root=str(tmp_path), nvml_module=mod, gpu="cuda:0") as found:
        domains = [(d.name, d.column) for d in found.domains()]
    rows = {r["meter"]: r for r in doctor_report(sysfs_root=str(tmp_path), nvml_module=mod, gpu="cuda:1")}

    assert ("gpu_1", "gpu") in domains and ("gpu_other_0", "gpu_other") in domains
    assert rows["nvml"]["status"] == "not found" and "makes 1 of NVML's 3 GPUs" in rows["nvml"]["reason"]


def test_a_typo_in_the_device_is_a_config_error_before_any_driver_call(tmp_path):
    mod = fake_pynvml_with_ids(three_gpus())

    with pytest.raises(ConfigError, match="gpu='cuda:one' is not a torch device"):
        discover(sysfs_root=str(tmp_path), nvml_module=mod, gpu="cuda:one")

    assert mod.calls == []


def test_a_round_gpu_without_energy_or_power_is_not_measured():
    gpus = three_gpus()
    gpus[1].update(energy_mj=None, power_mw=None)

    with pytest.raises(MeterError, match="NVML GPU 1, which runs torch device cuda:0 .* reports neither"):
        nvml.NvmlMeter(fake_pynvml_with_ids(gpus), gpu="cuda:0", environ={"CUDA_VISIBLE_DEVICES": "1"})


# --- a GPU without the energy counter: integrated power, labelled; short windows flagged -----------------------


def test_a_round_gpu_without_the_counter_is_integrated_power_and_labelled_so(tmp_path):
    gpus = three_gpus()
    gpus[2].update(energy_mj=None, power_mw=80_000)
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml_with_ids(gpus), gpu="cuda:0", environ={"CUDA_VISIBLE_DEVICES": "2"},
                           clock_ns=clock, start_thread=False)
    meters = MeterSet([meter])
    profiler = Profiler(meters, rss=PeakRss(tmp_path / "no-proc"), clock=lambda: clock.t_ns / 1e9)

    with profiler.window("client") as win:
        clock.advance_s(2)
        gpus[2]["power_mw"] = 120_000
    info = meter.describe()
    meters.close()
    row = row_from_window(win.result, {"run_id": "r"})

    assert (row["gpu_j"], row["gpu_method"], row["energy_method"]) == ("200", "integrated_power", "integrated_power")
    assert meter.update_period_s == nvml.POWER_AVERAGE_S == 1.0 and "average over up to 1 s" in info["power"]
    assert row["short_window"] == "0"


@pytest.mark.parametrize(("round_power_only", "wall_s", "short"), [
    (False, 0.05, True), (False, 0.2, False), (True, 0.5, True), (True, 1.5, False)])
def test_a_window_shorter_than_nvmls_update_period_is_flagged(tmp_path, round_power_only, wall_s, short):
    gpus = three_gpus()
    if round_power_only:
        gpus[0].update(energy_mj=None, power_mw=50_000)
    clock = FakeClock()
    meter = nvml.NvmlMeter(fake_pynvml_with_ids(gpus), gpu="cuda:0", environ={}, clock_ns=clock,
                           start_thread=False)
    meters = MeterSet([meter])
    profiler = Profiler(meters, rss=PeakRss(tmp_path / "no-proc"), clock=lambda: clock.t_ns / 1e9)

    with profiler.window("client") as win:
        clock.advance_s(wall_s)
    meters.close()

    assert win.result.short_window is short
    assert row_from_window(win.result, {"run_id": "r"})["short_window"] == str(int(short))
