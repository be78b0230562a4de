"""Windows that may nest and overlap, with phases inside, over one Profiler's meters and clocks.

This is edgeprof's one window engine: the :class:`~edgeprof.measure.profiler.Profiler` samples the meters and
clocks; every window and phase of ``measure``, ``sweep``, ``train``, :func:`edgeprof.monitor` and both Flower
mods is opened here (``profiler.window(name)`` is a window of this engine). User code opens windows inside
windows, from callbacks, from several threads. :class:`Windows` allows that by giving every window its own
start sample:
all windows share the meters' cumulative readings, and a window's figures are the differences between its
own two samples, exactly as a Profiler window's (same :class:`~edgeprof.measure.profiler.Span`, same
:class:`~edgeprof.measure.profiler.WindowResult`, so the report row and its method labels are those of
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
* Bookkeeping (meter and RSS reads) is charged to every window open while it ran (``overhead_s``).

:func:`phase` marks a phase of the innermost window opened in the current context (thread or asyncio task)
and does nothing outside any window, so library code can mark phases whether or not it is profiled.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from edgeprof.errors import MonitorError
from edgeprof.measure.profiler import Profiler, Sample, Span, WindowResult
from edgeprof.measure.trace import TracePoint, trace_rows

#: what a phase may be called: its report columns are ``<phase>_s``, ``<phase>_cpu_s`` and ``<phase>_j``
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")

#: the windows opened in this context, innermost last (thread- and task-local)
_OPEN: contextvars.ContextVar[tuple["OpenWindow", ...]] = contextvars.ContextVar("edgeprof_windows", default=())


def check_phase_name(name: str) -> None:
    from edgeprof.report.schema import BESIDE_ROUND, CORE_COLUMNS, GENERIC_COLUMNS, domain_columns

    if not isinstance(name, str) or not PHASE_NAME.fullmatch(name) or name.endswith("_cpu"):
        raise MonitorError(f"phase name {name!r} must be lower-case letters, digits and '_', start with a letter "
                           "and not end in '_cpu' (it names the columns <phase>_s, <phase>_cpu_s, <phase>_j)")
    taken = set(CORE_COLUMNS) | set(GENERIC_COLUMNS) | set(domain_columns())
    clash = [c for c in (f"{name}_s", f"{name}_cpu_s", f"{name}_j") if c in taken]
    if clash or name in BESIDE_ROUND:
        raise MonitorError(f"phase name {name!r} would write into the report's own column {(clash or [name])[0]!r}")


@dataclass
class _Cost:
    """The bookkeeping of one step, before it is charged to the windows open meanwhile."""

    overhead_s: float = 0.0
    overhead_wall_s: float = 0.0


class OpenWindow:
    """One window of :class:`Windows`; ``phase(name)`` marks a part of it; ``result`` once it has ended."""

    def __init__(self, engine: "Windows", name: str) -> None:
        self._engine = engine
        self.name = name
        self.phases: dict[str, Span] = {}
        self.overhead_s = 0.0
        self.overhead_wall_s = 0.0
        self.start: Optional[Sample] = None
        self.overlapped = False  # another window was open at some time during this one
        self.peak_rss_exact = True  # False when it opened while another window was open (no reset possible)
        self.open_phase: Optional[str] = None
        self.result: Optional[WindowResult] = None
        self.discarded = False  # dropped unmeasured (its run stopped while it was open)
        #: the samples of its power trace, with the phase open from each on (None: not traced)
        self.trace_points: Optional[list] = [] if engine.trace_hz else None

    @property
    def is_open(self) -> bool:
        return self.result is None and not self.discarded

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure the body as phase ``name`` of this window (entered twice: the parts add up)."""
        start = self._engine._enter_phase(self, name)
        try:
            yield
        finally:
            self._engine._exit_phase(self, name, start)

    def __repr__(self) -> str:
        return f"<window {self.name!r} {'open' if self.is_open else 'ended'}>"


class Windows:
    """Windows over one profiler that may nest and overlap, from any thread (one lock orders the samples)."""

    def __init__(self, profiler: Profiler) -> None:
        self.profiler = profiler
        self._lock = threading.RLock()
        self._open: list[OpenWindow] = []
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
        """One trace sample for every traced window open now (none open: nothing is read)."""
        with self._lock:
            traced = [w for w in self._open if w.trace_points is not None]
            if not traced:
                return
            cost = _Cost()
            sample = self.profiler.sample(cost, sync=False)
            self._charge(cost, self._open)
            for win in traced:
                win.trace_points.append(TracePoint(sample, win.open_phase))

    def _trace(self, sample: Sample) -> None:
        """Add an edge sample to the trace of every traced window open now (under the lock)."""
        for win in self._open:
            if win.trace_points is not None:
                win.trace_points.append(TracePoint(sample, win.open_phase))

    @property
    def open_windows(self) -> tuple[OpenWindow, ...]:
        return tuple(self._open)

    def _charge(self, cost: _Cost, windows: Iterable[OpenWindow]) -> None:
        for win in windows:
            win.overhead_s += cost.overhead_s
            win.overhead_wall_s += cost.overhead_wall_s

    def begin(self, name: str) -> OpenWindow:
        """Open a window now (reading the meters); it stays open until :meth:`end`."""
        win = OpenWindow(self, name)
        with self._lock:
            cost = _Cost()
            if self._open:
                # no reset now: it would spoil the open windows' peaks (where there is no reset, every
                # window shows the process's peak so far, as a Profiler window does)
                win.overlapped, win.peak_rss_exact = True, not self.profiler.peak_rss_per_window
                for other in self._open:
                    other.overlapped = True
            else:
                self.profiler.reset_peak_rss(cost)
                self.profiler.reset_device_peak(cost)
            win.start = self.profiler.sample(cost)
            self._open.append(win)
            self._charge(cost, self._open)
            self._trace(win.start)
        _OPEN.set(_OPEN.get() + (win,))
        return win

    def end(self, win: OpenWindow) -> WindowResult:
        """Close ``win`` (reading the meters) and return its :class:`WindowResult`."""
        with self._lock:
            if win not in self._open:
                raise MonitorError(f"window {win.name!r} is not open (ended already, or opened elsewhere)")
            if win.open_phase is not None:
                raise MonitorError(f"window {win.name!r} cannot end inside its phase {win.open_phase!r}; "
                                   "end the phase first")
            cost = _Cost()
            end = self.profiler.sample(cost)
            self._trace(end)
            peak = self.profiler.read_peak_rss_mb(cost)
            device_peak = self.profiler.read_device_peak_mb(cost) if win.peak_rss_exact else None
            self._charge(cost, self._open)
            self._open.remove(win)
            span = Span.between(win.start, end)
            period = self.profiler.meters.update_period_s
            win.result = WindowResult(
                name=win.name, span=span, phases=dict(win.phases), peak_rss_mb=peak, overhead_s=win.overhead_s,
                short_window=span.wall_s < period, domains=self.profiler.domains,
                overhead_wall_s=win.overhead_wall_s, device_kind=self.profiler.device_kind,
                device_peak_mem_mb=device_peak,
                short_phases=tuple(n for n, p in win.phases.items() if p.wall_s < period),
                trace=None if win.trace_points is None else trace_rows(
                    win.trace_points, self.profiler.domains, hz=self.trace_hz,
                    phase_wall_s={n: p.wall_s for n, p in win.phases.items()}))
        _forget(win)
        return win.result

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
            check_phase_name(name)  # a MonitorError for what can head no column, a list included
            self._names.add(name)
        with self._lock:
            if not win.is_open:
                raise MonitorError(f"window {win.name!r} has ended: no phase can start in it")
            if win.open_phase is not None:
                raise MonitorError(
                    f"phase {name!r} entered while phase {win.open_phase!r} of window {win.name!r} is open: the "
                    "phases of one window do not overlap (each is a part of the window); open a window inside "
                    "the phase instead")
            cost = _Cost()
            start = self.profiler.sample(cost)
            self._charge(cost, self._open)
            win.open_phase = name
            self._trace(start)
        return start

    def _exit_phase(self, win: OpenWindow, name: str, start: Sample) -> None:
        with self._lock:
            cost = _Cost()
            try:
                end = self.profiler.sample(cost)
            finally:  # a meter that fails here fails the window's run, not the bookkeeping of its phases
                win.open_phase = None
            self._charge(cost, self._open)
            self._trace(end)
            span = Span.between(start, end)
            previous = win.phases.get(name)
            win.phases[name] = span if previous is None else previous + span


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
    """Mark the body as phase ``name`` of the innermost window open here; outside any window, do nothing.

    The windows are those of :func:`edgeprof.monitor` and of the Flower mod
    (:func:`edgeprof.flower.energy.energy_mod`), so code that runs inside a profiled ClientApp, or that may or may
    not be profiled, marks its phases with ``with edgeprof.phase("forward"): ...``.
    """
    win = current_window()
    if win is None:
        check_phase_name(name)
        yield
        return
    with win.phase(name):
        yield
