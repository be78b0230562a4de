"""What ``edgeprof train`` adds on top of a run: the energy to reach a target accuracy, and its table.

``edgeprof train`` runs each algorithm with ``evaluate=True`` through :func:`edgeprof.rounds.simulate.run`, one
report per algorithm (:func:`train_configs`); each report then holds, per round, the eval row
(equation (1)'s training loss and the test accuracy averaged over clients) and one row per client
round with its joules. :func:`energy_to_target` (in :mod:`edgeprof.report.to_target`, which also forms the
figures over seeds and taus) reads such a report back and answers the question
none of the papers does: how much client energy (and carbon) did the federation spend before the test
accuracy first reached the target? The sum runs over the client rows of rounds 1..t*, where t* is the
first round whose eval row has ``test_accuracy >= target``; server steps are not client energy and
are left out. Pure functions on a :class:`~edgeprof.report.writer.Report`: no run needed to test them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from edgeprof.config import RunConfig
from edgeprof.report.to_target import TargetResult, energy_to_target

__all__ = ["TargetResult", "energy_to_target", "render", "train_configs"]


def train_configs(base: RunConfig, algos: Sequence[str], taus: Sequence[int] = (),
                  seeds: Sequence[int] = ()) -> list[RunConfig]:
    """One config per (algorithm, tau, seed), evaluation on; ``taus`` / ``seeds`` default to ``base``'s one.

    A run name keeps reports apart: ``<name>-<algo>``, with ``-tau<tau>`` when more than one tau is trained and
    ``-seed<seed>`` when more than one seed is (one report per run, its seed in the sidecar's ``config.seed``).
    """
    taus, seeds = tuple(taus) or (base.tau,), tuple(seeds) or (base.seed,)
    out = []
    for algo in algos:
        for tau in taus:
            for seed in seeds:
                name = None
                if base.run_name:
                    name = (f"{base.run_name}-{algo}" + (f"-tau{tau}" if len(taus) > 1 else "")
                            + (f"-seed{seed}" if len(seeds) > 1 else ""))
                out.append(dataclasses.replace(base, algo=algo, tau=tau, seed=seed, evaluate=True, run_name=name))
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
