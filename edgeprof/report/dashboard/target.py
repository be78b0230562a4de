"""The dashboard's "Energy to target accuracy" section: client joules to target against tau, per algorithm, and
test accuracy against cumulative client joules, with their Pareto front.

Drawn from the reports of ``edgeprof train`` (a sidecar with a ``train`` section naming the target), through the
figures of :mod:`edgeprof.report.to_target`: each reached (algorithm, tau) cell as its median over seeds with its
95% t interval as error bars, each algorithm's energy-optimal tau as a star, and every cell that did not reach the
target as an open cross on the axis's floor, labelled "not reached" (never as a number). The second figure draws
every evaluation of every run (algorithm, tau, seed) as its test accuracy against the client joules of its rounds
so far, one line a run, and the Pareto front over all of them: the most accuracy each amount of client energy
bought, and which (algorithm, tau) bought it. Runs of several devices or workloads, or one seed's from two runs,
get a note instead (:func:`edgeprof.report.to_target.cells` says why): no figure pools them.
"""
from __future__ import annotations

from typing import Sequence

from edgeprof.errors import ReportError
from edgeprof.report.dashboard.page import Page, esc, grid, table
from edgeprof.report.to_target import (Cell, Point, accuracy_energy, cells, energy_label, energy_to_target, fmt,
                                      optima, pareto_front)
from edgeprof.report.writer import Report


def _target(reports: Sequence[Report]) -> tuple[list[Report], set]:
    """The train reports and the targets they name (a usable target is a number in (0, 1])."""
    found = [r for r in reports if isinstance(r.sidecar, dict) and isinstance(r.sidecar.get("train"), dict)]
    targets = {r.sidecar["train"].get("target_accuracy") for r in found}
    return found, {t for t in targets if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t <= 1}


def _traces(page: Page, algo: str, mine: Sequence[Cell], best) -> list[dict]:
    reached = [c for c in mine if c.is_reached and c.joules.finite]
    missing = [c for c in mine if c not in reached]
    color = page.color(algo)
    data = [{"type": "scatter", "mode": "lines+markers", "name": esc(algo), "x": [c.tau for c in reached],
             "y": [c.joules.median for c in reached], "marker": {"color": color},
             "error_y": {"type": "data", "symmetric": False,
                         "array": [0 if c.joules.hi is None else c.joules.hi - c.joules.median for c in reached],
                         "arrayminus": [0 if c.joules.lo is None else c.joules.median - c.joules.lo for c in reached]},
             "text": [esc(f"{c.reached}/{len(c.seeds)} seeds reached; {fmt(c.joules)} J") for c in reached]}]
    if missing:
        data.append({"type": "scatter", "mode": "markers", "name": esc(f"{algo}: not reached"),
                     "x": [c.tau for c in missing], "y": [0] * len(missing),
                     "marker": {"color": color, "symbol": "x-open", "size": 12},
                     "text": [esc(f"not reached in {c.rounds_trained} rounds ({c.reached}/{len(c.seeds)} seeds)")
                              for c in missing]})
    if best is not None:
        data.append({"type": "scatter", "mode": "markers", "name": esc(f"{algo}: energy-optimal tau {best.tau}"),
                     "x": [best.tau], "y": [best.joules.median],
                     "marker": {"color": color, "symbol": "star", "size": 18}})
    return data


def _name(point: Point) -> str:
    return f"{point.algo}, tau {point.tau}" if point.tau is not None else point.algo


def _front_figure(page: Page, points: Sequence[Point], target: float, label: str) -> str:
    """Test accuracy against cumulative client joules: a line a run (the seeds of one algorithm and tau in one
    trace, apart), the target as a dotted line, and the Pareto front over every evaluation drawn."""
    runs: dict = {}
    for point in points:
        runs.setdefault(_name(point), {}).setdefault(point.seed, []).append(point)
    data = []
    for name, seeds in runs.items():
        x, y, text, symbols = [], [], [], []
        for seed, mine in seeds.items():
            for point in sorted(mine, key=lambda q: q.round):
                x.append(point.joules)
                y.append(point.accuracy)
                text.append(esc(f"{name}, seed {seed}, round {point.round}" + (
                    f" ({point.short} short window(s) in its joules: not resolved)" if point.short else "")))
                symbols.append("circle-open" if point.short else "circle")
            x.append(None)
            y.append(None)
            text.append("")
            symbols.append("circle")
        data.append({"type": "scatter", "mode": "lines+markers", "name": esc(name), "x": x, "y": y, "text": text,
                     "marker": {"color": page.color(name), "size": 5, "symbol": symbols}, "line": {"width": 1},
                     "connectgaps": False})
    front = pareto_front(points)
    data.append({"type": "scatter", "mode": "lines+markers", "name": "Pareto front",
                 "line": {"shape": "hv", "color": "black", "width": 2},
                 "marker": {"color": "black", "symbol": "diamond", "size": 8},
                 "x": [q.joules for q in front], "y": [q.accuracy for q in front],
                 "text": [esc(f"{_name(q)}, seed {q.seed}, round {q.round}") for q in front]})
    joules = [q.joules for q in points]
    data.append({"type": "scatter", "mode": "lines", "name": f"target {target:.0%}", "x": [min(joules), max(joules)],
                 "y": [target, target], "line": {"dash": "dot", "color": "grey"}, "hoverinfo": "skip"})
    return page.figure(data, f"test accuracy against cumulative client joules, {label}",
                       {"title": {"text": _estimated("client J so far", label)}, "type": "log"},
                       {"title": {"text": "test accuracy"}, "range": [0, 1.02]})


def _estimated(axis: str, label: str) -> str:
    """An energy axis, ``(ESTIMATE)`` after it where the joules' label says they are estimated."""
    return f"{axis} (ESTIMATE)" if "ESTIMATE" in label else axis


def energy_to_target_section(page: Page, reports: Sequence[Report]) -> str:
    """The figure of client joules to target against tau (all algorithms), the figure of test accuracy against
    cumulative client joules with its Pareto front, and the table of every cell."""
    found, targets = _target(reports)
    if not found:
        return ('<p class="note">None of these reports was written by <code>edgeprof train</code> (its sidecar names '
                'the target accuracy).</p>')
    if len(targets) != 1:
        return '<p class="note">These train reports name different or no target accuracies; give those of one run.</p>'
    target = float(targets.pop())
    try:
        all_cells = cells([res for r in found for res in energy_to_target(r, target)])
    except ReportError as err:  # several devices' or workloads' runs, or one seed's from two: no figure over them
        return f'<p class="note">{esc(str(err))}</p>'
    best = optima(all_cells)
    data = [t for algo in best for t in _traces(page, algo, [c for c in all_cells if c.algo == algo], best[algo])]
    label = energy_label(all_cells)
    figure = page.figure(data, f"client joules to {target:.0%} test accuracy against tau, {label}",
                         {"title": {"text": "tau (local steps per round)"}, "type": "log"},
                         {"title": {"text": _estimated("client J to target", label)}, "rangemode": "tozero"})
    points = [point for r in found for point in accuracy_energy(r)]
    figures = [figure] + ([_front_figure(page, points, target, label)] if points else [])
    short = [q for q in points if q.short]
    short_note = (f'<p class="note">{len(short)} of the {len(points)} evaluations have joules that hold client '
                  "windows shorter than the meters' update period (not resolved): they are drawn hollow and left off "
                  "the Pareto front" + (", which is therefore empty" if len(short) == len(points) else "") + ".</p>"
                  if short else "")
    body = [(c.algo, c.tau, f"{c.reached}/{len(c.seeds)}",
             fmt(c.rounds, ".3g") if c.is_reached else f"not reached in {c.rounds_trained} rounds",
             fmt(c.joules) if c.is_reached else "not reached",
             "energy-optimal" if best.get(c.algo) is c else "") for c in all_cells]
    caption = ('<p class="note">Left: each (algorithm, tau) as the median over seeds of its client joules to the '
               'target, with the 95% t interval; the star is the algorithm\'s energy-optimal tau; open crosses on the '
               'floor did not reach the target. Right: every evaluation of every run as its test accuracy against the '
               'client joules of its rounds so far, one line a run; in black the Pareto front, the most accuracy each '
               'amount of client energy bought (hover a point for its algorithm, tau, seed and round).</p>'
               if len(figures) > 1 else "")
    return grid(figures) + caption + short_note + table(("algorithm", "tau", "seeds reached", "rounds to target", f"client J ({label})",
                                   ""), body, "to-target")
