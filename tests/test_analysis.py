"""Scaling analysis: the t quantile, the line fit and its intervals, the verdict rule, ratios, the claim."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeprof.report import analysis, gpu_energy
from edgeprof.report.analysis import Interval, analyze, check_claim, fit_line, ratio_of_means, t_quantile, verdict
from edgeprof.report.writer import read_report

TAUS = (1, 5, 10, 25, 50, 100)


def _t_abs_cdf_by_integration(q: float, df: float, steps: int = 20_000) -> float:
    """P(|T| <= q) = 2 * integral over [0, q] of Student's t density, by composite Simpson's rule.

    The density is written from its definition, Gamma((df+1)/2) / (sqrt(df*pi) Gamma(df/2)) *
    (1 + t^2/df)^(-(df+1)/2), so this shares no code with scipy. Simpson's error is at most
    q * h^4 * max|f^(4)| / 180 with h = q/steps; for q <= 13 (df >= 1) that is below 1e-13.
    """
    t = np.linspace(0.0, q, steps + 1)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df))
    weights = np.ones(steps + 1)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return 2.0 * (q / steps) / 3.0 * float(weights @ density)


def _t_quantile_reference(confidence: float, df: float) -> float:
    """Invert :func:`_t_abs_cdf_by_integration` by bisection (60 halvings of a bracket <= 16 wide: < 1e-16)."""
    lo, hi = 0.0, 1.0
    while _t_abs_cdf_by_integration(hi, df) < confidence:
        lo, hi = hi, 2.0 * hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_abs_cdf_by_integration(mid, df) < confidence else (lo, mid)
    return 0.5 * (lo + hi)


# t(0.975, df) as printed in statistical tables, to 4 decimals (hence abs=5e-4).
@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281),
                                         (30, 2.0423), (120, 1.9799)])
def test_t_quantile_and_the_reference_match_the_printed_table(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, abs=5e-4)
    assert _t_quantile_reference(0.95, df) == pytest.approx(expected, abs=5e-4)  # the reference is sound


# rel=1e-9: the reference is good to ~1e-11 (the CDF bounds above divided by the density at q, >= 0.006
# here; they agree to ~1e-14 in practice) and scipy's ppf to a few ulps, so a disagreement beyond 1e-9 is a
# real error, not rounding. Rounding df down (the old behaviour) is off by 0.2% (df 12.3) to 111% (df 1.5).
@pytest.mark.parametrize("confidence", [0.95, 0.90])
@pytest.mark.parametrize("df", [1.5, 3.7, 12.3])
def test_t_quantile_at_fractional_df_matches_numerical_integration(confidence, df):
    assert t_quantile(confidence, df) == pytest.approx(_t_quantile_reference(confidence, df), rel=1e-9)


def test_t_quantile_keeps_fractional_df():
    assert t_quantile(0.95, 3.7) == pytest.approx(2.868, abs=5e-4)  # the value (3.182 at df 3)
    assert t_quantile(0.95, 4) < t_quantile(0.95, 3.7) < t_quantile(0.95, 3)
    with pytest.raises(ValueError):
        t_quantile(0.95, 0)


def test_welch_interval_uses_the_fractional_df():
    # Two groups of 3 whose variances of the mean (log scale) are in the ratio r, a root of
    # 2 (1 + r)^2 / (1 + r^2) = 3.7: the Welch-Satterthwaite df is 3.7 by construction.
    r = (2.0 - math.sqrt(4.0 - 4 * 0.85 ** 2)) / (2 * 0.85)
    spread = np.array([-1.0, 0.0, 1.0]) * 0.05
    num, den = 40.0 * np.exp(spread), np.exp(spread * math.sqrt(r))
    vn, vd = np.log(num).var(ddof=1) / 3, np.log(den).var(ddof=1) / 3
    df = (vn + vd) ** 2 / (vn ** 2 / 2 + vd ** 2 / 2)
    assert df == pytest.approx(3.7, rel=1e-12)

    result = ratio_of_means(list(num), list(den))

    assert result.value == pytest.approx(40.0, rel=1e-12)
    half = math.log(result.hi / result.value)
    assert math.log(result.value / result.lo) == pytest.approx(half, rel=1e-12)  # symmetric on the log scale
    # rel=1e-9 as for the quantile: the rest is a few well-conditioned float operations.
    t_exact, t_rounded_down = _t_quantile_reference(0.95, df), _t_quantile_reference(0.95, 3)
    assert half == pytest.approx(t_exact * math.sqrt(vn + vd), rel=1e-9)
    # Narrower than with df rounded down to 3 (the old behaviour) by t(3.7)/t(3) = 2.868/3.182: about 10%.
    assert half / (t_rounded_down * math.sqrt(vn + vd)) == pytest.approx(t_exact / t_rounded_down, rel=1e-9)
    assert t_exact / t_rounded_down == pytest.approx(2.868 / 3.182, abs=5e-4)


def _closed_form_ols(x, y) -> dict:
    """Textbook simple regression: b = Sxy/Sxx, a = ybar - b xbar, s^2 = RSS/(n-2), Var(b) = s^2/Sxx,
    Var(a) = s^2 (1/n + xbar^2/Sxx), Cov(a, b) = -xbar s^2/Sxx."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, mx = len(x), x.mean()
    sxx = ((x - mx) ** 2).sum()
    b = ((x - mx) * (y - y.mean())).sum() / sxx
    a = y.mean() - b * mx
    s2 = ((y - a - b * x) ** 2).sum() / (n - 2)
    return dict(a=a, b=b, se_a=math.sqrt(s2 * (1 / n + mx * mx / sxx)), se_b=math.sqrt(s2 / sxx),
                cov_ab=-mx * s2 / sxx, resid_sd=math.sqrt(s2), sxx=sxx, x_mean=mx)


# The design [1, tau] for tau in 1..100 has a condition number of about 64, so two backward-stable
# computations agree to ~1e-13 relative; rel=1e-9 leaves room and still catches any formula error.
@pytest.mark.parametrize("a,b,sigma,seed", [(0.7, 0.02, 0.01, 0), (1.0, 0.3, 2.0, 1), (0.2, 0.0001, 0.05, 2)])
def test_fit_matches_the_closed_form(a, b, sigma, seed):
    rng = np.random.default_rng(seed)
    x = [float(t) for t in TAUS for _ in range(3)]
    y = [a + b * xi + rng.normal(0, sigma) for xi in x]

    fit = fit_line(x, y)

    for name, value in _closed_form_ols(x, y).items():
        assert getattr(fit, name) == pytest.approx(value, rel=1e-9), name
    assert (fit.n, fit.x_min, fit.x_max) == (len(x), 1.0, 100.0)
    assert fit.y_at_min == pytest.approx(np.mean(y[:3]), rel=1e-12)


@pytest.mark.parametrize("a,b,sigma", [(0.7, 0.02, 0.01), (1.0, 0.3, 2.0), (0.7, 0.02, 0.0), (0.15, 0.0, 0.0)])
def test_fit_returns_the_line_and_noise_it_was_built_from(a, b, sigma):
    # Noise orthogonal to [1, x], scaled so that RSS = (n-2) sigma^2: the least-squares line is exactly
    # a + b x and the residual standard deviation exactly sigma (an exact or constant line when sigma = 0).
    x = np.array([float(t) for t in TAUS for _ in range(3)])
    design = np.column_stack((np.ones_like(x), x))
    e = np.random.default_rng(3).normal(size=len(x))
    e -= design @ np.linalg.solve(design.T @ design, design.T @ e)
    e *= sigma * math.sqrt(len(x) - 2) / np.linalg.norm(e)

    fit = fit_line(list(x), list(a + b * x + e))

    # rel=1e-9 as above; abs=1e-12 where the true value is 0: y is at most ~30, so rounding leaves ~1e-14.
    close = dict(rel=1e-9, abs=1e-12)
    sxx = ((x - x.mean()) ** 2).sum()
    assert fit.a == pytest.approx(a, **close) and fit.b == pytest.approx(b, **close)
    assert fit.resid_sd == pytest.approx(sigma, **close)
    assert fit.se_b == pytest.approx(sigma / math.sqrt(sxx), **close)
    assert fit.se_a == pytest.approx(sigma * math.sqrt(1 / len(x) + x.mean() ** 2 / sxx), **close)


def test_fit_through_two_points_has_no_standard_errors():
    fit = fit_line([1.0, 5.0], [1.0, 1.2])

    assert (fit.a, fit.b) == (pytest.approx(0.95), pytest.approx(0.05))
    assert math.isinf(fit.se_b) and math.isinf(fit.se_a) and math.isnan(fit.resid_sd)
    assert math.isinf(fit.band(3.0))


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


def rows_for(costs: dict, repeats: int = 3, host: str = "dev", noise: float = 0.01, seed: int = 0,
             method: str = "") -> list[dict]:
    """Client rows of a synthetic sweep: ``costs[(algo, engine)](tau)`` seconds, energy 10 W * wall, obtained by
    ``method`` (the ``energy_method`` column; left out when empty)."""
    rng = np.random.default_rng(seed)
    rows = []
    for (algo, engine), cost in costs.items():
        for tau in TAUS:
            for _ in range(repeats):
                wall = cost(tau) * (1 + rng.normal(0, noise))
                rows.append(dict(host=host, algo=algo, engine=engine, tau=str(tau), kind="client",
                                 wall_s=f"{wall:.6g}", cpu_s=f"{2 * wall:.6g}", energy_j=f"{10 * wall:.6g}",
                                 **({"energy_method": method} if method else {})))
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


def test_hosts_are_analysed_apart():
    rows = rows_for(CLAIM_HOLDS, host="a") + rows_for({k: (lambda t: 2 * t) for k in CLAIM_HOLDS}, host="b")

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


CLAIM_FAILS = {("pflego", "onnx"): lambda t: 0.01 + 0.15 * t, ("fedavg", "torch"): lambda t: 0.2}


@pytest.mark.parametrize("method,label", [
    ("estimate", "energy_j (ESTIMATE)"),  # the CPU-time estimate, the only meter of a VM
    ("counter+estimate", "energy_j (counter+estimate: in part an ESTIMATE)"),  # a GPU's counter and the CPU's estimate
    ("counter", "energy_j (counter)"),  # RAPL alone: measured, no ESTIMATE anywhere
    ("integrated", "energy_j (integrated)"),
])
def test_energy_fits_and_verdicts_name_their_method_and_an_estimate_says_estimate(method, label):
    result = analyze(rows_for(CLAIM_FAILS, method=method))

    problems = check_claim(result, "energy_j")

    named = {f.label for f in result.fits if f.metric == "energy_j"} | {r.label for r in result.ratios
                                                                       if r.metric == "energy_j"}
    assert named == {label} and result.label_of("energy_j") == label
    assert len(problems) == 2 and all(f"in {label} (" in p for p in problems), problems
    assert ("ESTIMATE" in " ".join(problems)) == ("estimate" in method)
    assert {f.label for f in result.fits if f.metric == "wall_s"} == {"wall_s"}  # seconds have no method


def test_a_verdict_over_variants_of_different_methods_says_estimate_if_any_was():
    rows = [r | {"energy_method": "counter" if r["algo"] == "fedavg" else "estimate"} for r in rows_for(CLAIM_FAILS)]

    result = analyze(rows)

    assert result.fit_for("dev", "fedavg", "energy_j").label == "energy_j (counter)"
    assert result.fit_for("dev", "pflego", "energy_j").label == "energy_j (ESTIMATE)"
    assert result.label_of("energy_j") == "energy_j (counter+estimate: in part an ESTIMATE)"
    assert {r.label for r in result.ratios if r.metric == "energy_j"} == {result.label_of("energy_j")}


def _short_below(rows: list[dict], seconds: float) -> list[dict]:
    """Mark the rows whose window lasted less than ``seconds`` (a meter updating that often) short, and give them
    joules quantized to that meter's steps, as a counter read across them would: 0 or one step."""
    out = []
    for i, r in enumerate(rows):
        short = float(r["wall_s"]) < seconds
        energy = (10 * seconds if i % 2 else 0.0) if short else float(r["energy_j"])
        out.append({**r, "short_window": str(int(short)), "energy_j": f"{energy:.6g}"})
    return out


def test_energy_fits_leave_short_windows_out_and_say_so_while_seconds_keep_every_row():
    """PFLEGO's rounds (0.05 s) all shorter than a 0.2 s meter, FedAvg's only at tau=1 (0.16 s) and one more row
    marked short: PFLEGO has no energy fit (inconclusive, saying why), FedAvg's energy fit uses its other rows and
    names the four it left out, its slope still the true 10 W * 0.15 s; wall time fits every row of both."""
    rows = _short_below(rows_for({("pflego", "onnx"): lambda t: 0.05, ("fedavg", "torch"): lambda t: 0.01 + 0.15 * t},
                                 noise=0.0), 0.2)
    rows[-1]["short_window"] = "True"  # the boolean spelling reads the same

    result = analyze(rows)

    pf = result.fit_for("dev", "pflego", "energy_j")
    assert pf.fit is None and pf.n == 0 and pf.short == 18 and pf.verdict.label == "inconclusive"
    assert "every one of its 18 windows was shorter than the meters' update period" in pf.verdict.reason
    fa = result.fit_for("dev", "fedavg", "energy_j")
    assert (fa.n, fa.short, fa.taus) == (14, 4, (5, 10, 25, 50, 100)) and fa.verdict.label == "linear"
    assert fa.fit.b == pytest.approx(1.5, rel=1e-9) and "4 window(s) shorter than the meters' update period" \
        in fa.verdict.reason
    assert not [r for r in result.ratios if r.metric == "energy_j"], "no PFLEGO energy to be a ratio's reference"
    assert result.fit_for("dev", "pflego", "wall_s").n == 18 and result.fit_for("dev", "fedavg", "wall_s").short == 0
    problems = check_claim(result, "energy_j")
    assert any("pflego on dev is inconclusive" in p and "not resolved" in p for p in problems)
    fits, _ = analysis.render(result, metrics=("energy_j",))
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(fits)
    text = console.export_text()
    assert "14 (+4 short)" in text and "0 (+18 short)" in text


# --- the round GPU's own joules -----------------------------------------------------------------------------
REFERENCE_GPU = Path(__file__).resolve().parents[1] / "profiles" / "reference" / "gpu-h200"
GPU_REPORTS = ("gpu-check-cnn-omniglot", "gpu-check-cnn-cifar")
#: the H200's idle power as scripts/gpu_check.py measured it with NVML (W): the reports' own sidecars have none
IDLE_W = json.loads((REFERENCE_GPU / "gpu_check.json").read_text())["idle_power_w"]


def idle_section(folder: Path, idle_w: float, gpus: int = 1) -> dict:
    """The sidecar's ``energy.idle`` as a run writes it: :func:`measure_idle` over this machine's meters with a
    fake NVML whose GPUs draw ``idle_w`` each, counted by their energy counters, over 5 s of a fake clock."""
    from edgeprof.meters import discover
    from edgeprof.meters.idle import measure_idle
    from fixtures_sysfs import fake_pynvml

    counters = [{"energy_mj": 0, "power_mw": int(idle_w * 1000)} for _ in range(gpus)]
    now = {"t": 0.0}

    def sleep(seconds: float) -> None:
        now["t"] += seconds
        for gpu in counters:
            gpu["energy_mj"] += round(idle_w * seconds * 1000)

    with discover(sysfs_root=str(folder), nvml_module=fake_pynvml(counters)) as found:  # no device: column gpu
        return measure_idle(found, 5.0, sleep=sleep, clock=lambda: now["t"]).describe()


def gpu_reference(folder: Path, name: str, idle: dict | None = None) -> Path:
    """A copy of the H200 reference report ``name`` (CSV and sidecar) in ``folder``, its sidecar given ``idle`` as
    its ``energy.idle`` (as if the run had measured that baseline) where one is given."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.csv"
    shutil.copyfile(REFERENCE_GPU / f"{name}.csv", path)
    sidecar = json.loads((REFERENCE_GPU / f"{name}.json").read_text())
    if idle is not None:
        sidecar["energy"]["idle"] = idle
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return path


def reference_columns(name: str, net_w: float | None = None) -> dict[str, np.ndarray]:
    """The reference's client rows read apart from edgeprof (csv and numpy): algo, tau, gpu_j, wall_s, short and,
    with ``net_w``, gpu_j - net_w * wall_s."""
    with open(REFERENCE_GPU / f"{name}.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "client"]
    out = {"algo": np.array([r["algo"] for r in rows]), "tau": np.array([int(r["tau"]) for r in rows]),
           "gpu_j": np.array([float(r["gpu_j"]) for r in rows]), "wall_s": np.array([float(r["wall_s"]) for r in rows]),
           "short": np.array([r["short_window"] == "1" for r in rows])}
    if net_w is not None:
        out["gpu_net_j"] = out["gpu_j"] - net_w * out["wall_s"]
    return out


def geometric_ratio(cols: dict, metric: str, tau: int) -> float:
    """FedAvg's over PFLEGO's geometric mean of ``metric`` at ``tau`` over the resolved client rows."""
    def gmean(algo):
        keep = (cols["algo"] == algo) & (cols["tau"] == tau) & ~cols["short"]
        return np.exp(np.log(cols[metric][keep]).mean())
    return float(gmean("fedavg") / gmean("pflego"))


def growth(cols: dict, metric: str, algo: str) -> float:
    """The verdict's relative growth by numpy: the slope of polyfit times the tau span over the mean at tau_min."""
    keep = (cols["algo"] == algo) & ~cols["short"]
    tau, y = cols["tau"][keep], cols[metric][keep]
    slope = np.polyfit(tau.astype(float), y, 1)[0]
    return float(slope * (tau.max() - tau.min()) / y[tau == tau.min()].mean())


@pytest.mark.parametrize("name", GPU_REPORTS)
@pytest.mark.parametrize("with_idle", [True, False], ids=["idle-baseline", "no-idle-baseline"])
def test_the_round_gpus_joules_get_fits_and_ratios_of_their_own_labelled_with_their_method(tmp_path, name, with_idle):
    idle = idle_section(tmp_path / "sys", IDLE_W) if with_idle else None
    report = read_report(gpu_reference(tmp_path, name, idle))
    cols = reference_columns(name, IDLE_W if with_idle else None)

    result = analyze(gpu_energy.with_net(report.rows, report.sidecar))

    gpu = {f.variant: f for f in result.fits if f.metric == "gpu_j"}
    assert {f.label for f in gpu.values()} == {"gpu_j (counter)"}
    assert gpu["pflego"].verdict.growth.value == pytest.approx(growth(cols, "gpu_j", "pflego"), rel=1e-9)
    assert gpu["fedavg"].verdict.label == "linear"
    (at50,) = [r for r in result.ratios if r.metric == "gpu_j" and r.tau == 50]
    assert at50.label == "gpu_j (counter)"
    assert at50.ratio.value == pytest.approx(geometric_ratio(cols, "gpu_j", 50), rel=1e-9)
    # the estimate is never labelled a measurement: the total keeps its mixed method, the GPU's figures have none
    assert {f.method for f in result.fits if f.metric == "energy_j"} == {"counter+estimate"}
    assert all("estimate" not in f.label for f in result.fits if f.metric in analysis.GPU_METRICS)
    net = [f for f in result.fits if f.metric == "gpu_net_j"]
    if with_idle:
        assert {f.label for f in net} == {"gpu_net_j (counter, net of idle)"} and len(net) == 2
        (net50,) = [r for r in result.ratios if r.metric == "gpu_net_j" and r.tau == 50]
        assert net50.ratio.value == pytest.approx(geometric_ratio(cols, "gpu_net_j", 50), rel=1e-9)
        assert net50.ratio.value > 1.3 * at50.ratio.value  # idle power is most of a PFLEGO round's joules
    else:
        assert net == [] and any("an idle baseline" in p for p in check_claim(result, "gpu_net_j"))


@pytest.mark.parametrize("name,problems", [
    ("gpu-check-cnn-omniglot", []),  # the reference README: the claim is shown in NVML joules
    ("gpu-check-cnn-cifar", ["pflego on vm is inconclusive, not flat, in gpu_j (counter) (growth over tau 5..100: "
                             "+24.5% [+2.6%, +46.4%]"]),
])
def test_the_claim_is_judged_on_the_gpus_own_joules(name, problems):
    report = read_report(REFERENCE_GPU / f"{name}.csv")

    found = check_claim(analyze(report.rows), "gpu_j")

    assert [p[:len(want)] for p, want in zip(found, problems)] == problems and len(found) == len(problems)


def test_a_run_without_a_gpu_has_no_gpu_fits_and_its_check_says_why():
    rows = rows_for(CLAIM_HOLDS)

    result = analyze(gpu_energy.with_net(rows, {}))

    assert {f.metric for f in result.fits} == set(analysis.METRICS) and all(not f.method for f in result.fits
                                                                              if f.metric != "energy_j")
    assert [r for r in result.ratios if r.metric in analysis.GPU_METRICS] == []
    problems = check_claim(result, "gpu_j")
    assert len(problems) == 2 and all("only rounds on a GPU that a GPU meter measured have them" in p
                                      for p in problems)


def _meters(*domains: tuple[str, str]) -> dict:
    return {"meters": [{"name": "nvml", "domains": [{"name": n, "column": c, "method": "counter", "in_total": True}
                                                    for n, c in domains]}]}


@pytest.mark.parametrize("sidecar,power,why", [
    ({}, None, "the sidecar's meters name no domain of the gpu column"),
    ({"meters": _meters(("gpu_0", "gpu"))}, None, "the run measured no idle baseline (--idle-seconds)"),
    ({"meters": _meters(("gpu_0", "gpu")), "energy": {"idle": {"seconds": 0.0, "power_w": {"gpu_0": 0.0},
                                                               "disabled": True}}},
     None, "the run's idle baseline was turned off"),
    ({"meters": _meters(("gpu_0", "gpu"), ("gpu_1", "gpu")), "energy": {"idle": {"power_w": {"gpu_0": 50.0}}}},
     None, "the idle baseline has no power in watts for gpu_1"),
    ({"meters": _meters(("gpu_0", "gpu")), "energy": {"idle": {"power_w": {"gpu_0": -3.0}}}},
     None, "the idle baseline has no power in watts for gpu_0"),
    ({"meters": _meters(("gpu_0", "gpu")), "energy": {"idle": {"power_w": {"gpu_0": "106"}}}},
     None, "the idle baseline has no power in watts for gpu_0"),
    ({"meters": _meters(("gpu_0", "gpu"), ("gpu_other_1", "gpu_other")),
      "energy": {"idle": {"power_w": {"gpu_0": 50.0, "gpu_other_1": 60.0}}}}, 50.0, ""),
], ids=["no-meters", "no-baseline", "disabled", "a-domain-missing", "negative", "not-a-number", "other-gpu-left-out"])
def test_the_gpus_idle_power_comes_from_the_sidecar_or_says_why_not(sidecar, power, why):
    idle = gpu_energy.gpu_idle(sidecar)

    assert (idle.power_w, idle.why[:len(why)]) == (power, why)


def test_the_idle_power_of_a_gpu_column_of_several_gpus_is_their_sum_as_measure_idle_writes_it(tmp_path):
    idle = idle_section(tmp_path, 40.0, gpus=2)
    sidecar = {"meters": _meters(("gpu_0", "gpu"), ("gpu_1", "gpu")), "energy": {"idle": idle}}
    row = {"kind": "client", "gpu_j": "100", "wall_s": "0.5"}

    found = gpu_energy.gpu_idle(sidecar)

    assert found.power_w == pytest.approx(80.0, rel=1e-12) and found.domains == ("gpu_0", "gpu_1")
    assert gpu_energy.net_j(row, found) == pytest.approx(100 - 80.0 * 0.5, rel=1e-12)


def test_a_fit_whose_rows_were_all_short_still_says_its_joules_are_an_estimate():
    """Every window of fedavg shorter than the estimate's update period: its energy fit has no rows left, yet its
    label (the table's metric cell) says how the joules it left out were obtained."""
    rows = rows_for(CLAIM_HOLDS, method="estimate")
    for r in rows:
        if r["algo"] == "fedavg":
            r["short_window"] = "1"

    result = analyze(rows)

    fit = result.fit_for("dev", "fedavg", "energy_j")
    assert fit is not None and fit.label == "energy_j (ESTIMATE)"
    assert result.label_of("energy_j") == "energy_j (ESTIMATE)"
