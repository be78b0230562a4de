"""Windows that may nest and overlap, with phases inside, over one Profiler's meters and clocks.

This is edgeprof's one window engine: the :class:`~edgeprof.measure.profiler.Profiler` samples the meters and
clocks; every window and phase of ``measure``, ``sweep``, ``train``, :func:`edgeprof.monitor` and both Flower
mods is opened here (``profiler.window(name)`` is a window of this engine). User code opens windows inside
windows, from callbacks, from several threads. :class:`Windows` allows that by giving every window its own
start sample:
all windows share the meters' cumulative readings, and a window's figures are the differences between its
own two samples, exactly as a Profiler window's (same :class:`~edgeprof.results.Span`, same
:class:`~edgeprof.results.WindowResult`, so the report row and its method labels are those of
``edgeprof measure``).

What overlapping windows mean, and where they are not allowed:

* Energy and CPU seconds are the machine's (the process's), not the window's own: two windows open at the
  same time both count everything that ran meanwhile. The energy of overlapping windows double counts;
  never add such rows up. Every window records whether another window was open during it (``overlapped``).
* Peak RSS: the kernel's high-water mark can only be reset for the whole process, so it is reset when a
  window opens while no other is; a window that opens while another is open has no peak of its own
  (``peak_rss_exact`` is False, and the report leaves its ``peak_rss_mb`` empty). Where the mark cannot
  be reset at all (not Linux), every window shows the process's peak so far, as a Profiler window does.
* Phases of one window never overlap: a phase is entered while none of that window is open, else
  :class:`~edgeprof.errors.MonitorError`. Phases of different windows are independent.
* The profiler's cost on the measured thread: each edge is timed from its entry (after the device's sync) to its
  exit, the wait for the engine's lock included, and charged to every window open while it ran
  (``overhead_wall_s``, and its thread CPU seconds ``overhead_s``), except that a window's own begin counts from its
  start sample on and its own end up to its end sample (the peak-RSS reset before the one and the reads after the
  other are outside it); a window's end also waits, off its own span,
  until the slow meters' series has passed it (charged to the windows still open, and counted in
  ``Profiler.cost``). The power trace's ticks run on their own thread: they never synchronise the device, read
  only the cheap meters (never under the engine's lock) and are charged to no window.

* On a device that queues its work and can mark its queue (``Profiler.marks``: a CUDA GPU) a phase edge does not
  wait for the device: it puts a marker in the queue, reads the clocks (no meter) and goes on. When the
  window has ended (its end waits for the device), each marked edge's time becomes the moment the device reached
  its marker (the window's start plus the device's seconds from the marker put at the start; never before the
  host passed the edge), its hardware meters' joules are the series' at that moment and its process CPU seconds
  (with the CPU-time estimate) the host's clock interpolated at that moment: a phase is one span of the wall
  clock for every domain. A trace's phases follow those moments. A window's own two edges there read the clocks
  alone as well (every meter read at an edge derives from the CPU clock; their joules are made from the edge's CPU
  seconds with the window's figures), and its markers go back to the device once read, to be recorded again.

:func:`phase` marks a phase of the innermost window opened in the current context (thread or asyncio task)
and does nothing outside any window, so library code can mark phases whether or not it is profiled.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import itertools
import threading
from typing import Callable, Iterable, Iterator, Optional

from edgeprof.errors import MonitorError
from edgeprof.measure.trace import TracePoint, trace_rows
from edgeprof.results import Sample, Span, WindowResult, check_phase_syntax

#: the windows opened in this context, innermost last (thread- and task-local)
_OPEN: contextvars.ContextVar[tuple["OpenWindow", ...]] = contextvars.ContextVar("edgeprof_windows", default=())


class _Cost:
    """The wall and thread CPU seconds of one edge on the measured thread, from its entry on, and the part of them
    before and after its sample (a window's own begin counts from its start sample on, its own end up to its end
    sample: the rest of those edges lies outside it)."""

    def __init__(self, profiler) -> None:
        self._profiler = profiler
        self._wall0, self._thread0 = profiler.clock(), profiler.thread_clock()
        self._thread_mark = self._thread0
        self.overhead_s = self.overhead_wall_s = 0.0
        self.before = self.after = (0.0, 0.0)  # (wall, thread) before the sample's clock reading, after it

    def mark(self) -> None:
        """Just before the edge's sample (which reads the wall clock first)."""
        self._thread_mark = self._profiler.thread_clock()

    def stop(self, sample: Sample) -> "_Cost":
        wall, thread = self._profiler.clock(), self._profiler.thread_clock()
        self.overhead_s, self.overhead_wall_s = thread - self._thread0, wall - self._wall0
        self.before = (sample.wall_s - self._wall0, self._thread_mark - self._thread0)
        self.after = (wall - sample.wall_s, thread - self._thread_mark)
        cost = self._profiler.cost
        cost["edges"] += 1
        cost["edge_wall_s"] += self.overhead_wall_s
        return self


class OpenWindow:
    """One window of :class:`Windows`; ``phase(name)`` marks a part of it; ``result`` once it has ended."""

    def __init__(self, engine: "Windows", name: str) -> None:
        self._engine = engine
        self.name = name
        #: each phase entry: (name, its start sample, its end sample), in order; the spans are made at the end
        self.phase_edges: list[tuple[str, Sample, Sample]] = []
        self.overhead_s = 0.0
        self.overhead_wall_s = 0.0
        self.start: Optional[Sample] = None
        self.overlapped = False  # another window was open at some time during this one
        self.peak_rss_exact = True  # False when it opened while another window was open (no reset possible)
        self.open_phase: Optional[str] = None
        self._phase_start: Optional[Sample] = None  # the start sample of the open phase
        self._result: Optional[WindowResult] = None
        #: once ended and until resolved: its end sample, peak RSS and peak device memory
        self._ending: Optional[tuple[Sample, float, Optional[float]]] = None
        self._resolving = threading.Lock()
        self.discarded = False  # dropped unmeasured (its run stopped while it was open)
        #: the samples of its power trace, with the phase open from each on (None: not traced)
        self.trace_points: Optional[list] = [] if engine.trace_hz else None
        #: on a device whose queue is marked: the marker put at its start, and each phase edge's marker by the id
        #: of the edge's sample (resolved to the moment the device reached it when the window's figures are made)
        self.start_marker = None
        self.markers: dict[int, object] = {}

    @property
    def is_open(self) -> bool:
        return self._result is None and self._ending is None and not self.discarded

    @property
    def result(self) -> Optional[WindowResult]:
        """The window's figures once it has ended (None before). A slow meter's share is filled in from its series on
        first use, waiting for the series' next reading if it has not passed the window's end yet (:meth:`ready`)."""
        if self._result is None and self._ending is not None:
            self._engine._resolve(self)
        return self._result

    def ready(self) -> bool:
        """Whether :attr:`result` can be had now without waiting for a slow meter's series."""
        return self._result is not None or (self._ending is not None and self._engine._ready(self))

    def phase(self, name: str) -> "_Phase":
        """Measure the body of ``with window.phase(name):`` as phase ``name`` of this window (entered twice: the
        parts add up)."""
        return _Phase(self, name)

    def __repr__(self) -> str:
        return f"<window {self.name!r} {'open' if self.is_open else 'ended'}>"


class _Phase:
    """``with window.phase(name):``, a plain context manager (a generator's made a phase edge dearer)."""

    __slots__ = ("_win", "_name", "_start")

    def __init__(self, win: OpenWindow, name: str) -> None:
        self._win, self._name = win, name

    def __enter__(self) -> None:
        self._start = self._win._engine._enter_phase(self._win, self._name)

    def __exit__(self, *exc) -> None:
        self._win._engine._exit_phase(self._win, self._name, self._start)


class Windows:
    """Windows over one profiler that may nest and overlap, from any thread (one lock orders the samples).

    ``profiler``: the sampler (a :class:`~edgeprof.measure.profiler.Profiler`, which makes its engine with
    ``profiler.windows``; this module does not import it, so the two import one way). ``check_phase``: what a phase
    name must pass, a MonitorError otherwise; the engine's own is that it can name columns at all
    (:func:`~edgeprof.results.check_phase_syntax`), and the owner of the report the windows are written to gives
    the report's (:func:`edgeprof.report.schema.check_phase_name`: not one of its own columns either), before the
    first phase is entered.
    """

    def __init__(self, profiler, check_phase: Callable[[str], None] = check_phase_syntax) -> None:
        self.profiler = profiler
        self.check_phase = check_phase
        self._lock = threading.RLock()
        self._open: list[OpenWindow] = []
        self._unresolved: list[OpenWindow] = []  # ended, their figures not made yet (a slow meter's series)
        self._names: set[str] = set()  # phase names this engine has checked (phases recur every round)
        self.trace_hz = 0.0  # the power trace's rate while it is on (start_trace)
        self._tracer = None
        self.trace_error: Optional[BaseException] = None  # what stopped the last tracer early (a failing meter)

    # --- the power trace (edgeprof.measure.trace) ------------------------------------------------------------
    def start_trace(self, hz: float, *, thread: bool = True) -> None:
        """Trace every window opened from now on: its edges, its phases' edges and a sample every ``1/hz`` s
        (a thread calling :meth:`trace_tick`; ``thread=False``: the caller ticks, as tests with fake clocks do)."""
        from edgeprof.measure.trace import Tracer

        self.stop_trace()
        self.trace_hz = float(hz)
        if thread:
            self._tracer = Tracer(self.trace_tick, hz).start()

    def stop_trace(self) -> int:
        """Stop the tracer thread (windows still open keep the samples they have); the number of ticks taken."""
        tracer, self._tracer = self._tracer, None
        if tracer is None:
            return 0
        tracer.stop()
        self.trace_error = tracer.error
        return tracer.ticks

    def trace_tick(self) -> None:
        """One trace sample for every traced window open now (none open: nothing is read). The sample is taken
        without the engine's lock and without waiting for the device; it joins each window's trace in time order."""
        if not any(w.trace_points is not None for w in self._open):
            return
        sample = self.profiler.sample()
        with self._lock:
            for win in self._open:
                if win.trace_points is not None and sample.wall_s > win.start.wall_s:
                    _insert(win.trace_points, sample)

    def _trace(self, sample: Sample) -> None:
        """Add an edge sample to the trace of every traced window open now (under the lock)."""
        for win in self._open:
            if win.trace_points is not None:
                win.trace_points.append(TracePoint(sample, win.open_phase))

    @property
    def open_windows(self) -> tuple[OpenWindow, ...]:
        return tuple(self._open)

    def _charge(self, cost: _Cost, windows: Iterable[OpenWindow], own: Optional[OpenWindow] = None,
                part: tuple[float, float] = (0.0, 0.0)) -> None:
        """Charge the whole edge to ``windows``, and its ``part`` (wall, thread) to the window ``own`` it opens or
        closes."""
        for win in windows:
            if win is own:
                win.overhead_wall_s += part[0]
                win.overhead_s += part[1]
            else:
                win.overhead_s += cost.overhead_s
                win.overhead_wall_s += cost.overhead_wall_s

    def begin(self, name: str) -> OpenWindow:
        """Open a window now (reading the meters); it stays open until :meth:`end`."""
        win = OpenWindow(self, name)
        self.profiler.start_series()
        self.profiler.sync()
        cost = _Cost(self.profiler)
        with self._lock:
            if self._open:
                # no reset now: it would spoil the open windows' peaks (where there is no reset, every
                # window shows the process's peak so far, as a Profiler window does)
                win.overlapped, win.peak_rss_exact = True, not self.profiler.peak_rss_per_window
                for other in self._open:
                    other.overlapped = True
            else:
                self.profiler.reset_peak_rss()
                self.profiler.reset_device_peak()
            cost.mark()
            win.start = self.profiler.edge_sample()
            if self.profiler.marks:  # the device is idle (just synchronised): it reaches this marker at once
                win.start_marker = self.profiler.mark()
            self._open.append(win)
            self._trace(win.start)
            cost.stop(win.start)
            self._charge(cost, self._open, win, cost.after)
        _OPEN.set(_OPEN.get() + (win,))
        return win

    def end(self, win: OpenWindow, *, close_phase: bool = False) -> None:
        """Close ``win`` (reading the cheap meters); ``win.result`` holds its figures. Where a slow meter is read off
        the measured thread, they are resolved when first asked for (the end does not wait for its series).

        A window cannot end inside its phase (MonitorError), unless ``close_phase``: the window ends with an
        exception that left its phase before the phase's own exit ran (a signal handler that raised as the ``with``
        block of the phase was being left), and the phase ends here, up to now."""
        if close_phase and win.open_phase is not None and win._phase_start is not None:
            self._exit_phase(win, win.open_phase, win._phase_start)
        self.profiler.sync()
        cost = _Cost(self.profiler)
        with self._lock:
            if win not in self._open:
                raise MonitorError(f"window {win.name!r} is not open (ended already, or opened elsewhere)")
            if win.open_phase is not None:
                raise MonitorError(f"window {win.name!r} cannot end inside its phase {win.open_phase!r}; "
                                   "end the phase first")
            cost.mark()
            end = self.profiler.edge_sample()
            self._trace(end)
            peak = self.profiler.read_peak_rss_mb()
            device_peak = self.profiler.read_device_peak_mb() if win.peak_rss_exact else None
            cost.stop(end)
            self._charge(cost, self._open, win, cost.before)
            self._open.remove(win)
            win._ending = (end, peak, device_peak)
            self._unresolved.append(win)
        _forget(win)
        if self.profiler.series is None:
            self._resolve(win)

    def _ready(self, win: OpenWindow) -> bool:
        series = self.profiler.series
        return win._ending is None or series is None or series.passed(win._ending[0].wall_s)

    def _resolve(self, win: OpenWindow) -> None:
        """Make ``win``'s result, waiting for the slow meters' series to pass its end (the wait is charged to the
        windows open meanwhile: the end of an inner window read inside an outer one is the outer one's time)."""
        with win._resolving:
            if win._ending is None:
                return
            end, peak, device_peak = win._ending
            if not self._ready(win):
                wall0, thread0 = self.profiler.clock(), self.profiler.thread_clock()
                self.profiler.wait_for_series(end.wall_s)
                with self._lock:
                    for other in self._open:
                        other.overhead_wall_s += self.profiler.clock() - wall0
                        other.overhead_s += self.profiler.thread_clock() - thread0
            win._result = self._result(win, end, peak, device_peak)
            win._ending = None
            if win.start_marker is not None:  # the device's events, read: for later windows to record again
                self.profiler.release([win.start_marker, *win.markers.values()])
            win.markers, win.start_marker = {}, None
            with self._lock:
                self._unresolved.remove(win)
                keep = [w.start.wall_s for w in self._open + self._unresolved]
            self.profiler.forget_before(min(keep, default=end.wall_s))

    def _result(self, win: OpenWindow, end: Sample, peak: float, device_peak: Optional[float]) -> WindowResult:
        """The window's figures from its samples, the slow meters' domains filled in (the series has passed it)."""
        profiler, complete = self.profiler, self.profiler.complete
        edges = self._reached(win, end)
        phases: dict[str, Span] = {}
        short: dict[str, bool] = {}  # per phase: whether an entry of it is not resolved
        for name, start, stop in edges:
            span = profiler.bounded(Span.between(complete(start), complete(stop)))
            phases[name] = span if name not in phases else phases[name] + span
            short[name] = short.get(name, False) or profiler.unresolved(span)
        span = profiler.bounded(Span.between(complete(win.start), complete(end)))
        trace = None
        if win.trace_points is not None:
            points = win.trace_points if not win.markers else _relabelled(win.trace_points, edges)
            points = [TracePoint(complete(p.sample), p.phase) for p in points]
            trace = trace_rows(points, profiler.domains, hz=self.trace_hz,
                               phase_wall_s={n: p.wall_s for n, p in phases.items()},
                               periods_s=profiler.domain_periods_s, limits_w=profiler.domain_limits_w)
        return WindowResult(
            name=win.name, span=span, phases=phases, peak_rss_mb=peak, overhead_s=win.overhead_s,
            short_window=profiler.unresolved(span), domains=profiler.domains, overhead_wall_s=win.overhead_wall_s,
            device_kind=profiler.device_kind, device_peak_mem_mb=device_peak,
            short_phases=tuple(n for n, unresolved in short.items() if unresolved), trace=trace)

    def _reached(self, win: OpenWindow, end: Sample) -> list[tuple[str, Sample, Sample]]:
        """The window's phase edges, each marked one at the moment the device reached its marker: the start's time
        plus the device's seconds from the start's marker, within [the host's time at the edge, the end]. The device
        has reached every marker: the window's end waited for it.

        Every figure of such an edge is taken at that moment, so that a phase is one span of the wall clock for
        all its domains: the hardware meters' from their series (:meth:`Profiler.complete`), the process CPU
        clock (and the meters that derive from it) interpolated linearly at that moment between the host's own
        samples around it (the window's edges, the host's passage through each phase edge, the trace's ticks).
        So a phase's ``cpu_s`` is the process's CPU seconds while the device ran it, and a trace never steps back
        in CPU time."""
        if not win.markers:
            return win.phase_edges
        host = sorted([(win.start.wall_s, win.start.cpu_s), (end.wall_s, end.cpu_s)]
                      + [(s.wall_s, s.cpu_s) for _, a, b in win.phase_edges for s in (a, b)]
                      + [(p.sample.wall_s, p.sample.cpu_s) for p in win.trace_points or ()
                         if win.start.wall_s <= p.sample.wall_s <= end.wall_s])
        walls, cpus = [w for w, _ in host], list(itertools.accumulate((c for _, c in host), max))

        def cpu_at(t: float) -> float:
            i = bisect.bisect_right(walls, t)
            if i == 0 or i == len(walls):
                return cpus[min(i, len(cpus) - 1)]
            (w0, c0), (w1, c1) = (walls[i - 1], cpus[i - 1]), (walls[i], cpus[i])
            return c0 if w1 <= w0 else c0 + (c1 - c0) * (t - w0) / (w1 - w0)

        def reached(sample: Sample) -> Sample:
            marker = win.markers.get(id(sample))
            if marker is None:
                return sample
            t = win.start.wall_s + self.profiler.device_seconds(win.start_marker, marker)
            t = min(max(t, sample.wall_s), end.wall_s)
            return self.profiler.at_device(sample, t, cpu_at(t))

        return [(name, reached(start), reached(stop)) for name, start, stop in win.phase_edges]

    def discard(self, win: OpenWindow) -> None:
        """Drop an open window without measuring its end (a run that stops with it still open)."""
        with self._lock:
            if win in self._open:
                self._open.remove(win)
            win.discarded = True
        _forget(win)

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[OpenWindow]:
        """Measure the body as window ``name``; ``window.result`` holds the WindowResult afterwards."""
        win = self.begin(name)
        try:
            yield win
        except BaseException:
            if win.is_open:
                try:
                    self.end(win)
                except Exception:  # the body's own error goes on (a meter failing twice says it once)
                    self.discard(win)
            raise
        if win.is_open:
            try:
                self.end(win)
            except BaseException:  # its end could not be measured: it is no longer open either way
                self.discard(win)
                raise

    def _enter_phase(self, win: OpenWindow, name: str) -> Sample:
        if not (isinstance(name, str) and name in self._names):
            self.check_phase(name)  # a MonitorError for what can head no column, a list included
            self._names.add(name)
        if self.profiler.marks and win.start_marker is not None:
            return self._marked_edge(win, name, None)
        self.profiler.sync()
        cost = _Cost(self.profiler)
        with self._lock:
            self._check_entry(win, name)
            start = self.profiler.sample()
            win.open_phase, win._phase_start = name, start
            self._trace(start)
            self._charge(cost.stop(start), self._open)
        return start

    @staticmethod
    def _check_entry(win: OpenWindow, name: str) -> None:
        """MonitorError where phase ``name`` cannot start in ``win`` now (under the lock)."""
        if not win.is_open:
            raise MonitorError(f"window {win.name!r} has ended: no phase can start in it")
        if win.open_phase is not None:
            raise MonitorError(
                f"phase {name!r} entered while phase {win.open_phase!r} of window {win.name!r} is open: the "
                "phases of one window do not overlap (each is a part of the window); open a window inside "
                "the phase instead")

    def _marked_edge(self, win: OpenWindow, name: str, start: Optional[Sample]) -> Sample:
        """A phase edge on a device whose queue is marked, its entry (``start`` None) or its exit, in one call (six a
        PFLEGO round): a marker put in the queue and the clocks read (the meters' share is made when the window is
        resolved, and the edge joins the window's trace then), its wall and thread CPU seconds from entry to exit
        charged to every window open."""
        profiler = self.profiler
        clock, thread_clock = profiler.clock, profiler.thread_clock
        wall0, thread0 = clock(), thread_clock()
        with self._lock:
            if start is None:
                self._check_entry(win, name)
            marker = profiler.mark()
            sample = profiler.clocks()
            win.markers[id(sample)] = marker
            if start is None:
                win.open_phase, win._phase_start = name, sample
            else:
                win.open_phase = None
                win.phase_edges.append((name, start, sample))
            wall, thread = clock() - wall0, thread_clock() - thread0
            cost = profiler.cost
            cost["edges"] += 1
            cost["edge_wall_s"] += wall
            for other in self._open:
                other.overhead_wall_s += wall
                other.overhead_s += thread
        return sample

    def _exit_phase(self, win: OpenWindow, name: str, start: Sample) -> None:
        if win.open_phase != name:  # ended already, with its window (end(close_phase=True)): its late exit is none
            return
        try:  # a device or meter that fails here fails the window's run, not the bookkeeping of its phases
            if id(start) in win.markers:
                self._marked_edge(win, name, start)
                return
            self.profiler.sync()
            cost = _Cost(self.profiler)
            with self._lock:
                end = self.profiler.sample()
                win.open_phase = None
                self._trace(end)
                win.phase_edges.append((name, start, end))
                self._charge(cost.stop(end), self._open)
        finally:
            win.open_phase = None


def _relabelled(points: list, edges: list[tuple[str, Sample, Sample]]) -> list:
    """A window's trace with its phase edges (at the moments the device reached them) among its other samples, in
    time order, each sample labelled with the phase open from it on by those edges."""
    changes = sorted([(start.wall_s, 2 * i, name, start) for i, (name, start, _) in enumerate(edges)]
                     + [(stop.wall_s, 2 * i + 1, None, stop) for i, (_, _, stop) in enumerate(edges)],
                     key=lambda c: (c[0], c[1]))
    times = [c[0] for c in changes]
    out = []
    for p in points:  # the window's own edges and the ticks: the phase of the last change at or before them
        i = bisect.bisect_right(times, p.sample.wall_s)
        out.append((p.sample.wall_s, len(changes), TracePoint(p.sample, changes[i - 1][2] if i else None)))
    out += [(t, order, TracePoint(sample, name)) for t, order, name, sample in changes]
    return [point for _, _, point in sorted(out, key=lambda o: (o[0], o[1]))]


def _insert(points: list, sample: Sample) -> None:
    """Put a tick's sample into a window's trace in time order; its phase is the one open at that time."""
    i = len(points)
    while i > 0 and points[i - 1].sample.wall_s > sample.wall_s:
        i -= 1
    points.insert(i, TracePoint(sample, points[i - 1].phase if i else None))


def _forget(win: OpenWindow) -> None:
    """Take ``win`` off this context's stack of windows (wherever it is: windows may end out of order)."""
    stack = _OPEN.get()
    if win in stack:
        _OPEN.set(tuple(w for w in stack if w is not win))


def current_window(engine: Optional[Windows] = None) -> Optional[OpenWindow]:
    """The innermost window still open in this context (of ``engine``, when given), or None."""
    for win in reversed(_OPEN.get()):
        if win.is_open and (engine is None or win._engine is engine):
            return win
    return None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark the body as phase ``name`` of the innermost window open here (its engine checks the name); outside any
    window, do nothing but check that the name can name columns (:func:`edgeprof.phase` adds the report's check).

    The windows are those of :func:`edgeprof.monitor` and of the Flower mod
    (:func:`edgeprof.flower.energy.energy_mod`), so code that runs inside a profiled ClientApp, or that may or may
    not be profiled, marks its phases with ``with edgeprof.phase("forward"): ...``.
    """
    win = current_window()
    if win is None:
        check_phase_syntax(name)
        yield
        return
    with win.phase(name):
        yield
