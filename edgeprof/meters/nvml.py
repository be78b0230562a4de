"""NVIDIA GPU energy through NVML (nvidia-ml-py, imported as ``pynvml`` only when probed).

Per GPU, the most direct source available:
  * ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded; Volta and newer)
    -> method ``counter``; deltas accumulated in integer millijoules.
  * where that answers ``NVML_ERROR_NOT_SUPPORTED`` (or the function is missing), the GPU's power (milliwatts)
    sampled by a :class:`~edgeprof.meters.sampler.PowerSampler` thread and integrated -> method
    ``integrated_power``: its instant power (the field ``NVML_FI_DEV_POWER_INSTANT``) where the GPU answers it,
    else ``nvmlDeviceGetPowerUsage``, which on Ampere (but GA100) and newer is an average over the last second.

The round's GPU (``gpu``, a torch device such as ``"cuda:1"``, also a ``discover()`` setting): its domain
``gpu_<nvml index>`` adds into column ``gpu`` and counts towards the total; every other GPU is measured beside
it, domain ``gpu_other_<nvml index>`` in column ``gpu_other``, never in the total (its work is not the round's).
Which NVML GPU a torch device is, honouring ``CUDA_VISIBLE_DEVICES``, is :mod:`edgeprof.meters.gpu_map`'s
business; torch's device properties (PCI address, UUID) are read only when torch is already imported.
``gpu="cpu"`` makes every GPU "other"; ``gpu=None`` (the default: the run does not say where its work runs,
e.g. a monitor around a user's code) counts every GPU in ``gpu``, as before the round's GPU was known.

``update_period_s`` is 0.1 s where every GPU has the energy counter: NVML refreshes it about every 100 ms.
Where a GPU's figure is integrated from ``nvmlDeviceGetPowerUsage`` it is :data:`POWER_AVERAGE_S` (1 s): that
reading is itself an average over up to 1 s, so a window shorter than that cannot be told from its neighbours;
integrated from instant power it is the sampling period. Either way a shorter window is flagged by the profiler (``short_window``) rather than trusted. The module is
injectable (``nvml_module``, also a ``discover()`` setting) so tests pass a fake with the same functions,
``NVMLError`` and error codes.
Every exception the binding raises (``NVMLError`` or any other) is translated into
:class:`~edgeprof.errors.MeterError` with one line (``raise ... from``); while probing it is the probe's reason.

Plausibility: each GPU's bound (:mod:`edgeprof.meters.nvml_gpus`: twice its largest power limit, else
:data:`~edgeprof.meters.nvml_gpus.DEFAULT_MAX_POWER_W`). The total-energy counter only grows while the
driver stays loaded: a reading below the previous one (a driver reload or GPU reset; read naively, -5,400 J in
one window) is flagged ``counter reset`` and the counter re-based; a rise faster than the bound times
(elapsed + 1 s) is flagged ``counter jump`` (the second of slack covers the 100 ms updates and the power
averaging of up to 1 s). Neither adds anything. Power samples that are negative or above the bound are not
integrated (``implausible power``, see :mod:`edgeprof.meters.sampler`).
"""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any, Callable, Mapping

from edgeprof.errors import MeterError
from edgeprof.meters import gpu_map
from edgeprof.meters.base import Backend, Domain, Invalid, Meter, ProbeResult
from edgeprof.meters.nvml_gpus import (INSTALL_FIX, Gpu, identity, init, instant_power_mw, list_gpus, load_nvml,
                                       shutdown, translate)
from edgeprof.meters.sampler import PowerSampler

MAPPING_FIX = ("pass the torch device the round runs on (gpu='cuda:N', N counted among the GPUs torch sees) and "
               "check CUDA_VISIBLE_DEVICES; import torch first so that its PCI address can be read")
#: seconds added to the elapsed time before a counter step's implied power is compared with the bound
SLACK_S = 1.0
#: seconds NVML's power reading may average over (Ampere and newer): the update period of integrated power
POWER_AVERAGE_S = 1.0
#: seconds between updates of the energy counter
COUNTER_PERIOD_S = 0.1


def round_gpu(nvml: ModuleType, gpu: Any, *, device_properties: Callable[[int], Any] | None = None,
              environ: Mapping[str, str] | None = None) -> gpu_map.Mapped | None:
    """The NVML GPU that runs torch device ``gpu`` (None for a host device such as ``"cpu"``).

    ``device_properties(ordinal)`` gives torch's properties (default
    :func:`~edgeprof.meters.gpu_map.torch_properties`); ``environ`` holds ``CUDA_VISIBLE_DEVICES`` and
    ``CUDA_DEVICE_ORDER`` (default ``os.environ``). One-line errors: ConfigError for what is no torch device,
    MeterError for a device no NVML GPU can be matched to.
    """
    ordinal = gpu_map.parse_device(gpu, current=gpu_map.current_ordinal())
    if ordinal is None:
        return None
    env = os.environ if environ is None else environ
    try:
        gpus = [identity(nvml, i) for i in range(int(nvml.nvmlDeviceGetCount()))]
    except Exception as err:
        raise translate(nvml, err, f"identity of the GPUs (to find {gpu})") from err
    props = (device_properties or gpu_map.torch_properties)(ordinal)
    return gpu_map.map_device(ordinal, gpus, props, visible=env.get("CUDA_VISIBLE_DEVICES"),
                              device_order=env.get("CUDA_DEVICE_ORDER"))


def _round_indices(nvml: ModuleType, gpus: tuple[Gpu, ...], gpu: Any, device_properties, environ,
                   ) -> tuple[frozenset[int], gpu_map.Mapped | None]:
    """The NVML indices whose energy is the round's (every GPU when ``gpu`` is None), and the mapping."""
    if gpu is None:
        return frozenset(g.index for g in gpus), None
    mapped = round_gpu(nvml, gpu, device_properties=device_properties, environ=environ)
    if mapped is None:
        return frozenset(), None
    if mapped.nvml_index not in {g.index for g in gpus}:
        raise MeterError(f"NVML GPU {mapped.nvml_index}, which runs torch device {gpu} ({mapped.how}), reports "
                         "neither an energy counter nor power")
    return frozenset({mapped.nvml_index}), mapped


def _domain(gpu: Gpu, round_indices: frozenset[int]) -> Domain:
    """``gpu_<i>`` in column ``gpu`` for the round's GPU, ``gpu_other_<i>`` beside the total for the others."""
    if gpu.index in round_indices:
        return Domain(f"gpu_{gpu.index}", "gpu", gpu.method, in_total=True)
    return Domain(f"gpu_other_{gpu.index}", "gpu_other", gpu.method, in_total=False)


def probe(nvml_module: ModuleType | None = None, gpu: Any = None, *,
          device_properties: Callable[[int], Any] | None = None, environ: Mapping[str, str] | None = None,
          ) -> ProbeResult:
    """Whether NVML loads, at least one GPU reports energy or power, and the round's GPU ``gpu`` (a torch
    device, see the module docstring) is one of them. A ``gpu`` that is no torch device is a ConfigError."""
    if gpu is not None:
        gpu_map.parse_device(gpu)  # a typo is the user's: one line, before any driver call
    try:
        nvml = load_nvml(nvml_module)
    except MeterError as err:
        return ProbeResult("nvml", False, str(err).split(". Fix")[0], INSTALL_FIX)
    try:
        init(nvml)
    except MeterError as err:
        return ProbeResult("nvml", False, f"no NVIDIA GPU usable: {err}",
                           "install the NVIDIA driver (nvidia-smi must work) and check the GPU is visible here")
    try:
        return _probe_gpus(nvml, gpu, device_properties, environ)
    finally:
        shutdown(nvml)


def _probe_gpus(nvml: ModuleType, gpu: Any, device_properties, environ) -> ProbeResult:
    try:
        gpus = list_gpus(nvml)
    except MeterError as err:
        return ProbeResult("nvml", False, f"NVML error while listing GPUs: {err}", "check nvidia-smi")
    if not gpus:
        return ProbeResult("nvml", False, "NVML found no GPU with an energy counter or a power reading",
                           "a GPU that reports power is needed (nvidia-smi -q -d POWER)")
    try:
        rounds = _round_indices(nvml, gpus, gpu, device_properties, environ)[0]
    except MeterError as err:
        return ProbeResult("nvml", False, f"the round's GPU cannot be measured: {err}", MAPPING_FIX)
    return ProbeResult("nvml", True, domains=tuple(_domain(g, rounds).name for g in gpus))


class NvmlMeter(Meter):
    """Cumulative joules per NVIDIA GPU: the energy counter where present, else integrated power.

    ``gpu``: the torch device the round runs on (see the module docstring); ``device_properties`` and
    ``environ`` as for :func:`round_gpu`. ``clock_ns`` (default :func:`time.monotonic_ns`) times the power
    samples and the counter steps.
    """

    name = "nvml"
    update_period_s = COUNTER_PERIOD_S

    def __init__(self, nvml_module: ModuleType | None = None, *, gpu: Any = None, hz: float = 10.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, start_thread: bool = True,
                 device_properties: Callable[[int], Any] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        if gpu is not None:
            gpu_map.parse_device(gpu)  # a typo is the user's: one line, before any driver call
        self._nvml = load_nvml(nvml_module)
        init(self._nvml)
        self._closed = False
        self._sampler: PowerSampler | None = None
        self.hz = hz
        self._clock_ns = clock_ns
        self._gpu = gpu
        try:
            self._gpus = list_gpus(self._nvml)
            rounds, self._mapped = _round_indices(self._nvml, self._gpus, gpu, device_properties, environ)
            self._domains = {g.index: _domain(g, rounds) for g in self._gpus}
            self._open_readers(hz, clock_ns)
        except MeterError:
            self.close()
            raise
        if self._sampler is not None and start_thread:
            self._sampler.start()

    def _open_readers(self, hz: float, clock_ns: Callable[[], int]) -> None:
        """The counters' first readings and, for GPUs without the counter, the power sampler (first sample now)."""
        self._counter_gpus = tuple(g for g in self._gpus if g.method == "counter")
        self._last_t_ns = clock_ns()
        self._last_mj = {self._key(g): self._energy_mj(g) for g in self._counter_gpus}
        self._total_mj = {key: 0 for key in self._last_mj}
        powered = tuple(g for g in self._gpus if g.method == "integrated_power")
        if powered:
            self.update_period_s = POWER_AVERAGE_S if not all(g.instant for g in powered) else max(
                COUNTER_PERIOD_S if self._counter_gpus else 0.0, 1.0 / hz)
            self._sampler = PowerSampler(
                tuple(self._key(g) for g in powered),
                lambda: {self._key(g): self._power_mw(g) * 1000 for g in powered},
                hz=hz, clock_ns=clock_ns, max_power_uw={self._key(g): g.max_power_mw * 1000 for g in powered},
            )

    def _key(self, gpu: Gpu) -> str:
        return self._domains[gpu.index].name

    @property
    def sampler(self) -> PowerSampler | None:
        return self._sampler

    def _energy_mj(self, gpu: Gpu) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
        except Exception as err:
            raise translate(self._nvml, err, f"energy of GPU {gpu.index}") from err

    def _power_mw(self, gpu: Gpu) -> float:
        if gpu.instant:
            value = instant_power_mw(self._nvml, gpu.handle)
            if value is None:
                raise MeterError(f"NVML instant power of GPU {gpu.index}: the field NVML_FI_DEV_POWER_INSTANT, "
                                 "answered when the meter opened, is no longer answered")
            return value
        try:
            return int(self._nvml.nvmlDeviceGetPowerUsage(gpu.handle))
        except Exception as err:
            raise translate(self._nvml, err, f"power of GPU {gpu.index}") from err

    def domains(self) -> tuple[Domain, ...]:
        return tuple(self._domains[g.index] for g in self._gpus)

    def read_j(self) -> Mapping[str, float]:
        t_ns = self._clock_ns()
        elapsed_s = max(t_ns - self._last_t_ns, 0) / 1e9
        for gpu in self._counter_gpus:
            key, now = self._key(gpu), self._energy_mj(gpu)
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
    def _problem(gpu: Gpu, last: int, now: int, elapsed_s: float) -> Invalid | None:
        """Why the counter step from ``last`` to ``now`` mJ cannot be trusted (None when it can)."""
        if now < last:
            return Invalid("counter reset", f"GPU {gpu.index} total energy went back from {last} to {now} mJ "
                                            "(driver reload or GPU reset)")
        if (now - last) > gpu.max_power_mw * (elapsed_s + SLACK_S):  # mJ vs mW * s
            return Invalid("counter jump", f"GPU {gpu.index} total energy rose {(now - last) / 1000:.6g} J in "
                                           f"{elapsed_s:.3g} s, over {gpu.max_power_mw / 1000:g} W "
                                           f"({gpu.bound_source}) x (elapsed + {SLACK_S:g} s)")
        return None

    def power_limits_w(self) -> Mapping[str, float]:
        """Each GPU's largest power limit where NVML gives one (a drawn power above it is flagged)."""
        return {self._key(g): g.limit_mw / 1000 for g in self._gpus if g.limit_mw}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_sampler", None) is not None:
            self._sampler.stop()
        shutdown(self._nvml)

    def describe(self) -> dict:
        info = super().describe()
        info["gpus"] = [{"index": g.index, "name": g.gpu_name, "method": g.method, "max_power_w": g.max_power_mw / 1000,
                         **({"power_limit_w": g.limit_mw / 1000} if g.limit_mw else {}),
                         "max_power_source": g.bound_source, "domain": self._key(g),
                         **({"power_reading": g.power_reading} if g.power_reading else {})} for g in self._gpus]
        info["round_gpu"] = self._describe_round()
        if self._sampler is not None:
            info["sampling_hz"] = self.hz
            if self.update_period_s >= POWER_AVERAGE_S:
                info["power"] = (f"NVML's power reading (nvmlDeviceGetPowerUsage), on Ampere and newer an average "
                                 f"over up to {POWER_AVERAGE_S:g} s: windows shorter than {POWER_AVERAGE_S:g} s are "
                                 "flagged short_window")
            else:
                info["power"] = (f"NVML's instant power (NVML_FI_DEV_POWER_INSTANT) sampled at {self.hz:g} Hz: "
                                 f"windows shorter than {self.update_period_s:g} s are flagged short_window")
        info["resolution"] = "1 mJ counter" if self._counter_gpus else "1 mW power samples"
        return info

    def _describe_round(self) -> dict:
        """Which GPU is the round's, how that was found, and what happens to the others."""
        if self._gpu is None:
            return {"device": None, "how": "no torch device given: every GPU counts in column gpu and the total"}
        if self._mapped is None:
            return {"device": str(self._gpu), "how": "a host device: every GPU is in column gpu_other, not the total"}
        out = {"device": str(self._gpu), "nvml_index": self._mapped.nvml_index, "how": self._mapped.how,
               "others": "column gpu_other, not in the total"}
        if self._mapped.mig:
            out["mig"] = "a MIG instance: NVML's figures are its whole GPU's, every instance on it included"
        return out


#: discovery's view of NVML: the round's GPU (setting ``gpu``: a torch device) into column ``gpu``, the other GPUs
#: into ``gpu_other``; ``nvml_module`` injects a fake pynvml
BACKEND = Backend(
    name="nvml", title="NVML", columns=("gpu", "gpu_other"), settings={"nvml_module": None, "gpu": None},
    probe=lambda ctx: probe(ctx.settings["nvml_module"], ctx.settings["gpu"]),
    open=lambda ctx: NvmlMeter(ctx.settings["nvml_module"], gpu=ctx.settings["gpu"]),
)
