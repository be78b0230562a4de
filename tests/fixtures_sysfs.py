"""Builders of real sysfs-like trees (powercap RAPL zones, Jetson INA3221 rails) and fakes of the meter libraries at
their module boundary: pynvml, amdsmi and zeus-apple-silicon.

Each builder writes the files the kernel would show under a root directory that the production code
reads as its ``sysfs_root``; tests then change the counter files between reads.
"""

from __future__ import annotations

import types
from typing import Callable
from pathlib import Path

MAX_RANGE_UJ = 262143328850  # a real package-0 max_energy_range_uj


def rapl_zone(root: Path, zone: str, name: str, energy_uj: int = 0, max_range_uj: int = MAX_RANGE_UJ) -> Path:
    """Write ``class/powercap/<zone>/{name,energy_uj,max_energy_range_uj}`` and return the zone dir."""
    path = Path(root) / "class" / "powercap" / zone
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return path


def set_energy(root: Path, zone: str, energy_uj: int) -> None:
    (Path(root) / "class" / "powercap" / zone / "energy_uj").write_text(f"{energy_uj}\n")


#: ways a label file (a RAPL zone's ``name``, a Jetson rail label) can be unusable. The tests run as root,
#: which reads a chmod 000 file anyway, so "unreadable" is a dangling link (open() fails with ENOENT).
BAD_LABELS = ("not_utf8", "directory", "dangling_link")


def spoil_label(path: Path, how: str) -> None:
    """Replace the label file at ``path`` by one that cannot be read as a label (see :data:`BAD_LABELS`)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    if how == "not_utf8":
        path.write_bytes(b"\xff\xfe")
    elif how == "directory":
        path.mkdir()
    elif how == "dangling_link":
        path.symlink_to(path.parent / "no-such-file")
    else:
        raise ValueError(how)


#: layouts by scenario: (zone dir, kernel name)
RAPL_LAYOUTS = {
    "one_socket": [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl:0:1", "uncore")],
    "two_sockets": [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"),
                    ("intel-rapl:1", "package-1"), ("intel-rapl:1:0", "core")],
    "dram": [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl:0:1", "dram"),
             ("intel-rapl:1", "package-1"), ("intel-rapl:1:0", "dram")],
    "psys": [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl:0:1", "uncore"),
             ("intel-rapl:0:2", "dram"), ("intel-rapl:1", "psys")],
    "mmio_duplicate": [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl-mmio:0", "package-0")],
}


def build_rapl(root: Path, layout: str, energy_uj: int = 1000) -> list[str]:
    """Build one of :data:`RAPL_LAYOUTS`; returns the zone dirs."""
    zones = RAPL_LAYOUTS[layout]
    for zone, name in zones:
        rapl_zone(root, zone, name, energy_uj)
    return [zone for zone, _ in zones]


# --- Jetson -------------------------------------------------------------------------------------

#: board -> (layout, device dir under bus/i2c/drivers, rail labels in channel order)
JETSON_BOARDS = {
    "orin_nano": ("hwmon", "ina3221/1-0040", ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]),
    "xavier_nx": ("iio", "ina3221x/7-0040", ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]),
    "nano": ("iio", "ina3221x/6-0040", ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]),
    "agx_orin": ("hwmon", "ina3221/1-0040", ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"]),
}


def rail_dir(root: Path, board: str) -> Path:
    layout, device, _ = JETSON_BOARDS[board]
    base = Path(root) / "bus" / "i2c" / "drivers" / device
    return base / ("hwmon/hwmon3" if layout == "hwmon" else "iio:device0")


def build_jetson(root: Path, board: str, extra_nc: bool = True, *, shunt_uohm: int | None = 5000,
                 update_ms: int | None = 6) -> list[str]:
    """Write the rails of ``board`` (all at 0 W); an ``NC`` channel is added to hwmon boards. hwmon boards get, as
    the mainline driver writes them, each channel's ``shunt<k>_resistor`` (µΩ; an Orin's device tree gives 5000)
    and the chip's ``update_interval`` (ms; 6 at the driver's default of one sample and 1.1 ms conversions on 3
    channels); None leaves the file out."""
    layout, _, labels = JETSON_BOARDS[board]
    d = rail_dir(root, board)
    d.mkdir(parents=True, exist_ok=True)
    if layout == "hwmon" and update_ms is not None:
        (d / "update_interval").write_text(f"{update_ms}\n")
    for k, label in enumerate(labels, start=1 if layout == "hwmon" else 0):
        if layout == "hwmon":
            (d / f"in{k}_label").write_text(label + "\n")
            if shunt_uohm is not None:
                (d / f"shunt{k}_resistor").write_text(f"{shunt_uohm}\n")
        else:
            (d / f"rail_name_{k}").write_text(label + "\n")
    if layout == "hwmon" and extra_nc:
        (d / "in4_label").write_text("NC\n")
        (d / "in4_input").write_text("0\n")
        (d / "curr4_input").write_text("0\n")
    set_rails(root, board, {label: (5000, 0) for label in labels})
    return labels


def set_rails(root: Path, board: str, values: dict[str, tuple[int, int]]) -> None:
    """Set rails: hwmon takes (mV, mA); iio takes (mW, ignored)."""
    layout, _, labels = JETSON_BOARDS[board]
    d = rail_dir(root, board)
    for label, (a, b) in values.items():
        k = labels.index(label) + (1 if layout == "hwmon" else 0)
        if layout == "hwmon":
            (d / f"in{k}_input").write_text(f"{a}\n")
            (d / f"curr{k}_input").write_text(f"{b}\n")
        else:
            (d / f"in_power{k}_input").write_text(f"{a}\n")


# --- NVML -----------------------------------------------------------------------------------------


class FakeClock:
    """An integer-nanosecond clock that moves only when told."""

    def __init__(self, t_ns: int = 0) -> None:
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns

    def advance_s(self, seconds: float) -> None:
        self.t_ns += round(seconds * 1e9)


#: the NVML functions that say a GPU's power limit, without ``nvmlDeviceGet``
LIMIT_CALLS = ("PowerManagementLimitConstraints", "EnforcedPowerLimit", "PowerManagementLimit",
               "PowerManagementDefaultLimit")


def fake_pynvml(gpus: list[dict], *, init_error: int | None = None) -> types.ModuleType:
    """A module with pynvml's functions, ``NVMLError`` and error codes.

    Each GPU dict: ``energy_mj`` (int, or None when the counter is NOT_SUPPORTED), ``power_mw`` (int or
    None), ``name`` and optionally ``limit_mw`` (the largest power limit, also the enforced, management and default
    one; absent: NOT_SUPPORTED) with ``limit_calls`` (the names, without ``nvmlDeviceGet``, of the limit functions
    that answer: default all four), ``instant_mw`` (the field ``NVML_FI_DEV_POWER_INSTANT``; absent: NOT_SUPPORTED) and
    ``util`` (GPU utilisation %, default 0); tests change the dicts between reads. ``module.calls`` records
    function names. The driver is ``580.00.00`` with CUDA 13.0.
    """
    mod = types.ModuleType("pynvml")
    mod.NVML_ERROR_NOT_SUPPORTED = 3
    mod.NVML_ERROR_NO_PERMISSION = 4
    mod.NVML_ERROR_DRIVER_NOT_LOADED = 9
    mod.NVML_ERROR_FUNCTION_NOT_FOUND = 13
    mod.calls = []

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {3: "Not Supported", 4: "Insufficient Permissions", 9: "Driver Not Loaded"}.get(self.value, "Unknown")

    mod.NVMLError = NVMLError
    mod.initialised = False

    def nvmlInit():
        mod.calls.append("nvmlInit")
        if init_error is not None:
            raise NVMLError(init_error)
        mod.initialised = True

    def nvmlShutdown():
        mod.calls.append("nvmlShutdown")
        mod.initialised = False

    def _field(handle, key):
        value = gpus[handle][key]
        if value is None:
            raise NVMLError(mod.NVML_ERROR_NOT_SUPPORTED)
        return value

    mod.nvmlInit = nvmlInit
    mod.nvmlShutdown = nvmlShutdown
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: gpus[h].get("name", "Fake GPU")
    mod.nvmlDeviceGetTotalEnergyConsumption = lambda h: _field(h, "energy_mj")
    mod.nvmlDeviceGetPowerUsage = lambda h: _field(h, "power_mw")

    def limit_call(name: str, answer: Callable[[int], object]) -> None:
        def call(handle):
            gpu = gpus[handle]
            if gpu.get("limit_mw") is None or name not in gpu.get("limit_calls", LIMIT_CALLS):
                raise NVMLError(mod.NVML_ERROR_NOT_SUPPORTED)
            return answer(gpu["limit_mw"])
        setattr(mod, f"nvmlDeviceGet{name}", call)

    limit_call("PowerManagementLimitConstraints", lambda mw: (100_000, mw))  # (min, max) in mW
    for name in LIMIT_CALLS[1:]:
        limit_call(name, lambda mw: mw)
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=gpus[h].get("util", 0), memory=0)
    mod.nvmlSystemGetDriverVersion = lambda: "580.00.00"
    mod.nvmlSystemGetCudaDriverVersion = lambda: 13000
    mod.NVML_FI_DEV_POWER_INSTANT = 186
    mod.NVML_VALUE_TYPE_UNSIGNED_INT = 1

    def nvmlDeviceGetFieldValues(handle, field_ids):
        out = []
        for field in field_ids:
            value = gpus[handle].get("instant_mw") if field == mod.NVML_FI_DEV_POWER_INSTANT else None
            out.append(types.SimpleNamespace(fieldId=field, valueType=1, nvmlReturn=0 if value is not None else 3,
                                             value=types.SimpleNamespace(uiVal=value or 0)))
        return out

    mod.nvmlDeviceGetFieldValues = nvmlDeviceGetFieldValues
    return mod


def slow_stepping_pynvml(*, power_w: float, period_s: float = 0.1, read_s: float = 0.003,
                         limit_mw: int = 700_000, clock=None) -> types.ModuleType:
    """A fake pynvml whose one GPU draws ``power_w`` constantly, as a data-centre GPU's NVML shows it: the energy
    counter moves only every ``period_s`` (by ``power_w * period_s``), and each read of it takes ``read_s`` seconds
    (a driver round trip; ``time.sleep``, which releases the GIL as the real binding's ctypes call does).
    ``module.energy_reads`` records the name of the thread of each energy read."""
    import threading
    import time as _time

    clock = clock or _time.perf_counter
    start = clock()
    mod = fake_pynvml([{"energy_mj": 0, "power_mw": int(power_w * 1000), "limit_mw": limit_mw}])
    mod.energy_reads = []

    def energy_mj(handle):
        mod.energy_reads.append(threading.current_thread().name)
        _time.sleep(read_s)
        steps = int((clock() - start) // period_s)
        return int(round(steps * period_s * power_w * 1000))

    mod.nvmlDeviceGetTotalEnergyConsumption = energy_mj
    return mod


# --- AMD SMI ----------------------------------------------------------------------------------------


def fake_amdsmi(gpus: list[dict], *, init_error: int | None = None, old_api: bool = False) -> types.ModuleType:
    """A module with amdsmi's functions and exceptions, as its Python library (amdsmi 7.0) has them.

    Each GPU dict: ``counts`` (the energy accumulator, an int; None: ``AMDSMI_STATUS_NOT_SUPPORTED``),
    ``resolution_uj`` (``counter_resolution``, default 15.3), ``current_w`` and ``average_w`` (the power info's
    ``current_socket_power`` and ``average_socket_power`` in watts; absent or None: ``"N/A"``), ``cap_w`` (the
    ``max_power_cap``, reported in microwatts; absent: NOT_SUPPORTED), ``bdf`` (``"0000:03:00.0"``), ``name``
    (``market_name``), ``hip_uuid`` and ``error`` (a status code every energy and power call raises). ``old_api``:
    the energy dict's counts under ``power``, as before ROCm 6.2.1. Tests change the dicts between reads;
    ``module.calls`` records function names.
    """
    mod = types.ModuleType("amdsmi")
    mod.calls = []
    info = {2: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported", 10: "AMDSMI_STATUS_NO_PERM - Permission Denied",
            34: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded"}

    class AmdSmiException(Exception):
        """Base smi exception class"""

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, err_code: int) -> None:
            err_code = abs(err_code)
            super().__init__(err_code)
            self.err_code = err_code
            self.err_info = info.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

        def __str__(self) -> str:
            return f"Error code:\n\t{self.err_code} | {self.err_info}"

        def get_error_info(self, detailed=True):
            return self.err_info if detailed else self.err_info.split(" - ")[0]

        def get_error_code(self):
            return self.err_code

    mod.AmdSmiException, mod.AmdSmiLibraryException = AmdSmiException, AmdSmiLibraryException

    def amdsmi_init(flag=2):  # AmdSmiInitFlags.INIT_AMD_GPUS
        mod.calls.append("amdsmi_init")
        if init_error is not None:
            raise AmdSmiLibraryException(init_error)

    def amdsmi_shut_down():
        mod.calls.append("amdsmi_shut_down")

    def _gpu(handle, what):
        mod.calls.append(what)
        if gpus[handle].get("error") is not None:
            raise AmdSmiLibraryException(gpus[handle]["error"])
        return gpus[handle]

    def amdsmi_get_energy_count(handle):
        gpu = _gpu(handle, "amdsmi_get_energy_count")
        if gpu.get("counts") is None:
            raise AmdSmiLibraryException(2)
        return {"power" if old_api else "energy_accumulator": gpu["counts"],
                "counter_resolution": gpu.get("resolution_uj", 15.3), "timestamp": 1_000_000}

    def amdsmi_get_power_info(handle):
        gpu = _gpu(handle, "amdsmi_get_power_info")
        na = lambda key: "N/A" if gpu.get(key) is None else gpu[key]  # noqa: E731 (amdsmi's 0xFFFF -> "N/A")
        return {"socket_power": na("average_w"), "current_socket_power": na("current_w"),
                "average_socket_power": na("average_w"), "gfx_voltage": "N/A", "soc_voltage": "N/A",
                "mem_voltage": "N/A", "power_limit": na("cap_w")}

    def amdsmi_get_power_cap_info(handle):
        if gpus[handle].get("cap_w") is None:
            raise AmdSmiLibraryException(2)
        cap_uw = gpus[handle]["cap_w"] * 10**6
        return {"power_cap": cap_uw, "default_power_cap": cap_uw, "dpm_cap": 0, "min_power_cap": 0,
                "max_power_cap": cap_uw}

    mod.amdsmi_init, mod.amdsmi_shut_down = amdsmi_init, amdsmi_shut_down
    mod.amdsmi_get_processor_handles = lambda: list(range(len(gpus)))
    mod.amdsmi_get_energy_count, mod.amdsmi_get_power_info = amdsmi_get_energy_count, amdsmi_get_power_info
    mod.amdsmi_get_power_cap_info = amdsmi_get_power_cap_info
    mod.amdsmi_get_gpu_device_bdf = lambda h: gpus[h].get("bdf", f"0000:{h + 3:02x}:00.0")
    mod.amdsmi_get_gpu_asic_info = lambda h: {"market_name": gpus[h].get("name", "AMD Instinct MI210"),
                                              "vendor_id": "0x1002", "device_id": "0x740f", "rev_id": "0x02",
                                              "asic_serial": "0x0", "family": 141}
    mod.amdsmi_get_gpu_enumeration_info = lambda h: {"drm_render": 128 + h, "drm_card": h, "hsa_id": h + 1,
                                                     "hip_id": h, "hip_uuid": gpus[h].get("hip_uuid", "")}
    return mod


# --- Apple silicon (zeus-apple-silicon) -------------------------------------------------------------


#: the fields of zeus-apple-silicon's AppleEnergyMetrics (integer mJ, or lists of them; None where not measured)
APPLE_FIELDS = ("cpu_total_mj", "efficiency_cores_mj", "performance_cores_mj", "efficiency_cluster_mj",
                "performance_cluster_mj", "efficiency_core_manager_mj", "performance_core_manager_mj", "dram_mj",
                "gpu_mj", "gpu_sram_mj", "ane_mj")


def fake_zeus_apple_silicon(counters: dict, *, init_error: str | None = None) -> types.ModuleType:
    """A module with zeus-apple-silicon's ``AppleEnergyMonitor`` and ``AppleEnergyMetrics``.

    ``counters`` maps AppleEnergyMetrics fields to cumulative mJ (fields left out are None, as on a chip without
    that channel); tests change it between reads. ``init_error``: the RuntimeError the monitor's constructor
    raises (IOReport refusing the subscription). ``module.calls`` records method names.
    """
    mod = types.ModuleType("zeus_apple_silicon")
    mod.calls = []

    class AppleEnergyMetrics:
        def __init__(self) -> None:
            for name in APPLE_FIELDS:
                setattr(self, name, None)

    def snapshot() -> AppleEnergyMetrics:
        metrics = AppleEnergyMetrics()
        for name, value in counters.items():
            setattr(metrics, name, list(value) if isinstance(value, list) else value)
        return metrics

    class AppleEnergyMonitor:
        def __init__(self) -> None:
            mod.calls.append("AppleEnergyMonitor")
            if init_error is not None:
                raise RuntimeError(init_error)
            self._windows: dict = {}

        def get_cumulative_energy(self) -> AppleEnergyMetrics:
            mod.calls.append("get_cumulative_energy")
            return snapshot()

        def begin_window(self, key: str, restart: bool = False) -> None:
            if key in self._windows and not restart:
                raise RuntimeError("Measurement with specified key already exists.")
            self._windows[key] = dict(counters)

        def end_window(self, key: str) -> AppleEnergyMetrics:
            if key not in self._windows:
                raise RuntimeError("No measurement with provided key had been started.")
            start, metrics = self._windows.pop(key), snapshot()
            for name, value in start.items():
                now = getattr(metrics, name)
                setattr(metrics, name, [a - b for a, b in zip(now, value)] if isinstance(value, list) else now - value)
            return metrics

    mod.AppleEnergyMetrics, mod.AppleEnergyMonitor = AppleEnergyMetrics, AppleEnergyMonitor
    return mod
