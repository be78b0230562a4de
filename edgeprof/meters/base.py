"""The one small interface every energy back-end implements.

A :class:`Meter` is opened by its back-end module (after a probe said it is available), exposes a
fixed tuple of :class:`Domain` objects, and answers :meth:`Meter.read_j` with the *cumulative* energy
of every domain in joules since the meter was opened. Counter wrap-around, sampling threads and unit
conversion are the back-end's business; the profiler only subtracts two readings.

Every domain carries its method (how its joules were obtained) and whether it counts towards the
total: nested domains (RAPL core inside package inside psys, Jetson sub-rails inside the board's
input rail) are reported but never summed into ``energy_j``.

A back-end checks every reading against physical bounds it can justify (a counter that jumps, a negative
current). A step it cannot trust is left out of its cumulative joules and flagged with
:meth:`Meter.flag_invalid`; ``MeterSet.read`` hands the flags on in a :class:`Reading`, and every window or
phase that spans a flagged step reports that domain as :data:`INVALID` (an empty cell), never as a number.

Each back-end module also declares a :class:`Backend` (name, probe, opener, the report columns its
domains add into, its role in discovery); :mod:`edgeprof.meters.registry` lists those declarations in
discovery order, and the report header follows from them.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Optional

#: how a figure was obtained, from most to least direct
METHODS = ("counter", "integrated_power", "estimate")
#: the method cell of a figure left empty because a reading inside its window was implausible (never a Domain's method)
INVALID = "invalid"
#: a power drawn over a span shorter than this many update periods of its meter is not resolved (its energy is off
#: by up to one counter update at each end: at most a factor 1.5 or 0.5 at two periods)
RESOLVED_PERIODS = 2.0

#: what a report column (``<column>_j``, ``<column>_method``) may be called
_COLUMN_RE = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Domain:
    """One thing a meter measures.

    ``name`` is unique across the meters of a run (e.g. ``cpu_package_0``, ``gpu_1``), ``column`` is
    the report column it adds into (one its back-end declares in :attr:`Backend.columns`; checked when
    the meters are put together in a ``MeterSet``), ``method`` one of :data:`METHODS`. ``in_total`` is
    False for a domain that is contained in another counted domain. ``platform`` marks the whole platform's energy
    (RAPL's psys: a laptop's discrete GPU is inside it): a ``MeterSet`` counts every other meter's domains beside it.
    """

    name: str
    column: str
    method: str
    in_total: bool = True
    platform: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}")
        if not _COLUMN_RE.fullmatch(self.column):
            raise ValueError(f"report column {self.column!r} is not a lower-case identifier")


@dataclass(frozen=True)
class ProbeResult:
    """Whether a back-end can be used here; when not, why and how to fix it.

    ``skipped`` says, one line each, which parts (a zone, a rail) were left out and why (a label that is
    not UTF-8, a counter range of zero), whether or not the back-end is available with the rest.
    """

    meter: str
    available: bool
    reason: str = ""
    fix: str = ""
    domains: tuple[str, ...] = field(default_factory=tuple)
    skipped: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Invalid:
    """Why a domain's energy since its previous reading is not trustworthy: a short ``kind`` and the detail."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class Reading:
    """One cumulative reading: joules per domain, and the domains whose step since the previous reading is
    not trustworthy (left out of ``energy_j``'s cumulative figure), with why."""

    energy_j: Mapping[str, float]
    invalid: Mapping[str, Invalid] = field(default_factory=dict)


class Meter(ABC):
    """A cumulative energy counter per domain. Subclasses live one per module in ``edgeprof.meters``."""

    #: short name used in reports and ``edgeprof doctor``
    name: ClassVar[str] = "meter"
    #: seconds between updates of the underlying counter; windows shorter than this are flagged
    update_period_s: float = 0.0
    #: the coarsest energy step of this meter's domains in the total, J: a window in which they count less than one
    #: step has joules they did not resolve, and is flagged as a short one (0: steps far below any window's joules)
    energy_quantum_j: float = 0.0
    #: True for a meter whose joules derive from the process CPU clock the caller samples (the estimate): it is
    #: read at the measured thread's own edges; every other meter measures hardware, which a device's queued work
    #: reaches later (:class:`edgeprof.measure.profiler.Profiler` reads those off the thread on such a device)
    from_cpu_clock: ClassVar[bool] = False

    @abstractmethod
    def domains(self) -> tuple[Domain, ...]:
        """The domains this meter reports, fixed for its lifetime."""

    @abstractmethod
    def read_j(self) -> Mapping[str, float]:
        """Cumulative joules per domain name since the meter was opened (never decreasing).

        A step the back-end cannot trust adds nothing here and is flagged with :meth:`flag_invalid`.
        """

    def read_at_cpu_j(self, cpu_s: float) -> Mapping[str, float]:
        """The reading that goes with a process CPU time ``cpu_s`` the caller has just sampled.

        A meter whose figure is derived from CPU time (the estimate) computes it from ``cpu_s`` instead of
        reading the clock again, so its joules are exactly the caller's CPU seconds times its model; every
        other meter ignores ``cpu_s`` and reads as :meth:`read_j` does.
        """
        return self.read_j()

    def flag_invalid(self, domain: str, why: Invalid) -> None:
        """Say that ``domain``'s energy since its previous reading is not trustworthy (first reason kept).

        Called by a back-end inside :meth:`read_j`; the flag waits for :meth:`take_invalid`, which the
        meter set calls right after the reading, so it belongs to that reading.
        """
        self.__dict__.setdefault("_invalid_pending", {}).setdefault(domain, why)

    def take_invalid(self) -> dict[str, Invalid]:
        """The domains flagged since the last call, with why; forgets them."""
        return self.__dict__.pop("_invalid_pending", {})

    def power_limits_w(self) -> Mapping[str, float]:
        """Per domain, the power it cannot draw above (a GPU's power limit; the estimate's cores x watts per core),
        where the meter knows one: a drawn power above it is flagged. Default: none known."""
        return {}

    def power_bounds_w(self) -> Mapping[str, float]:
        """Per domain, the most power its readings can plausibly show: the bound the meter's own plausibility check
        holds its steps or samples to (a RAPL zone's twice its largest constraint, a GPU's twice its power limit, a
        Jetson rail's full scale, the estimate's every core busy). Default: none known. The idle baseline, which
        no check of a step's slack covers, is held to it."""
        return {}

    def close(self) -> None:
        """Release handles and stop sampler threads; idempotent."""

    def describe(self) -> dict:
        """What the sidecar records about this meter."""
        return {
            "name": self.name,
            "update_period_s": self.update_period_s,
            **({"energy_quantum_j": self.energy_quantum_j} if self.energy_quantum_j else {}),
            "domains": [
                {"name": d.name, "column": d.column, "method": d.method, "in_total": d.in_total}
                for d in self.domains()
            ],
        }

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class MeterContext:
    """What discovery hands every back-end's probe and opener: the sysfs root and the meter settings.

    ``settings`` holds every setting a registered back-end declares (:attr:`Backend.settings`), with the
    caller's values over the declared defaults, e.g. ``cpu_watts``, ``jetson_hz``, ``nvml_module``.
    """

    sysfs_root: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MeterOption:
    """A meter setting with front doors of its own, declared by its back-end and named nowhere else.

    Besides ``--meter-setting NAME=VALUE`` (every setting), an option is the flag ``--<key>`` of the commands that
    measure (``edgeprof measure``, ``train``, ``sweep``, ``doctor``), the Flower run- and node-config key ``<key>``,
    and a keyword argument ``<name>`` of :func:`edgeprof.monitor`, :func:`edgeprof.flower.energy.energy_mod` and
    :meth:`edgeprof.config.EnergySettings.of`; each of them reads the option from
    :func:`edgeprof.meters.registry.options`. ``default`` is the back-end's (None: not set), ``type`` what a value
    is read as (a flag's type, a config value's), ``help`` the flag's help text.
    """

    name: str
    default: Any
    help: str
    type: type = float

    @property
    def key(self) -> str:
        """The option as a flag (after ``--``) and a Flower config key: its name with ``-`` for ``_``."""
        return self.name.replace("_", "-")


@dataclass(frozen=True, eq=False)
class Backend:
    """One energy back-end as discovery and the report see it; each back-end module declares one.

    ``name`` is the :attr:`Meter.name` of what ``open`` returns and the ``meter`` of what ``probe``
    returns; ``title`` names it in a sentence ("CPU energy is measured by RAPL"). ``columns`` are the
    report columns its domains add into, in header order. ``settings`` are the keyword settings of
    ``discover()`` it reads from :attr:`MeterContext.settings`, with their defaults; ``options`` are those of them
    with front doors of their own (:class:`MeterOption`), added to ``settings`` with their defaults.

    Its role in discovery: ``measures_cpu`` when, once opened, the CPU's energy is measured (RAPL, the
    Jetson rails); ``cpu_fallback`` for a back-end tried only after every other and opened only when no
    ``measures_cpu`` back-end was (the CPU-time estimate).
    """

    name: str
    title: str
    columns: tuple[str, ...]
    probe: Callable[[MeterContext], ProbeResult]
    open: Callable[[MeterContext], Meter]
    settings: Mapping[str, Any] = field(default_factory=dict)
    options: tuple[MeterOption, ...] = ()
    measures_cpu: bool = False
    cpu_fallback: bool = False
    #: checks the values of its own settings a user gave (a mapping of those of :attr:`settings` given): the
    #: first problem as one line, or None (a run's settings are checked before anything is opened)
    check: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None

    def __post_init__(self) -> None:
        bad = [c for c in self.columns if not _COLUMN_RE.fullmatch(c)]
        if not self.columns or bad:
            raise ValueError(f"back-end {self.name!r} must declare lower-case report columns, got {self.columns!r}")
        if self.measures_cpu and self.cpu_fallback:
            raise ValueError(f"back-end {self.name!r} cannot both measure the CPU and be its fallback")
        object.__setattr__(self, "settings", {**self.settings, **{o.name: o.default for o in self.options}})
