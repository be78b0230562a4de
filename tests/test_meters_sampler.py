"""The trapezoidal integrator against an independent exact computation (Fractions)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters.sampler import PowerSampler, TrapezoidIntegrator
from fixtures_sysfs import FakeClock


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integral_equals_the_exact_trapezoid_sum(seed):
    rng = random.Random(seed)
    times = [0]
    for _ in range(50):
        times.append(times[-1] + rng.randint(1, 10**9))
    powers = [rng.randint(0, 60_000_000) for _ in times]  # uW
    integrator = TrapezoidIntegrator(("x",))

    for t, p in zip(times, powers):
        integrator.add(t, {"x": p})

    exact = sum(Fraction(powers[i] + powers[i + 1], 2) * (times[i + 1] - times[i]) for i in range(50))
    assert integrator.energy_j()["x"] == float(exact / 10**15)


def test_clock_going_backwards_is_an_error():
    integrator = TrapezoidIntegrator(("x",))
    integrator.add(100, {"x": 1})

    with pytest.raises(MeterError, match="backwards"):
        integrator.add(50, {"x": 1})


def test_an_error_in_the_thread_surfaces_on_the_next_reading():
    calls = {"n": 0}

    def read():
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("rail vanished")
        return {"x": 1}

    sampler = PowerSampler(("x",), read, hz=1000, clock_ns=FakeClock())
    sampler.start()
    while sampler._error is None:
        pass
    sampler.stop()

    with pytest.raises(MeterError, match="rail vanished"):
        sampler.energy_j()
