"""Background power sampling with exact trapezoidal integration.

Back-ends that only expose instantaneous power (Jetson INA3221 rails, NVML power on GPUs without the
energy counter) turn it into cumulative energy here. Power is kept in integer microwatts and time in
integer nanoseconds, so the trapezoid sum ``sum((p_i + p_{i+1}) / 2 * (t_{i+1} - t_i))`` is accumulated
exactly as an integer (twice the integral, in uW*ns = 1e-15 J) and converted to joules once, with
correctly rounded division. A fake clock in tests therefore gives exact joules.

:class:`PowerSampler` is usable without its thread (call :meth:`PowerSampler.sample` step by step);
:meth:`PowerSampler.start` adds a daemon thread that samples at ``hz``. A reading always takes one
fresh sample first, so a window ends exactly at the moment it is read.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping

from edgeprof.errors import MeterError

#: 1 J = 1e15 uW*ns; the integral is stored doubled (trapezoid without the division by two)
_TWICE_FJ_PER_J = 2 * 10**15


class TrapezoidIntegrator:
    """Cumulative energy per channel from (time_ns, power_uw) samples."""

    def __init__(self, channels: tuple[str, ...]) -> None:
        self.channels = channels
        self._twice_fj = {c: 0 for c in channels}
        self._last_t: int | None = None
        self._last_p: dict[str, int] = {}
        self.samples = 0

    def add(self, t_ns: int, power_uw: Mapping[str, int]) -> None:
        """Add one sample; the first only sets the starting point. Time must not go backwards."""
        if self._last_t is not None:
            dt = int(t_ns) - self._last_t
            if dt < 0:
                raise MeterError(f"sampler clock went backwards by {-dt} ns")
            for c in self.channels:
                self._twice_fj[c] += (self._last_p[c] + int(power_uw[c])) * dt
        self._last_t = int(t_ns)
        self._last_p = {c: int(power_uw[c]) for c in self.channels}
        self.samples += 1

    def energy_j(self) -> dict[str, float]:
        return {c: v / _TWICE_FJ_PER_J for c, v in self._twice_fj.items()}

    def last_power_w(self) -> dict[str, float]:
        return {c: p / 1e6 for c, p in self._last_p.items()}


class PowerSampler:
    """Samples ``read_power_uw()`` (channel -> integer microwatts) and integrates it.

    ``clock_ns`` is injectable (default :func:`time.monotonic_ns`). The first sample is taken in the
    constructor, so energy counts from the moment the sampler exists. An error in the thread is kept
    and raised (as :class:`MeterError`) by the next :meth:`energy_j`.
    """

    def __init__(
        self,
        channels: tuple[str, ...],
        read_power_uw: Callable[[], Mapping[str, int]],
        *,
        hz: float = 10.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not hz > 0:
            raise ValueError("sampling rate must be positive")
        self.hz = float(hz)
        self._read = read_power_uw
        self._clock_ns = clock_ns
        self._integrator = TrapezoidIntegrator(channels)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.sample()

    def sample(self) -> None:
        """Take one sample now (reading the power first, then the clock)."""
        power = self._read()
        with self._lock:
            self._integrator.add(self._clock_ns(), power)

    def energy_j(self) -> dict[str, float]:
        """Cumulative joules per channel, up to a sample taken now."""
        if self._error is not None:
            raise MeterError(f"power sampler failed: {self._error}") from self._error
        self.sample()
        with self._lock:
            return self._integrator.energy_j()

    def last_power_w(self) -> dict[str, float]:
        with self._lock:
            return self._integrator.last_power_w()

    @property
    def samples(self) -> int:
        return self._integrator.samples

    def start(self) -> "PowerSampler":
        """Sample in a daemon thread every ``1/hz`` seconds until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="edgeprof-power-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        period = 1.0 / self.hz
        while not self._stop.wait(period):
            try:
                self.sample()
            except BaseException as err:  # kept for the reader; the thread must not die silently
                self._error = err
                return

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
