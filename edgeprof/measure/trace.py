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

What is resolved: a meter whose counter moves every ``P`` seconds (its ``update_period_s``: NVML's energy counter
about 100 ms, the CPU estimate the process clock's lag) cannot give the power of a shorter interval: differenced
over 20-ms intervals, a counter that steps every 100 ms reads 0 W four times and five times its power once (on an
H200, 5,928 W on a 700-W GPU). So each domain's intervals are gathered, in order, into spans of at least
:data:`RESOLVED_PERIODS` x ``P`` (a span never crosses an invalid interval; a short tail joins the span before
it), and every interval of a span is given the span's mean power: the energy over a span of ``k`` periods is off
by at most one counter update at each end, so its mean power is within a factor (k +- 1) / k, at most 1.5x or
0.5x at k = 2. An interval that is a span on its own (``dt_s`` >= 2 ``P``, or a meter with no update period) is
``resolved``; the others are not (the dashboard draws them hollow, ``edgeprof trace`` says so). Energy is kept:
``sum(w * dt_s)`` over a window is still its energy from its edges.

Bounds: a row whose power is negative or above its domain's power limit (a GPU's power limit from NVML, the
estimate's cores x watts per core; :meth:`~edgeprof.meters.base.Meter.power_limits_w`) carries a ``flag`` saying
so; it is never drawn as a plain measurement.

The tracer's ticks do not wait for the device (no ``sync``) and do not take the window engine's lock while they
read: they read the cheap meters' counters, they do not cut the work, and they are charged to no window. A slow
meter (:mod:`edgeprof.measure.series`) is not read by a tick at all: its value at every sample of the trace is
interpolated from its own series when the window ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from edgeprof.meters.base import INVALID, RESOLVED_PERIODS, Domain
from edgeprof.meters.sampler import Periodic
from edgeprof.results import Sample, Span, TraceRow  # noqa: F401 (TraceRow: the rows it makes)

#: the default sampling rate of ``--trace``, Hz
DEFAULT_HZ = 50.0


@dataclass(frozen=True)
class TracePoint:
    """One sample of a window's trace and the phase of the window that is open from it on (None: none)."""

    sample: Sample
    phase: Optional[str]


def trace_rows(points: Sequence[TracePoint], domains: Sequence[Domain], *, hz: float,
               phase_wall_s: Optional[dict] = None, periods_s: Optional[Mapping[str, float]] = None,
               limits_w: Optional[Mapping[str, float]] = None) -> tuple[TraceRow, ...]:
    """The rows of one window's trace from its samples (in the order taken; the first is the window's start).

    Samples that share a wall-clock reading with the one before are merged into it (an interval of zero length
    has no power), so every interval has ``dt_s > 0`` and ``sum(w * dt_s)`` over a domain's rows is the energy
    between the first and the last sample. ``phase_wall_s``: each phase's total seconds in the window, which
    flags the phases shorter than two sample periods. ``periods_s``: each domain's update period (what it
    resolves, see the module docstring; missing: 0), ``limits_w``: each domain's power limit (missing: none).
    """
    if len(points) < 2:
        return ()
    short = {name for name, wall in (phase_wall_s or {}).items() if wall < 2.0 / hz}
    kept = _distinct(points)
    spans = [Span.between(before.sample, after.sample) for before, after in zip(kept, kept[1:])]
    start_wall = kept[0].sample.wall_s
    per_domain = {d.name: _resolved_power(spans, d.name, RESOLVED_PERIODS * (periods_s or {}).get(d.name, 0.0))
                  for d in domains}
    rows: list[TraceRow] = []
    for k, (before, after) in enumerate(zip(kept, kept[1:])):
        phase = before.phase or ""
        for d in domains:
            w, resolved = per_domain[d.name][k]
            bad = math.isnan(w)
            rows.append(TraceRow(
                t_s=after.sample.wall_s - start_wall, dt_s=spans[k].wall_s, phase=phase, domain=d.name,
                column=d.column, in_total=d.in_total, w=w, method=INVALID if bad else d.method,
                short_phase=phase in short, resolved=resolved and not bad,
                flag="" if bad else _flag(w, (limits_w or {}).get(d.name))))
    return tuple(rows)


def _distinct(points: Sequence[TracePoint]) -> list[TracePoint]:
    """The samples with distinct wall-clock readings (a later reading at the same instant stands for both)."""
    kept: list[TracePoint] = [points[0]]
    for point in points[1:]:
        if point.sample.wall_s > kept[-1].sample.wall_s:
            kept.append(point)
        elif len(kept) > 1:  # same instant as the previous sample: the later reading stands for both
            kept[-1] = TracePoint(point.sample, point.phase)
        else:  # same instant as the start, which stays (the window's energy is counted from it): only the phase
            kept[0] = TracePoint(kept[0].sample, point.phase)
    return kept


def _resolved_power(spans: Sequence[Span], domain: str, resolves_s: float) -> list[tuple[float, bool]]:
    """Per interval, (watts, resolved): the mean power of the run of intervals it is gathered into, a run being
    at least ``resolves_s`` long where it can be (a short tail joins the valid run just before it; an invalid
    interval, NaN, stands alone and ends a run)."""
    runs: list[tuple[list[int], bool]] = []  # (intervals, valid)
    current: list[int] = []

    def close_short() -> None:
        if current and runs and runs[-1][1] and runs[-1][0][-1] + 1 == current[0]:
            runs[-1][0].extend(current)
        elif current:
            runs.append((list(current), True))
        current.clear()

    for k, span in enumerate(spans):
        if math.isnan(span.energy_j[domain]):
            close_short()
            runs.append(([k], False))
            continue
        current.append(k)
        if sum(spans[i].wall_s for i in current) >= resolves_s:
            runs.append((list(current), True))
            current.clear()
    close_short()
    out: list[tuple[float, bool]] = [(math.nan, False)] * len(spans)
    for run, valid in runs:
        seconds = sum(spans[i].wall_s for i in run)
        watts = sum(spans[i].energy_j[domain] for i in run) / seconds if valid else math.nan
        for i in run:
            out[i] = (watts, valid and len(run) == 1 and seconds >= resolves_s)
    return out


def _flag(w: float, limit_w: Optional[float]) -> str:
    """Why ``w`` watts cannot be a power the domain drew ("" when it can)."""
    if w < 0:
        return "negative power"
    if limit_w and w > limit_w:
        return f"above the {limit_w:g} W power limit"
    return ""


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
