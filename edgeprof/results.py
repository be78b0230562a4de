"""The plain results of a measurement: what ``measure/`` makes and ``report/`` reads, and the one rule both apply to a
phase's name.

Nothing here measures or writes: a :class:`Sample` is what the profiler read at one instant, a :class:`Span` the
difference of two, a :class:`WindowResult` one finished window of the window engine (:mod:`edgeprof.measure.windows`)
and a :class:`TraceRow` one interval of its power trace (:mod:`edgeprof.measure.trace`). The report's schema
(:mod:`edgeprof.report.schema`) turns them into rows, the trace file (:mod:`edgeprof.report.trace_file`) into its rows,
and a Flower client's profile carries them across the wire; none of those imports the machinery that made them
(pyinstrument's shape: the profiler returns plain data, the renderers read it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional

from edgeprof.errors import MonitorError

if TYPE_CHECKING:  # a window lists its meters' domains; the meters' base module is below this one
    from edgeprof.meters.base import Domain

#: what a phase may be called: its report columns are ``<phase>_s``, ``<phase>_cpu_s`` and ``<phase>_j``
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


def check_phase_syntax(name: str) -> None:
    """MonitorError unless ``name`` can name a phase's columns (:data:`PHASE_NAME`, not ending in ``_cpu``); the
    report adds the check that they are not its own columns (:func:`edgeprof.report.schema.check_phase_name`)."""
    if not isinstance(name, str) or not PHASE_NAME.fullmatch(name) or name.endswith("_cpu"):
        shown = f"of {len(name):,} characters" if isinstance(name, str) and len(name) > 80 else repr(name)
        raise MonitorError(f"phase name {shown} must be lower-case letters, digits and '_', start with a letter "
                           "and not end in '_cpu' (it names the columns <phase>_s, <phase>_cpu_s, <phase>_j)")


@dataclass(frozen=True)
class Sample:
    """Everything read at one instant; ``flagged``: per domain, (readings flagged implausible so far, the
    latest reason), as a span ending here counts them; ``flagged_start``: the same as a span starting here counts
    them (None: as ``flagged``; they differ for a slow meter's domain interpolated between two readings).
    ``resolved``: False while the slow meters' domains are still to be filled in
    (:meth:`edgeprof.measure.profiler.Profiler.complete`)."""

    wall_s: float
    cpu_s: float
    energy_j: Mapping[str, float]
    flagged: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    flagged_start: Optional[Mapping[str, tuple[int, str]]] = None
    resolved: bool = True


@dataclass(frozen=True)
class Span:
    """Differences between two samples; ``invalid``: domains with an implausible step inside (-> reason),
    whose ``energy_j`` is NaN."""

    wall_s: float
    cpu_s: float
    energy_j: Mapping[str, float]
    invalid: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def between(start: Sample, end: Sample) -> "Span":
        before = start.flagged if start.flagged_start is None else start.flagged_start
        invalid = {d: why for d, (n, why) in end.flagged.items() if n > before.get(d, (0, ""))[0]}
        return Span(end.wall_s - start.wall_s, end.cpu_s - start.cpu_s,
                    {k: math.nan if k in invalid else end.energy_j[k] - start.energy_j[k] for k in end.energy_j},
                    invalid)

    def __add__(self, other: "Span") -> "Span":
        """Two spans of one phase together (an invalid domain in either stays invalid)."""
        return Span(self.wall_s + other.wall_s, self.cpu_s + other.cpu_s,
                    {k: self.energy_j[k] + other.energy_j[k] for k in other.energy_j},
                    {**self.invalid, **other.invalid})


@dataclass(frozen=True)
class WindowResult:
    """One finished window: totals, per-phase spans, peak RSS, the profiler's own overhead.

    ``overhead_wall_s`` is the wall time the profiler added to the measured thread inside the window (its edges,
    lock waits and waits for a slow meter's series included), ``overhead_s`` the thread CPU seconds of the same
    stretches.
    """

    name: str
    span: Span
    phases: Mapping[str, Span]
    peak_rss_mb: float
    overhead_s: float
    short_window: bool
    domains: tuple[Domain, ...] = field(default_factory=tuple)
    overhead_wall_s: float = 0.0
    #: the compute device's kind ("cpu", "cuda"; "" when the profiler was given no device)
    device_kind: str = ""
    #: the device memory allocated at most during the window, MiB (None: a host device, or none given)
    device_peak_mem_mb: Optional[float] = None
    #: phases shorter than the meters' update period (their joules are below what the counters resolve)
    short_phases: tuple[str, ...] = ()
    #: the window's power trace (:class:`TraceRow` per interval and domain), when traced
    trace: Optional[tuple] = None

    @property
    def wall_s(self) -> float:
        return self.span.wall_s

    @property
    def cpu_s(self) -> float:
        return self.span.cpu_s

    @property
    def energy_total_j(self) -> float:
        """The sum over the counted domains; NaN when one of them is invalid in this window."""
        return float(sum(self.span.energy_j[d.name] for d in self.domains if d.in_total))

    @property
    def invalid(self) -> Mapping[str, str]:
        """Domains with an implausible reading inside the window, and why."""
        return self.span.invalid



@dataclass(frozen=True)
class TraceRow:
    """The mean power of one domain over one interval between consecutive samples of a window.

    ``t_s``: the interval's end, seconds since the window started; ``dt_s``: its length; ``phase``: the window's
    phase during it ("" outside any); ``w``: joules over ``dt_s`` (NaN when ``method`` is ``invalid``);
    ``short_phase``: the phase lasted less than two sample periods in this window, too short to see its shape;
    ``resolved``: the interval alone spans what its meter resolves (else ``w`` is the mean power of the span of
    intervals that does, see the module docstring); ``flag``: why ``w`` cannot be a physical power ("" if none).
    """

    t_s: float
    dt_s: float
    phase: str
    domain: str
    column: str
    in_total: bool
    w: float
    method: str
    short_phase: bool
    resolved: bool = True
    flag: str = ""
