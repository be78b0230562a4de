"""NVIDIA GPU energy through NVML (nvidia-ml-py, imported as ``pynvml`` only when probed).

Per GPU, the most direct source available:
  * ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded; Volta and newer)
    -> method ``counter``; deltas accumulated in integer millijoules.
  * where that answers ``NVML_ERROR_NOT_SUPPORTED`` (or the function is missing), ``nvmlDeviceGetPowerUsage``
    (milliwatts) sampled by a :class:`~edgeprof.meters.sampler.PowerSampler` thread and integrated
    -> method ``integrated_power``.

``update_period_s`` is 0.1 s: NVML refreshes both the energy counter and the power reading about every
100 ms on most GPUs (on Ampere and newer the power reading is itself an average over up to 1 s), so a
window shorter than that is flagged by the profiler rather than reported as zero. The module is
injectable (``nvml_module``, also a ``discover()`` setting) so tests pass a fake with the same functions,
``NVMLError`` and error codes.
Every NVML error is translated into :class:`~edgeprof.errors.MeterError` (``raise ... from``).
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Callable, Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters.base import Backend, Domain, Meter, ProbeResult
from edgeprof.meters.sampler import PowerSampler

INSTALL_FIX = "pip install 'edgeprof[nvidia]' (nvidia-ml-py) and install the NVIDIA driver"


def load_nvml(nvml_module: ModuleType | None = None) -> ModuleType:
    """The NVML binding: the injected module, else ``import pynvml``; MeterError when absent."""
    if nvml_module is not None:
        return nvml_module
    try:
        import pynvml
    except ImportError as err:
        raise MeterError(f"nvidia-ml-py is not installed. Fix: {INSTALL_FIX}") from err
    return pynvml


def _error_value(nvml: ModuleType, err: BaseException) -> int | None:
    return getattr(err, "value", None)


def _unsupported(nvml: ModuleType, err: BaseException) -> bool:
    codes = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)}
    return _error_value(nvml, err) in codes


def _translate(nvml: ModuleType, err: BaseException, what: str) -> MeterError:
    if _error_value(nvml, err) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return MeterPermissionError(f"NVML {what}: insufficient permissions ({err}); run as a user in the video group")
    return MeterError(f"NVML {what}: {err}")


class _Gpu:
    """One GPU's handle and how its energy is read."""

    def __init__(self, index: int, handle, gpu_name: str, method: str) -> None:
        self.index = index
        self.handle = handle
        self.gpu_name = gpu_name
        self.method = method


def _name(nvml: ModuleType, handle) -> str:
    try:
        raw = nvml.nvmlDeviceGetName(handle)
    except nvml.NVMLError:
        return "unknown GPU"
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _classify(nvml: ModuleType, index: int) -> _Gpu | None:
    """Counter if the GPU has one, else power sampling, else None (the GPU cannot be measured)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as err:
        raise _translate(nvml, err, f"handle of GPU {index}") from err
    name = _name(nvml, handle)
    for method, fn in (("counter", nvml.nvmlDeviceGetTotalEnergyConsumption), ("integrated_power", nvml.nvmlDeviceGetPowerUsage)):
        try:
            fn(handle)
            return _Gpu(index, handle, name, method)
        except nvml.NVMLError as err:
            if not _unsupported(nvml, err):
                raise _translate(nvml, err, f"GPU {index} ({name})") from err
    return None


def _init(nvml: ModuleType) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise _translate(nvml, err, "init (is the NVIDIA driver loaded?)") from err


def _shutdown(nvml: ModuleType) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass


def probe(nvml_module: ModuleType | None = None) -> ProbeResult:
    """Whether NVML loads and at least one GPU reports energy or power."""
    try:
        nvml = load_nvml(nvml_module)
    except MeterError as err:
        return ProbeResult("nvml", False, str(err).split(". Fix")[0], INSTALL_FIX)
    try:
        _init(nvml)
    except MeterError as err:
        return ProbeResult("nvml", False, f"no NVIDIA GPU usable: {err}",
                           "install the NVIDIA driver (nvidia-smi must work) and check the GPU is visible here")
    try:
        gpus = [g for g in (_classify(nvml, i) for i in range(nvml.nvmlDeviceGetCount())) if g]
    except (MeterError, nvml.NVMLError) as err:
        return ProbeResult("nvml", False, f"NVML error while listing GPUs: {err}", "check nvidia-smi")
    finally:
        _shutdown(nvml)
    if not gpus:
        return ProbeResult("nvml", False, "NVML found no GPU with an energy counter or a power reading",
                           "a GPU that reports power is needed (nvidia-smi -q -d POWER)")
    return ProbeResult("nvml", True, domains=tuple(f"gpu_{g.index}" for g in gpus))


class NvmlMeter(Meter):
    """Cumulative joules per NVIDIA GPU: the energy counter where present, else integrated power."""

    name = "nvml"
    update_period_s = 0.1

    def __init__(self, nvml_module: ModuleType | None = None, *, hz: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, start_thread: bool = True) -> None:
        self._nvml = load_nvml(nvml_module)
        _init(self._nvml)
        self._closed = False
        self.hz = hz
        try:
            count = self._nvml.nvmlDeviceGetCount()
            self._gpus = tuple(g for g in (_classify(self._nvml, i) for i in range(count)) if g)
        except self._nvml.NVMLError as err:
            self.close()
            raise _translate(self._nvml, err, "device count") from err
        except MeterError:
            self.close()
            raise
        counters = [g for g in self._gpus if g.method == "counter"]
        self._start_mj = {f"gpu_{g.index}": self._energy_mj(g) for g in counters}
        self._counter_gpus = tuple(counters)
        powered = tuple(g for g in self._gpus if g.method == "integrated_power")
        self._sampler: PowerSampler | None = None
        if powered:
            self._sampler = PowerSampler(
                tuple(f"gpu_{g.index}" for g in powered),
                lambda: {f"gpu_{g.index}": self._power_mw(g) * 1000 for g in powered},
                hz=hz, clock_ns=clock_ns,
            )
            if start_thread:
                self._sampler.start()

    @property
    def sampler(self) -> PowerSampler | None:
        return self._sampler

    def _energy_mj(self, gpu: _Gpu) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
        except self._nvml.NVMLError as err:
            raise _translate(self._nvml, err, f"energy of GPU {gpu.index}") from err

    def _power_mw(self, gpu: _Gpu) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetPowerUsage(gpu.handle))
        except self._nvml.NVMLError as err:
            raise _translate(self._nvml, err, f"power of GPU {gpu.index}") from err

    def domains(self) -> tuple[Domain, ...]:
        return tuple(Domain(f"gpu_{g.index}", "gpu", g.method, in_total=True) for g in self._gpus)

    def read_j(self) -> Mapping[str, float]:
        out = {f"gpu_{g.index}": (self._energy_mj(g) - self._start_mj[f"gpu_{g.index}"]) / 1000
               for g in self._counter_gpus}
        if self._sampler is not None:
            out.update(self._sampler.energy_j())
        return {d.name: out[d.name] for d in self.domains()}

    def sync(self) -> None:
        """``torch.cuda.synchronize()`` when torch is already imported and has initialised CUDA."""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_sampler", None) is not None:
            self._sampler.stop()
        _shutdown(self._nvml)

    def describe(self) -> dict:
        info = super().describe()
        info["gpus"] = [{"index": g.index, "name": g.gpu_name, "method": g.method} for g in self._gpus]
        if self._sampler is not None:
            info["sampling_hz"] = self.hz
        info["resolution"] = "1 mJ counter" if self._counter_gpus else "1 mW power samples"
        return info


#: discovery's view of NVML: every NVIDIA GPU into column ``gpu``; ``nvml_module`` injects a fake pynvml
BACKEND = Backend(
    name="nvml", title="NVML", columns=("gpu",), settings={"nvml_module": None},
    probe=lambda ctx: probe(ctx.settings["nvml_module"]), open=lambda ctx: NvmlMeter(ctx.settings["nvml_module"]),
)
