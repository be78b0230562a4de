"""The labelled fallback: energy estimated from process CPU time and a per-core power figure.

Model: ``E = t_cpu * P_core``, where ``t_cpu`` is the process's user+system CPU seconds (all threads)
and ``P_core`` the power one fully busy core draws above idle, in watts. It measures nothing: every
figure it yields is labelled ``estimate`` in reports, summaries and the dashboard.

``P_core`` comes from ``--cpu-watts`` when given, else from :data:`KNOWN_CPUS` (first pattern that
matches the CPU model string), else :data:`DEFAULT_WATTS_PER_CORE`. The table's figures are rough
estimates, mostly TDP (or the CPU rail's full-load power) divided by the number of cores; the source
text of each travels into the report's sidecar.

What it resolves: the process CPU clock counts the calling thread's time at once but another thread's only
at that thread's next scheduler tick or switch (:mod:`edgeprof.meters.cpu_clock`), so a span shorter than that
lag can gain or lose up to a tick of each busy thread's time. The lag is measured once per process and is the
meter's ``update_period_s``: windows and phases shorter than it are flagged (``short_window``,
``short_phases``). Its power limit is the usable cores times the watts per core (:meth:`power_limits_w`).

In discovery it is the CPU fallback (:data:`BACKEND`): tried after every other back-end and opened only
when none that measures the CPU (RAPL, the Jetson rails) was.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Callable, ClassVar, Mapping

from edgeprof.meters.base import Backend, Domain, Meter, MeterContext, MeterOption, ProbeResult
from edgeprof.meters.cpu_clock import MAX_LAG_S, process_cpu_clock_lag, usable_cpus

#: watts per busy core when nothing better is known (a mid-range laptop/desktop x86 core)
DEFAULT_WATTS_PER_CORE = 10.0
#: the most ``--cpu-watts`` takes, per busy core (a whole server CPU draws a few hundred watts)
MAX_WATTS_PER_CORE = 1000.0

#: (regex searched in the CPU model, watts per busy core, where the figure comes from); first match wins
KNOWN_CPUS: tuple[tuple[str, float, str], ...] = (
    (r"Cortex-A57", 1.5, "Jetson Nano/TX1: ~6 W CPU rail at full load in 10 W mode / 4 cores (estimate)"),
    (r"Cortex-A78AE", 2.0, "Jetson Orin: ~12 W CPU cluster at full load / 6 cores (estimate)"),
    (r"Carmel", 2.5, "Jetson Xavier: ~15 W CPU cluster at full load / 6 cores (estimate)"),
    (r"Cortex-A72", 1.0, "Raspberry Pi 4: ~4 W above idle at full load / 4 cores (estimate)"),
    (r"Cortex-A76", 1.5, "Raspberry Pi 5: ~6 W above idle at full load / 4 cores (estimate)"),
    (r"Apple M\d", 4.0, "Apple M-series: ~20-30 W CPU package / 4-8 performance cores (estimate)"),
    (r"Core\(TM\).*\d{4,5}[A-Z]*U\b|Core\(TM\) Ultra \d \d+U", 7.0,
     "Intel laptop U-series: 15-28 W TDP / 2-4 performance cores (estimate)"),
    (r"Ryzen.*\d{4}U\b", 7.0, "AMD laptop U-series: 15-28 W TDP / 4-8 cores, boost power (estimate)"),
    (r"Core\(TM\).*\d{4,5}H[SXK]?\b", 8.0, "Intel laptop H-series: 45 W TDP / 6-8 cores (estimate)"),
    (r"Xeon", 12.0, "Intel Xeon server: 150-350 W TDP / 16-32 cores (estimate)"),
    (r"EPYC", 10.0, "AMD EPYC server: 200-360 W TDP / 24-64 cores, boost (estimate)"),
    (r"Threadripper", 10.0, "AMD Threadripper: 280 W TDP / 24-32 cores (estimate)"),
    (r"Ryzen", 11.0, "AMD Ryzen desktop: 65-105 W TDP / 6-8 cores (estimate)"),
    (r"Core\(TM\)|Intel", 10.0, "Intel desktop: 65-125 W TDP / 6-12 cores (estimate)"),
)

#: ARM "CPU part" codes of /proc/cpuinfo for the cores in KNOWN_CPUS
_ARM_PARTS = {"0xd07": "Cortex-A57", "0xd08": "Cortex-A72", "0xd0b": "Cortex-A76", "0xd42": "Cortex-A78AE",
              "0x004": "Carmel"}


def watts_per_core_for(cpu_model: str | None) -> tuple[float, str]:
    """Watts per busy core for a CPU model string, and the source of that figure."""
    for pattern, watts, source in KNOWN_CPUS:
        if cpu_model and re.search(pattern, cpu_model, flags=re.IGNORECASE):
            return watts, f"{source}; matched {cpu_model!r}"
    return DEFAULT_WATTS_PER_CORE, f"default {DEFAULT_WATTS_PER_CORE:g} W/core (CPU {cpu_model!r} not in the table; estimate)"


def detect_cpu_model(proc_root: str = "/proc") -> str:
    """The CPU model from ``<proc_root>/cpuinfo`` (x86 ``model name``; ARM core part names); '' if unknown."""
    try:
        text = (Path(proc_root) / "cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    parts = {value.strip() for key, _, value in (l.partition(":") for l in text.splitlines())
             if key.strip() == "CPU part"}
    return ", ".join(sorted(_ARM_PARTS.get(p, f"ARM part {p}") for p in parts))


class CpuTimeEstimateMeter(Meter):
    """Estimated CPU energy: process CPU seconds times watts per busy core.

    Read inside a profiler window (:meth:`read_at_cpu_j`), it takes the CPU time the profiler has just
    sampled, so a window's or phase's ``energy_j`` is exactly its ``cpu_s`` times ``watts_per_core``;
    read alone (:meth:`read_j`), it reads ``cpu_time`` itself. Both count from ``cpu_time()`` at opening,
    so a supplied ``cpu_s`` must come from the same clock (process CPU time) for the cumulative figure to
    start at zero; differences of two readings are right whatever the clock.

    ``cpu_clock_lag_s`` is how late the process CPU clock counts other threads' time, the meter's update period:
    by default the lag measured once per process (:func:`~edgeprof.meters.cpu_clock.process_cpu_clock_lag_s`,
    ~60 ms at the first meter), else the figure given. ``cores`` (default: the CPUs the process may run on)
    times the watts per core is the most it can estimate (:attr:`max_power_w`).
    """

    #: its joules are the process CPU clock's seconds times watts: it measures no device
    from_cpu_clock: ClassVar[bool] = True

    name = "cpu_estimate"

    def __init__(
        self,
        watts_per_core: float = DEFAULT_WATTS_PER_CORE,
        source: str = "default",
        cpu_time: Callable[[], float] = time.process_time,
        cpu_clock_lag_s: float | None = None,
        cores: int | None = None,
    ) -> None:
        if not watts_per_core > 0:
            raise ValueError("watts per core must be positive")
        if cpu_clock_lag_s is not None and not 0 <= cpu_clock_lag_s <= MAX_LAG_S:
            raise ValueError(f"the CPU clock's lag must be in 0..{MAX_LAG_S:g} s, got {cpu_clock_lag_s}")
        if cores is not None and not cores >= 1:
            raise ValueError(f"cores must be at least 1, got {cores}")
        self.watts_per_core = float(watts_per_core)
        self.source = source
        measured = process_cpu_clock_lag() if cpu_clock_lag_s is None else (float(cpu_clock_lag_s), "given")
        self.cpu_clock_lag_s, self.lag_source = measured
        self.update_period_s = self.cpu_clock_lag_s
        self.cores = usable_cpus() if cores is None else int(cores)
        #: the most the estimate can show: every usable core busy
        self.max_power_w = self.cores * self.watts_per_core
        self._cpu_time = cpu_time
        self._start = cpu_time()

    def domains(self) -> tuple[Domain, ...]:
        return (Domain("cpu_estimate", "cpu_estimate", "estimate", in_total=True),)

    def read_j(self) -> Mapping[str, float]:
        return self.read_at_cpu_j(self._cpu_time())

    def read_at_cpu_j(self, cpu_s: float) -> Mapping[str, float]:
        return {"cpu_estimate": (cpu_s - self._start) * self.watts_per_core}

    def power_limits_w(self) -> Mapping[str, float]:
        return {"cpu_estimate": self.max_power_w}

    def power_bounds_w(self) -> Mapping[str, float]:
        return self.power_limits_w()  # every core busy: the most it can estimate is also its limit

    def describe(self) -> dict:
        info = super().describe()
        lag_ms = self.cpu_clock_lag_s * 1e3
        info.update(watts_per_core=self.watts_per_core, watts_source=self.source,
                    model="energy_j = process_cpu_s * watts_per_core", cpu_clock_lag_s=self.cpu_clock_lag_s,
                    resolution=f"process CPU clock: other threads' time arrives up to {lag_ms:.2f} ms late "
                               f"({self.lag_source})",
                    cores=self.cores, max_power_w=self.max_power_w)
        return info


def estimate_meter(cpu_watts: float | None = None, cpu_model: str | None = None,
                   cpu_clock_lag_s: float | None = None) -> CpuTimeEstimateMeter:
    """The estimate with ``cpu_watts`` when given, else the table's figure for ``cpu_model`` (default: this CPU's);
    the CPU clock's lag as given, else measured (once per process)."""
    if cpu_watts is not None:
        return CpuTimeEstimateMeter(cpu_watts, f"--cpu-watts {cpu_watts:g} W/core (user-supplied; estimate)",
                                    cpu_clock_lag_s=cpu_clock_lag_s)
    model = cpu_model if cpu_model is not None else detect_cpu_model()
    watts, source = watts_per_core_for(model)
    return CpuTimeEstimateMeter(watts, source, cpu_clock_lag_s=cpu_clock_lag_s)


def _open(ctx: MeterContext) -> CpuTimeEstimateMeter:
    return estimate_meter(ctx.settings["cpu_watts"], ctx.settings["cpu_model"], ctx.settings["cpu_clock_lag_s"])


#: discovery's view of the estimate: always available, opened only when nothing measures the CPU
def check_settings(given) -> str | None:
    """``cpu_watts``, when given, must be a number in (0, MAX_WATTS_PER_CORE]; ``cpu_clock_lag_s`` one in
    0..MAX_LAG_S."""
    watts, lag = given.get("cpu_watts"), given.get("cpu_clock_lag_s")
    if watts is not None and not (_is_number(watts) and math.isfinite(watts) and watts > 0):
        return f"cpu-watts must be positive, got {watts}"
    if watts is not None and watts > MAX_WATTS_PER_CORE:
        return f"cpu-watts must be at most {MAX_WATTS_PER_CORE:g} W per busy core, got {watts:g}"
    if lag is not None and not (_is_number(lag) and 0 <= lag <= MAX_LAG_S):
        return f"cpu_clock_lag_s must be in 0..{MAX_LAG_S:g} s, got {lag}"
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


BACKEND = Backend(
    name="cpu_estimate", title="the CPU-time estimate", columns=("cpu_estimate",), cpu_fallback=True,
    settings={"cpu_model": None, "cpu_clock_lag_s": None}, check=check_settings,
    options=(MeterOption("cpu_watts", None, "Watts per busy core for the CPU estimate."),),
    probe=lambda ctx: ProbeResult("cpu_estimate", True, domains=("cpu_estimate",)), open=_open,
)
