"""Background power sampling with exact trapezoidal integration.

Back-ends that only expose instantaneous power (Jetson INA3221 rails, NVML power on GPUs without the
energy counter) turn it into cumulative energy here. Power is kept in integer microwatts and time in
integer nanoseconds, so the trapezoid sum ``sum((p_i + p_{i+1}) / 2 * (t_{i+1} - t_i))`` is accumulated
exactly as an integer (twice the integral, in uW*ns = 1e-15 J) and converted to joules once, with
correctly rounded division. A fake clock in tests therefore gives exact joules.

:class:`PowerSampler` is usable without its thread (call :meth:`PowerSampler.sample` step by step);
:meth:`PowerSampler.start` adds a daemon thread that samples at ``hz``. A reading always takes one
fresh sample first, so a window ends exactly at the moment it is read.

Implausible samples: a channel's sample that is :class:`Implausible` (the reader says why, e.g. a negative
current), negative, or above the channel's bound (``max_power_uw``) is never integrated. Both trapezoids
that touch it (from the sample before, to the sample after) add nothing, and the channel is flagged; the
flag is handed out with the reading that ends the first of those trapezoids and again with the reading
that ends the second (:meth:`PowerSampler.read`), so every window that spans a part of them is invalid.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Union

from edgeprof.errors import MeterError

#: 1 J = 1e15 uW*ns; the integral is stored doubled (trapezoid without the division by two)
_TWICE_FJ_PER_J = 2 * 10**15


@dataclass(frozen=True)
class Implausible:
    """A power sample that cannot be physical, as its reader saw it (e.g. a negative current), with why."""

    reason: str


#: what a power reader returns per channel: integer microwatts, or why the sample is implausible
PowerSample = Union[int, Implausible]


class TrapezoidIntegrator:
    """Cumulative energy per channel from (time_ns, power_uw) samples; implausible samples are left out.

    ``max_power_uw`` bounds a channel's plausible power (channels not in it: no upper bound); a negative
    sample is always implausible.
    """

    def __init__(self, channels: tuple[str, ...], max_power_uw: Mapping[str, int] | None = None) -> None:
        self.channels = channels
        self._max_uw = dict(max_power_uw or {})
        self._twice_fj = {c: 0 for c in channels}
        self._last_t: int | None = None
        self._last_p: dict[str, int | None] = {}
        self._bad: dict[str, str] = {}  # channel -> why its last sample is not usable
        self._invalid: dict[str, str] = {}  # channel -> why a trapezoid since the last take_invalid was left out
        self.samples = 0

    def _check(self, channel: str, power: PowerSample) -> tuple[int | None, str]:
        if isinstance(power, Implausible):
            return None, power.reason
        value = int(power)
        if value < 0:
            return None, f"power sample {value} uW is negative"
        bound = self._max_uw.get(channel)
        if bound is not None and value > bound:
            return None, f"power sample {value / 1e6:g} W is above the {bound / 1e6:g} W bound"
        return value, ""

    def add(self, t_ns: int, power_uw: Mapping[str, PowerSample]) -> None:
        """Add one sample; the first only sets the starting point. Time must not go backwards."""
        checked = {c: self._check(c, power_uw[c]) for c in self.channels}
        if self._last_t is not None:
            dt = int(t_ns) - self._last_t
            if dt < 0:
                raise MeterError(f"sampler clock went backwards by {-dt} ns")
            for c in self.channels:
                (now, why), before = checked[c], self._last_p[c]
                if now is None or before is None:
                    self._invalid.setdefault(c, why or self._bad[c])
                else:
                    self._twice_fj[c] += (before + now) * dt
        self._last_t = int(t_ns)
        self._last_p = {c: p for c, (p, _) in checked.items()}
        self._bad = {c: why for c, (p, why) in checked.items() if p is None}
        self.samples += 1

    def energy_j(self) -> dict[str, float]:
        return {c: v / _TWICE_FJ_PER_J for c, v in self._twice_fj.items()}

    def take_invalid(self) -> dict[str, str]:
        """Channels with a trapezoid left out since the last call, with why; forgets them."""
        invalid, self._invalid = self._invalid, {}
        return invalid

    def last_power_w(self) -> dict[str, float]:
        """The last sample per channel in watts (NaN where it was implausible)."""
        return {c: float("nan") if p is None else p / 1e6 for c, p in self._last_p.items()}


class Periodic:
    """A daemon thread that calls ``fn`` every ``1/hz`` seconds until :meth:`stop`.

    An exception from ``fn`` ends the thread and is kept in :attr:`error` for the owner to raise where its
    reader can handle it; :attr:`calls` counts the calls that returned. The power sampler and the power trace
    (:class:`edgeprof.measure.trace.Tracer`) run on it.
    """

    def __init__(self, fn: Callable[[], object], hz: float, name: str) -> None:
        self.fn, self.hz, self.name = fn, float(hz), name
        self.calls = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Periodic":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        period = 1.0 / self.hz
        while not self._stop.wait(period):
            try:
                self.fn()
                self.calls += 1
            except BaseException as err:  # kept for the owner; the thread must not die silently
                self.error = err
                return

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread and wait for it (idempotent; from the thread itself, only stop)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class PowerSampler:
    """Samples ``read_power_uw()`` (channel -> integer microwatts) and integrates it.

    ``clock_ns`` is injectable (default :func:`time.monotonic_ns`). The first sample is taken in the
    constructor, so energy counts from the moment the sampler exists. An error in the thread is kept
    and raised (as :class:`MeterError`) by the next :meth:`energy_j` or :meth:`read`. ``max_power_uw``
    bounds each channel's plausible power (see :class:`TrapezoidIntegrator`).
    """

    def __init__(
        self,
        channels: tuple[str, ...],
        read_power_uw: Callable[[], Mapping[str, PowerSample]],
        *,
        hz: float = 10.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        max_power_uw: Mapping[str, int] | None = None,
    ) -> None:
        if not hz > 0:
            raise ValueError("sampling rate must be positive")
        self.hz = float(hz)
        self._read = read_power_uw
        self._clock_ns = clock_ns
        self._integrator = TrapezoidIntegrator(channels, max_power_uw)
        self._lock = threading.Lock()
        self._thread = Periodic(self.sample, self.hz, "edgeprof-power-sampler")
        self.sample()

    @property
    def _error(self) -> BaseException | None:
        return self._thread.error

    def sample(self) -> None:
        """Take one sample now (reading the power first, then the clock)."""
        power = self._read()
        with self._lock:
            self._integrator.add(self._clock_ns(), power)

    def energy_j(self) -> dict[str, float]:
        """Cumulative joules per channel, up to a sample taken now (flags stay for :meth:`read`)."""
        return self._reading(take=False)[0]

    def read(self) -> tuple[dict[str, float], dict[str, str]]:
        """Cumulative joules per channel up to a sample taken now, and the channels with a trapezoid left
        out since the previous :meth:`read` (with why), both taken under one lock so that no sample of the
        thread falls between them."""
        return self._reading(take=True)

    def _reading(self, *, take: bool) -> tuple[dict[str, float], dict[str, str]]:
        if self._error is not None:
            raise MeterError(f"power sampler failed: {self._error}") from self._error
        self.sample()
        with self._lock:
            return self._integrator.energy_j(), (self._integrator.take_invalid() if take else {})

    def last_power_w(self) -> dict[str, float]:
        with self._lock:
            return self._integrator.last_power_w()

    @property
    def samples(self) -> int:
        return self._integrator.samples

    def start(self) -> "PowerSampler":
        """Sample in a daemon thread every ``1/hz`` seconds until :meth:`stop`."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        self._thread.stop()
