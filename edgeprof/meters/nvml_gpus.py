"""The GPUs NVML lists, through the binding (nvidia-ml-py, imported as ``pynvml`` only when asked for).

Loading the binding, every exception it raises as one line (:func:`translate`: a
:class:`~edgeprof.errors.MeterError`, or :class:`~edgeprof.errors.MeterPermissionError` with its fix), and per
GPU what :class:`~edgeprof.meters.nvml.NvmlMeter` needs: its handle, how its energy is read (``counter`` where
``nvmlDeviceGetTotalEnergyConsumption`` answers, else ``integrated_power`` from its instant power field or
``nvmlDeviceGetPowerUsage``; :func:`list_gpus`), its plausible-power bound, and its identity (PCI address, UUID,
MIG instances; :func:`identity`) for :mod:`edgeprof.meters.gpu_map`.

Plausibility: each GPU's bound is twice its power limit (twice, because the power reading may exceed the limit in
bursts): the largest limit NVML accepts for it (``nvmlDeviceGetPowerManagementLimitConstraints``) where that answers,
else the first of its enforced, management and default limits that does (:data:`LIMIT_CALLS`; a board, a vGPU or a
driver that does not let the limit be changed may answer only those), else :data:`DEFAULT_MAX_POWER_W`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters import gpu_map

INSTALL_FIX = "pip install nvidia-ml-py (an edgeprof dependency this environment lacks) and install the NVIDIA driver"
#: watts no single GPU board draws (the largest today are rated about 1.2 kW), used when NVML gives no limit
DEFAULT_MAX_POWER_W = 2000
#: the NVML functions that give a GPU's power limit in mW, most telling first, and what each one's answer is called
LIMIT_CALLS = (("nvmlDeviceGetPowerManagementLimitConstraints", "the largest power limit"),
               ("nvmlDeviceGetEnforcedPowerLimit", "the enforced power limit"),
               ("nvmlDeviceGetPowerManagementLimit", "the power management limit"),
               ("nvmlDeviceGetPowerManagementDefaultLimit", "the default power limit"))


def load_nvml(nvml_module: ModuleType | None = None) -> ModuleType:
    """The NVML binding: the injected module, else ``import pynvml``; MeterError when absent."""
    if nvml_module is not None:
        return nvml_module
    try:
        import pynvml
    except ImportError as err:
        raise MeterError(f"nvidia-ml-py is not installed. Fix: {INSTALL_FIX}") from err
    except Exception as err:  # a broken install: one line, not a traceback
        raise MeterError(f"nvidia-ml-py cannot be imported ({type(err).__name__}: {err}). Fix: {INSTALL_FIX}") from err
    return pynvml


def _error_value(nvml: ModuleType, err: BaseException) -> int | None:
    return getattr(err, "value", None)


def _unsupported(nvml: ModuleType, err: BaseException) -> bool:
    codes = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)}
    return _error_value(nvml, err) in codes


def _is_nvml_error(nvml: ModuleType, err: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError", None)
    return isinstance(cls, type) and isinstance(err, cls)


def _one_line(nvml: ModuleType, err: BaseException) -> str:
    """The error as one line; anything other than an ``NVMLError`` keeps its type name."""
    try:
        text = " ".join(str(err).split())
    except Exception:  # a broken __str__ must not escape either
        text = ""
    return text if _is_nvml_error(nvml, err) and text else f"{type(err).__name__}: {text}".rstrip(": ")


def translate(nvml: ModuleType, err: BaseException, what: str) -> MeterError:
    """``err``, raised by the binding while doing ``what``, as one line: MeterPermissionError (with its fix) for
    NVML's no-permission code, else MeterError."""
    if _error_value(nvml, err) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return MeterPermissionError(f"NVML {what}: insufficient permissions ({_one_line(nvml, err)}); "
                                    "run as a user in the video group")
    return MeterError(f"NVML {what}: {_one_line(nvml, err)}")


class Gpu:
    """One GPU's handle, how its energy is read, and its plausible-power bound."""

    def __init__(self, index: int, handle, gpu_name: str, method: str, max_power_mw: int, bound_source: str,
                 instant: bool = False, limit_mw: int = 0) -> None:
        self.index = index
        self.handle = handle
        self.gpu_name = gpu_name
        self.method = method
        self.max_power_mw = max_power_mw
        self.bound_source = bound_source
        #: integrated power read from the instant field (else nvmlDeviceGetPowerUsage's average)
        self.instant = instant
        #: the largest power limit NVML accepts for it, mW (0: NVML gave none)
        self.limit_mw = limit_mw

    @property
    def power_reading(self) -> str | None:
        """The NVML reading integrated for this GPU's energy (None where the energy counter is read)."""
        if self.method != "integrated_power":
            return None
        return "NVML_FI_DEV_POWER_INSTANT" if self.instant else "nvmlDeviceGetPowerUsage"


#: nvmlValueType_t -> the member of nvmlValue_t that holds a field's value (the type differs between drivers)
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def instant_power_mw(nvml: ModuleType, handle) -> float | None:
    """The GPU's instant power in mW (the field ``NVML_FI_DEV_POWER_INSTANT``), or None where the binding, the
    driver or the GPU does not answer it."""
    field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
    read = getattr(nvml, "nvmlDeviceGetFieldValues", None)
    if field is None or read is None:
        return None
    try:
        value = read(handle, [field])[0]
        if value.nvmlReturn != 0:
            return None
        return float(getattr(value.value, VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")))
    except Exception:  # not supported, or a binding that lays the structure out otherwise
        return None


def _name(nvml: ModuleType, handle) -> str:
    try:
        raw = nvml.nvmlDeviceGetName(handle)
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    except Exception:  # a name is only a label: any failure gives a placeholder
        return "unknown GPU"


def _power_limit_mw(nvml: ModuleType, handle) -> tuple[int, str]:
    """The GPU's power limit in mW and what it is: the first of :data:`LIMIT_CALLS` that answers with a positive
    figure ((0, "") where none does)."""
    for call, what in LIMIT_CALLS:
        try:
            answer = getattr(nvml, call)(handle)
            limit = int(answer[1] if isinstance(answer, (tuple, list)) else answer)
        except Exception:  # not supported, missing from the binding, or anything else: ask the next one
            continue
        if limit > 0:
            return limit, what
    return 0, ""


def _power_bound(limit_mw: int, what: str) -> tuple[int, str]:
    """The GPU's plausible-power bound in mW and where it comes from (see the module docstring)."""
    if limit_mw > 0:
        return 2 * limit_mw, f"2 x {what} ({limit_mw / 1000:g} W)"
    return DEFAULT_MAX_POWER_W * 1000, f"default {DEFAULT_MAX_POWER_W} W"


def _classify(nvml: ModuleType, index: int) -> Gpu | None:
    """Counter if the GPU has one, else power sampling, else None (the GPU cannot be measured)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as err:
        raise translate(nvml, err, f"handle of GPU {index}") from err
    name = _name(nvml, handle)
    for method, fn_name in (("counter", "nvmlDeviceGetTotalEnergyConsumption"),
                            ("integrated_power", "nvmlDeviceGetPowerUsage")):
        fn = getattr(nvml, fn_name, None)
        if fn is None:  # an older binding without it: as if NOT_SUPPORTED
            continue
        try:
            fn(handle)
        except Exception as err:
            if not _unsupported(nvml, err):
                raise translate(nvml, err, f"GPU {index} ({name})") from err
            continue
        instant = method == "integrated_power" and instant_power_mw(nvml, handle) is not None
        limit_mw, what = _power_limit_mw(nvml, handle)
        return Gpu(index, handle, name, method, *_power_bound(limit_mw, what), instant=instant, limit_mw=limit_mw)
    return None


def init(nvml: ModuleType) -> None:
    """``nvmlInit``; MeterError with one line when the driver does not answer."""
    try:
        nvml.nvmlInit()
    except Exception as err:
        raise translate(nvml, err, "init (is the NVIDIA driver loaded?)") from err


def shutdown(nvml: ModuleType) -> None:
    """``nvmlShutdown``, best effort (a failure to let go of the driver is not the run's)."""
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down is best effort
        pass


def list_gpus(nvml: ModuleType) -> tuple[Gpu, ...]:
    """Every GPU NVML can measure; MeterError (one line) for any failure of the binding."""
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as err:
        raise translate(nvml, err, "device count") from err
    return tuple(g for g in (_classify(nvml, i) for i in range(count)) if g)


def _optional(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when it fails or the binding lacks it: an identity that is not read maps nothing."""
    try:
        return fn()
    except Exception:
        return None


def identity(nvml: ModuleType, index: int) -> gpu_map.NvmlGpu:
    """NVML's PCI address, UUID, name and MIG UUIDs of GPU ``index`` (each empty where NVML does not answer)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = _optional(lambda: nvml.nvmlDeviceGetPciInfo(handle).busId)
    uuid = _optional(lambda: nvml.nvmlDeviceGetUUID(handle))
    migs = []
    for slot in range(_optional(lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))) or 0):
        mig = _optional(lambda: nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)))
        if mig:
            migs.append(mig.decode(errors="replace") if isinstance(mig, bytes) else str(mig))
    uuid = uuid.decode(errors="replace") if isinstance(uuid, bytes) else str(uuid or "")
    return gpu_map.NvmlGpu(index, gpu_map.pci_from_nvml(pci), uuid, _name(nvml, handle), tuple(migs))
