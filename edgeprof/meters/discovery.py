"""Find the energy meters this machine offers, in the registry's order, and say why the others are absent.

The order is :data:`edgeprof.meters.registry.BACKENDS` (each back-end is probed; an available one is
opened; a failure to open is reported like a failed probe and discovery goes on with the next):
  1. CPU counters: Intel/AMD RAPL via powercap  -> method ``counter``          (:mod:`.rapl`)
  2. NVIDIA GPUs via NVML                      -> ``counter`` or ``integrated_power`` (:mod:`.nvml`)
  3. AMD GPUs via AMD SMI                      -> ``counter`` or ``integrated_power`` (:mod:`.amdsmi`)
  4. Jetson INA3221 power rails                -> ``integrated_power``          (:mod:`.jetson`)
  5. Apple silicon via IOReport                -> ``counter``                   (:mod:`.apple`)
  6. CPU-time estimate                         -> ``estimate``                  (:mod:`.estimate`),
     opened only when nothing measures the CPU side.
The loop names no back-end: each declares its role (:class:`~edgeprof.meters.base.Backend`). A
``cpu_fallback`` back-end is decided after all the others and opened only when no ``measures_cpu`` one
was; otherwise it is recorded as "not needed", naming the back-end that measures the CPU.

The sysfs root is ``sysfs_root``, else the environment variable ``EDGEPROF_SYSFS_ROOT``, else ``/sys``
(for containers that mount the host's sysfs elsewhere). Every meter that is not used leaves a
:class:`ProbeResult` with the reason and the fix; ``MeterSet.describe()`` and ``edgeprof doctor`` list them,
and the parts a back-end left out (``ProbeResult.skipped``: a zone or rail whose label cannot be read, a
counter without a range). A probe or opener that fails on a strange tree (``OSError``, ``ValueError``)
is recorded like a failed probe, so discovery never ends in a traceback.

Read cost: :meth:`MeterSet.measure_read_costs` (called by ``discover``) times each meter's read; one that costs more
than :data:`SLOW_READ_S` is "slow" (:meth:`MeterSet.slow_meters`: NVML's energy counter on data-centre GPUs, about
2.7 ms a read on an H200) and the profiler reads it off the measured thread
(:mod:`edgeprof.measure.series`). Each meter's reads are serialised by a lock of its own (a meter keeps state between
reads: counter wrap, the last value), so readers of different meters never wait for each other. Meters never synchronise a device: only the compute seam does.

``MeterSet.read`` returns a :class:`~edgeprof.meters.base.Reading`: the joules and the domains whose step
since the previous reading a back-end flagged as implausible. The set keeps every such flag (per domain and
kind: how many readings, the first detail) for ``describe()``, which the run's final sidecar records.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from edgeprof.errors import MeterError
from edgeprof.meters import registry
from edgeprof.meters.base import METHODS, Backend, Domain, Invalid, Meter, MeterContext, ProbeResult, Reading

SYSFS_ENV = "EDGEPROF_SYSFS_ROOT"
#: a meter whose read costs more than this many seconds is read off the measured thread
SLOW_READ_S = 200e-6
#: reads timed per meter by :meth:`MeterSet.measure_read_costs` (the fastest is kept)
COST_READS = 5
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
    #: domain -> kind -> {"readings": how many readings were flagged, "first": the first detail}
    _invalid_log: dict[str, dict[str, dict]] = field(default_factory=dict, init=False, repr=False)
    #: meter name -> seconds one read costs (the fastest of a few), once :meth:`measure_read_costs` ran; unknown: cheap
    read_cost_s: dict[str, float] = field(default_factory=dict, init=False)
    #: per meter, held around each of its reads, from whichever thread (a meter keeps state between reads)
    _locks: dict = field(default_factory=dict, init=False, repr=False)
    #: domain -> the platform domain of another meter it is inside (counted beside it, :attr:`Domain.platform`)
    _inside: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        """Reject two domains with one name (their readings would overwrite each other in one reading) and
        a domain whose column no registered back-end declares (the report header would have no place for it)."""
        owner: dict[str, str] = {}
        columns = set(registry.report_columns()) if self.meters else set()
        for meter in self.meters:
            for domain in meter.domains():
                if domain.column not in columns:
                    raise MeterError(
                        f"meter {meter.name!r} reports domain {domain.name!r} into column {domain.column!r}, "
                        "which no registered back-end declares (edgeprof.meters.registry)")
                if domain.name in owner:
                    raise MeterError(
                        f"meters {owner[domain.name]!r} and {meter.name!r} both report a domain named "
                        f"{domain.name!r}; domain names must be unique across the meters of a run")
                owner[domain.name] = meter.name
        self._locks.update((id(meter), threading.Lock()) for meter in self.meters)
        platform = next(((m, d) for m in self.meters for d in m.domains() if d.platform and d.in_total), None)
        if platform is not None:
            self._inside = {d.name: platform[1].name for m in self.meters if m is not platform[0]
                            for d in m.domains() if d.in_total}

    def domains(self) -> tuple[Domain, ...]:
        """Every meter's domains; those inside another meter's platform domain (a GPU beside psys) not in the total."""
        return tuple(replace(d, in_total=False) if d.name in self._inside else d
                     for m in self.meters for d in m.domains())

    def read(self, *, cpu_s: float | None = None, only: Sequence[Meter] | None = None) -> Reading:
        """One cumulative reading of every domain of every meter (of ``only``, when given), with the domains whose
        step since the previous reading is implausible (their joules left that step out). Never waits for a device;
        each meter is read under its own lock, so readers of different meters never wait for each other.

        ``cpu_s`` is the process CPU time the caller (the profiler) sampled for this reading; meters
        derived from CPU time use it instead of their own clock (:meth:`Meter.read_at_cpu_j`).
        """
        out: dict[str, float] = {}
        invalid: dict[str, Invalid] = {}
        for meter in self.meters if only is None else only:
            with self._lock_of(meter):
                out.update(meter.read_j() if cpu_s is None else meter.read_at_cpu_j(cpu_s))
                invalid.update(meter.take_invalid())
        self.log_invalid(invalid)
        return Reading(out, invalid)

    def _lock_of(self, meter: Meter) -> threading.Lock:
        return self._locks[id(meter)]

    def log_invalid(self, invalid: Mapping[str, Invalid]) -> None:
        """Keep the flags of one reading for ``describe()`` (per domain and kind: readings, first detail)."""
        for domain, why in invalid.items():
            entry = self._invalid_log.setdefault(domain, {}).setdefault(why.kind, {"readings": 0, "first": why.detail})
            entry["readings"] += 1

    def measure_read_costs(self, reads: int = COST_READS, clock: Callable[[], float] = time.perf_counter) -> None:
        """Time ``reads`` reads of each meter and keep the fastest in :attr:`read_cost_s` (what a read costs the meter
        itself: a busy machine only slows some reads, and must not make a cheap meter look slow); flags are logged."""
        for meter in self.meters:
            costs = []
            with self._lock_of(meter):
                for _ in range(reads):
                    start = clock()
                    meter.read_j()
                    costs.append(clock() - start)
                    self.log_invalid(meter.take_invalid())
            self.read_cost_s[meter.name] = min(costs)

    def slow_meters(self) -> tuple[Meter, ...]:
        """The meters whose read costs more than :data:`SLOW_READ_S` (read off the measured thread)."""
        return tuple(m for m in self.meters if self.read_cost_s.get(m.name, 0.0) > SLOW_READ_S)

    def off_thread(self, marks: bool = False) -> tuple[Meter, ...]:
        """The meters a profiler reads off the measured thread: the slow ones; and with ``marks`` (a device whose queue
        the profiler marks: a CUDA GPU) every meter that measures hardware, all but those derived from the process
        CPU clock (:attr:`~edgeprof.meters.base.Meter.from_cpu_clock`), so that a phase's joules are those between
        the moments the device reached its edges."""
        slow = self.slow_meters()
        return tuple(m for m in self.meters if m in slow or not m.from_cpu_clock) if marks else slow

    def read_j(self, *, cpu_s: float | None = None) -> dict[str, float]:
        """The joules of :meth:`read` (its flags are still recorded for ``describe()``)."""
        return dict(self.read(cpu_s=cpu_s).energy_j)

    @property
    def update_period_s(self) -> float:
        return max((m.update_period_s for m in self.meters), default=0.0)

    def power_limits_w(self) -> dict[str, float]:
        """Per domain, the power limit its meter knows (:meth:`Meter.power_limits_w`; missing: none known)."""
        return {k: float(v) for m in self.meters for k, v in m.power_limits_w().items()}

    def power_bounds_w(self) -> dict[str, float]:
        """Per domain, the most power its meter's readings can plausibly show (:meth:`Meter.power_bounds_w`;
        missing: none known)."""
        return {k: float(v) for m in self.meters for k, v in m.power_bounds_w().items()}

    def energy_quanta(self) -> tuple[tuple[tuple[str, ...], float], ...]:
        """Per meter with an energy step (:attr:`Meter.energy_quantum_j`): its domains in the run's total, and the
        step; a span in which those domains count less than one step together has joules they did not resolve."""
        in_total = {d.name for d in self.domains() if d.in_total}
        quanta = []
        for meter in self.meters:
            names = tuple(d.name for d in meter.domains() if d.name in in_total)
            if meter.energy_quantum_j > 0 and names:
                quanta.append((names, meter.energy_quantum_j))
        return tuple(quanta)

    @property
    def methods(self) -> tuple[str, ...]:
        """The distinct methods of the domains that count towards the total, most direct first."""
        used = {d.method for d in self.domains() if d.in_total}
        return tuple(m for m in METHODS if m in used)

    def describe(self, marks: bool = False) -> dict:
        """The meters, the back-ends not found (with the parts they left out) or not used, and ``invalid``:
        per domain, each kind of implausible reading seen so far with how many readings and the first detail.
        ``marks``: the run's device is one whose queue the profiler marks (each meter's ``read`` then says so,
        :meth:`off_thread`)."""
        slow = self.off_thread(marks)
        return {
            "meters": [{**self._nested(m.describe()), **self._read_description(m, m in slow)} for m in self.meters],
            "not_found": [
                {"meter": p.meter, "reason": p.reason, "fix": p.fix,
                 **({"skipped": list(p.skipped)} if p.skipped else {})}
                for p in self.probes if not p.available and not p.reason.startswith(NOT_NEEDED)
            ],
            "not_used": [
                {"meter": p.meter, "reason": p.reason} for p in self.probes if p.reason.startswith(NOT_NEEDED)
            ],
            "invalid": {domain: [{"kind": kind, **dict(entry)} for kind, entry in kinds.items()]
                        for domain, kinds in self._invalid_log.items()},
        }

    def _nested(self, info: dict) -> dict:
        """A meter's description with its domains inside another meter's platform domain said so."""
        domains = [{**d, "in_total": False, "inside": self._inside[d["name"]]} if d.get("name") in self._inside else d
                   for d in info.get("domains", [])]
        return {**info, "domains": domains}

    def _read_description(self, meter: Meter, slow: bool) -> dict:
        """How a run reads ``meter``: its read cost, and at the edges or off the measured thread."""
        if meter.name not in self.read_cost_s:
            return {}
        return {"read_cost_s": round(self.read_cost_s[meter.name], 9),
                "read": ("off the measured thread: sampled with timestamps, edges interpolated" if slow
                         else "at every window and phase edge" if meter.from_cpu_clock
                         else "at every window and phase edge (off the measured thread where the profiler marks "
                              "the device's queue: a CUDA GPU)")}

    def close(self) -> None:
        for meter in self.meters:
            meter.close()

    def __enter__(self) -> "MeterSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(backend: Backend, ctx: MeterContext) -> tuple[Meter | None, ProbeResult]:
    """Probe one back-end and open it when available: the meter (or None) and the probe to record."""
    try:
        probe = backend.probe(ctx)
    except (OSError, ValueError) as err:  # a tree the back-end did not expect: a reason, not a traceback
        return None, ProbeResult(backend.name, False, f"probe failed: {type(err).__name__}: {err}",
                                 "check that the driver behind this meter is loaded and healthy (dmesg)")
    if not probe.available:
        return None, _declared(backend, probe, None)
    try:
        meter = backend.open(ctx)
    except (MeterError, OSError, ValueError) as err:
        why = str(err) if isinstance(err, MeterError) else f"{type(err).__name__}: {err}"
        return None, ProbeResult(probe.meter, False, f"probe passed but opening failed: {why}", probe.fix,
                                 skipped=probe.skipped)
    return meter, _declared(backend, probe, meter)


def _declared(backend: Backend, probe: ProbeResult, meter: Meter | None) -> ProbeResult:
    """``probe``, once the back-end is seen to keep its declaration: one name, and only its own columns."""
    names = {probe.meter} | ({meter.name} if meter is not None else set())
    extra = sorted({d.column for d in meter.domains()} - set(backend.columns)) if meter is not None else []
    problem = (f"its probe or meter is named {sorted(names - {backend.name})}" if names != {backend.name}
               else f"its meter reports columns it does not declare: {extra}" if extra else "")
    if problem:
        if meter is not None:
            meter.close()
        raise MeterError(f"meter back-end {backend.name!r} does not keep its declaration: {problem}")
    return probe


def discover(*, sysfs_root: str | None = None, **settings: Any) -> MeterSet:
    """Probe every registered back-end in order and open those available; never raises for a missing meter.

    ``settings`` go to the back-ends, each of which declares the names it reads and their defaults
    (:attr:`Backend.settings`): ``cpu_watts`` (``--cpu-watts``: the estimate's watts per busy core;
    otherwise the table's figure for ``cpu_model``, default read from /proc/cpuinfo), ``jetson_hz`` (the
    rails' sampling rate, default 10), ``nvml_module`` (a stand-in for pynvml). A name that no registered
    back-end declares is a TypeError, as an unknown keyword argument would be.
    """
    declared = registry.settings()
    unknown = sorted(set(settings) - set(declared))
    if unknown:
        raise TypeError(f"discover() got settings no meter back-end declares: {unknown}; known: {sorted(declared)}")
    ctx = MeterContext(resolve_sysfs_root(sysfs_root), {**declared, **settings})
    backends = registry.backends()
    outcome: dict[str, tuple[Meter | None, ProbeResult]] = {}
    cpu_by: Backend | None = None  # the first opened back-end that measures the CPU
    try:
        for backend in sorted(backends, key=lambda b: b.cpu_fallback):  # stable: fallbacks last, else in order
            if backend.cpu_fallback and cpu_by is not None:
                reason = f"{NOT_NEEDED}: CPU energy is measured by {cpu_by.title}"
                outcome[backend.name] = None, ProbeResult(backend.name, False, reason)
                continue
            outcome[backend.name] = _open(backend, ctx)
            if backend.measures_cpu and cpu_by is None and outcome[backend.name][0] is not None:
                cpu_by = backend
        meters = [outcome[b.name][0] for b in backends if outcome[b.name][0] is not None]
        found = MeterSet(meters, tuple(outcome[b.name][1] for b in backends))
        found.measure_read_costs()
        return found
    except MeterError:
        for meter, _ in outcome.values():
            if meter is not None:
                meter.close()
        raise
