"""Scaling analysis: the t quantile, the line fit and its intervals, the verdict rule, ratios, the claim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgeprof import analysis
from edgeprof.analysis import Interval, analyze, check_claim, fit_line, ratio_of_means, t_quantile, verdict

TAUS = (1, 5, 10, 25, 50, 100)


@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281),
                                         (30, 2.0423), (120, 1.9799)])
def test_t_quantile_matches_the_printed_table(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_agrees_with_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 4, 7, 16, 59):
        assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_fit_recovers_an_exact_line_and_matches_numpy():
    rng = np.random.default_rng(0)
    x = [float(t) for t in TAUS for _ in range(3)]
    y = [0.7 + 0.02 * xi + rng.normal(0, 0.01) for xi in x]

    fit = fit_line(x, y)

    slope, intercept = np.polyfit(x, y, 1)
    assert fit.b == pytest.approx(slope, rel=1e-9) and fit.a == pytest.approx(intercept, rel=1e-9)
    assert fit.ci_b[0] < 0.02 < fit.ci_b[1] and fit.ci_a[0] < 0.7 < fit.ci_a[1]
    exact = fit_line(x, [0.7 + 0.02 * xi for xi in x])
    assert exact.b == pytest.approx(0.02) and exact.se_b == pytest.approx(0.0, abs=1e-12)


def test_intervals_cover_the_true_slope_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    x = [float(t) for t in TAUS for _ in range(2)]
    covered = 0
    for _ in range(400):
        fit = fit_line(x, [1.0 + 0.3 * xi + rng.normal(0, 2.0) for xi in x])
        covered += fit.ci_b[0] <= 0.3 <= fit.ci_b[1]
    assert 0.91 <= covered / 400 <= 0.98


def test_fit_needs_two_distinct_x():
    with pytest.raises(ValueError):
        fit_line([5.0, 5.0, 5.0], [1.0, 2.0, 3.0])


def _points(cost, noise: float, seed: int = 0, repeats: int = 3):
    rng = np.random.default_rng(seed)
    x = [float(t) for t in TAUS for _ in range(repeats)]
    return x, [cost(xi) * (1 + rng.normal(0, noise)) for xi in x]


@pytest.mark.parametrize("cost,noise,expected", [
    (lambda t: 1.0 + 0.0003 * t, 0.01, "flat"),          # +3% over tau 1..100
    (lambda t: 0.01 + 0.3 * t, 0.05, "linear"),          # FedAvg-like
    (lambda t: 1.0 + 0.0003 * t, 0.60, "inconclusive"),  # flat but far too noisy to show it
    (lambda t: 1.0 + 0.0035 * t, 0.01, "inconclusive"),  # a real but moderate +35%
    (lambda t: 1.0 - 0.001 * t, 0.01, "flat"),           # getting cheaper is flat too
])
def test_verdict_rule(cost, noise, expected):
    x, y = _points(cost, noise)

    result = verdict(fit_line(x, y))

    assert result.label == expected, result.reason


def test_verdict_without_enough_rows_is_inconclusive():
    assert verdict(None).label == "inconclusive"
    assert verdict(fit_line([1.0, 5.0], [1.0, 1.1])).label == "inconclusive"


def test_ratio_of_means_exact_and_with_interval():
    assert ratio_of_means([2.0, 2.0], [1.0, 1.0]) == Interval(2.0, 2.0, 2.0)
    assert ratio_of_means([6.0], [2.0]) == Interval(pytest.approx(3.0))
    noisy = ratio_of_means([40.0, 44.0, 38.0], [1.0, 1.1, 0.95])
    assert noisy.lo < noisy.value < noisy.hi and noisy.value == pytest.approx(40.0, rel=0.05)
    assert math.isnan(ratio_of_means([], [1.0]).value)


def rows_for(costs: dict, repeats: int = 3, device: str = "dev", noise: float = 0.01, seed: int = 0) -> list[dict]:
    """Client rows of a synthetic sweep: ``costs[(algo, engine)](tau)`` seconds, energy 10 W * wall."""
    rng = np.random.default_rng(seed)
    rows = []
    for (algo, engine), cost in costs.items():
        for tau in TAUS:
            for _ in range(repeats):
                wall = cost(tau) * (1 + rng.normal(0, noise))
                rows.append(dict(device=device, algo=algo, engine=engine, tau=str(tau), kind="client",
                                 wall_s=f"{wall:.6g}", cpu_s=f"{2 * wall:.6g}", energy_j=f"{10 * wall:.6g}"))
    return rows


CLAIM_HOLDS = {("pflego", "onnx"): lambda t: 0.2 + 0.0001 * t, ("pflego", "torch-reuse"): lambda t: 0.15,
               ("fedavg", "torch"): lambda t: 0.01 + 0.15 * t}


def test_analyze_fits_every_variant_and_relates_steps_to_a_full_pass():
    result = analyze(rows_for(CLAIM_HOLDS, noise=0.0))

    assert {(f.variant, f.metric) for f in result.fits} == {
        (v, m) for v in ("pflego", "pflego[torch-reuse]", "fedavg") for m in analysis.METRICS}
    pf = result.fit_for("dev", "pflego", "wall_s")
    assert pf.fit.b == pytest.approx(0.0001, rel=1e-3) and pf.verdict.label == "flat"
    assert pf.step_vs_pass.value == pytest.approx(0.0001 / 0.15, rel=1e-3)
    assert result.fit_for("dev", "fedavg", "energy_j").fit.b == pytest.approx(1.5, rel=1e-3)
    at50 = [r for r in result.ratios if r.tau == 50 and r.metric == "wall_s" and r.reference == "pflego"]
    assert len(at50) == 1 and at50[0].ratio.value == pytest.approx((0.01 + 7.5) / 0.205, rel=1e-3)


def test_devices_are_analysed_apart():
    rows = rows_for(CLAIM_HOLDS, device="a") + rows_for({k: (lambda t: 2 * t) for k in CLAIM_HOLDS}, device="b")

    result = analyze(rows)

    assert result.fit_for("a", "pflego", "wall_s").verdict.label == "flat"
    assert result.fit_for("b", "pflego", "wall_s").verdict.label == "linear"


def test_check_claim_passes_and_fails_with_reasons():
    assert check_claim(analyze(rows_for(CLAIM_HOLDS))) == []

    swapped = analyze(rows_for({("pflego", "onnx"): lambda t: 0.01 + 0.15 * t, ("fedavg", "torch"): lambda t: 0.2}))
    problems = check_claim(swapped)
    assert any("pflego" in p and "not flat" in p for p in problems)
    assert any("fedavg" in p and "not linear" in p for p in problems)
    assert any("no fedavg" in p for p in check_claim(analyze(rows_for({("pflego", "onnx"): lambda t: 1.0}))))
