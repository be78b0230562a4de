"""The trapezoidal integrator against an independent exact computation (Fractions); implausible samples."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from edgeprof.errors import MeterError
from edgeprof.meters.sampler import Implausible, PowerSampler, TrapezoidIntegrator
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


@pytest.mark.parametrize(
    ("bad", "bound_uw", "needle"),
    [(-1, None, "negative"), (Implausible("curr1_input reads -3 (negative)"), None, "curr1_input reads -3"),
     (3_000_001, 3_000_000, "above the 3 W bound")],
    ids=["negative", "flagged-by-the-reader", "above-the-bound"],
)
def test_an_implausible_sample_is_left_out_of_both_trapezoids_it_touches(bad, bound_uw, needle):
    clock = FakeClock()
    samples = iter([{"x": 1_000_000, "y": 5}, {"x": bad, "y": 5}, {"x": 3_000_000, "y": 5}, {"x": 1_000_000, "y": 5}])
    sampler = PowerSampler(("x", "y"), lambda: next(samples), clock_ns=clock,
                           max_power_uw=None if bound_uw is None else {"x": bound_uw})  # t = 0

    readings = []
    for _ in range(3):  # t = 1 s (the bad sample), 2 s, 3 s
        clock.advance_s(1)
        readings.append(sampler.read())

    assert [set(invalid) for _, invalid in readings] == [{"x"}, {"x"}, set()]
    assert needle in readings[0][1]["x"] and needle in readings[1][1]["x"]
    energy = readings[-1][0]
    assert energy["x"] == float(Fraction(3 + 1, 2))  # only the trapezoid from 2 s to 3 s, in joules
    assert energy["y"] == float(Fraction(5 * 3, 10**6))  # the other channel is untouched
