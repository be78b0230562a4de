"""A power trace of every window: the meters sampled at a fixed rate while a window is open, and at its edges.

The window engine (:class:`~edgeprof.measure.windows.Windows`) keeps, for every window opened while tracing
is on, the list of samples taken during it: its start and end, every phase edge, and a tick of the
:class:`Tracer` thread every ``1/hz`` seconds. Each sample is a :class:`~edgeprof.measure.profiler.Sample`
like the edges' (the same cumulative meter readings and clocks), so the power of a domain over the interval
between two consecutive samples is the difference of its cumulative joules over the difference of the wall
clock, and the sum of power x interval over a window is exactly the window's energy from its edges (the
intervals telescope): a trace never disagrees with its report row beyond float rounding.

What each interval's figure is follows from its domain's method: ``counter`` (RAPL, NVML's energy counter,
Jetson's counters) differenced, ``integrated_power`` (a sampled power rail integrated by its meter),
``estimate`` (the CPU-time estimate: the interval's process CPU seconds times the watts per core, labelled as
such). An interval with an implausible reading of a domain is ``invalid`` with no watts, as in the rows.

The tracer's ticks do not wait for the device (no ``sync``): they read counters, they do not cut the work.
Their bookkeeping is charged to the windows open meanwhile, as every other sample's is (``overhead_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from edgeprof.meters.base import INVALID, Domain
from edgeprof.meters.sampler import Periodic
from edgeprof.measure.profiler import Sample, Span

#: the default sampling rate of ``--trace``, Hz
DEFAULT_HZ = 50.0


@dataclass(frozen=True)
class TracePoint:
    """One sample of a window's trace and the phase of the window that is open from it on (None: none)."""

    sample: Sample
    phase: Optional[str]


@dataclass(frozen=True)
class TraceRow:
    """The mean power of one domain over one interval between consecutive samples of a window.

    ``t_s``: the interval's end, seconds since the window started; ``dt_s``: its length; ``phase``: the window's
    phase during it ("" outside any); ``w``: joules over ``dt_s`` (NaN when ``method`` is ``invalid``);
    ``short_phase``: the phase lasted less than two sample periods in this window, too short to see its shape.
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


def trace_rows(points: Sequence[TracePoint], domains: Sequence[Domain], *, hz: float,
               phase_wall_s: Optional[dict] = None) -> tuple[TraceRow, ...]:
    """The rows of one window's trace from its samples (in the order taken; the first is the window's start).

    Samples that share a wall-clock reading with the one before are merged into it (an interval of zero length
    has no power), so every interval has ``dt_s > 0`` and ``sum(w * dt_s)`` over a domain's rows is the energy
    between the first and the last sample. ``phase_wall_s``: each phase's total seconds in the window, which
    flags the phases shorter than two sample periods.
    """
    if len(points) < 2:
        return ()
    short = {name for name, wall in (phase_wall_s or {}).items() if wall < 2.0 / hz}
    start_wall = points[0].sample.wall_s
    kept: list[TracePoint] = [points[0]]
    for point in points[1:]:
        if point.sample.wall_s > kept[-1].sample.wall_s:
            kept.append(point)
        elif len(kept) > 1:  # same instant as the previous sample: the later reading stands for both
            kept[-1] = TracePoint(point.sample, point.phase)
        else:  # same instant as the start, which stays (the window's energy is counted from it): only the phase
            kept[0] = TracePoint(kept[0].sample, point.phase)
    rows: list[TraceRow] = []
    for before, after in zip(kept, kept[1:]):
        span = Span.between(before.sample, after.sample)
        phase = before.phase or ""
        for d in domains:
            bad = d.name in span.invalid
            rows.append(TraceRow(
                t_s=after.sample.wall_s - start_wall, dt_s=span.wall_s, phase=phase, domain=d.name, column=d.column,
                in_total=d.in_total, w=math.nan if bad else span.energy_j[d.name] / span.wall_s,
                method=INVALID if bad else d.method, short_phase=phase in short))
    return tuple(rows)


class Tracer(Periodic):
    """A daemon thread that calls ``tick()`` every ``1/hz`` seconds until :meth:`stop`.

    ``tick`` is :meth:`edgeprof.measure.windows.Windows.trace_tick`, which samples only while a window is open; a
    meter that fails in a tick ends the thread (:attr:`error`) and fails the window's own next edge instead.
    """

    def __init__(self, tick: Callable[[], None], hz: float) -> None:
        super().__init__(tick, hz, "edgeprof-trace")

    @property
    def ticks(self) -> int:
        return self.calls

    def stop(self) -> None:
        super().stop(timeout=5.0)
