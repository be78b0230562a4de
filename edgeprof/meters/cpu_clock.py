"""How late the process CPU clock counts other threads' time, measured once per process.

``time.process_time()`` reads ``CLOCK_PROCESS_CPUTIME_ID``: on Linux the sum of every thread's
``sum_exec_runtime``, of which only the calling thread's is brought up to date. Another thread's running time
is added when its CPU's scheduler tick comes (every 1/``CONFIG_HZ``: 1 to 10 ms) or when it stops running, so
a reading can lack up to a tick of each busy thread's time, and the next reading picks it up: a phase of ~1 ms
has shown 5.7 times its wall time in CPU seconds on 2 cores. Other systems count CPU time in steps of their
own (Windows in ~15.6 ms clock ticks).

:func:`measure_cpu_clock_lag_s` measures the lag: a helper thread (:func:`busy_thread`) keeps a core busy
outside the GIL while the calling thread polls the process CPU clock, its own thread CPU clock and a wall
clock; :func:`late_cpu_s` takes from the samples the most CPU time that arrived in one poll step beyond what
the process could have used during it. :func:`process_cpu_clock_lag_s` measures once per process (~50 ms when
idle) and keeps the figure.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
import time
from typing import Callable, Iterable, Iterator

#: how long the calling thread polls the clocks, seconds of its own CPU time
POLL_S = 0.04
#: the longest poll, in POLL_S: on a loaded machine the poller runs less, and sees fewer late arrivals
MAX_POLL_FACTOR = 3.0
#: how long each GIL-free hash of the helper thread lasts, seconds (at least a tick at CONFIG_HZ=100)
BUSY_CHUNK_S = 0.015
#: the largest lag reported, seconds (the poll cannot see a longer one)
MAX_LAG_S = 0.1

#: (wall_before_s, process_s, thread_s, wall_after_s), see :func:`late_cpu_s`
Sample = tuple[float, float, float, float]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _thread_time() -> float:
    """The calling thread's CPU seconds; 0.0 where the OS has no thread CPU clock (the bound then uses wall time
    alone)."""
    clock = getattr(time, "thread_time", None)
    return clock() if clock is not None else 0.0


def late_cpu_s(samples: Iterable[Sample], cpus: int) -> float:
    """The most CPU time that arrived between consecutive samples beyond what the process's other threads could
    have used meanwhile; 0.0 if none did.

    A sample is ``(wall_before_s, process_s, thread_s, wall_after_s)``: the process and the calling thread's CPU
    clocks read between two readings of a wall clock. Between two samples the other threads' CPU time grew by
    ``dp - dt``, in at most ``dw`` = the later ``wall_after_s`` - the earlier ``wall_before_s`` (the poller may
    be preempted between its reads), in which they could have run for at most ``cpus * dw - dt``; so at least
    ``min(dp - dt, dp - cpus * dw)`` of it was used before: it arrived late.
    """
    worst = 0.0
    for (before, p0, t0, _), (_, p1, t1, after) in itertools.pairwise(samples):
        dp = p1 - p0
        worst = max(worst, min(dp - (t1 - t0), dp - cpus * (after - before)))
    return worst


def busy_thread(chunk_s: float = BUSY_CHUNK_S) -> Callable[[], None]:
    """Start a daemon thread that keeps one core busy outside the GIL; returns the function that stops it.

    The thread hashes a zero buffer with SHA-256 (which releases the GIL over large buffers), sized from one
    timed hash of 1 MiB here so that a hash lasts about ``chunk_s``: long enough to span a scheduler tick between
    two waits for the GIL, short enough that stopping waits little.
    """
    import hashlib  # here: loading OpenSSL costs milliseconds that importing the meters need not pay

    t0 = time.perf_counter()
    hashlib.sha256(bytes(1 << 20))
    per_mib = max(time.perf_counter() - t0, 1e-6)
    chunk = bytes(min(max(round(chunk_s / per_mib), 1), 64) << 20)  # calloc'd: untouched zero pages
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(chunk)

    thread = threading.Thread(target=spin, name="edgeprof-cpu-clock-lag", daemon=True)
    thread.start()

    def stop_busy() -> None:
        stop.set()
        thread.join()

    return stop_busy


def _poll(process_clock: Callable[[], float], thread_clock: Callable[[], float], wall_clock: Callable[[], float],
          duration_s: float) -> Iterator[Sample]:
    """Samples for :func:`late_cpu_s`, back to back, until the calling thread has run for ``duration_s`` (its own
    CPU clock) or :data:`MAX_POLL_FACTOR` times that has passed on the wall clock (a loaded machine)."""
    thread_end = thread_clock() + duration_s
    wall_end = wall_clock() + MAX_POLL_FACTOR * duration_s
    while True:
        sample = (wall_clock(), process_clock(), thread_clock(), wall_clock())
        yield sample
        if sample[2] >= thread_end or sample[3] >= wall_end:
            return


def measure_cpu_clock_lag_s(
    *,
    process_clock: Callable[[], float] = time.process_time,
    thread_clock: Callable[[], float] = _thread_time,
    wall_clock: Callable[[], float] = time.perf_counter,
    busy: Callable[[], Callable[[], None]] = busy_thread,
    cpus: int | None = None,
    duration_s: float = POLL_S,
    floor_s: float | None = None,
) -> float:
    """Seconds by which ``process_clock`` may count another busy thread's CPU time late, measured now.

    Starts ``busy`` (a helper thread) and polls the clocks for ``duration_s``; the lag is :func:`late_cpu_s`
    of the samples, at least ``floor_s`` (default: the process clock's own resolution as Python reports it)
    and at most :data:`MAX_LAG_S` (a non-finite figure reads as that). On one CPU the helper and the poller
    take turns, and a thread is counted as it stops running: the lag comes out near the floor. On a loaded
    machine the helper may seldom run beside the poller: the figure is then too low, never too high.
    """
    if floor_s is None:
        floor_s = time.get_clock_info("process_time").resolution
    cpus = usable_cpus() if cpus is None else cpus
    stop = busy()
    try:
        lag = late_cpu_s(_poll(process_clock, thread_clock, wall_clock, duration_s), cpus)
    finally:
        stop()
    return min(max(lag, floor_s), MAX_LAG_S) if math.isfinite(lag) else MAX_LAG_S


#: the lag taken where the measurement saw none on several CPUs (a loaded machine): a 250-Hz scheduler tick, Linux's
#: most common; on a 1000-Hz kernel it flags more phases than it need, never fewer
ASSUMED_TICK_S = 0.004


@functools.lru_cache(maxsize=1)
def process_cpu_clock_lag() -> tuple[float, str]:
    """(seconds, how they were had): :func:`measure_cpu_clock_lag_s` with the real clocks, measured at the first call
    and kept for the process; where it saw no late CPU time at all though the process may run on several CPUs (the
    helper thread seldom ran beside the poller: a loaded machine), :data:`ASSUMED_TICK_S`, said so."""
    floor = time.get_clock_info("process_time").resolution
    lag = measure_cpu_clock_lag_s(floor_s=floor)
    if lag <= floor and usable_cpus() > 1:
        return ASSUMED_TICK_S, (f"assumed: no late CPU time was seen at start (a loaded machine?), so a "
                                f"{ASSUMED_TICK_S * 1e3:g}-ms scheduler tick")
    return lag, "measured at start"


def process_cpu_clock_lag_s() -> float:
    """The seconds of :func:`process_cpu_clock_lag`."""
    return process_cpu_clock_lag()[0]
