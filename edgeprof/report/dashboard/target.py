"""The dashboard's "Energy to target accuracy" section: client joules to target against tau, per algorithm.

Drawn from the reports of ``edgeprof train`` (a sidecar with a ``train`` section naming the target), through the
figures of :mod:`edgeprof.report.to_target`: each reached (algorithm, tau) cell as its median over seeds with its
95% t interval as error bars, each algorithm's energy-optimal tau as a star, and every cell that did not reach the
target as an open cross on the axis's floor, labelled "not reached" (never as a number).
"""

from __future__ import annotations

from typing import Sequence

from edgeprof.report.dashboard.page import Page, esc, grid, table
from edgeprof.report.to_target import Cell, cells, energy_label, energy_to_target, fmt, optima
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


def energy_to_target_section(page: Page, reports: Sequence[Report]) -> str:
    """One figure of client joules to target against tau (all algorithms), and the table of every cell."""
    found, targets = _target(reports)
    if not found:
        return ('<p class="note">None of these reports was written by <code>edgeprof train</code> (its sidecar names '
                'the target accuracy).</p>')
    if len(targets) != 1:
        return '<p class="note">These train reports name different or no target accuracies; give those of one run.</p>'
    target = float(targets.pop())
    all_cells = cells([res for r in found for res in energy_to_target(r, target)])
    best = optima(all_cells)
    data = [t for algo in best for t in _traces(page, algo, [c for c in all_cells if c.algo == algo], best[algo])]
    label = energy_label(all_cells)
    figure = page.figure(data, f"client joules to {target:.0%} test accuracy against tau, {label}; median over "
                               f"seeds, 95% t interval; crosses on the floor: not reached",
                         {"title": {"text": "tau (local steps per round)"}, "type": "log"},
                         {"title": {"text": "client J to target"}, "rangemode": "tozero"})
    body = [(c.algo, c.tau, f"{c.reached}/{len(c.seeds)}",
             fmt(c.rounds, ".3g") if c.is_reached else f"not reached in {c.rounds_trained} rounds",
             fmt(c.joules) if c.is_reached else "not reached",
             "energy-optimal" if best.get(c.algo) is c else "") for c in all_cells]
    return grid([figure]) + table(("algorithm", "tau", "seeds reached", "rounds to target", f"client J ({label})",
                                   ""), body, "to-target")
