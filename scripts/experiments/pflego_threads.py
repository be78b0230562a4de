#!/usr/bin/env python
"""PFLEGO at Table 6's rho=0.003 on digits with 1 and 2 threads, side by side: final accuracy per seed and protocol.

Setting of ``edgeprof train --algos pflego --dataset digits --degree high --clients 20 --tau 25 --rounds 100
--backbone mlp --seed S --threads T``: every cell is one :func:`edgeprof.rounds.simulate.run` with ``evaluate=True``
in a fresh process (so that each thread count is set before torch and ONNX Runtime start, as in the CLI),
one cell at a time. For each seed and evaluation protocol (:data:`edgeprof.algorithms.contract.EVAL_PROTOCOLS`) it prints
the final test accuracy and the mean over the last ``--last`` rounds for every thread count, and whether the
runs are the same run: ``identical`` when every per-round eval row (training loss and accuracy, 6 significant
digits) and the final accuracy agree across the thread counts. ``--capabilities default,avx2`` adds torch's
kernel families (``ATEN_CPU_CAPABILITY``) as further columns, and whether they agree: the same seed under a
different float32 rounding.

    python scripts/experiments/pflego_threads.py [--seeds 0,1,2] [--threads 1,2] [--rounds 100]
                                                 [--capabilities default,avx2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_cell(spec: dict) -> dict:
    """One run (in this process): final and last-k accuracy, a fingerprint of its eval rows, what it ran on."""
    from edgeprof.host import prefer_passive_openmp

    prefer_passive_openmp()  # before torch loads
    from edgeprof.config import RunConfig
    from edgeprof.report.writer import read_report
    from edgeprof.rounds.simulate import run

    start = time.perf_counter()
    cfg = RunConfig(algo="pflego", dataset="digits", degree="high", backbone="mlp", participation=0.2,
                    clients=spec["clients"], tau=spec["tau"], rounds=spec["rounds"], seed=spec["seed"],
                    threads=spec["threads"], rho=spec["rho"], evaluate=True, eval_protocol=spec["protocol"],
                    progress=False, out=Path(spec["out"]), run_name=spec["name"])
    report = read_report(run(cfg).csv_path)
    evals = sorted(report.where(kind="eval"), key=lambda r: int(r["round"]))
    acc = report.values("test_accuracy", evals)
    rows = "\n".join(f"{r['round']},{r['train_loss']},{r['test_accuracy']}" for r in evals)
    import numpy as np
    import torch
    from threadpoolctl import threadpool_info

    return {"final": 100 * acc[-1], "last": 100 * statistics.fmean(acc[-spec["last"]:]),
            "rows_sha": hashlib.sha256(rows.encode()).hexdigest()[:12], "wall_s": time.perf_counter() - start,
            "torch_threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
            "blas_threads": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"],
            "numpy": np.__version__}


def cell(spec: dict, capability: str | None) -> dict:
    """:func:`run_cell` in a fresh interpreter (``ATEN_CPU_CAPABILITY`` set when ``capability`` is given)."""
    env = dict(os.environ)
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    out = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def columns(args) -> list[tuple[str | None, int]]:
    caps = [c or None for c in args.capabilities.split(",")] if args.capabilities else [None]
    return [(cap, t) for cap in caps for t in args.threads]


def label(cap: str | None, threads: int) -> str:
    return f"{threads} thread{'s' if threads > 1 else ''}" + (f", {cap}" if cap else "")


def same(cells: list[dict]) -> bool:
    """Whether runs are the same run: equal eval rows (every round) and equal final accuracy."""
    return len({(c["rows_sha"], round(c["final"], 6)) for c in cells}) == 1


def print_table(protocol: str, args, results: dict) -> None:
    cols = columns(args)
    caps = list(dict.fromkeys(cap for cap, _ in cols))
    print(f"\nprotocol {protocol}: final test accuracy % (mean of the last {args.last} rounds)\n")
    extra = " | same rows across kernels?" if len(caps) > 1 else ""
    print("| seed | " + " | ".join(label(*c) for c in cols) + " | same rows across threads?" + extra + " |")
    print("|---|" + "---|" * (len(cols) + 1 + bool(extra)))
    for seed in args.seeds:
        cells = {c: results[(protocol, seed, *c)] for c in cols}
        body = " | ".join(f"{r['final']:.2f} ({r['last']:.2f})" for r in cells.values())
        by_cap = [same([cells[(cap, t)] for t in args.threads]) for cap in caps]
        threads = "identical" if all(by_cap) else "differ"
        kernels = (" | " + ("identical" if same([cells[(cap, args.threads[0])] for cap in caps]) else "differ")
                   if extra else "")
        print(f"| {seed} | {body} | {threads}{kernels} |")
    summary = []
    for c in cols:
        finals = [results[(protocol, s, *c)]["final"] for s in args.seeds]
        lasts = [results[(protocol, s, *c)]["last"] for s in args.seeds]
        sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)
        summary.append(f"{statistics.fmean(finals):.2f} ± {sd(finals):.2f} "
                       f"({statistics.fmean(lasts):.2f} ± {sd(lasts):.2f})")
    print("| mean ± std | " + " | ".join(summary) + " |" + (" |" if extra else "") + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--protocols", default=None, help="default: every one in edgeprof.algorithms.contract.EVAL_PROTOCOLS")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--tau", type=int, default=25)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rho", type=float, default=None, help="default: Table 6 (0.003)")
    parser.add_argument("--last", type=int, default=10)
    parser.add_argument("--capabilities", default="", help="torch kernel families to add, e.g. default,avx2")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(run_cell(json.loads(args.cell))))
        return
    from edgeprof.algorithms.contract import EVAL_PROTOCOLS

    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.threads = [int(t) for t in args.threads.split(",")]
    protocols = args.protocols.split(",") if args.protocols else list(EVAL_PROTOCOLS)
    start = time.perf_counter()
    results, walls = {}, {}
    with tempfile.TemporaryDirectory(prefix="pflego-threads-") as out:
        for protocol in protocols:
            for seed in args.seeds:
                for cap, threads in columns(args):
                    spec = {"seed": seed, "threads": threads, "protocol": protocol, "rounds": args.rounds,
                            "tau": args.tau, "clients": args.clients, "rho": args.rho, "last": args.last,
                            "out": out, "name": f"{protocol}-s{seed}-t{threads}-{cap}"}
                    res = results[(protocol, seed, cap, threads)] = cell(spec, cap)
                    walls.setdefault((cap, threads), []).append(res["wall_s"])
    caps = sorted({r["capability"] for r in results.values()})
    blas = sorted({str(r["blas_threads"]) for r in results.values()})
    print(f"PFLEGO, digits High-Pers, {args.clients} clients, 20% participation, T={args.rounds}, tau={args.tau}, "
          f"mlp, rho={args.rho or 'Table 6'}; torch kernels {', '.join(caps)}; numpy BLAS threads outside the "
          f"head {', '.join(blas)} (one inside it)")
    for protocol in protocols:
        print_table(protocol, args, results)
    print("\nmedian wall time per run: " + ", ".join(f"{label(*c)} {statistics.median(w):.1f} s"
                                                     for c, w in walls.items()))
    print(f"{len(results)} runs in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
