"""Named measurement windows around client rounds and server steps, with phases inside.

A window records wall seconds (a monotonic clock), process CPU seconds, the peak resident set size
*during the window* (Linux: the kernel's high-water mark is reset at the window's start through
``/proc/self/clear_refs``; elsewhere the process's lifetime peak), and the energy of every meter
domain as the difference of two cumulative readings. Phases split the same quantities further.

Each sample reads the process CPU clock once and hands that value to the meter set, so a meter derived
from CPU time (the estimate) yields exactly the window's and every phase's ``cpu_s`` times its watts.

Implausible readings: a meter flags a domain whose step since its previous reading cannot be trusted
(:class:`~edgeprof.meters.base.Reading`). Every sample carries, per domain, how many readings were flagged so
far (and the latest reason), so a span between two samples knows whether a flagged step lies inside it: that
domain is then in ``Span.invalid`` and its ``energy_j`` is NaN, never a number. Phases and windows are spans
alike; a phase entered twice is invalid when either part is.

A meter checks each step on its own, with a second of slack for when its counter updated (or each power sample),
so steps that each pass can still add up to more than a span could have drawn: a window read often (trace ticks,
phase edges) or a very short one. So every span is held to its domains' plausible-power bounds as well
(:meth:`~edgeprof.meters.base.Meter.power_bounds_w`: a RAPL zone's twice its largest constraint, a GPU's twice its
power limit, a Jetson rail's full scale, the estimate's every core busy): a domain whose joules are above its bound
times the span's wall seconds plus :func:`bound_slack_s` (two of its meter's update periods, at least
:data:`BOUND_SLACK_S`: a reading's clock and its counter are read apart) is invalid in that span (``above bound``,
:meth:`Profiler.bounded`), exactly as if a reading inside it had been flagged.

Slow meters (a read that costs more than :data:`~edgeprof.meters.discovery.SLOW_READ_S`, NVML's energy counter on
data-centre GPUs) are never read at an edge: a :class:`~edgeprof.measure.series.CounterSeries` thread reads them
with timestamps, and :meth:`Profiler.complete` fills an edge's sample with the series interpolated at its time
once the series has passed it. An edge on the measured thread is the device's sync (the compute seam's, the one
sync), the clocks and the reads of the cheap meters.

Clocks and the meter set are injectable, so a test with fake clocks and fake counters can assert exact
numbers. The profiler's own cost is measured by the window engine on the measured thread, edge by edge, from the
moment an edge is entered (after the device's sync, which is the span's own work finishing) to the moment it is
left, waits for the engine's lock and for the slow meters' series included: ``overhead_wall_s`` is that wall time,
``overhead_s`` the thread CPU seconds of the same stretches. Work of other threads (the series, the power trace's
ticks, a meter's own sampler) is in neither; the sidecar's ``profiler`` section says which meters the series read,
how often, and the waits for it.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

from edgeprof.meters.base import Invalid
from edgeprof.meters.discovery import MeterSet
from edgeprof.measure.series import CounterSeries, period_for
from edgeprof.results import Sample, Span, WindowResult  # noqa: F401 (the results of its windows, plain data)

#: the least slack, seconds, a span's plausible-power bound allows beyond its wall time (:func:`bound_slack_s`)
BOUND_SLACK_S = 0.05
#: the slack in update periods of the domain's meter: the counter may lag by one at each end of a span
BOUND_PERIODS = 2.0
#: the kind of an invalid span whose joules are above its domain's plausible-power bound
ABOVE_BOUND = "above bound"


def bound_slack_s(update_period_s: float) -> float:
    """The seconds beyond a span's wall time its plausible-power bound allows: :data:`BOUND_PERIODS` update periods
    of the domain's meter (its counter may have lagged by one at each end), at least :data:`BOUND_SLACK_S`."""
    return max(BOUND_PERIODS * update_period_s, BOUND_SLACK_S)


class PeakRss:
    """Peak resident set size per window: resets and reads the kernel's VmHWM where Linux allows.

    Both files stay open: a window's reset is one write to ``clear_refs`` (opening and reading each file anew took
    ~130 us a window, a profiler's largest cost on a short round). A forked child's ``/proc/self`` is another
    process: the files are opened again there.

    The read: ``getrusage``'s peak (the calling thread's call, whose peak is the memory's all threads share: under
    1 us, where the process's call adds up every thread's times) where that can only be the reset mark, else one
    ``pread`` of ``status``
    (its whole text made by the kernel: 30..45 us at a PFLEGO round's end on an H200's host, ``scripts/gpu_probe.py
    --parts edges``). Linux's ``getrusage`` peak is the larger of the high-water mark that ``clear_refs`` resets
    (VmHWM) and a figure no reset touches and nothing changes while the process lives (the peak of the image it was
    exec'd from: a process spawned by a large one starts with that one's peak there). Each ``getrusage`` peak read
    just after a reset is at least that fixed figure, so the least of them (``_floor_kb``) bounds it, and a later
    peak above the bound is the high-water mark itself; one at the bound is read from ``status``."""

    #: the open files (descriptors) and the process that opened them (None: not open)
    _clear: Optional[int] = None
    _status: Optional[int] = None
    _pid: Optional[int] = None
    #: the least ``getrusage`` peak (KiB) read just after a reset in this process (None: none yet)
    _floor_kb: Optional[int] = None

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._proc = proc
        self.per_window = self._try_reset()

    def _open(self) -> bool:
        """The two files open in this process (opened again after a fork); False where they cannot be."""
        if self._pid == os.getpid():
            return True
        self.close()
        try:
            self._clear = os.open(self._proc / "clear_refs", os.O_WRONLY)
            self._status = os.open(self._proc / "status", os.O_RDONLY)
        except OSError:
            self.close()
            return False
        self._pid = os.getpid()
        return True

    def close(self) -> None:
        for fd in (self._clear, self._status):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._clear = self._status = self._pid = self._floor_kb = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit os may be gone: the files close with the process
            pass

    def _try_reset(self) -> bool:
        try:
            if not self._open():
                return False
            os.write(self._clear, b"5")
        except OSError:
            return False
        if self._proc == _PROC_SELF:  # getrusage speaks of this process: its peak now bounds the fixed figure
            kb = resource.getrusage(_RUSAGE).ru_maxrss
            self._floor_kb = kb if self._floor_kb is None else min(self._floor_kb, kb)
        return True

    def reset(self) -> None:
        if self.per_window:
            self.per_window = self._try_reset()

    def read_mb(self) -> float:
        if self.per_window and self._open():
            if self._floor_kb is not None:
                kb = resource.getrusage(_RUSAGE).ru_maxrss
                if kb > self._floor_kb:
                    return kb / 1024.0
            try:
                status = os.pread(self._status, 16384, 0)
            except OSError:
                status = b""
            at = status.find(b"\nVmHWM:")
            if at >= 0:
                return int(status[at + 7:status.index(b"kB", at)]) / 1024.0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


#: this process's /proc directory (where ``getrusage`` speaks of the same process as the files)
_PROC_SELF = Path("/proc/self")
#: the calling thread's getrusage (Linux's; its peak is the process's memory's) where there is one
_RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


class Device(Protocol):
    """Where the measured work runs (:class:`edgeprof.nn.compute.Compute` is one): what the profiler needs of it."""

    device: str
    #: the device's kind (``cpu``, ``cuda``), each window's ``device_kind``
    kind_name: str

    def sync(self) -> None:
        """Wait for the device's queued work."""

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory period."""

    def peak_memory_mb(self) -> Optional[float]:
        """The device memory allocated at most since the reset, MiB (None for the host)."""

    # optional, for a device that queues its work (a CUDA GPU): ``can_mark() -> bool``, ``mark()`` (a marker put in
    # its queue now: a CUDA event), ``seconds_between(first, second)`` (the device's seconds between two reached
    # markers) and ``release(markers)`` (markers read, free to be reused); :class:`edgeprof.nn.compute.Compute` has
    # them


def _can_mark(device: Optional[Device]) -> bool:
    can = getattr(device, "can_mark", None)
    return bool(can()) if callable(can) else False


class Profiler:
    """Samples a meter set with injectable clocks; windows and phases are built on it by the one engine,
    :class:`edgeprof.measure.windows.Windows` (``profiler.window(name)`` opens one of its windows).

    ``clock`` is the wall clock, ``cpu_clock`` the process CPU clock (all threads) whose differences are
    ``cpu_s``, ``thread_clock`` the calling thread's CPU clock that times the profiler's own overhead.
    ``device`` (a :class:`Device`, e.g. the run's Compute): the engine has it wait (:meth:`sync`) before every
    window edge, so work queued on an accelerator is counted in the window that queued it, and each window records
    its peak device memory and the device's kind. A phase edge waits too, unless the device queues its work and
    can mark its queue (:attr:`marks`: a CUDA GPU): there a phase edge puts a marker in the queue and goes on, and
    its time is resolved when the window ends to the moment the device reached it (the window's start plus the
    device's seconds from a marker put at the start), so the profiler never drains the queue inside a window (a
    wait at each phase edge made a profiled PFLEGO round 21..33% slower on an H100: the host could no longer
    queue the next phase while the device ran this one). On such a device every meter that measures hardware
    (all but the CPU-time estimate, :attr:`~edgeprof.meters.base.Meter.from_cpu_clock`) is read by the series
    below, so a phase's joules are those between the moments the device reached its edges; its CPU seconds (and
    the estimate made from them) are the process CPU clock interpolated at those moments. The power trace's ticks
    never wait for the device.

    The meters the set found slow to read (:meth:`~edgeprof.meters.discovery.MeterSet.slow_meters`) are read by a
    :class:`~edgeprof.measure.series.CounterSeries` thread, started with the first window (:meth:`start_series`)
    and stopped by :meth:`close`.
    """

    def __init__(self, meters: MeterSet, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time,
                 thread_clock: Callable[[], float] = time.thread_time, rss: PeakRss | None = None,
                 device: Optional[Device] = None) -> None:
        self.meters = meters
        self.domains = meters.domains()
        self.device = device
        self.clock = clock
        self._cpu_clock = cpu_clock
        self.thread_clock = thread_clock
        self._rss = rss if rss is not None else PeakRss()
        self._flagged: dict[str, tuple[int, str]] = {}  # per domain: readings flagged implausible, latest reason
        self._flagged_now: dict[str, tuple[int, str]] = {}  # a copy of it, replaced (never changed) on a new flag
        self._windows = None  # the engine, made on first use
        #: each domain's meter's update period: what a span must last for its joules to be resolved
        self.domain_periods_s = {d.name: m.update_period_s for m in meters.meters for d in m.domains()}
        #: per meter with a coarse energy step: its domains in the total and the step (a span that counts less is
        #: not resolved, :meth:`unresolved`)
        self.energy_quanta = meters.energy_quanta()
        #: each domain's power limit where its meter knows one (a GPU's power limit, the estimate's cores x W)
        self.domain_limits_w = meters.power_limits_w()
        #: each domain's plausible-power bound where its meter knows one: a span above it is invalid (:meth:`bounded`)
        self.domain_bounds_w = meters.power_bounds_w()
        #: phase edges mark the device's queue instead of waiting for it (see the class docstring)
        self.marks = _can_mark(device)
        maker = getattr(device, "marker", None) if self.marks else None
        #: what puts a marker in the device's queue (:meth:`mark`), made once where the device says how
        self._marker = maker() if callable(maker) else getattr(device, "mark", None)
        self._slow = meters.off_thread(self.marks)
        self._direct = tuple(m for m in meters.meters if m not in self._slow)
        self.series: Optional[CounterSeries] = None
        self._sampling = threading.Lock()  # a sample's clocks and reads together (edges and trace ticks)
        #: the profiler's own cost on the measured threads: edges taken, their wall seconds, waits for the series
        self.cost = {"edges": 0, "edge_wall_s": 0.0, "resolve_wait_s": 0.0}

    @property
    def device_kind(self) -> str:
        """The kind of :attr:`device` as it says (``cpu``, ``cuda``: :attr:`Compute.kind_name
        <edgeprof.nn.compute.Compute.kind_name>`; ``""`` without one)."""
        return "" if self.device is None else self.device.kind_name

    def sync(self) -> None:
        """Wait for the device's queued work (the compute seam's sync; nothing without a device)."""
        if self.device is not None:
            self.device.sync()

    def mark(self):
        """A marker in the device's queue now (only where :attr:`marks`)."""
        return self._marker()

    def device_seconds(self, first, second) -> float:
        """The device's seconds between two markers it has reached (after a :meth:`sync`)."""
        return self.device.seconds_between(first, second)

    def release(self, markers) -> None:
        """Markers whose times were read: the device may reuse them (where it says how)."""
        release = getattr(self.device, "release", None)
        if callable(release):
            release(markers)

    def start_series(self) -> None:
        """Start reading the slow meters off the measured thread (once; nothing when every meter is cheap)."""
        if self._slow and self.series is None:
            cost = sum(self.meters.read_cost_s.get(m.name, 0.0) for m in self._slow)
            slow = self._slow
            self.series = CounterSeries(lambda: self.meters.read(only=slow), period_s=period_for(slow, cost),
                                        clock=self.clock).start()

    def close(self) -> None:
        """Stop the slow meters' series (idempotent); the meters themselves are the caller's to close."""
        if self.series is not None:
            self.series.stop()

    # --- for the window engine (edgeprof.measure.windows: windows that may nest and overlap, phases inside) --------
    def sample(self) -> Sample:
        """One sample now: the clocks and the cheap meters, read together under one lock (so samples from several
        threads, edges and trace ticks, are ordered alike by time and by counter); the slow meters' domains wait for
        :meth:`complete`. Never waits for the device (the engine does that before an edge)."""
        with self._sampling:
            wall = self.clock()
            cpu = self._cpu_clock()
            reading = self.meters.read(cpu_s=cpu, only=self._direct)
            if reading.invalid:
                for domain, why in reading.invalid.items():
                    self._flagged[domain] = (self._flagged.get(domain, (0, ""))[0] + 1, str(why))
                self._flagged_now = dict(self._flagged)
            flagged = self._flagged_now
        return Sample(wall, cpu, reading.energy_j, flagged, resolved=self.series is None)

    def clocks(self) -> Sample:
        """A marked phase edge's sample (only where :attr:`marks`): the clocks alone. Every meter read at an edge
        there derives from the process CPU clock (:attr:`~edgeprof.meters.base.Meter.from_cpu_clock`), so its
        joules follow from the CPU seconds whenever they are made (:meth:`at_device`)."""
        return Sample(self.clock(), self._cpu_clock(), {}, self._flagged_now, resolved=False)

    def at_device(self, sample: Sample, wall_s: float, cpu_s: float) -> Sample:
        """A marked edge's sample (:meth:`clocks`) at the moment ``wall_s`` the device reached it, when the process
        CPU clock read ``cpu_s`` (interpolated by the engine): the CPU-clock meters' joules made from it, the slow
        meters' still to be filled in (:meth:`complete`)."""
        energy = self.meters.read(cpu_s=cpu_s, only=self._direct).energy_j if self._direct else {}
        return Sample(wall_s, cpu_s, energy, sample.flagged, resolved=self.series is None)

    def edge_sample(self) -> Sample:
        """A window edge's sample: where :attr:`marks`, the clocks alone (:meth:`clocks`: every meter read at an edge
        there derives from the CPU clock, and its joules are made from the sample's CPU seconds by :meth:`complete`),
        else :meth:`sample`."""
        return self.clocks() if self.marks else self.sample()

    def complete(self, sample: Sample) -> Sample:
        """``sample`` with the meters it did not read filled in: the CPU-clock meters' joules from its CPU seconds
        where it holds the clocks alone (:meth:`clocks`), the slow meters' domains from the series (interpolated at
        its time; the series must have passed it: :meth:`wait_for_series`)."""
        if self._direct and not sample.energy_j:
            sample = self.at_device(sample, sample.wall_s, sample.cpu_s)
        if sample.resolved or self.series is None:
            return sample
        energy, flagged_start, flagged_end = self.series.at(sample.wall_s)
        return Sample(sample.wall_s, sample.cpu_s, {**sample.energy_j, **energy}, {**sample.flagged, **flagged_end},
                      {**sample.flagged, **flagged_start}, resolved=True)

    def unresolved(self, span: Span) -> bool:
        """Whether the meters did not resolve ``span``'s joules: it is shorter than their update period, or a meter
        with a coarse energy step (:attr:`~edgeprof.meters.base.Meter.energy_quantum_j`) counted less than one step
        in its domains of the total (an invalid domain is flagged as such, not here)."""
        return span.wall_s < self.meters.update_period_s or any(
            sum(span.energy_j.get(name, 0.0) for name in names) < quantum for names, quantum in self.energy_quanta)

    def bounded(self, span: Span) -> Span:
        """``span`` with every domain whose joules are above what its meter can plausibly show over it (its bound times
        the span's wall seconds plus :func:`bound_slack_s`) made invalid (``above bound``, NaN joules; logged for the
        sidecar's ``meters.invalid``), as a flagged reading inside it would be. A domain already invalid, or with no
        known bound, is left as it is."""
        over: dict[str, Invalid] = {}
        for name, bound in self.domain_bounds_w.items():
            joules = span.energy_j.get(name)
            if joules is None or name in span.invalid or not bound > 0:
                continue
            slack = bound_slack_s(self.domain_periods_s.get(name, 0.0))
            if joules > bound * (span.wall_s + slack):
                over[name] = Invalid(ABOVE_BOUND, f"{joules:.4g} J in {span.wall_s:.4g} s, above the {bound:g} W its "
                                                  f"readings can plausibly show x (wall + {slack:g} s)")
        if not over:
            return span
        self.meters.log_invalid(over)
        return Span(span.wall_s, span.cpu_s, {k: math.nan if k in over else v for k, v in span.energy_j.items()},
                    {**span.invalid, **{k: str(why) for k, why in over.items()}})

    def wait_for_series(self, t_s: float) -> float:
        """Wait until the slow meters' series has a reading after ``t_s``; the seconds waited (0: no series)."""
        if self.series is None:
            return 0.0
        start = self.clock()
        timeout = max(1.0, 4 * self.series.period_s)
        self.series.wait_past(t_s, timeout)
        waited = self.clock() - start
        self.cost["resolve_wait_s"] += waited
        return waited

    def forget_before(self, t_s: float) -> None:
        """The series' readings before ``t_s`` will not be asked for again."""
        if self.series is not None:
            self.series.forget_before(t_s)

    def describe(self) -> dict:
        """The sidecar's ``profiler`` section: how edges read the meters, and what the profiler cost."""
        out = {"edges": self.cost["edges"], "edge_wall_s": round(self.cost["edge_wall_s"], 9),
               "resolve_wait_s": round(self.cost["resolve_wait_s"], 9),
               "read_at_edges": [m.name for m in self._direct], "read_off_thread": [m.name for m in self._slow],
               "phase_edges": "device markers, resolved at the window's end" if self.marks else "device synchronised"}
        if self.cost["edges"]:
            out["edge_wall_us_mean"] = round(self.cost["edge_wall_s"] / self.cost["edges"] * 1e6, 3)
        if self.series is not None:
            out["series"] = {"period_s": self.series.period_s, "readings": self.series.readings}
        return out

    @property
    def peak_rss_per_window(self) -> bool:
        """Whether the peak RSS can be reset (Linux); otherwise every read is the process's peak so far."""
        return self._rss.per_window

    def reset_peak_rss(self) -> None:
        """Start a new peak-RSS period."""
        self._rss.reset()

    def read_peak_rss_mb(self) -> float:
        """The peak RSS since the last reset, MiB."""
        return self._rss.read_mb()

    def reset_device_peak(self) -> None:
        """Start a new peak-device-memory period (no-op without a device)."""
        if self.device is not None:
            self.device.reset_peak_memory()

    def read_device_peak_mb(self) -> Optional[float]:
        """The device's peak memory since the last reset, MiB (None: no device, or a host device)."""
        return None if self.device is None else self.device.peak_memory_mb()

    @property
    def windows(self):
        """The window engine over this profiler (:class:`edgeprof.measure.windows.Windows`), made once; whoever
        writes its windows into a report gives it the report's phase-name check (``windows.check_phase``)."""
        if self._windows is None:
            from edgeprof.measure.windows import Windows

            self._windows = Windows(self)
        return self._windows

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator:
        """Measure the body as one window of :attr:`windows`; ``window.result`` holds the :class:`WindowResult`
        afterwards and ``window.phase(name)`` marks its phases."""
        with self.windows.window(name) as win:
            yield win
