"""The tau that reaches a target accuracy for the fewest client joules, over seeds, and its projection elsewhere.

``edgeprof train --taus ... --seeds ...`` writes one report per (algorithm, tau, seed); :func:`energy_to_target`
reads each run's rounds, client joules and client seconds to the target: the client rows of rounds 1..t*, t* the
first round whose eval row has ``test_accuracy >= target`` (server steps are not client energy). The runs of one
(algorithm, tau) then become one :class:`Cell`:

* a seed that never reached the target counts as +infinity, and each figure's point is the **median over all
  seeds**: the cell is *reached* only when more than half of its seeds reached (the median is then finite);
  otherwise it reads "not reached in R rounds", never as a number;
* the 95% interval is Student's t interval of the mean over the seeds' values (clipped to the figure's range: not
  below 0, an accuracy not above 1), formed only when every seed reached and there are at least two (one seed: the
  point only; some seeds unreached: the point and "k/n reached");
* the energy-optimal tau of an algorithm is the reached cell with the lowest median joules to target, and the
  algorithm that reaches the target for the fewest joules is the one whose optimum is lowest.

A projection (``--cost-from SWEEP.csv``) multiplies the client rounds to target measured here by the cost of one
client round on the sweep's device at the same tau, read off its fit a + b*tau (:func:`edgeprof.report.analysis
.analyze`). The intervals are carried by the product of bounds: [count_lo * cost_lo, count_hi * cost_hi], the
count's t interval over seeds (its point where there is none) times the fit's 95% confidence band at tau. Both
factors are measurements; the product is neither, and every label says PROJECTION.

Pure functions on :class:`~edgeprof.report.writer.Report` objects: the CLI and the dashboard read them, no run
is needed to test them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from edgeprof.errors import ConfigError, ReportError
from edgeprof.report.analysis import CONFIDENCE, LineFit, analyze, is_short, metric_label, t_quantile
from edgeprof.report.writer import Report


# --- one run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetResult:
    """One algorithm's training outcome and its client energy to the target accuracy.

    ``reached_round`` is None when the target was never reached; ``energy_j`` / ``carbon_g`` are None
    then, or when a client row up to that round has no measured value. ``energy_method`` says how the
    joules were obtained (``counter``, ``integrated_power``, ``estimate``, joined by ``+``).
    """

    algo: str
    target: float
    rounds: int
    final_loss: Optional[float]
    final_accuracy: Optional[float]
    median_client_round_j: Optional[float]
    reached_round: Optional[int]
    energy_j: Optional[float]
    carbon_g: Optional[float]
    energy_method: str
    eval_protocol: str = "global"
    #: the run's tau (None where the rows carry none) and seed (the sidecar's ``config.seed``)
    tau: Optional[int] = None
    seed: Optional[int] = None
    #: client rows of rounds 1..reached_round, and the sum of their ``wall_s`` (None: not reached or not measured)
    client_rounds: Optional[int] = None
    wall_s: Optional[float] = None
    #: the device that measured it: the rows' ``host``, else the sidecar's host name ('' where neither says)
    host: str = ""
    #: what it trained: its client rows' data set, backbone and device (``digits/mlp/cpu``; '' where none says)
    workload: str = ""


def _floats(rows, column: str) -> Optional[list[float]]:
    """The column as floats, or None if any cell is empty."""
    cells = [r.get(column, "") for r in rows]
    return None if any(c == "" for c in cells) else [float(c) for c in cells]


def _first_reached(evals: Sequence[dict], target: float) -> Optional[int]:
    for row in sorted((r for r in evals if r.get("round")), key=lambda r: int(r["round"])):
        if row.get("test_accuracy", "") != "" and float(row["test_accuracy"]) >= target:
            return int(row["round"])
    return None


def _seed_of(report: Report) -> Optional[int]:
    """The run's seed: its rows' ``seed`` column, else (a report written before the column) its sidecar's config."""
    seeds = {r.get("seed", "") for r in report.rows} - {""}
    if len(seeds) == 1 and seeds.copy().pop().isdigit():
        return int(seeds.pop())
    config = report.sidecar.get("config") if isinstance(report.sidecar, dict) else None
    seed = config.get("seed") if isinstance(config, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _host_of(report: Report) -> str:
    """The device that measured the run (:meth:`Report.host_of` of its rows, joined by ``+``; '' if none says)."""
    return "+".join(sorted({report.host_of(r) for r in report.rows} - {""}))


def _workload_of(rows: Sequence[Mapping[str, str]]) -> str:
    """``dataset/backbone/device_kind`` of ``rows`` (:data:`~edgeprof.report.schema.WORKLOAD_COLUMNS`, each the
    values they name, joined by ``+``), '' if none."""
    from edgeprof.report.schema import WORKLOAD_COLUMNS

    parts = ["+".join(sorted({r.get(c, "") for r in rows} - {""})) for c in WORKLOAD_COLUMNS]
    return "/".join(parts) if any(parts) else ""


def _rows(report: Report, algo: str, tau: str, kind: str) -> list[dict]:
    """The rows of ``kind`` of one (algorithm, tau) of ``report`` that name their round (tau ``""``: none given)."""
    return [r for r in report.where(algo=algo, kind=kind) if r.get("round") and r.get("tau", "") == tau]


def _one(report: Report, algo: str, target: float, tau: str = "") -> TargetResult:
    evals = sorted(_rows(report, algo, tau, "eval"), key=lambda r: int(r["round"]))
    clients = _rows(report, algo, tau, "client")
    last = evals[-1] if evals else {}
    reached = _first_reached(evals, target)
    energy = carbon = wall = count = None
    if reached is not None:
        upto = [r for r in clients if int(r["round"]) <= reached]
        joules, grams, seconds = _floats(upto, "energy_j"), _floats(upto, "carbon_g"), _floats(upto, "wall_s")
        energy = sum(joules) if joules is not None else None
        carbon = sum(grams) if grams is not None else None
        wall = sum(seconds) if seconds is not None else None
        count = len(upto)
    per_round = report.values("energy_j", clients)
    return TargetResult(
        algo=algo, target=target, rounds=len(evals),
        final_loss=float(last["train_loss"]) if last.get("train_loss") else None,
        final_accuracy=float(last["test_accuracy"]) if last.get("test_accuracy") else None,
        median_client_round_j=statistics.median(per_round) if per_round else None,
        reached_round=reached, energy_j=energy, carbon_g=carbon,
        energy_method="+".join(sorted({r["energy_method"] for r in clients if r.get("energy_method")})) or "none",
        eval_protocol="+".join(sorted({r.get("eval_protocol") or "global" for r in evals})) or "global",
        tau=int(tau) if tau else None, seed=_seed_of(report), client_rounds=count, wall_s=wall, host=_host_of(report),
        workload=_workload_of(clients),
    )


def energy_to_target(report: Report, target: float) -> list[TargetResult]:
    """Per (algorithm, tau) in the report (in order of appearance): outcome and client energy to ``target``."""
    cells = dict.fromkeys((r["algo"], r.get("tau", "")) for r in report.rows if r.get("kind") in ("client", "eval"))
    return [_one(report, algo, target, tau) for algo, tau in cells]


@dataclass(frozen=True)
class Point:
    """One evaluation of one run: its test accuracy after ``round`` and the client joules of rounds 1..``round``."""

    algo: str
    tau: Optional[int]
    seed: Optional[int]
    round: int
    joules: float
    accuracy: float
    #: how many of the client rows summed into ``joules`` lasted less than their meters' update period (their joules
    #: are not resolved, so neither is the sum's share of them)
    short: int = 0


def accuracy_energy(report: Report) -> list[Point]:
    """Every evaluation of every (algorithm, tau) in ``report``, as test accuracy against the cumulative client
    joules up to its round; an evaluation whose rounds hold a client row without a measured value is left out."""
    points = []
    seed = _seed_of(report)
    for algo, tau in dict.fromkeys((r["algo"], r.get("tau", "")) for r in report.rows if r.get("kind") == "eval"):
        clients = _rows(report, algo, tau, "client")
        for ev in sorted(_rows(report, algo, tau, "eval"), key=lambda r: int(r["round"])):
            rows = [r for r in clients if int(r["round"]) <= int(ev["round"])]
            upto = _floats(rows, "energy_j")
            if ev.get("test_accuracy", "") == "" or not upto:
                continue
            points.append(Point(algo, int(tau) if tau else None, seed, int(ev["round"]), sum(upto),
                                float(ev["test_accuracy"]), sum(is_short(r) for r in rows)))
    return points


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both counts (as many joules or fewer and as high an accuracy or higher,
    one of them strictly), by rising joules: the most accuracy each amount of client energy bought. A point whose
    joules hold a short window's (:attr:`Point.short`) is not on it: what it bought is not resolved."""
    front: list[Point] = []
    for point in sorted((q for q in points if not q.short), key=lambda q: (q.joules, -q.accuracy)):
        if not front or point.accuracy > front[-1].accuracy:
            front.append(point)
    return front


# --- over seeds -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """The median of ``n`` seeds' values (unreached ones as +inf) and a t interval of their mean (or None)."""

    median: float
    lo: Optional[float]
    hi: Optional[float]
    n: int

    @property
    def finite(self) -> bool:
        return math.isfinite(self.median)


def spread(values: Sequence[float], n: int, low: float = 0.0, high: float = math.inf) -> Spread:
    """``values``: the finite figures of the seeds that have one; the other ``n - len(values)`` count as +inf.

    The interval is clipped to [``low``, ``high``], the range the figure can take (joules, seconds and rounds are
    not negative, an accuracy not above 1): with two seeds t is 12.7 and the bare interval often crosses zero.
    """
    if not values:
        return Spread(math.inf, None, None, n)
    median = statistics.median(sorted(values) + [math.inf] * (n - len(values)))
    if len(values) < n or n < 2:
        return Spread(median, None, None, n)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(CONFIDENCE, n - 1) * sd / math.sqrt(n)
    return Spread(median, max(mean - half, low), min(mean + half, high), n)


@dataclass(frozen=True)
class Projection:
    """Client joules to target on another device: counted rounds here x fitted cost there (labelled as such); ``host``
    is that device's name in the sweep's ``host`` column."""

    host: str
    method: str
    cost_j: float
    cost_lo: Optional[float]
    cost_hi: Optional[float]
    joules: Optional[Spread]


@dataclass(frozen=True)
class Cell:
    """One (algorithm, tau) over its seeds: rounds, client joules and seconds to target, final accuracy."""

    algo: str
    tau: Optional[int]
    seeds: tuple
    reached: int
    rounds_trained: int
    rounds: Spread
    client_rounds: Spread
    joules: Spread
    wall_s: Spread
    final_accuracy: Spread
    method: str
    projection: Optional[Projection] = None

    @property
    def is_reached(self) -> bool:
        """More than half of the seeds reached the target (so the medians are finite)."""
        return 2 * self.reached > len(self.seeds)


def _values(results: Sequence[TargetResult], name: str) -> list[float]:
    return [float(getattr(r, name)) for r in results if r.reached_round is not None and getattr(r, name) is not None]


def cells(results: Sequence[TargetResult]) -> list[Cell]:
    """Group runs by (algorithm, tau) in order of appearance; every figure over the seeds as :func:`spread`.
    ReportError when the runs come from several devices or trained several workloads (joules to target are one
    device's, of one data set, backbone and device kind) or a group has one seed twice (two runs of one seed: one
    seed's run, not two samples)."""
    hosts = sorted({r.host for r in results} - {""})
    if len(hosts) > 1:
        raise ReportError(f"these train runs were measured on {len(hosts)} devices ({', '.join(hosts)}): the energy "
                          f"to target is one device's; give one device's reports")
    workloads = sorted({r.workload for r in results} - {""})
    if len(workloads) > 1:
        raise ReportError(f"these train runs trained {len(workloads)} workloads (data set/backbone/device: "
                          f"{', '.join(workloads)}): the energy to target is one workload's; give the reports of one")
    groups: dict[tuple, list[TargetResult]] = {}
    for r in results:
        groups.setdefault((r.algo, r.tau), []).append(r)
    out = []
    for (algo, tau), runs in groups.items():
        seeds = [r.seed for r in runs if r.seed is not None]
        twice = next((seed for seed in seeds if seeds.count(seed) > 1), None)
        if twice is not None:  # not an independent run: it would narrow the interval over seeds
            raise ReportError(f"{algo}{'' if tau is None else f' at tau {tau}'}: seed {twice} comes from two runs; "
                              f"the figures are over seeds, each counted once: give one report per seed")
        n = len(runs)
        reached = [r for r in runs if r.reached_round is not None]
        joules = _values(runs, "energy_j")
        out.append(Cell(
            algo=algo, tau=tau, seeds=tuple(r.seed for r in runs), reached=len(reached),
            rounds_trained=max(r.rounds for r in runs), rounds=spread(_values(runs, "reached_round"), n, low=1.0),
            client_rounds=spread(_values(runs, "client_rounds"), n, low=1.0),
            # a reached seed whose joules were not measured makes the cell's joules unknown, not smaller
            joules=spread(joules, n) if len(joules) == len(reached) else Spread(math.nan, None, None, n),
            wall_s=spread(_values(runs, "wall_s"), n) if len(_values(runs, "wall_s")) == len(reached)
            else Spread(math.nan, None, None, n),
            final_accuracy=spread([r.final_accuracy for r in runs if r.final_accuracy is not None], n, high=1.0),
            method="+".join(sorted({m for r in runs for m in r.energy_method.split("+") if m and m != "none"})),
        ))
    return out


def optimum(algo_cells: Sequence[Cell]) -> Optional[Cell]:
    """The reached cell with the lowest median joules to target (None when no tau reached it)."""
    known = [c for c in algo_cells if c.is_reached and c.joules.finite]
    return min(known, key=lambda c: c.joules.median) if known else None


def projected_optimum(algo_cells: Sequence[Cell]) -> Optional[Cell]:
    """The reached cell with the lowest median projected joules (None without a projection): the rounds are the
    same, the cost per round is the other device's, so its optimum may be another tau."""
    known = [c for c in algo_cells if c.projection is not None and c.projection.joules is not None]
    return min(known, key=lambda c: c.projection.joules.median) if known else None


def optima(all_cells: Sequence[Cell]) -> dict[str, Optional[Cell]]:
    """Each algorithm's energy-optimal cell, in order of appearance."""
    algos = dict.fromkeys(c.algo for c in all_cells)
    return {a: optimum([c for c in all_cells if c.algo == a]) for a in algos}


# --- projection onto another device -------------------------------------------------------------------------
@dataclass(frozen=True)
class CostFit:
    """One algorithm's per-client-round joules against tau on the sweep's host (its ``host`` column)."""

    host: str
    fit: LineFit
    method: str


def read_costs(path: Path, algos: Sequence[str], taus: Sequence[int], backbone: Optional[str] = None,
               ) -> dict[str, CostFit]:
    """The sweep's energy fit per algorithm; ConfigError (one line) when the report is not one sweep of one device,
    ran another backbone than ``backbone`` (a round's joules are its backbone's), lacks an algorithm, or its taus
    do not cover one of ``taus`` (no extrapolation)."""
    from edgeprof.errors import ReportError
    from edgeprof.report.writer import read_report

    try:
        report = read_report(path)
    except ReportError as err:
        raise ConfigError(f"--cost-from {path}: {err}") from None
    swept = sorted({r.get("backbone", "") for r in report.rows if r.get("kind") == "client"} - {""})
    if backbone is not None and swept and swept != [backbone]:
        raise ConfigError(f"--cost-from {path}: its rounds ran the backbone {', '.join(swept)}, this training "
                          f"{backbone}: a round's joules are its backbone's; sweep that device with --backbone "
                          f"{backbone}")
    fits = [f for f in analyze(report.rows, metrics=("energy_j",)).fits if f.fit is not None]
    hosts = sorted({f.host for f in fits})
    if len(hosts) != 1:
        raise ConfigError(f"--cost-from {path}: needs a sweep's energy fits on exactly one host, found "
                          f"{len(hosts)}{': ' + ', '.join(hosts) if hosts else ''}")
    out = {}
    for algo in algos:
        found = next((f for f in fits if f.variant == algo), None)
        if found is None:
            raise ConfigError(f"--cost-from {path}: has no energy fit for {algo} (it fits "
                              f"{', '.join(f.variant for f in fits)}); sweep it with --algos {algo}")
        outside = [t for t in taus if not found.fit.x_min <= t <= found.fit.x_max]
        if outside:
            raise ConfigError(f"--cost-from {path}: {algo} was swept at tau {found.fit.x_min:g}..{found.fit.x_max:g}, "
                              f"which does not cover tau {outside[0]}; a projection would be an extrapolation")
        out[algo] = CostFit(hosts[0], found.fit, found.method)
    return out


def project(cell: Cell, cost: CostFit) -> Cell:
    """``cell`` with its :class:`Projection`: client rounds to target x the fitted cost at its tau there."""
    from dataclasses import replace

    fit, tau = cost.fit, float(cell.tau)
    c, band = fit.predict(tau), fit.band(tau)
    c_lo, c_hi = (max(c - band, 0.0), c + band) if math.isfinite(band) else (None, None)
    joules = None
    if cell.is_reached:
        count = cell.client_rounds
        n_lo = count.lo if count.lo is not None else count.median
        n_hi = count.hi if count.hi is not None else count.median
        joules = Spread(count.median * c, None if c_lo is None else max(n_lo, 0.0) * c_lo,
                        None if c_hi is None else n_hi * c_hi, count.n)
    return replace(cell, projection=Projection(cost.host, cost.method, c, c_lo, c_hi, joules))


# --- the table ----------------------------------------------------------------------------------------------
def fmt(s: Spread, digits: str = ".4g") -> str:
    """``median [lo, hi]``; the point alone without an interval."""
    if math.isnan(s.median):
        return "-"
    point = format(s.median, digits)
    return point if s.lo is None else f"{point} [{format(s.lo, digits)}, {format(s.hi, digits)}]"


def _reached_cell(cell: Cell, s: Spread, digits: str = ".4g") -> str:
    if not cell.is_reached:
        return f"not reached in {cell.rounds_trained} rounds"
    return fmt(s, digits)


def energy_label(all_cells: Sequence[Cell]) -> str:
    """How the joules were obtained: ``energy_j (ESTIMATE)`` on a machine with only the CPU estimate."""
    return metric_label("energy_j", "+".join(sorted({m for c in all_cells for m in c.method.split("+") if m})))


def projection_label(cell_or_cost) -> str:
    p = cell_or_cost
    return (f"PROJECTION onto {p.host}: client rounds to target measured here x J per client round measured "
            f"there ({metric_label('energy_j', p.method)}, fit a + b*tau)")


def render(all_cells: Sequence[Cell], target: float, protocol: str = "global"):
    """A rich Table, one row per (algorithm, tau): figures over seeds as ``median [95% t interval of the mean]``."""
    from rich.markup import escape
    from rich.table import Table

    projected = next((c.projection for c in all_cells if c.projection is not None), None)
    table = Table(title=f"to {target:.0%} test accuracy ({escape(protocol)} evaluation protocol), over seeds: median "
                        f"[{CONFIDENCE:.0%} t interval of the mean]; client joules as {energy_label(all_cells)}")
    names = ["algo", "tau", "seeds reached", "rounds to target", "client J to target", "client s to target",
             "final accuracy"]
    if projected is not None:
        names.append(f"PROJECTED client J on {projected.host}")
    for name in names:
        table.add_column(escape(name), justify="left" if name == "algo" else "right", no_wrap=name == "algo")
    for c in all_cells:
        row = [escape(c.algo), "-" if c.tau is None else str(c.tau), f"{c.reached}/{len(c.seeds)}",
               _reached_cell(c, c.rounds, ".3g"), _reached_cell(c, c.joules), _reached_cell(c, c.wall_s),
               fmt(c.final_accuracy, ".3f")]
        if projected is not None:
            row.append(_reached_cell(c, c.projection.joules) if c.projection and c.projection.joules else
                       _reached_cell(c, Spread(math.nan, None, None, 0)))
        table.add_row(*row)
    return table


def verdict_lines(all_cells: Sequence[Cell]) -> list[str]:
    """Each algorithm's energy-optimal tau with its interval, then the algorithm with the fewest joules."""
    label = energy_label(all_cells)
    lines, best = [], {}
    for algo, cell in optima(all_cells).items():
        if cell is None:
            rounds = max(c.rounds_trained for c in all_cells if c.algo == algo)
            lines.append(f"energy-optimal tau of {algo}: none; the target was not reached at any tau in {rounds} rounds")
            continue
        best[algo] = cell
        lines.append(f"energy-optimal tau of {algo}: {cell.tau} ({fmt(cell.joules)} client J to target, {label})")
        there = projected_optimum([c for c in all_cells if c.algo == algo])
        if there is not None:
            lines.append(f"  on {there.projection.host}: tau {there.tau} ({fmt(there.projection.joules)} J; "
                         f"{projection_label(there.projection)})")
    if best:
        algo, cell = min(best.items(), key=lambda kv: kv[1].joules.median)
        lines.append(f"fewest client joules to target: {algo} at tau {cell.tau} ({fmt(cell.joules)} J, {label})")
    else:
        lines.append("fewest client joules to target: none; no algorithm reached the target")
    return lines
