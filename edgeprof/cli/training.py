"""What ``edgeprof train`` and ``edgeprof summary`` print of the energy to a target accuracy: the lists of taus and
seeds a run trains, the sidecar's account of the protocol, the per-(algorithm, tau) table over seeds and each
algorithm's energy-optimal tau (:mod:`edgeprof.report.to_target` computes them; docs/energy-to-target.md)."""

from __future__ import annotations

from typing import Callable, Optional

import typer

from edgeprof.errors import ConfigError, ReportError

#: what the sidecar of a ``train`` run says the energy to target is (docs/energy-to-target.md)
TO_TARGET_PROTOCOL = (
    "one report per (algorithm, tau, seed); to target = client rows of rounds 1..t*, t* the first round whose eval "
    "row has test_accuracy >= target (evaluation outside the measured windows); per (algorithm, tau) the median over "
    "seeds, an unreached seed counting as +inf (not reached unless more than half reached) and a 95% t interval of "
    "the mean when every seed reached")


def tau_and_seed_lists(given, taus: Optional[str], seeds: Optional[str],
                       parse: Callable[[str, type, str], tuple]) -> tuple[tuple, tuple]:
    """The ``--taus`` and ``--seeds`` lists (empty where not given); ConfigError with one line for ``--tau`` given
    with ``--taus`` (``--seed`` with ``--seeds``), and for a list that is empty or repeats a value."""
    for one, many in (("tau", "taus"), ("seed", "seeds")):
        if one in given and many in given:
            raise ConfigError(f"--{one} and --{many} both given; give one --{one} or a list in --{many}")
    tau_list = parse(taus, int, "taus") if taus is not None else ()
    seed_list = parse(seeds, int, "seeds") if seeds is not None else ()
    for name, values, text in (("taus", tau_list, taus), ("seeds", seed_list, seeds)):
        if text is not None and (not values or len(set(values)) != len(values)):
            raise ConfigError(f"--{name} must be a comma-separated list of distinct integers, got {text!r}")
    return tau_list, seed_list


def print_to_target(console, results, target: float, protocol: str, costs=None, always: bool = True) -> None:
    """The per-(algorithm, tau) table over seeds and each algorithm's energy-optimal tau (``costs``: projected)."""
    from edgeprof.report.to_target import cells, project, render, verdict_lines

    table = cells(results)
    if costs:
        table = [project(c, costs[c.algo]) if c.algo in costs and c.tau is not None else c for c in table]
    if always or costs:
        console.print(render(table, target, protocol))
        for line in verdict_lines(table):
            typer.echo(line)


def train_summary(read: list):
    """(results, target, protocol) of the to-target table of the reports whose sidecar has a ``train`` section, or
    None where none has; ReportError (exit 7) where they cannot make one table (several targets, a seed from two
    runs), found before anything is printed."""
    from edgeprof.report.to_target import cells, energy_to_target

    reports = [r for r in read if isinstance(r.sidecar, dict) and isinstance(r.sidecar.get("train"), dict)]
    if not reports:
        return None
    targets = {r.sidecar["train"].get("target_accuracy") for r in reports}
    target = targets.pop() if len(targets) == 1 else None
    if not isinstance(target, (int, float)) or isinstance(target, bool) or not 0 < target <= 1:
        raise ReportError("the train reports given name different or no target accuracies; give those of one run")
    protocol = "+".join(sorted({str(r.sidecar["train"].get("eval_protocol", "global")) for r in reports}))
    results = [res for r in reports for res in energy_to_target(r, float(target))]
    cells(results)  # a seed from two runs, refused here
    return results, float(target), protocol
