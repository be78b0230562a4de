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

Clocks and the meter set are injectable, so a test with fake clocks and fake counters can assert exact
numbers. The profiler's own cost is its bookkeeping (meter reads, RSS reads) measured on the calling
thread's CPU clock: ``overhead_s`` is thread CPU seconds, which time spent preempted by other processes
or blocked (e.g. waiting for a GPU in ``sync``) does not inflate; ``overhead_wall_s`` is the wall time of the
same bookkeeping, kept beside it. Work of a meter's own sampler thread is in neither.
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Protocol

from edgeprof.meters.base import Domain
from edgeprof.meters.discovery import MeterSet


@dataclass(frozen=True)
class Sample:
    """Everything read at one instant; ``flagged``: per domain, (readings flagged implausible so far, the
    latest reason)."""

    wall_s: float
    cpu_s: float
    energy_j: Mapping[str, float]
    flagged: Mapping[str, tuple[int, str]] = field(default_factory=dict)


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
        invalid = {d: why for d, (n, why) in end.flagged.items() if n > start.flagged.get(d, (0, ""))[0]}
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

    ``overhead_s`` is the thread CPU seconds of the profiler's bookkeeping inside the window,
    ``overhead_wall_s`` the wall seconds of the same bookkeeping.
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
    #: the window's power trace (:class:`edgeprof.measure.trace.TraceRow` per interval and domain), when traced
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


class PeakRss:
    """Peak resident set size per window: resets and reads the kernel's VmHWM where Linux allows."""

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._clear = proc / "clear_refs"
        self._status = proc / "status"
        self.per_window = self._try_reset()

    def _try_reset(self) -> bool:
        try:
            self._clear.write_text("5")
            return True
        except OSError:
            return False

    def reset(self) -> None:
        if self.per_window:
            self.per_window = self._try_reset()

    def read_mb(self) -> float:
        if self.per_window:
            for line in self._status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


class Device(Protocol):
    """Where the measured work runs (:class:`edgeprof.nn.compute.Compute` is one): what the profiler needs of it."""

    device: str

    def sync(self) -> None:
        """Wait for the device's queued work."""

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory period."""

    def peak_memory_mb(self) -> Optional[float]:
        """The device memory allocated at most since the reset, MiB (None for the host)."""


class Profiler:
    """Samples a meter set with injectable clocks; windows and phases are built on it by the one engine,
    :class:`edgeprof.measure.windows.Windows` (``profiler.window(name)`` opens one of its windows).

    ``clock`` is the wall clock, ``cpu_clock`` the process CPU clock (all threads) whose differences are
    ``cpu_s``, ``thread_clock`` the calling thread's CPU clock that times the profiler's own overhead.
    ``device`` (a :class:`Device`, e.g. the run's Compute): every sample first waits for it (``sync``), so
    work queued on an accelerator is counted in the span that queued it, and each window records its peak
    device memory and the device's kind. Samples are taken at window and phase edges only, so the device is
    synchronised there and nowhere else.
    """

    def __init__(self, meters: MeterSet, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time,
                 thread_clock: Callable[[], float] = time.thread_time, rss: PeakRss | None = None,
                 device: Optional[Device] = None) -> None:
        self.meters = meters
        self.domains = meters.domains()
        self.device = device
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._thread_clock = thread_clock
        self._rss = rss if rss is not None else PeakRss()
        self._flagged: dict[str, tuple[int, str]] = {}  # per domain: readings flagged implausible, latest reason
        self._windows = None  # the engine, made on first use

    @property
    def device_kind(self) -> str:
        """``cpu``, ``cuda``, ... of :attr:`device` (``""`` without one)."""
        return "" if self.device is None else str(self.device.device).partition(":")[0]

    def _charge(self, window, wall0_s: float, thread0_s: float) -> None:
        """Add the bookkeeping since ``(wall0_s, thread0_s)`` to the window's overhead."""
        window.overhead_s += self._thread_clock() - thread0_s
        window.overhead_wall_s += self._clock() - wall0_s

    def _sample(self, window, sync: bool = True) -> Sample:
        """Wait for the device (unless ``sync`` is False), then read the clocks and the meters, handing the meters
        this sample's CPU time; the reading (not the wait, which is the span's own work finishing) is charged to
        overhead."""
        if sync and self.device is not None:
            self.device.sync()
        wall0, thread0 = self._clock(), self._thread_clock()
        cpu = self._cpu_clock()
        reading = self.meters.read(cpu_s=cpu)
        for domain, why in reading.invalid.items():
            self._flagged[domain] = (self._flagged.get(domain, (0, ""))[0] + 1, str(why))
        self._charge(window, wall0, thread0)
        return Sample(wall0, cpu, reading.energy_j, dict(self._flagged))

    # --- for the window engine (edgeprof.measure.windows: windows that may nest and overlap, phases inside) --------
    def sample(self, charge, sync: bool = True) -> Sample:
        """One sample, as a window's edges and phases take it; its bookkeeping is added to ``charge``'s
        ``overhead_s`` and ``overhead_wall_s``. ``sync=False`` (the power trace's ticks) reads without waiting
        for the device's queued work."""
        return self._sample(charge, sync)

    @property
    def peak_rss_per_window(self) -> bool:
        """Whether the peak RSS can be reset (Linux); otherwise every read is the process's peak so far."""
        return self._rss.per_window

    def reset_peak_rss(self, charge) -> None:
        """Start a new peak-RSS period; the bookkeeping is added to ``charge``."""
        wall0, thread0 = self._clock(), self._thread_clock()
        self._rss.reset()
        self._charge(charge, wall0, thread0)

    def read_peak_rss_mb(self, charge) -> float:
        """The peak RSS since the last reset, MiB; the bookkeeping is added to ``charge``."""
        wall0, thread0 = self._clock(), self._thread_clock()
        peak = self._rss.read_mb()
        self._charge(charge, wall0, thread0)
        return peak

    def reset_device_peak(self, charge) -> None:
        """Start a new peak-device-memory period (no-op without a device); the bookkeeping goes to ``charge``."""
        if self.device is not None:
            wall0, thread0 = self._clock(), self._thread_clock()
            self.device.reset_peak_memory()
            self._charge(charge, wall0, thread0)

    def read_device_peak_mb(self, charge) -> Optional[float]:
        """The device's peak memory since the last reset, MiB (None: no device, or a host device)."""
        if self.device is None:
            return None
        wall0, thread0 = self._clock(), self._thread_clock()
        peak = self.device.peak_memory_mb()
        self._charge(charge, wall0, thread0)
        return peak

    @property
    def windows(self):
        """The window engine over this profiler (:class:`edgeprof.measure.windows.Windows`), made once."""
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
