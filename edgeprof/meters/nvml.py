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
Every exception the binding raises (``NVMLError`` or any other) is translated into
:class:`~edgeprof.errors.MeterError` with one line (``raise ... from``); while probing it is the probe's reason.

Plausibility: each GPU's bound is twice the largest power limit NVML accepts for it
(``nvmlDeviceGetPowerManagementLimitConstraints``; twice, because the power reading may exceed the limit in
bursts) when it answers, else :data:`DEFAULT_MAX_POWER_W`. The total-energy counter only grows while the
driver stays loaded: a reading below the previous one (a driver reload or GPU reset; read naively, -5,400 J in
one window) is flagged ``counter reset`` and the counter re-based; a rise faster than the bound times
(elapsed + 1 s) is flagged ``counter jump`` (the second of slack covers the 100 ms updates and the power
averaging of up to 1 s). Neither adds anything. Power samples that are negative or above the bound are not
integrated (``implausible power``, see :mod:`edgeprof.meters.sampler`).
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Callable, Mapping

from edgeprof.errors import MeterError, MeterPermissionError
from edgeprof.meters.base import Backend, Domain, Invalid, Meter, ProbeResult
from edgeprof.meters.sampler import PowerSampler

INSTALL_FIX = "pip install 'edgeprof[nvidia]' (nvidia-ml-py) and install the NVIDIA driver"
#: watts no single GPU board draws (the largest today are rated about 1.2 kW), used when NVML gives no limit
DEFAULT_MAX_POWER_W = 2000
#: seconds added to the elapsed time before a counter step's implied power is compared with the bound
SLACK_S = 1.0


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


def _translate(nvml: ModuleType, err: BaseException, what: str) -> MeterError:
    if _error_value(nvml, err) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return MeterPermissionError(f"NVML {what}: insufficient permissions ({_one_line(nvml, err)}); "
                                    "run as a user in the video group")
    return MeterError(f"NVML {what}: {_one_line(nvml, err)}")


class _Gpu:
    """One GPU's handle, how its energy is read, and its plausible-power bound."""

    def __init__(self, index: int, handle, gpu_name: str, method: str, max_power_mw: int, bound_source: str) -> None:
        self.index = index
        self.handle = handle
        self.gpu_name = gpu_name
        self.method = method
        self.max_power_mw = max_power_mw
        self.bound_source = bound_source


def _name(nvml: ModuleType, handle) -> str:
    try:
        raw = nvml.nvmlDeviceGetName(handle)
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    except Exception:  # a name is only a label: any failure gives a placeholder
        return "unknown GPU"


def _power_bound(nvml: ModuleType, handle) -> tuple[int, str]:
    """The GPU's plausible-power bound in mW and where it comes from (see the module docstring)."""
    try:
        limit_mw = int(nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)[1])
    except Exception:  # not supported, missing from the binding, or anything else: the default applies
        limit_mw = 0
    if limit_mw > 0:
        return 2 * limit_mw, f"2 x the largest power limit ({limit_mw / 1000:g} W)"
    return DEFAULT_MAX_POWER_W * 1000, f"default {DEFAULT_MAX_POWER_W} W"


def _classify(nvml: ModuleType, index: int) -> _Gpu | None:
    """Counter if the GPU has one, else power sampling, else None (the GPU cannot be measured)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as err:
        raise _translate(nvml, err, f"handle of GPU {index}") from err
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
                raise _translate(nvml, err, f"GPU {index} ({name})") from err
            continue
        return _Gpu(index, handle, name, method, *_power_bound(nvml, handle))
    return None


def _init(nvml: ModuleType) -> None:
    try:
        nvml.nvmlInit()
    except Exception as err:
        raise _translate(nvml, err, "init (is the NVIDIA driver loaded?)") from err


def _shutdown(nvml: ModuleType) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down is best effort
        pass


def _list_gpus(nvml: ModuleType) -> tuple[_Gpu, ...]:
    """Every GPU NVML can measure; MeterError (one line) for any failure of the binding."""
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as err:
        raise _translate(nvml, err, "device count") from err
    return tuple(g for g in (_classify(nvml, i) for i in range(count)) if g)


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
        gpus = _list_gpus(nvml)
    except MeterError as err:
        return ProbeResult("nvml", False, f"NVML error while listing GPUs: {err}", "check nvidia-smi")
    finally:
        _shutdown(nvml)
    if not gpus:
        return ProbeResult("nvml", False, "NVML found no GPU with an energy counter or a power reading",
                           "a GPU that reports power is needed (nvidia-smi -q -d POWER)")
    return ProbeResult("nvml", True, domains=tuple(f"gpu_{g.index}" for g in gpus))


class NvmlMeter(Meter):
    """Cumulative joules per NVIDIA GPU: the energy counter where present, else integrated power.

    ``clock_ns`` (default :func:`time.monotonic_ns`) times the power samples and the counter steps.
    """

    name = "nvml"
    update_period_s = 0.1

    def __init__(self, nvml_module: ModuleType | None = None, *, hz: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, start_thread: bool = True) -> None:
        self._nvml = load_nvml(nvml_module)
        _init(self._nvml)
        self._closed = False
        self._sampler: PowerSampler | None = None
        self.hz = hz
        self._clock_ns = clock_ns
        try:
            self._gpus = _list_gpus(self._nvml)
            self._counter_gpus = tuple(g for g in self._gpus if g.method == "counter")
            self._last_t_ns = clock_ns()
            self._last_mj = {f"gpu_{g.index}": self._energy_mj(g) for g in self._counter_gpus}
            self._total_mj = {key: 0 for key in self._last_mj}
            powered = tuple(g for g in self._gpus if g.method == "integrated_power")
            if powered:  # its first sample is taken here
                self._sampler = PowerSampler(
                    tuple(f"gpu_{g.index}" for g in powered),
                    lambda: {f"gpu_{g.index}": self._power_mw(g) * 1000 for g in powered},
                    hz=hz, clock_ns=clock_ns, max_power_uw={f"gpu_{g.index}": g.max_power_mw * 1000 for g in powered},
                )
        except MeterError:
            self.close()
            raise
        if self._sampler is not None and start_thread:
            self._sampler.start()

    @property
    def sampler(self) -> PowerSampler | None:
        return self._sampler

    def _energy_mj(self, gpu: _Gpu) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
        except Exception as err:
            raise _translate(self._nvml, err, f"energy of GPU {gpu.index}") from err

    def _power_mw(self, gpu: _Gpu) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetPowerUsage(gpu.handle))
        except Exception as err:
            raise _translate(self._nvml, err, f"power of GPU {gpu.index}") from err

    def domains(self) -> tuple[Domain, ...]:
        return tuple(Domain(f"gpu_{g.index}", "gpu", g.method, in_total=True) for g in self._gpus)

    def read_j(self) -> Mapping[str, float]:
        t_ns = self._clock_ns()
        elapsed_s = max(t_ns - self._last_t_ns, 0) / 1e9
        for gpu in self._counter_gpus:
            key, now = f"gpu_{gpu.index}", self._energy_mj(gpu)
            problem = self._problem(gpu, self._last_mj[key], now, elapsed_s)
            if problem:
                self.flag_invalid(key, problem)
            else:
                self._total_mj[key] += now - self._last_mj[key]
            self._last_mj[key] = now
        self._last_t_ns = t_ns
        out = {key: mj / 1000 for key, mj in self._total_mj.items()}
        if self._sampler is not None:
            energy, invalid = self._sampler.read()
            out.update(energy)
            for key, why in invalid.items():
                self.flag_invalid(key, Invalid("implausible power", why))
        return {d.name: out[d.name] for d in self.domains()}

    @staticmethod
    def _problem(gpu: _Gpu, last: int, now: int, elapsed_s: float) -> Invalid | None:
        """Why the counter step from ``last`` to ``now`` mJ cannot be trusted (None when it can)."""
        if now < last:
            return Invalid("counter reset", f"GPU {gpu.index} total energy went back from {last} to {now} mJ "
                                            "(driver reload or GPU reset)")
        if (now - last) > gpu.max_power_mw * (elapsed_s + SLACK_S):  # mJ vs mW * s
            return Invalid("counter jump", f"GPU {gpu.index} total energy rose {(now - last) / 1000:.6g} J in "
                                           f"{elapsed_s:.3g} s, over {gpu.max_power_mw / 1000:g} W "
                                           f"({gpu.bound_source}) x (elapsed + {SLACK_S:g} s)")
        return None

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
        info["gpus"] = [{"index": g.index, "name": g.gpu_name, "method": g.method, "max_power_w": g.max_power_mw / 1000,
                         "max_power_source": g.bound_source} for g in self._gpus]
        if self._sampler is not None:
            info["sampling_hz"] = self.hz
        info["resolution"] = "1 mJ counter" if self._counter_gpus else "1 mW power samples"
        return info


#: discovery's view of NVML: every NVIDIA GPU into column ``gpu``; ``nvml_module`` injects a fake pynvml
BACKEND = Backend(
    name="nvml", title="NVML", columns=("gpu",), settings={"nvml_module": None},
    probe=lambda ctx: probe(ctx.settings["nvml_module"]), open=lambda ctx: NvmlMeter(ctx.settings["nvml_module"]),
)
