"""AMD GPU energy through AMD SMI (ROCm's ``amdsmi`` Python library, imported only when probed; ``edgeprof[amd]``).

Per GPU (``amdsmi_get_processor_handles``), the most direct source available:
  * ``amdsmi_get_energy_count(handle)``: the GPU's energy accumulator, ``energy_accumulator`` counts (``power`` in
    amdsmi before ROCm 6.2.1) of ``counter_resolution`` microjoules each (15.3 uJ on the GPUs seen so far) ->
    method ``counter``; deltas accumulated in integer counts, converted to joules at the GPU's resolution.
  * where that answers ``AMDSMI_STATUS_NOT_SUPPORTED`` (or a resolution that is no positive number), the GPU's power
    from ``amdsmi_get_power_info(handle)`` in watts, sampled by a :class:`~edgeprof.meters.sampler.PowerSampler`
    thread and integrated -> method ``integrated_power``: ``current_socket_power`` (instant) where the GPU answers
    it, else ``average_socket_power``; amdsmi writes ``"N/A"`` for a figure the GPU does not give.

The round's GPU (setting ``gpu``, a torch device, shared with NVML): torch's ROCm build presents AMD GPUs as
``cuda:N``. Its domain ``gpu_amd_<amdsmi index>`` adds into column ``gpu`` and counts towards the total; every other
AMD GPU is ``gpu_amd_other_<index>`` in column ``gpu_other``, never in the total, as NVML's are. Which amdsmi GPU
``cuda:N`` is, is :func:`edgeprof.meters.gpu_map.map_device`'s answer, as for NVML: torch's PCI address against
``amdsmi_get_gpu_device_bdf``, else torch's UUID against HIP's (``hip_uuid`` of
``amdsmi_get_gpu_enumeration_info``, where this amdsmi has it), else the visible-devices variable HIP reads
(``HIP_VISIBLE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``, which HIP also honours), index entries counted in amdsmi's
order only when every AMD GPU is the same model. ``ROCR_VISIBLE_DEVICES`` filters the GPUs below HIP; with it set,
only torch's PCI address or UUID maps a device. When torch is imported and is a CUDA (not ROCm) build, ``cuda:N``
is an NVIDIA GPU and every AMD GPU is "other". ``gpu="cpu"``: every AMD GPU is other; ``gpu=None``: every one counts.

``update_period_s``: amdsmi does not document how often the accumulator moves; it is taken as
:data:`COUNTER_PERIOD_S` (100 ms, NVML's) until measured, so no shorter window is trusted. Integrated power: the
sampling period for ``current_socket_power``, :data:`POWER_AVERAGE_S` (1 s) for ``average_socket_power``. Power is
in whole watts (the resolution of that method).

Errors: every exception of the library (``AmdSmiLibraryException`` with its ``get_error_code()``,
``AmdSmiException``, or any other) becomes one :class:`~edgeprof.errors.MeterError` line (``raise ... from``);
``AMDSMI_STATUS_NO_PERM`` a :class:`~edgeprof.errors.MeterPermissionError` naming its fix. The library installed
without its native part (``libamd_smi.so`` of ROCm) fails on import (a ``KeyError`` or ``OSError``, after it prints
two lines, which are swallowed): the probe says so and names the fix.

Plausibility: each GPU's bound is twice its ``max_power_cap`` (``amdsmi_get_power_cap_info``, microwatts) where it
answers, else :data:`DEFAULT_MAX_POWER_W`. The accumulator is 64 bits wide, so it does not wrap in a machine's
lifetime; a reading below the previous one (a driver reload or GPU reset) is flagged ``counter reset`` and the
counter re-based; a rise faster than the bound times (elapsed + 1 s) is flagged ``counter jump`` (the known fault of
some GPUs' accumulators, ROCm/amdsmi issue 38). Neither adds anything. Power samples that are negative or above the
bound are not integrated (``implausible power``). The module is injectable (``amdsmi_module``) so tests pass a fake
with the library's functions, exceptions and status codes. What the meter shares with NVML's (the probe's steps, the
round's GPU against the others, the counter's checks, the sampler) is :class:`~edgeprof.meters.gpu_meter.GpuMeter`'s.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters import gpu_map
from edgeprof.meters.base import Backend, ProbeResult
from edgeprof.meters.gpu_meter import GpuMeter

INSTALL_FIX = ("on Linux with an AMD GPU: install ROCm (amd-smi must work), then pip install 'edgeprof[amd]' "
               "(the amdsmi package of the same version as ROCm)")
NATIVE_FIX = ("install ROCm's AMD SMI library (libamd_smi.so, package amd-smi-lib) and set ROCM_PATH (e.g. /opt/rocm); "
              "keep the amdsmi package at the installed ROCm's version")
MAPPING_FIX = ("pass the torch device the round runs on (gpu='cuda:N', N counted among the GPUs torch sees) and "
               "check HIP_VISIBLE_DEVICES; import torch first so that its PCI address can be read")
PERMISSION_FIX = "add this user to the video and render groups"
#: the library's status codes used here (amdsmi_wrapper.AMDSMI_STATUS_*)
STATUS_NOT_SUPPORTED = 2
STATUS_NO_PERM = 10
#: watts no single GPU board draws (an MI300X is rated 750 W), used when amdsmi gives no power cap
DEFAULT_MAX_POWER_W = 2000
#: seconds the accumulator is taken to move in (not documented by amdsmi; NVML's, until measured)
COUNTER_PERIOD_S = 0.1
#: seconds ``average_socket_power`` may average over (taken as NVML's average's)
POWER_AVERAGE_S = 1.0


def load_amdsmi(amdsmi_module: ModuleType | None = None) -> ModuleType:
    """The library: the injected module, else ``import amdsmi`` (its prints swallowed); MeterError when absent or
    when its native part does not load."""
    if amdsmi_module is not None:
        return amdsmi_module
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints two lines when libamd_smi.so is missing
            import amdsmi
    except ImportError as err:
        if err.name == "amdsmi":
            raise MeterError(f"amdsmi is not installed. Fix: {INSTALL_FIX}") from err
        raise MeterError(f"amdsmi cannot be imported ({type(err).__name__}: {err}). Fix: {NATIVE_FIX}") from err
    except Exception as err:  # KeyError 'libamd_smi.so', OSError, AttributeError: the native part
        raise MeterError(f"amdsmi is installed but its native library does not load ({type(err).__name__}: {err}). "
                         f"Fix: {NATIVE_FIX}") from err
    return amdsmi


def _code(err: BaseException) -> int | None:
    getter = getattr(err, "get_error_code", None)
    try:
        return int(getter()) if callable(getter) else getattr(err, "err_code", None)
    except Exception:
        return None


def translate(smi: ModuleType, err: BaseException, what: str) -> MeterError:
    """``err``, raised by the library while doing ``what``, as one line: MeterPermissionError (with its fix) for
    ``AMDSMI_STATUS_NO_PERM``, else MeterError; anything but the library's exceptions keeps its type name."""
    try:
        text = " ".join(str(err).split())
    except Exception:  # a broken __str__ must not escape either
        text = ""
    base = getattr(smi, "AmdSmiException", None)
    if not (isinstance(base, type) and isinstance(err, base)) or not text:
        text = f"{type(err).__name__}: {text}".rstrip(": ")
    if _code(err) == STATUS_NO_PERM:
        return MeterPermissionError(f"AMD SMI {what}: permission denied ({text}); {PERMISSION_FIX}")
    return MeterError(f"AMD SMI {what}: {text}")


def _call(smi: ModuleType, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as err:
        raise translate(smi, err, what) from err


def _optional(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when it fails or the library lacks it."""
    try:
        return fn()
    except Exception:
        return None


def init(smi: ModuleType) -> None:
    """``amdsmi_init()`` (its default: AMD GPUs only); MeterError with one line when the driver does not answer."""
    _call(smi, "init (is the amdgpu driver loaded?)", lambda: smi.amdsmi_init())


def shutdown(smi: ModuleType) -> None:
    """``amdsmi_shut_down()``, best effort."""
    with contextlib.suppress(Exception):
        smi.amdsmi_shut_down()


@dataclass(frozen=True)
class AmdGpu:
    """One AMD GPU: its handle, identity (for :mod:`edgeprof.meters.gpu_map`), reading method and power bound."""

    index: int
    handle: Any
    identity: gpu_map.NvmlGpu
    method: str  # counter or integrated_power
    max_power_mw: int
    bound_source: str
    power_key: str = ""  # the amdsmi_get_power_info key integrated, for integrated_power
    limit_mw: int = 0

    @property
    def instant(self) -> bool:
        """Whether the power integrated is the instant ``current_socket_power`` (else an average)."""
        return self.power_key == "current_socket_power"


def _watts(info: Any, key: str) -> float | None:
    value = info.get(key) if isinstance(info, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None  # "N/A", absent
    return float(value)


def energy_count(smi: ModuleType, handle: Any, index: int) -> tuple[int, float]:
    """(accumulator counts, microjoules per count) of GPU ``index``, from either spelling of the library's dict."""
    raw = _call(smi, f"energy of GPU {index}", lambda: smi.amdsmi_get_energy_count(handle))
    count = raw.get("energy_accumulator", raw.get("power")) if isinstance(raw, Mapping) else None
    resolution = raw.get("counter_resolution") if isinstance(raw, Mapping) else None
    if isinstance(count, bool) or not isinstance(count, int) or not isinstance(resolution, (int, float)):
        raise MeterError(f"AMD SMI energy of GPU {index}: amdsmi_get_energy_count returned {raw!r}, without an "
                         "integer energy_accumulator (or power) and a counter_resolution")
    return count, float(resolution)


def _classify(smi: ModuleType, index: int, handle: Any) -> AmdGpu | None:
    """How GPU ``index`` is read: its counter, else its power; None when it gives neither."""
    identity = gpu_map.NvmlGpu(
        index, gpu_map.pci_from_nvml(_optional(lambda: smi.amdsmi_get_gpu_device_bdf(handle))),
        str(_optional(lambda: smi.amdsmi_get_gpu_enumeration_info(handle)["hip_uuid"]) or ""),
        str(_optional(lambda: smi.amdsmi_get_gpu_asic_info(handle)["market_name"]) or "AMD GPU"))
    cap_uw = _optional(lambda: int(smi.amdsmi_get_power_cap_info(handle)["max_power_cap"])) or 0
    limit_mw = cap_uw // 1000 if cap_uw > 0 else 0
    bound_mw, source = ((2 * limit_mw, f"2 x max_power_cap ({limit_mw / 1000:g} W)") if limit_mw else
                        (DEFAULT_MAX_POWER_W * 1000, f"default {DEFAULT_MAX_POWER_W} W"))
    try:
        _, resolution = energy_count(smi, handle, index)
        if math.isfinite(resolution) and resolution > 0:
            return AmdGpu(index, handle, identity, "counter", bound_mw, source, limit_mw=limit_mw)
    except MeterError as err:
        if _code(err.__cause__) not in (STATUS_NOT_SUPPORTED, None) or isinstance(err, MeterPermissionError):
            raise
    info = _optional(lambda: smi.amdsmi_get_power_info(handle))
    key = next((k for k in ("current_socket_power", "average_socket_power") if _watts(info, k) is not None), "")
    return AmdGpu(index, handle, identity, "integrated_power", bound_mw, source, key, limit_mw) if key else None


def list_gpus(smi: ModuleType) -> tuple[AmdGpu, ...]:
    """Every AMD GPU the library can measure; MeterError (one line) for any failure of the library."""
    handles = _call(smi, "list of GPUs", lambda: smi.amdsmi_get_processor_handles())
    return tuple(g for g in (_classify(smi, i, h) for i, h in enumerate(handles)) if g)


def _torch_is_cuda_build() -> bool:
    """Whether torch is imported and is a CUDA (not ROCm) build: its ``cuda:N`` is then no AMD GPU."""
    version = getattr(sys.modules.get("torch"), "version", None)
    return version is not None and not getattr(version, "hip", None) and bool(getattr(version, "cuda", None))


def round_gpu(gpus: tuple[AmdGpu, ...], gpu: Any, *, device_properties: Callable[[int], Any] | None = None,
              environ: Mapping[str, str] | None = None) -> gpu_map.Mapped | None:
    """The amdsmi GPU that runs torch device ``gpu`` (None for a host device, or for ``cuda:N`` of a CUDA build of
    torch). ConfigError for what is no torch device, MeterError (one line) for a device no AMD GPU matches."""
    ordinal = gpu_map.parse_device(gpu, current=gpu_map.current_ordinal())
    if ordinal is None or _torch_is_cuda_build():
        return None
    env = os.environ if environ is None else environ
    props = (device_properties or gpu_map.torch_properties)(ordinal)
    named = "HIP_VISIBLE_DEVICES" if env.get("HIP_VISIBLE_DEVICES") is not None else "CUDA_VISIBLE_DEVICES"
    by_torch = gpu_map.pci_from_torch(props) is not None or bool(gpu_map.uuid_key(getattr(props, "uuid", None)))
    models = {g.identity.name for g in gpus}
    why = ("" if by_torch else
           "ROCR_VISIBLE_DEVICES hides GPUs below HIP" if env.get("ROCR_VISIBLE_DEVICES") is not None else
           f"HIP's order of unlike GPUs ({', '.join(sorted(models))}) need not be AMD SMI's" if len(models) > 1 else "")
    if why:
        raise MeterError(f"cannot tell which AMD SMI GPU runs torch device cuda:{ordinal}: {why}, and torch gives "
                         "no PCI address or UUID")
    return gpu_map.map_device(ordinal, [g.identity for g in gpus], props, visible=env.get(named),
                              library="AMD SMI", variable=named)


def probe(amdsmi_module: ModuleType | None = None, gpu: Any = None, *,
          device_properties: Callable[[int], Any] | None = None, environ: Mapping[str, str] | None = None,
          ) -> ProbeResult:
    """Whether amdsmi loads, at least one AMD GPU reports energy or power, and the round's GPU ``gpu`` (a torch
    device, see the module docstring) is one of them. A ``gpu`` that is no torch device is a ConfigError."""
    return AmdSmiMeter.probe(amdsmi_module, gpu, device_properties=device_properties, environ=environ)


class AmdSmiMeter(GpuMeter):
    """Cumulative joules per AMD GPU: the energy accumulator where present, else integrated power.

    ``amdsmi_module`` injects a fake amdsmi; the other options (``gpu``, ``hz``, ``clock_ns``, ``start_thread``,
    ``device_properties`` and ``environ``, as for :func:`round_gpu`) are :class:`~edgeprof.meters.gpu_meter.GpuMeter`'s.
    """

    name = "amdsmi"
    update_period_s = counter_period_s = COUNTER_PERIOD_S
    power_average_s = POWER_AVERAGE_S
    library, vendor_gpu, every_gpu = "AMD SMI", "AMD GPU", "AMD GPU"
    not_round = "a host device, or cuda:N of a CUDA build of torch"
    domain_prefix, index_key, units_per_mj = "gpu_amd", "amdsmi_index", 1000  # counts x counter_resolution: uJ
    reset_subject, count_unit = "AMD GPU {index} energy accumulator", "counts"
    jump_subject = "AMD GPU {index} energy"
    resolution = ("energy accumulator counts (counter_resolution uJ each)", "1 W power samples")
    needs_a_gpu = True
    fixes = {"load": NATIVE_FIX, "list": "check amd-smi metric --power --energy", "mapping": MAPPING_FIX,
             "init": "load the amdgpu driver and check that amd-smi lists the GPU",
             "none": "an AMD GPU that reports power is needed (amd-smi metric --power)"}

    def __init__(self, amdsmi_module: ModuleType | None = None, **options: Any) -> None:
        super().__init__(amdsmi_module, **options)

    _load = staticmethod(load_amdsmi)
    _init = staticmethod(init)
    _shutdown = staticmethod(shutdown)
    _list = staticmethod(list_gpus)

    @staticmethod
    def _find(smi: ModuleType, gpus: tuple[AmdGpu, ...], gpu: Any, device_properties, environ,
              ) -> gpu_map.Mapped | None:
        return round_gpu(gpus, gpu, device_properties=device_properties, environ=environ)

    @classmethod
    def _fix(cls, step: str, err: MeterError | None) -> str:
        """The library missing (not its native part) and a permission denied have fixes of their own."""
        if step == "load" and " not installed" in str(err):
            return INSTALL_FIX
        if step in ("init", "list") and isinstance(err, MeterPermissionError):
            return PERMISSION_FIX
        return cls.fixes[step]

    def _read_counter(self, gpu: AmdGpu) -> tuple[int, float]:
        """The accumulator's counts and microjoules per count."""
        return energy_count(self._lib, gpu.handle, gpu.index)

    def _power_uw(self, gpu: AmdGpu) -> int:
        info = _call(self._lib, f"power of GPU {gpu.index}", lambda: self._lib.amdsmi_get_power_info(gpu.handle))
        watts = _watts(info, gpu.power_key)
        if watts is None:
            raise MeterError(f"AMD SMI power of GPU {gpu.index}: {gpu.power_key}, answered when the meter opened, "
                             f"now reads {info.get(gpu.power_key) if isinstance(info, Mapping) else info!r}")
        return round(watts * 10**6)

    def _describe_gpu(self, g: AmdGpu) -> dict:
        return {"index": g.index, "name": g.identity.name, "method": g.method, "domain": self._key(g),
                "max_power_w": g.max_power_mw / 1000, "max_power_source": g.bound_source,
                **({"resolution_uj": self._per_count[self._key(g)]} if g.method == "counter" else {}),
                **({"power_reading": g.power_key} if g.power_key else {})}


#: discovery's view of AMD SMI: the round's AMD GPU (setting ``gpu``, shared with NVML) into column ``gpu``, the
#: others into ``gpu_other``; ``amdsmi_module`` injects a fake amdsmi
BACKEND = Backend(
    name="amdsmi", title="AMD SMI", columns=("gpu", "gpu_other"), settings={"amdsmi_module": None, "gpu": None},
    probe=lambda ctx: probe(ctx.settings["amdsmi_module"], ctx.settings["gpu"]),
    open=lambda ctx: AmdSmiMeter(ctx.settings["amdsmi_module"], gpu=ctx.settings["gpu"]),
)
