#!/usr/bin/env python
"""Reproduce the High-Pers column of the PFLEGO paper's Table 1 under both evaluation protocols.

Data: scikit-learn's 1,797 digits by default (28x28, the paper's ``mlp`` backbone for MNIST; the MNIST
column of Table 1 is printed beside it as the closest match), or the official MNIST / Fashion-MNIST IDX
files with ``--dataset mnist|fashion-mnist --data-dir DIR`` (nothing is downloaded; the matching column of
Table 1 is printed). Setting: High-Pers (K=2 classes per client), ``--clients`` clients, 20% participation,
the same T rounds and tau for every algorithm, every seed of ``--seeds``, hyperparameters from Table 6 (the
dataset's column; the documented fallbacks of ``edgeprof.algorithms.hyperparams`` where it has none). PFLEGO is run
twice: with Table 6's rho and with rho=0.001, the low end of the paper's own search grid
{0.001, 0.002, 0.003} (Appendix A.3), because Adam at 0.003 oscillates on a much smaller federation.

Protocols (``--protocol``, :mod:`edgeprof.rounds.evaluation`): ``global`` scores every client after the server step;
``paper`` (the authors' reference code, hence Table 1) scores the round's sampled clients right after their
local update, before the server step. One run's eval rows carry one protocol, so with ``both`` every
(variant, seed) is run once per protocol; each protocol runs with its own split unless ``--split`` names one:
``balanced`` for ``global``, ``paper`` (the reference code's class draw and test split, r = int(I*pi)) for
``paper``. Final accuracy, as in the paper: the mean test accuracy over the last ``--last`` rounds, then
mean +- standard deviation over seeds. Energy: the median client energy per client round over all runs of
the variant (evaluation lies outside the measured windows), and how it was obtained (``estimate`` on a
machine without energy counters). Every run goes through :func:`edgeprof.rounds.simulate.run` (its report is kept
under ``--out``; with ``--resume`` a complete report of the same run and settings already there is read instead);
``--jobs`` processes run side by side with one thread each.

    python scripts/reproduce_table1.py [--protocol both] [--split balanced|paper] [--dataset digits]
        [--data-dir DIR] [--algos pflego,fedavg] [--rounds 100] [--tau 25] [--clients 20] [--seeds 0,1,2]
        [--last 10] [--jobs 2] [--out profiles/table1] [--resume]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does

from edgeprof.errors import EdgeprofError  # noqa: E402
from edgeprof.algorithms.hyperparams import defaults

#: Table 1 of the PFLEGO paper, High-Pers (mean +- CI over the final 10 rounds), by dataset; an algorithm
#: missing from a column is not in Table 1
PAPER_TABLE1 = {
    "mnist": {"fedper": "97.88 ± 0.25", "fedavg": "97.54 ± 0.25", "fedprox": "97.50 ± 0.26",
              "ditto": "98.25 ± 0.12", "fedrep": "98.03 ± 0.23", "fedbabu": "97.19 ± 0.33",
              "pflego": "98.70 ± 0.21"},
    "fashion-mnist": {"fedper": "96.14 ± 0.35", "fedavg": "96.35 ± 0.47", "fedprox": "95.21 ± 0.48",
                      "ditto": "96.45 ± 0.47", "fedrep": "95.99 ± 0.38", "fedbabu": "95.68 ± 0.44",
                      "pflego": "96.34 ± 0.43"},
}
#: the column of Table 1 each dataset is compared with (digits: MNIST's, the closest match)
PAPER_COLUMN = {"digits": "mnist", "mnist": "mnist", "fashion-mnist": "fashion-mnist"}
COLUMN_TITLE = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}
DATASET_TITLE = {"digits": "digits (sklearn, 28x28)", "mnist": "MNIST (official IDX files)",
                 "fashion-mnist": "Fashion-MNIST (official IDX files)"}
DATASETS = tuple(PAPER_COLUMN)
PROTOCOLS = ("global", "paper")
#: the split each protocol runs with unless ``--split`` names one
DEFAULT_SPLIT = {"global": "balanced", "paper": "paper"}
ALGOS = ("pflego", "fedavg", "fedprox", "fedper", "fedrep", "fedbabu", "ditto", "fedrecon", "fedsim", "fedalt")
#: PFLEGO's second server step size: the low end of the paper's grid {0.001, 0.002, 0.003}
GRID_RHO = 0.001


@dataclass(frozen=True)
class Variant:
    """One row of the table: an algorithm with hyperparameter overrides."""

    label: str
    algo: str
    overrides: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Column:
    """One accuracy column: an evaluation protocol and the split its runs use."""

    protocol: str
    split: str


@dataclass(frozen=True)
class Cell:
    """What one (variant, column, seed) run gives: eval accuracies by round, client-round joules, energy method."""

    label: str
    protocol: str
    seed: int
    accuracies: tuple[float, ...]
    joules: tuple[float, ...]
    method: str


@dataclass(frozen=True)
class Row:
    """One printed row: accuracy % as (mean, std over seeds) by protocol (a protocol not run is absent)."""

    label: str
    paper: str
    accuracy: dict[str, tuple[float, float]]
    energy_j: Optional[float]
    method: str


def paper_column(dataset: str) -> tuple[str, dict[str, str]]:
    """(title, algorithm -> "mean ± CI") of the High-Pers column of Table 1 that ``dataset`` is compared with."""
    key = PAPER_COLUMN[dataset]
    return COLUMN_TITLE[key], PAPER_TABLE1[key]


def variants(dataset: str, algos: Sequence[str]) -> list[Variant]:
    """The rows for ``algos`` in :data:`ALGOS` order; PFLEGO twice (Table 6's rho, and :data:`GRID_RHO`)."""
    out = []
    for algo in (a for a in ALGOS if a in algos):
        if algo != "pflego":
            out.append(Variant(algo, algo))
            continue
        rho = defaults("pflego", dataset, "high")["rho"]
        out.append(Variant(f"pflego (rho={rho:g}, Table 6)", "pflego"))
        if rho != GRID_RHO:
            out.append(Variant(f"pflego (rho={GRID_RHO:g}, paper's grid)", "pflego", (("rho", GRID_RHO),)))
    return out


def columns(protocol: str, split: Optional[str]) -> list[Column]:
    """The accuracy columns ``--protocol`` asks for, each with ``split`` or its protocol's default split."""
    protocols = PROTOCOLS if protocol == "both" else (protocol,)
    return [Column(p, split or DEFAULT_SPLIT[p]) for p in protocols]


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=(*PROTOCOLS, "both"), default="both",
                        help="evaluation protocol(s); with both every (variant, seed) runs once per protocol")
    parser.add_argument("--split", choices=("balanced", "paper"), default=None,
                        help="data split of every run (default: balanced for global, paper for paper)")
    parser.add_argument("--dataset", choices=DATASETS, default="digits")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder with the official IDX files")
    parser.add_argument("--algos", default=",".join(ALGOS), help="comma-separated algorithms (pflego: both rows)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--tau", type=int, default=25)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--last", type=int, default=10, help="final rounds the accuracy is averaged over")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("profiles/table1"))
    parser.add_argument("--resume", action="store_true",
                        help="read a run's complete report already under --out (same name and settings) instead "
                             "of running it again")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parsed and checked options; ``algos`` and ``seeds`` become lists, ``columns`` and ``variants`` are added."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dataset == "digits" and args.data_dir is not None:
        parser.error("--data-dir needs --dataset mnist or fashion-mnist (digits is embedded)")
    if args.dataset != "digits" and args.data_dir is None:
        parser.error(f"--dataset {args.dataset} needs --data-dir pointing at its official IDX files")
    args.algos = _comma_list(args.algos)
    unknown = [a for a in args.algos if a not in ALGOS]
    if unknown or not args.algos:
        parser.error(f"--algos: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ALGOS)}")
    try:
        args.seeds = [int(s) for s in _comma_list(args.seeds)]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seeds:
        parser.error("--seeds: give at least one seed")
    for name in ("last", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    args.columns = columns(args.protocol, args.split)
    args.variants = variants(args.dataset, args.algos)
    return args


def run_name(dataset: str, variant: Variant, column: Column, seed: int) -> str:
    over = "".join(f"-{k}{v:g}" for k, v in variant.overrides)
    return f"table1-{dataset}-{variant.algo}{over}-{column.protocol}-{column.split}-s{seed}"


def finished(sidecar: dict, settings: dict) -> bool:
    """Whether a run's sidecar says it completed with exactly ``settings`` (a resolved RunConfig's ``to_dict``)."""
    return sidecar.get("status") == "complete" and sidecar.get("config") == settings


def previous_report(cfg) -> Optional[Path]:
    """The CSV of an earlier complete run of ``cfg`` under ``cfg.out`` (``--resume``), or None."""
    import json

    sidecar, csv = (Path(cfg.out) / f"{cfg.run_name}{ext}" for ext in (".json", ".csv"))
    try:
        done = finished(json.loads(sidecar.read_text()), cfg.resolved().to_dict())
    except (OSError, ValueError):
        return None
    return csv if done and csv.is_file() else None


def run_cell(variant: Variant, column: Column, seed: int, args) -> Cell:
    """One (variant, column, seed) run through :func:`edgeprof.rounds.simulate.run` (or its earlier report: ``--resume``)."""
    from edgeprof.config import RunConfig
    from edgeprof.report.writer import read_report
    from edgeprof.rounds.simulate import run

    cfg = RunConfig(algo=variant.algo, tau=args.tau, rounds=args.rounds, clients=args.clients, participation=0.2,
                    dataset=args.dataset, data_dir=args.data_dir, degree="high", split=column.split,
                    backbone="mlp", seed=seed, out=args.out, threads=1, evaluate=True,
                    eval_protocol=column.protocol, progress=False,
                    run_name=run_name(args.dataset, variant, column, seed), **dict(variant.overrides))
    report = read_report((args.resume and previous_report(cfg)) or run(cfg).csv_path)
    evals = sorted(report.where(kind="eval", eval_protocol=column.protocol), key=lambda r: int(r["round"]))
    clients = report.where(kind="client")
    method = "+".join(sorted({r["energy_method"] for r in clients if r["energy_method"]})) or "none"
    return Cell(variant.label, column.protocol, seed, tuple(report.values("test_accuracy", evals)),
                tuple(report.values("energy_j", clients)), method)


def final_accuracy(accuracies: Sequence[float], last: int) -> float:
    """The paper's final accuracy of one run, in %: the mean over its last ``last`` rounds."""
    return 100 * statistics.fmean(accuracies[-last:])


def summarize(cells: Sequence[Cell], variant_list: Sequence[Variant], column_list: Sequence[Column],
              paper: dict[str, str], last: int) -> list[Row]:
    """One :class:`Row` per variant from the runs' cells (mean and std over seeds; std 0 with one seed)."""
    rows = []
    for v in variant_list:
        mine = [c for c in cells if c.label == v.label]
        accuracy = {}
        for col in column_list:
            finals = [final_accuracy(c.accuracies, last) for c in mine if c.protocol == col.protocol and c.accuracies]
            if finals:
                accuracy[col.protocol] = (statistics.fmean(finals),
                                          statistics.stdev(finals) if len(finals) > 1 else 0.0)
        joules = [j for c in mine for j in c.joules]
        methods = sorted({m for c in mine for m in c.method.split("+") if m != "none"})
        rows.append(Row(v.label, paper.get(v.algo, "-"), accuracy, statistics.median(joules) if joules else None,
                        "+".join(methods) or "none"))
    return rows


def format_table(rows: Sequence[Row], column_list: Sequence[Column], paper_title: str, setting: str) -> str:
    """The Markdown table: paper's value, one accuracy column per protocol, median J per client round, method."""
    heads = [f"{c.protocol} protocol, {c.split} split" for c in column_list]
    lines = [setting, "", "| algorithm | paper, " + paper_title + " High-Pers | " + " | ".join(heads)
             + " | median J / client round | energy method |",
             "|---" * (len(heads) + 4) + "|"]
    for row in rows:
        accs = [f"{row.accuracy[c.protocol][0]:.2f} ± {row.accuracy[c.protocol][1]:.2f}"
                if c.protocol in row.accuracy else "-" for c in column_list]
        energy = f"{row.energy_j:.3g}" if row.energy_j is not None else "-"
        lines.append(f"| {row.label} | {row.paper} | " + " | ".join(accs) + f" | {energy} | {row.method} |")
    return "\n".join(lines)


def setting_line(args) -> str:
    """The sentence above the table: data, federation, rounds and how accuracy is summarised."""
    return (f"{DATASET_TITLE[args.dataset]}, High-Pers K=2, {args.clients} clients, 20% participation, "
            f"T={args.rounds}, tau={args.tau}, mlp, seeds {','.join(map(str, args.seeds))}; accuracy % = mean of "
            f"the last {args.last} rounds, mean ± std over seeds")


def check_data(args) -> None:
    """Fail before any run when the IDX files under ``--data-dir`` cannot be read (EdgeprofError)."""
    if args.dataset != "digits":
        from edgeprof.data import load_dataset

        load_dataset(args.dataset, data_dir=args.data_dir)


def run_all(args) -> list[Cell]:
    """Every (variant, column, seed) run, ``--jobs`` at a time; the slow baselines first, so workers end together."""
    todo = [(v, c, s) for v in args.variants for c in args.columns for s in args.seeds]
    todo.sort(key=lambda t: t[0].algo in ("pflego", "fedrecon"))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_cell, *t, args) for t in todo]
        return [f.result() for f in futures]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        check_data(args)
        cells = run_all(args)
    except (EdgeprofError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return getattr(err, "exit_code", 1)
    title, paper = paper_column(args.dataset)
    rows = summarize(cells, args.variants, args.columns, paper, args.last)
    print(format_table(rows, args.columns, title, setting_line(args)))
    print(f"\n{len(cells)} runs in {time.perf_counter() - start:.0f} s; reports under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
