"""Find the energy meters this machine offers, in a documented order, and say why the others are absent.

Order (each back-end is probed; an available one is opened; a failure to open is reported like a
failed probe and discovery goes on with the next):
  1. CPU counters: Intel/AMD RAPL via powercap  -> method ``counter``          (:mod:`.rapl`)
  2. NVIDIA GPUs via NVML                      -> ``counter`` or ``integrated_power`` (:mod:`.nvml`)
  3. Jetson INA3221 power rails                -> ``integrated_power``          (:mod:`.jetson`)
  4. CPU-time estimate                         -> ``estimate``                  (:mod:`.estimate`),
     opened only when neither RAPL nor a Jetson board meter was found (nothing measures the CPU side).

The sysfs root is ``sysfs_root``, else the environment variable ``EDGEPROF_SYSFS_ROOT``, else ``/sys``
(for containers that mount the host's sysfs elsewhere). Every meter that is not used leaves a
:class:`ProbeResult` with the reason and the fix; ``MeterSet.describe()`` and ``edgeprof doctor`` list them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Sequence

from edgeprof.errors import MeterError
from edgeprof.meters import jetson, nvml, rapl
from edgeprof.meters.base import METHODS, Domain, Meter, ProbeResult
from edgeprof.meters.estimate import CpuTimeEstimateMeter, detect_cpu_model, watts_per_core_for

SYSFS_ENV = "EDGEPROF_SYSFS_ROOT"
#: reason prefix of a back-end that exists but is deliberately not opened (the estimate beside a counter)
NOT_NEEDED = "not needed"


def resolve_sysfs_root(sysfs_root: str | None = None) -> str:
    """``sysfs_root`` if given, else ``$EDGEPROF_SYSFS_ROOT``, else ``/sys``."""
    return sysfs_root or os.environ.get(SYSFS_ENV) or "/sys"


@dataclass
class MeterSet:
    """The meters of one run, read together; plus the probes of every back-end (found or not)."""

    meters: Sequence[Meter]
    probes: Sequence[ProbeResult] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        """Reject two domains with one name: their readings would overwrite each other in one reading."""
        owner: dict[str, str] = {}
        for meter in self.meters:
            for domain in meter.domains():
                if domain.name in owner:
                    raise MeterError(
                        f"meters {owner[domain.name]!r} and {meter.name!r} both report a domain named "
                        f"{domain.name!r}; domain names must be unique across the meters of a run")
                owner[domain.name] = meter.name

    def domains(self) -> tuple[Domain, ...]:
        return tuple(d for m in self.meters for d in m.domains())

    def read_j(self, *, cpu_s: float | None = None) -> dict[str, float]:
        """One cumulative reading of every domain of every meter (devices synchronised first).

        ``cpu_s`` is the process CPU time the caller (the profiler) sampled for this reading; meters
        derived from CPU time use it instead of their own clock (:meth:`Meter.read_at_cpu_j`).
        """
        for meter in self.meters:
            meter.sync()
        out: dict[str, float] = {}
        for meter in self.meters:
            out.update(meter.read_j() if cpu_s is None else meter.read_at_cpu_j(cpu_s))
        return out

    @property
    def update_period_s(self) -> float:
        return max((m.update_period_s for m in self.meters), default=0.0)

    @property
    def methods(self) -> tuple[str, ...]:
        """The distinct methods of the domains that count towards the total, most direct first."""
        used = {d.method for d in self.domains() if d.in_total}
        return tuple(m for m in METHODS if m in used)

    def describe(self) -> dict:
        return {
            "meters": [m.describe() for m in self.meters],
            "not_found": [
                {"meter": p.meter, "reason": p.reason, "fix": p.fix}
                for p in self.probes if not p.available and not p.reason.startswith(NOT_NEEDED)
            ],
            "not_used": [
                {"meter": p.meter, "reason": p.reason} for p in self.probes if p.reason.startswith(NOT_NEEDED)
            ],
        }

    def close(self) -> None:
        for meter in self.meters:
            meter.close()

    def __enter__(self) -> "MeterSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _try_open(probe: ProbeResult, opener: Callable[[], Meter], meters: list, probes: list) -> Meter | None:
    if not probe.available:
        probes.append(probe)
        return None
    try:
        meter = opener()
    except MeterError as err:
        probes.append(ProbeResult(probe.meter, False, f"probe passed but opening failed: {err}", probe.fix))
        return None
    meters.append(meter)
    probes.append(probe)
    return meter


def discover(
    *,
    cpu_watts: float | None = None,
    sysfs_root: str | None = None,
    jetson_hz: float = 10.0,
    nvml_module: ModuleType | None = None,
    cpu_model: str | None = None,
) -> MeterSet:
    """Probe every back-end in order and open those available; never raises for a missing meter.

    ``cpu_watts`` (``--cpu-watts``) sets the estimate's watts per busy core; otherwise the figure comes
    from the table of known CPUs for ``cpu_model`` (default: read from /proc/cpuinfo).
    """
    root = resolve_sysfs_root(sysfs_root)
    meters: list[Meter] = []
    probes: list[ProbeResult] = []
    cpu_side = _try_open(rapl.probe(root), lambda: rapl.RaplMeter(root), meters, probes)
    _try_open(nvml.probe(nvml_module), lambda: nvml.NvmlMeter(nvml_module), meters, probes)
    board = _try_open(jetson.probe(root), lambda: jetson.JetsonMeter(root, hz=jetson_hz), meters, probes)
    if cpu_side is None and board is None:
        meters.append(_estimate_meter(cpu_watts, cpu_model))
        probes.append(ProbeResult("cpu_estimate", True, domains=("cpu_estimate",)))
    else:
        found = "RAPL" if cpu_side is not None else "the Jetson rails"
        probes.append(ProbeResult("cpu_estimate", False, f"{NOT_NEEDED}: CPU energy is measured by {found}"))
    return MeterSet(meters, tuple(probes))


def _estimate_meter(cpu_watts: float | None, cpu_model: str | None) -> CpuTimeEstimateMeter:
    if cpu_watts is not None:
        return CpuTimeEstimateMeter(cpu_watts, f"--cpu-watts {cpu_watts:g} W/core (user-supplied; estimate)")
    model = cpu_model if cpu_model is not None else detect_cpu_model()
    watts, source = watts_per_core_for(model)
    return CpuTimeEstimateMeter(watts, source)
