"""Scaling analysis of a sweep: cost(tau) = a + b*tau per algorithm, confidence intervals, verdicts.

Inputs are report rows (``kind=client``, one per client round); an *algorithm variant* is the algorithm
plus its engine when that is not the registry's default (``pflego``, ``pflego[torch-reuse]``), and every
host of a report is analysed on its own.

* **Fit.** Ordinary least squares of every client row's cost on its tau, per variant and metric
  (``wall_s``, ``cpu_s``, ``energy_j``), by ``scipy.linalg.lstsq``. 95% intervals are estimate
  +- t(0.975, n-2) * standard error, the Student t quantile from ``scipy.stats`` (:func:`t_quantile`).
* **Verdict** (:func:`verdict`). The *relative growth* over the swept range is
  ``g = b * (tau_max - tau_min) / mean cost at tau_min``: how much dearer a round at the largest tau is
  than one at the smallest, as a fraction of the latter (the observed mean, not the fitted intercept,
  which noise can push to zero or below for a cost proportional to tau); its interval comes from b's.
  ``flat`` when the whole interval lies within +-:data:`FLAT_MAX_GROWTH` (20%): even the most
  pessimistic slope the data allow changes the round by less than a fifth (an equivalence test: a
  noisy fit whose interval reaches far below zero is not evidence of flatness). ``linear`` when its lower end
  is at least :data:`LINEAR_MIN_GROWTH` (50%): even the most optimistic slope makes the round at least
  half again as dear (so b's interval excludes 0). Anything else is ``inconclusive``: a real but
  moderate growth, or data too noisy (or too few: fewer than 2 taus or 3 rows) to tell. Noise widens
  the interval and so can only turn a verdict into ``inconclusive``, never into the opposite one.
* **Marginal cost of a local step** relative to one full backbone forward-and-backward pass over the
  local set. That pass is measured in the same sweep as FedAvg's slope b: each FedAvg local step is
  exactly one forward and one backward pass of backbone plus head over the client's local set and an
  SGD update. Interval by the delta method on the ratio of two independent slopes.
* **Ratios** of every other variant to every PFLEGO variant at each tau both were measured at: ratio of
  geometric means, with a Welch t interval on the log scale (needs >= 2 rows on each side) at the
  Welch-Satterthwaite degrees of freedom, fractional as they come.
* **The round GPU's own joules** (:data:`GPU_METRICS`). A GPU run's ``energy_j`` adds the CPU-time estimate to
  the GPU's meter; ``gpu_j`` (the meter alone) and ``gpu_net_j`` (net of the GPU's idle power, derived from the
  sidecar by :mod:`edgeprof.report.gpu_energy`) get fits, verdicts and ratios of their own, labelled with their
  rows' method (:attr:`VariantFit.label`). A run without a GPU has neither column, so no fit of them.
* **Estimates.** A fit, ratio or verdict of an energy metric names how its rows were obtained
  (:func:`metric_label`), and says ESTIMATE where any of them is an estimate (``energy_j (ESTIMATE)`` on a machine
  whose only meter is the CPU-time estimate): tables, ``sweep --check``'s lines and the dashboard alike.
* **Short windows.** A row whose window was shorter than its meters' update period (``short_window``; NVML's
  counter moves about every 100 ms, a millisecond GPU round reads zero or one whole step) has joules the meters
  did not resolve: energy metrics (``*_j``) leave such rows out of fits and ratios, and the verdict says how many
  it left out; a variant whose every row was short has no energy fit, only an ``inconclusive`` verdict that says
  why. Seconds are measured by the clock and keep every row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.errors import EdgeprofError

METRICS = ("wall_s", "cpu_s", "energy_j")
#: the round GPU's joules by its own meter, and net of its idle power (:mod:`edgeprof.report.gpu_energy`)
GPU_METRICS = ("gpu_j", "gpu_net_j")
#: the metrics :func:`render` tables show unless told otherwise (``sweep --check`` adds the one it judges):
#: time, the round's energy (named with its method, :func:`metric_label`) and the GPU's
TABLE_METRICS = ("wall_s", "cpu_s", "energy_j") + GPU_METRICS
#: the column that says how an energy metric's rows were obtained
METHOD_COLUMNS = {"energy_j": "energy_method", "gpu_j": "gpu_method", "gpu_net_j": "gpu_method"}
CONFIDENCE = 0.95
FLAT_MAX_GROWTH = 0.20
LINEAR_MIN_GROWTH = 0.50
REFERENCE_ALGO = "pflego"
PASS_ALGO = "fedavg"


class ClaimNotShown(EdgeprofError):
    """``sweep --check``: PFLEGO was not found flat or FedAvg not linear."""

    exit_code = 8


# --- Student t -----------------------------------------------------------------------------------------
def t_quantile(confidence: float, df: float) -> float:
    """The two-sided critical value t with P(|T| <= t) = ``confidence`` for Student's t with ``df`` > 0.

    ``df`` need not be an integer (Welch-Satterthwaite's rarely is) and is used as is: rounding it down would
    widen the interval (at df 3.7, 3.182 instead of 2.868). scipy is imported here, not at module level, so
    that importing this module (the dashboard does) stays cheap.
    """
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, df))


# --- fits ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval (``lo``/``hi`` None when it cannot be formed)."""

    value: float
    lo: Optional[float] = None
    hi: Optional[float] = None


@dataclass(frozen=True)
class LineFit:
    """Least-squares line y = a + b*x with standard errors; intervals at :data:`CONFIDENCE`."""

    a: float
    b: float
    se_a: float
    se_b: float
    cov_ab: float
    n: int
    x_min: float
    x_max: float
    x_mean: float
    sxx: float
    resid_sd: float
    y_at_min: float = math.nan

    @property
    def df(self) -> int:
        return self.n - 2

    @property
    def t(self) -> float:
        return t_quantile(CONFIDENCE, self.df) if self.df >= 1 else math.inf

    @property
    def ci_a(self) -> tuple[float, float]:
        return self.a - self.t * self.se_a, self.a + self.t * self.se_a

    @property
    def ci_b(self) -> tuple[float, float]:
        return self.b - self.t * self.se_b, self.b + self.t * self.se_b

    def predict(self, x: float) -> float:
        return self.a + self.b * x

    def band(self, x: float) -> float:
        """Half-width of the confidence band of the fitted mean at ``x``."""
        if self.df < 1:
            return math.inf
        return self.t * self.resid_sd * math.sqrt(1.0 / self.n + (x - self.x_mean) ** 2 / self.sxx)


def fit_line(x: Sequence[float], y: Sequence[float]) -> LineFit:
    """OLS fit of y on x (scipy's least squares); ValueError when x has fewer than two distinct values."""
    n = len(x)
    if n != len(y) or len(set(x)) < 2:
        raise ValueError("a line fit needs at least two distinct x values (and as many y)")
    import numpy as np
    from scipy import linalg

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    design = np.column_stack((np.ones(n), xs))  # full column rank: two distinct x
    coef = linalg.lstsq(design, ys)[0]
    a, b = float(coef[0]), float(coef[1])
    mx = float(xs.mean())
    sxx = float(((xs - mx) ** 2).sum())
    x_min, x_max = float(xs.min()), float(xs.max())
    y_at_min = float(ys[xs == x_min].mean())
    if n == 2:  # an exact line through two points: no residual degree of freedom, no standard errors
        return LineFit(a, b, math.inf, math.inf, math.nan, n, x_min, x_max, mx, sxx, math.nan, y_at_min)
    resid = ys - design @ coef
    s2 = float(resid @ resid) / (n - 2)
    pinv = linalg.pinv(design)
    cov = s2 * (pinv @ pinv.T)  # s^2 (X'X)^-1, with (X'X)^-1 = X+ X+' for X of full column rank
    return LineFit(a, b, math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1]), float(cov[0, 1]), n, x_min, x_max, mx, sxx,
                   math.sqrt(s2), y_at_min)


# --- verdicts -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """``flat``, ``linear`` or ``inconclusive``, the relative growth it rests on, and why."""

    label: str
    growth: Interval
    reason: str


def verdict(fit: Optional[LineFit]) -> Verdict:
    """Apply the documented rule (module docstring) to one fit."""
    if fit is None or fit.df < 1:
        return Verdict("inconclusive", Interval(math.nan), "too few rows or taus for a line with an interval")
    base = fit.y_at_min
    span = fit.x_max - fit.x_min
    if not base > 0:
        return Verdict("inconclusive", Interval(math.nan), "the mean cost at the smallest tau is not positive")
    lo_b, hi_b = fit.ci_b
    growth = Interval(fit.b * span / base, lo_b * span / base, hi_b * span / base)
    where = (f"growth over tau {fit.x_min:g}..{fit.x_max:g}: {growth.value:+.1%} "
             f"[{growth.lo:+.1%}, {growth.hi:+.1%}]")
    if -FLAT_MAX_GROWTH <= growth.lo and growth.hi <= FLAT_MAX_GROWTH:
        return Verdict("flat", growth, f"{where}; within +-{FLAT_MAX_GROWTH:.0%}")
    if growth.lo >= LINEAR_MIN_GROWTH:
        return Verdict("linear", growth, f"{where}; lower end >= {LINEAR_MIN_GROWTH:.0%}")
    return Verdict("inconclusive", growth, f"{where}; neither within +-{FLAT_MAX_GROWTH:.0%} (flat) nor "
                                           f"lower end >= {LINEAR_MIN_GROWTH:.0%} (linear): more repeats or "
                                           f"a quieter machine may decide")


# --- grouping rows ------------------------------------------------------------------------------------
def variant_of(algo: str, engine: str) -> str:
    """``algo``, or ``algo[engine]`` when ``engine`` is not the algorithm's default engine."""
    from edgeprof.algorithms import ALGORITHMS

    spec = ALGORITHMS.get(algo)
    default = spec.engines[0] if spec else engine
    return algo if engine in ("", default) else f"{algo}[{engine}]"


def is_short(row: Mapping[str, str]) -> bool:
    """Whether the row's window was shorter than its meters' update period (``short_window``)."""
    return str(row.get("short_window", "")).strip().lower() in ("1", "true")


def _cells(rows: Iterable[Mapping[str, str]], metric: str,
           ) -> tuple[dict[tuple[str, str], list[tuple[int, float]]], dict[tuple[str, str], int],
                      dict[tuple[str, str], set[str]]]:
    """(host, variant) -> [(tau, value)] over the client rows with a value for ``metric``; for an energy
    metric (host, variant) -> how many short-window rows were left out, and -> the methods of its rows, the left-out
    ones too (their :data:`METHOD_COLUMNS` cell, split at ``+``)."""
    out: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    short: dict[tuple[str, str], int] = defaultdict(int)
    methods: dict[tuple[str, str], set[str]] = defaultdict(set)
    energy = metric.endswith("_j")
    for r in rows:
        if r.get("kind") == "client" and r.get(metric, "") != "" and r.get("tau", "") != "":
            key = (r.get("host", ""), variant_of(r.get("algo", ""), r.get("engine", "")))
            # short rows too: a fit whose rows were all left out still says how its joules were obtained
            methods[key] |= {m for m in r.get(METHOD_COLUMNS.get(metric, ""), "").split("+") if m}
            if energy and is_short(r):
                short[key] += 1
            else:
                out[key].append((int(r["tau"]), float(r[metric])))
    return out, short, methods


@dataclass(frozen=True)
class VariantFit:
    """One (host, variant, metric): its fit, verdict and marginal step cost relative to a full pass."""

    host: str
    variant: str
    metric: str
    n: int
    taus: tuple[int, ...]
    fit: Optional[LineFit]
    verdict: Verdict
    step_vs_pass: Optional[Interval] = None
    #: rows left out because their window was shorter than the meters' update period (energy metrics)
    short: int = 0
    #: how the fitted rows' figures were obtained (``counter``, ``counter+estimate``; ``""`` for seconds)
    method: str = ""

    @property
    def label(self) -> str:
        """The metric as tables name it: a GPU metric with its method (``gpu_j (counter)``), others as they are."""
        return metric_label(self.metric, self.method)


@dataclass(frozen=True)
class Ratio:
    """Cost of ``variant`` over cost of ``reference`` (a PFLEGO variant) at one tau, one metric."""

    host: str
    metric: str
    variant: str
    reference: str
    tau: int
    ratio: Interval
    n_variant: int
    n_reference: int
    #: how the figures of both sides were obtained, as :attr:`VariantFit.method`
    method: str = ""

    @property
    def label(self) -> str:
        return metric_label(self.metric, self.method)


def metric_label(metric: str, method: str) -> str:
    """The metric as tables and verdicts name it, with how its rows were obtained: ``gpu_j (counter)``, ``gpu_net_j
    (counter, net of idle)``, ``energy_j (counter)``; seconds (no method) as they are.

    Where any of the figures is an estimate the name says ESTIMATE: ``energy_j (ESTIMATE)`` (CPU time times watts
    per core, the only meter of a machine without RAPL or NVML), ``energy_j (counter+estimate: in part an
    ESTIMATE)`` (a GPU's counter plus the CPU's estimate), so that no fit, ratio or verdict on estimated joules
    reads as one on measured joules.
    """
    from edgeprof.report.gpu_energy import label

    parts = {m for m in method.split("+") if m}
    how = method
    if "estimate" in parts:
        how = "ESTIMATE" if parts == {"estimate"} else f"{method}: in part an ESTIMATE"
    if metric in GPU_METRICS:
        return label(metric, how)
    return f"{metric} ({how})" if how else metric


@dataclass
class Analysis:
    """Everything the sweep prints and the dashboard shows about scaling."""

    fits: list[VariantFit] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)

    def fit_for(self, host: str, variant: str, metric: str) -> Optional[VariantFit]:
        return next((f for f in self.fits if (f.host, f.variant, f.metric) == (host, variant, metric)), None)

    def label_of(self, metric: str) -> str:
        """``metric`` named with the methods of all its fits (:func:`metric_label`): what a verdict on it rests on,
        ``energy_j (ESTIMATE)`` where any of its rows was estimated."""
        methods = {m for f in self.fits if f.metric == metric for m in f.method.split("+") if m}
        return metric_label(metric, "+".join(sorted(methods)))


def ratio_of_means(num: Sequence[float], den: Sequence[float]) -> Interval:
    """Ratio of geometric means with a Welch t interval on the log scale (point only below 2 per side)."""
    if not num or not den or min(num) <= 0 or min(den) <= 0:
        return Interval(math.nan)
    ln, ld = [math.log(v) for v in num], [math.log(v) for v in den]
    mn, md = sum(ln) / len(ln), sum(ld) / len(ld)
    value = math.exp(mn - md)
    if len(ln) < 2 or len(ld) < 2:
        return Interval(value)
    vn = sum((v - mn) ** 2 for v in ln) / (len(ln) - 1) / len(ln)
    vd = sum((v - md) ** 2 for v in ld) / (len(ld) - 1) / len(ld)
    if vn + vd == 0:
        return Interval(value, value, value)
    df = (vn + vd) ** 2 / (vn ** 2 / (len(ln) - 1) + vd ** 2 / (len(ld) - 1))  # Welch-Satterthwaite
    half = t_quantile(CONFIDENCE, df) * math.sqrt(vn + vd)
    return Interval(value, value * math.exp(-half), value * math.exp(half))


def slope_ratio(fit: LineFit, ref: LineFit) -> Optional[Interval]:
    """b / b_ref with a delta-method interval (t at the smaller df); None when b_ref is not positive."""
    if not ref.b > 0:
        return None
    value = fit.b / ref.b
    df = min(fit.df, ref.df)
    if df < 1:
        return Interval(value)
    se = abs(value) * math.sqrt((fit.se_b / fit.b) ** 2 + (ref.se_b / ref.b) ** 2) if fit.b != 0 \
        else fit.se_b / ref.b
    t = t_quantile(CONFIDENCE, df)
    return Interval(value, value - t * se, value + t * se)


def _fit_group(points: list[tuple[int, float]]) -> Optional[LineFit]:
    taus = [p[0] for p in points]
    if len(set(taus)) < 2 or len(points) < 3:
        return None
    return fit_line([float(t) for t in taus], [p[1] for p in points])


def analyze(rows: Iterable[Mapping[str, str]], metrics: Sequence[str] = METRICS + GPU_METRICS) -> Analysis:
    """Fits, verdicts, step-vs-pass costs and ratios for every (host, variant, metric) in ``rows``; a metric no
    row has a value for (the GPU's in a run without one, ``gpu_net_j`` without an idle baseline) has none."""
    rows = list(rows)
    result = Analysis()
    for metric in metrics:
        cells, short, methods = _cells(rows, metric)
        fits = {key: _fit_group(points) for key, points in cells.items()}
        for (host, variant) in dict.fromkeys([*cells, *short]):
            points, left_out = cells.get((host, variant), []), short.get((host, variant), 0)
            fit = fits.get((host, variant))
            ref = fits.get((host, PASS_ALGO))
            rel = slope_ratio(fit, ref) if fit is not None and ref is not None else None
            result.fits.append(VariantFit(host, variant, metric, len(points), tuple(sorted({p[0] for p in points})),
                                          fit, _short_verdict(verdict(fit), points, left_out), rel, left_out,
                                          "+".join(sorted(methods.get((host, variant), ())))))
        result.ratios.extend(_ratios(cells, metric, methods))
    return result


def _short_verdict(v: Verdict, points: list, left_out: int) -> Verdict:
    """The verdict with the short-window rows it left out named (see the module docstring)."""
    if not left_out:
        return v
    if not points:
        return Verdict("inconclusive", Interval(math.nan),
                       f"every one of its {left_out} windows was shorter than the meters' update period: their "
                       f"joules are not resolved (short_window); hold the windows longer (--hold-seconds)")
    return Verdict(v.label, v.growth, f"{v.reason}; {left_out} window(s) shorter than the meters' update period "
                                      "left out (short_window)")


def _is_reference(variant: str) -> bool:
    return variant.split("[")[0] == REFERENCE_ALGO


def _ratios(cells, metric: str, methods: Mapping[tuple[str, str], set[str]]) -> list[Ratio]:
    out = []
    for (host, ref), ref_points in cells.items():
        if not _is_reference(ref):
            continue
        for (dev, variant), points in cells.items():
            if dev != host or _is_reference(variant):
                continue
            method = "+".join(sorted(methods.get((dev, variant), set()) | methods.get((host, ref), set())))
            for tau in sorted({p[0] for p in points} & {p[0] for p in ref_points}):
                num = [v for t, v in points if t == tau]
                den = [v for t, v in ref_points if t == tau]
                out.append(Ratio(host, metric, variant, ref, tau, ratio_of_means(num, den), len(num), len(den),
                                 method))
    return out


# --- the claim ----------------------------------------------------------------------------------------
def check_claim(analysis: Analysis, metric: str = "wall_s") -> list[str]:
    """Reasons the claim fails on ``metric``: a PFLEGO variant not ``flat`` or FedAvg not ``linear``.

    An empty list means every PFLEGO variant is flat and FedAvg linear on every host; a sweep without
    PFLEGO or FedAvg fails with the reason that it cannot show the claim.
    """
    fits = [f for f in analysis.fits if f.metric == metric]
    problems = []
    missing = f": the claim cannot be checked{_WHY_NONE.get(metric, '')}"
    if not any(_is_reference(f.variant) for f in fits):
        problems.append(f"no {REFERENCE_ALGO} rows with {metric}{missing}")
    if not any(f.variant == PASS_ALGO for f in fits):
        problems.append(f"no {PASS_ALGO} rows with {metric}{missing}")
    for f in fits:
        want = "flat" if _is_reference(f.variant) else "linear" if f.variant == PASS_ALGO else None
        if want and f.verdict.label != want:
            where = f" on {f.host}" if f.host else ""
            problems.append(f"{f.variant}{where} is {f.verdict.label}, not {want}, in {f.label} ({f.verdict.reason})")
    return problems


#: why a report may have no rows with a GPU metric, said where the claim cannot be checked on it
_WHY_NONE = {"gpu_j": " (gpu_j is the joules of the round's GPU by its own meter: only rounds on a GPU that a GPU "
                      "meter measured have them)", "gpu_net_j": " (gpu_net_j is gpu_j net of the GPU's idle power: it "
                                                                "needs rounds on a measured GPU and an idle baseline, "
                                                                "--idle-seconds)"}


def _fmt_interval(iv: Optional[Interval], fmt: str = "{:.3g}") -> str:
    if iv is None or math.isnan(iv.value):
        return "-"
    if iv.lo is None or iv.hi is None:
        return fmt.format(iv.value)
    return f"{fmt.format(iv.value)} [{fmt.format(iv.lo)}, {fmt.format(iv.hi)}]"


def render(analysis: Analysis, metrics: Sequence[str] = TABLE_METRICS):
    """Two rich Tables: the fits with verdicts, and the ratios to PFLEGO (the host column only if several); an
    energy metric is named with its method (:func:`metric_label`: ``gpu_j (counter)``, ``energy_j (ESTIMATE)``) and
    has rows only where the analysis has its fits."""
    from rich.markup import escape
    from rich.table import Table

    several = len({f.host for f in analysis.fits}) > 1
    fits = Table(title=f"cost per client round = a + b*tau ({CONFIDENCE:.0%} intervals)")
    for name in ("host",) * several + ("algo", "metric", "n", "a", "b per step", "step/pass", "growth", "verdict"):
        fits.add_column(name, justify="left" if name in ("host", "algo", "metric", "verdict") else "right",
                        no_wrap=name in ("algo", "metric", "verdict"))
    for f in analysis.fits:
        if f.metric not in metrics:
            continue
        b = Interval(f.fit.b, *f.fit.ci_b) if f.fit else None
        fits.add_row(*(escape(f.host),) * several, escape(f.variant), escape(f.label),
                     f"{f.n} (+{f.short} short)" if f.short else str(f.n),
                     f"{f.fit.a:.3g}" if f.fit else "-", _fmt_interval(b),
                     _fmt_interval(f.step_vs_pass, "{:.3g}"), _fmt_interval(f.verdict.growth, "{:+.0%}"),
                     f.verdict.label)
    ratios = Table(title="ratio to PFLEGO per client round at each tau (geometric means)")
    taus = sorted({r.tau for r in analysis.ratios if r.metric in metrics})
    for name in ("host",) * several + ("algo", "over", "metric") + tuple(f"tau={t}" for t in taus):
        # a long metric label (energy_j (counter+estimate: ...)) wraps in its cell, never the ratios
        ratios.add_column(name, justify="right" if name.startswith("tau") else "left", no_wrap=name != "metric")
    pivot: dict[tuple, dict[int, str]] = defaultdict(dict)
    for r in analysis.ratios:
        if r.metric in metrics:
            key = (*(escape(r.host),) * several, escape(r.variant), escape(r.reference), escape(r.label))
            pivot[key][r.tau] = _fmt_interval(r.ratio, "{:.1f}")
    for key, cells in pivot.items():
        ratios.add_row(*key, *[cells.get(t, "-") for t in taus])
    return fits, ratios
