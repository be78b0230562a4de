"""Slow meters read off the measured thread: a sampler thread keeps their cumulative readings with timestamps.

A meter read can cost milliseconds (NVML's energy counter took ~2.7 ms a read on an H200: a driver round trip).
Read at every window and phase edge, such a meter made the profiler ~42% of a PFLEGO round on a GPU. Following
Zeus, an edge on the measured thread only synchronises the device, takes the time and reads the meters that are
cheap; a meter whose read cost (measured when the run's meters are opened,
:meth:`edgeprof.meters.discovery.MeterSet.measure_read_costs`) is above
:data:`~edgeprof.meters.discovery.SLOW_READ_S` is read here instead, by a daemon thread, every :func:`period_for`
seconds, each reading stamped with the middle of the read (the profiler's wall clock). An edge's energy is then
the series interpolated linearly at the edge's time between the two readings around it (:meth:`CounterSeries.at`),
once a reading has started after the window's end: a window's figures are made when first asked for
(:class:`~edgeprof.measure.windows.OpenWindow`), waiting then if need be (:meth:`CounterSeries.wait_past`, which
asks the thread to read at once).

What that resolves: the readings are the counter's own values, so an edge's figure is as fresh as the counter
(NVML's moves about every 100 ms) plus at most one period of this thread; a window or phase shorter than the
meter's update period is flagged as before (``short_window``, ``short_phases``), and a trace draws a slow
meter's power only over spans it resolves (:mod:`edgeprof.measure.trace`).

Implausible steps: the readings carry, per domain, how many readings the meters flagged so far; an edge between
readings ``i`` and ``i+1`` counts the flags up to ``i+1`` for its end and up to ``i`` for its start, so a span
is invalid whenever a flagged step may lie inside it.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from edgeprof.errors import MeterError
from edgeprof.meters.base import Meter, Reading

#: the series thread spends at most about 1/this of its time in reads
DUTY = 10.0
#: readings per update period of the counter: one. A read of NVML's energy counter is a driver round trip (2.2 to
#: 3 ms on an H200's host) that now and then stalls the measured thread's CUDA work. On an H200 (2026-11-27, two
#: leases: the first with this check's first draft, the second with ``scripts/gpu_probe.py --parts nvml``),
#: PFLEGO rounds at tau=50 back to back on cnn-omniglot / cnn-cifar beside a thread reading the counter every 24 ms
#: (four readings an update) had means 53% / 32% and 4% / 48% over their medians, rounds up to 27 / 29 and 9 / 32
#: ms; beside one reading every 100 ms, 4% / 10% and 1% / 27%, up to 7 / 16 and 6 / 36 ms; with none, 0..3% /
#: 4..23%, up to 6 / 11 and 7 / 30 ms (cnn-cifar's rounds were noisy on the second lease with no reader too). More
#: readings than updates only tell when the counter stepped, inside a span it does not resolve anyway; fewer round
#: trips can only stall less.
PER_UPDATE = 1.0
#: the shortest period of the series thread, seconds
MIN_PERIOD_S = 0.005


def period_for(meters: Sequence[Meter], read_cost_s: float) -> float:
    """The series thread's period: one reading per counter update (:data:`PER_UPDATE`), at most 1/:data:`DUTY` of the
    time busy, never under :data:`MIN_PERIOD_S`."""
    update = max((m.update_period_s for m in meters), default=0.0)
    return max(MIN_PERIOD_S, DUTY * read_cost_s, update / PER_UPDATE if update > 0 else 0.0)


@dataclass(frozen=True)
class Point:
    """One reading of the slow meters: its time (middle of the read), joules per domain, flags so far."""

    t_s: float
    started_s: float
    energy_j: Mapping[str, float]
    flagged: Mapping[str, tuple[int, str]]


class CounterSeries:
    """Timestamped cumulative readings of the slow meters, taken by a daemon thread every ``period_s`` seconds.

    ``read()`` reads them once (``MeterSet.read(only=...)``, which holds each meter's own lock, so a reading here
    never waits for the cheap meters' reads at the edges, nor they for it). ``clock`` must be the profiler's wall
    clock. The thread takes its first reading as :meth:`start` starts it. An error in the thread is kept and raised
    as :class:`~edgeprof.errors.MeterError` by the next :meth:`wait_past` or :meth:`at`.
    """

    def __init__(self, read: Callable[[], Reading], *, period_s: float,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._read = read
        self.period_s = float(period_s)
        self._clock = clock
        self._reading = threading.Lock()  # one reading at a time (the thread's, or a caller's once it has stopped)
        self._points: list[Point] = []
        self._times: list[float] = []
        self._flagged: dict[str, tuple[int, str]] = {}
        self._cond = threading.Condition()
        self._nudge = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.readings = 0

    def start(self) -> "CounterSeries":
        """Keep reading in a daemon thread, the first reading at once (on that thread: the caller never waits for a
        slow read; an edge taken before the first reading gets that reading's value, as fresh as any other)."""
        self._nudge.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="edgeprof-counter-series", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it (idempotent); a window still to be resolved then reads the meters itself
        (:meth:`wait_past`), so close the meters after every window was."""
        self._stop.set()
        self._nudge.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._nudge.wait(self.period_s)
            self._nudge.clear()
            if self._stop.is_set():
                return
            try:
                self.read()
            except BaseException as err:  # kept for the measured thread; this one must not die silently
                with self._cond:
                    self.error = err
                    self._cond.notify_all()
                return

    def read(self) -> Point:
        """Read every slow meter once (on the calling thread) and keep the reading."""
        with self._reading:
            started = self._clock()
            reading = self._read()
            ended = self._clock()
        energy, invalid = dict(reading.energy_j), reading.invalid
        with self._cond:
            for domain, why in invalid.items():
                self._flagged[domain] = (self._flagged.get(domain, (0, ""))[0] + 1, str(why))
            point = Point((started + ended) / 2, started, energy, dict(self._flagged))
            if self._points and point.t_s < self._points[-1].t_s:
                point = Point(self._points[-1].t_s, started, energy, point.flagged)
            self._points.append(point)
            self._times.append(point.t_s)
            self.readings += 1
            self._cond.notify_all()
        return point

    def _raise_error(self) -> None:
        if self.error is not None:
            raise MeterError(f"the slow meters' sampler failed: {self.error}") from self.error

    def _has_past(self, t_s: float) -> bool:
        return bool(self._points and self._points[-1].started_s >= t_s)

    def passed(self, t_s: float) -> bool:
        """Whether a reading has started at or after ``t_s`` (or the thread failed: asking will say so)."""
        with self._cond:
            return self.error is not None or self._has_past(t_s)

    def wait_past(self, t_s: float, timeout_s: float) -> None:
        """Return once a reading has started at or after ``t_s`` (asking the thread to read now); MeterError when
        none has after ``timeout_s``, or the thread failed before one had (a span its good readings cover is still
        resolved: the windows that ended before a failure keep their figures)."""
        if self._thread is None:  # stopped: the caller reads
            with self._cond:
                if self._has_past(t_s):
                    return
                self._raise_error()
            self.read()
            return
        with self._cond:
            if self._has_past(t_s):
                return
            self._nudge.set()
            done = self._cond.wait_for(lambda: self.error is not None or self._has_past(t_s), timeout_s)
            if self._has_past(t_s):
                return
            self._raise_error()
            if not done:
                raise MeterError(f"the slow meters' sampler took no reading within {timeout_s:g} s of a window's end")

    def at(self, t_s: float) -> tuple[dict[str, float], dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
        """The joules interpolated at ``t_s`` between the readings around it, and the flag counts that go with a
        span starting there and with one ending there (see the module docstring)."""
        with self._cond:
            i = bisect.bisect_left(self._times, t_s)
            if not self._points or i >= len(self._points):
                self._raise_error()
                raise MeterError(f"the slow meters have no reading after t={t_s:.6f} s yet")
            after = self._points[i]
            before = self._points[i - 1] if i > 0 else after
        if after.t_s == before.t_s or t_s >= after.t_s:
            return dict(after.energy_j), dict(before.flagged), dict(after.flagged)
        f = (t_s - before.t_s) / (after.t_s - before.t_s)
        energy = {k: before.energy_j[k] + f * (after.energy_j[k] - before.energy_j[k]) for k in after.energy_j}
        return energy, dict(before.flagged), dict(after.flagged)

    def forget_before(self, t_s: float) -> None:
        """Drop readings no longer needed: those before the last one taken at or before ``t_s``."""
        with self._cond:
            i = max(bisect.bisect_right(self._times, t_s) - 1, 0)
            if i:
                del self._points[:i]
                del self._times[:i]

    def __len__(self) -> int:
        return len(self._points)
