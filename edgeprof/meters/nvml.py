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

What the meter shares with AMD SMI's (the probe's steps, the round's GPU against the others, the counter's checks,
the sampler) is :class:`~edgeprof.meters.gpu_meter.GpuMeter`'s; this module keeps NVML's reads and words.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Callable, Mapping

from edgeprof.errors import MeterError
from edgeprof.meters import gpu_map
from edgeprof.meters.base import Backend, ProbeResult
from edgeprof.meters.gpu_meter import GpuMeter
from edgeprof.meters.nvml_gpus import (INSTALL_FIX, Gpu, identity, init, instant_power_mw, list_gpus, load_nvml,
                                       shutdown, translate)

MAPPING_FIX = ("pass the torch device the round runs on (gpu='cuda:N', N counted among the GPUs torch sees) and "
               "check CUDA_VISIBLE_DEVICES; import torch first so that its PCI address can be read")
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


def probe(nvml_module: ModuleType | None = None, gpu: Any = None, *,
          device_properties: Callable[[int], Any] | None = None, environ: Mapping[str, str] | None = None,
          ) -> ProbeResult:
    """Whether NVML loads, at least one GPU reports energy or power, and the round's GPU ``gpu`` (a torch
    device, see the module docstring) is one of them. A ``gpu`` that is no torch device is a ConfigError."""
    return NvmlMeter.probe(nvml_module, gpu, device_properties=device_properties, environ=environ)


class NvmlMeter(GpuMeter):
    """Cumulative joules per NVIDIA GPU: the energy counter where present, else integrated power.

    ``nvml_module`` injects a fake pynvml; the other options (``gpu``, ``hz``, ``clock_ns``, ``start_thread``,
    ``device_properties`` and ``environ``, as for :func:`round_gpu`) are :class:`~edgeprof.meters.gpu_meter.GpuMeter`'s.
    """

    name = "nvml"
    update_period_s = counter_period_s = COUNTER_PERIOD_S
    power_average_s = POWER_AVERAGE_S
    library, vendor_gpu, every_gpu, not_round = "NVML", "NVIDIA GPU", "GPU", "a host device"
    domain_prefix, index_key, units_per_mj = "gpu", "nvml_index", 1
    reset_subject = jump_subject = "GPU {index} total energy"
    count_unit = "mJ"
    resolution = ("1 mJ counter", "1 mW power samples")
    fixes = {"load": INSTALL_FIX, "list": "check nvidia-smi", "mapping": MAPPING_FIX,
             "init": "install the NVIDIA driver (nvidia-smi must work) and check the GPU is visible here",
             "none": "a GPU that reports power is needed (nvidia-smi -q -d POWER)"}

    def __init__(self, nvml_module: ModuleType | None = None, **options: Any) -> None:
        super().__init__(nvml_module, **options)

    _load = staticmethod(load_nvml)
    _init = staticmethod(init)
    _shutdown = staticmethod(shutdown)
    _list = staticmethod(list_gpus)

    @staticmethod
    def _find(nvml: ModuleType, gpus: tuple[Gpu, ...], gpu: Any, device_properties, environ) -> gpu_map.Mapped | None:
        return round_gpu(nvml, gpu, device_properties=device_properties, environ=environ)

    def _read_counter(self, gpu: Gpu) -> tuple[int, int]:
        """The GPU's total energy in mJ (one mJ a count)."""
        try:
            return int(self._lib.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)), 1
        except Exception as err:
            raise translate(self._lib, err, f"energy of GPU {gpu.index}") from err

    def _power_uw(self, gpu: Gpu) -> float:
        if gpu.instant:
            value = instant_power_mw(self._lib, gpu.handle)
            if value is None:
                raise MeterError(f"NVML instant power of GPU {gpu.index}: the field NVML_FI_DEV_POWER_INSTANT, "
                                 "answered when the meter opened, is no longer answered")
            return value * 1000
        try:
            return int(self._lib.nvmlDeviceGetPowerUsage(gpu.handle)) * 1000
        except Exception as err:
            raise translate(self._lib, err, f"power of GPU {gpu.index}") from err

    def _describe_gpu(self, g: Gpu) -> dict:
        return {"index": g.index, "name": g.gpu_name, "method": g.method, "max_power_w": g.max_power_mw / 1000,
                **({"power_limit_w": g.limit_mw / 1000} if g.limit_mw else {}),
                "max_power_source": g.bound_source, "domain": self._key(g),
                **({"power_reading": g.power_reading} if g.power_reading else {})}

    def _describe_power(self) -> dict:
        if self.update_period_s >= POWER_AVERAGE_S:
            return {"power": (f"NVML's power reading (nvmlDeviceGetPowerUsage), on Ampere and newer an average "
                              f"over up to {POWER_AVERAGE_S:g} s: windows shorter than {POWER_AVERAGE_S:g} s are "
                              "flagged short_window")}
        return {"power": (f"NVML's instant power (NVML_FI_DEV_POWER_INSTANT) sampled at {self.hz:g} Hz: "
                          f"windows shorter than {self.update_period_s:g} s are flagged short_window")}


#: discovery's view of NVML: the round's GPU (setting ``gpu``: a torch device) into column ``gpu``, the other GPUs
#: into ``gpu_other``; ``nvml_module`` injects a fake pynvml
BACKEND = Backend(
    name="nvml", title="NVML", columns=("gpu", "gpu_other"), settings={"nvml_module": None, "gpu": None},
    probe=lambda ctx: probe(ctx.settings["nvml_module"], ctx.settings["gpu"]),
    open=lambda ctx: NvmlMeter(ctx.settings["nvml_module"], gpu=ctx.settings["gpu"]),
)
