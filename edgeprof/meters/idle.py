"""Idle baseline: the power the machine draws while the run is not working, measured before the run.

``measure_idle`` reads every meter, sleeps ``seconds`` and reads again; the power of a domain is its
energy delta over the elapsed (clock) time. Net energy of a window, which the profiler computes, is
``gross_j - total_power_w * wall_s``. ``seconds=0`` turns the baseline off: all powers are zero and
the baseline is flagged ``disabled`` so reports show net == gross and say why. A meter that flags an
implausible reading during the measurement (:class:`~edgeprof.meters.base.Reading`) leaves no baseline to
trust: :class:`~edgeprof.errors.MeterError` names the domain and why, before the run starts. So does a domain
whose idle power is above the most its readings can plausibly show (:meth:`~edgeprof.meters.base.Meter.power_bounds_w`):
a meter lets a single step through with up to a second of slack for when its counter updated, which a glitch can
hide in, but a machine at rest over the whole measurement cannot draw above that bound, and every row's net figure
would subtract it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from edgeprof.errors import ConfigError, MeterError
from edgeprof.meters.discovery import MeterSet


@dataclass(frozen=True)
class IdleBaseline:
    """Idle power per domain (W) and of the domains counted in the total, measured over ``seconds``."""

    seconds: float
    power_w: Mapping[str, float] = field(default_factory=dict)
    total_power_w: float = 0.0
    disabled: bool = False

    def net_j(self, gross_j: float, wall_s: float) -> float:
        """Energy above idle of a window: ``gross_j - total_power_w * wall_s``."""
        return gross_j - self.total_power_w * wall_s

    def describe(self) -> dict:
        return {"seconds": self.seconds, "power_w": dict(self.power_w), "total_power_w": self.total_power_w,
                "disabled": self.disabled}


def measure_idle(
    meters: MeterSet,
    seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> IdleBaseline:
    """Measure idle power for ``seconds`` (0: disabled baseline of zeros)."""
    if seconds < 0:
        raise ConfigError(f"idle seconds must be >= 0, got {seconds}")
    domains = meters.domains()
    if seconds == 0:
        return IdleBaseline(0.0, {d.name: 0.0 for d in domains}, 0.0, disabled=True)
    before, t0 = meters.read_j(), clock()
    sleep(seconds)
    reading, t1 = meters.read(), clock()
    if reading.invalid:
        domain, why = next(iter(reading.invalid.items()))
        raise MeterError(f"idle baseline not measured: {domain} gave an implausible reading ({why}); "
                         "run again, or without --idle-seconds")
    after = reading.energy_j
    elapsed = t1 - t0
    if elapsed <= 0:
        raise ConfigError("idle measurement took no measurable time; check the clock")
    power = {d.name: (after[d.name] - before[d.name]) / elapsed for d in domains}
    bounds = meters.power_bounds_w()
    for name, watts in power.items():
        if name in bounds and watts > bounds[name]:
            raise MeterError(f"idle baseline not measured: {name} drew {watts:.4g} W while idle over {elapsed:.3g} s, "
                             f"above the {bounds[name]:g} W its readings can plausibly show (a glitch or a counter "
                             "jump); run again, or without --idle-seconds")
    total = sum(power[d.name] for d in domains if d.in_total)
    return IdleBaseline(float(elapsed), power, float(total))
