"""What ``edgeprof train`` adds on top of a run: the energy to reach a target accuracy, and its table.

``edgeprof train`` runs each algorithm with ``evaluate=True`` through :func:`edgeprof.rounds.simulate.run`, one
report per algorithm (:func:`train_configs`); each report then holds, per round, the eval row
(equation (1)'s training loss and the test accuracy averaged over clients) and one row per client
round with its joules. :func:`energy_to_target` reads such a report back and answers the question
none of the papers does: how much client energy (and carbon) did the federation spend before the test
accuracy first reached the target? The sum runs over the client rows of rounds 1..t*, where t* is the
first round whose eval row has ``test_accuracy >= target``; server steps are not client energy and
are left out. Pure functions on a :class:`~edgeprof.report.writer.Report`: no run needed to test them.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from edgeprof.config import RunConfig
from edgeprof.report.writer import Report


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


def _floats(rows, column: str) -> Optional[list[float]]:
    """The column as floats, or None if any cell is empty."""
    cells = [r.get(column, "") for r in rows]
    return None if any(c == "" for c in cells) else [float(c) for c in cells]


def _first_reached(evals: Sequence[dict], target: float) -> Optional[int]:
    for row in sorted((r for r in evals if r.get("round")), key=lambda r: int(r["round"])):
        if row.get("test_accuracy", "") != "" and float(row["test_accuracy"]) >= target:
            return int(row["round"])
    return None


def _one(report: Report, algo: str, target: float) -> TargetResult:
    evals = sorted((r for r in report.where(algo=algo, kind="eval") if r.get("round")), key=lambda r: int(r["round"]))
    clients = [r for r in report.where(algo=algo, kind="client") if r.get("round")]
    last = evals[-1] if evals else {}
    reached = _first_reached(evals, target)
    energy = carbon = None
    if reached is not None:
        upto = [r for r in clients if int(r["round"]) <= reached]
        joules, grams = _floats(upto, "energy_j"), _floats(upto, "carbon_g")
        energy = sum(joules) if joules is not None else None
        carbon = sum(grams) if grams is not None else None
    per_round = report.values("energy_j", clients)
    return TargetResult(
        algo=algo, target=target, rounds=len(evals),
        final_loss=float(last["train_loss"]) if last.get("train_loss") else None,
        final_accuracy=float(last["test_accuracy"]) if last.get("test_accuracy") else None,
        median_client_round_j=statistics.median(per_round) if per_round else None,
        reached_round=reached, energy_j=energy, carbon_g=carbon,
        energy_method="+".join(sorted({r["energy_method"] for r in clients if r.get("energy_method")})) or "none",
        eval_protocol="+".join(sorted({r.get("eval_protocol") or "global" for r in evals})) or "global",
    )


def energy_to_target(report: Report, target: float) -> list[TargetResult]:
    """Per algorithm in the report (in order of appearance): outcome and client energy to ``target``."""
    algos = dict.fromkeys(r["algo"] for r in report.rows)
    return [_one(report, algo, target) for algo in algos]


def train_configs(base: RunConfig, algos: Sequence[str]) -> list[RunConfig]:
    """One config per algorithm, evaluation on; a run name ``<name>-<algo>`` keeps reports apart."""
    out = []
    for algo in algos:
        name = f"{base.run_name}-{algo}" if base.run_name else None
        out.append(dataclasses.replace(base, algo=algo, evaluate=True, run_name=name))
    return out


def _cell(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(results: Sequence[TargetResult]):
    """A rich Table: final loss and accuracy, median joules per client round, energy and carbon to target."""
    from rich.markup import escape
    from rich.table import Table

    target = results[0].target if results else 0.0
    protocols = "+".join(sorted({r.eval_protocol for r in results})) or "global"
    table = Table(title=f"training outcome and client energy to {target:.0%} test accuracy "
                        f"({protocols} evaluation protocol)")
    for name in ("algo", "rounds", "loss", "accuracy", "J/client round", "reached at", "client J to target",
                 "gCO2e to target", "method"):
        table.add_column(name, justify="left" if name in ("algo", "method") else "right", no_wrap=name == "algo")
    for r in results:
        if r.reached_round is None:
            reached = joules = grams = "not reached"
        else:
            reached, joules, grams = str(r.reached_round), _cell(r.energy_j, ".4g"), _cell(r.carbon_g, ".3g")
        table.add_row(escape(r.algo), str(r.rounds), _cell(r.final_loss, ".4g"), _cell(r.final_accuracy, ".2%"),
                      _cell(r.median_client_round_j, ".4g"), reached, joules, grams, escape(r.energy_method))
    return table
