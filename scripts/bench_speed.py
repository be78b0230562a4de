#!/usr/bin/env python
"""Benchmark: wall seconds of a whole simulated PFLEGO federation, through `edgeprof measure`'s code path.

The setting of the paper's MNIST experiments, on the embedded digits data: 100 clients, 20%
participation (20 clients a round), 200 rounds, tau=50, the ``mlp`` backbone. It calls
:func:`edgeprof.rounds.simulate.run` (what ``edgeprof measure --no-progress`` calls) with the report written to
a temporary folder, prints the wall seconds of the whole run (set-up included: data, backbone, ONNX
export, meters) and the breakdown read back from the report: per phase, client rounds, server steps,
and the rest (profiler, report, set-up). Target on 2 cores: under 60 s.

    python scripts/bench_speed.py [--algo pflego] [--rounds 200] [--clients 100] [--tau 50] [--threads N]
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="pflego")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--participation", type=float, default=0.2)
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--target-s", type=float, default=60.0)
    args = parser.parse_args()

    from edgeprof.host import prefer_passive_openmp

    prefer_passive_openmp()  # before torch loads, as the CLI does
    from edgeprof.rounds.simulate import run
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.config import RunConfig
    from edgeprof.report.writer import read_report

    with tempfile.TemporaryDirectory() as out:
        cfg = RunConfig(algo=args.algo, tau=args.tau, rounds=args.rounds, clients=args.clients,
                        participation=args.participation, dataset="digits", backbone="mlp", out=out,
                        threads=args.threads, progress=False, run_name="bench-speed")
        start = time.perf_counter()
        result = run(cfg)
        wall = time.perf_counter() - start
        report = read_report(result.csv_path)

    clients, servers = report.where(kind="client"), report.where(kind="server")
    client_s, server_s = sum(report.values("wall_s", clients)), sum(report.values("wall_s", servers))
    print(f"{args.algo}: {args.clients} clients, {args.participation:.0%} participation, {args.rounds} rounds, "
          f"tau={args.tau}, digits/mlp, threads={args.threads or 'default'}")
    print(f"wall seconds, whole run: {wall:.1f} s (target < {args.target_s:.0f} s: "
          f"{'met' if wall < args.target_s else 'NOT met'})")
    print(f"  client rounds ({len(clients)}): {client_s:.2f} s")
    for phase in ALGORITHMS[args.algo].phases:
        print(f"    {phase:15s} {sum(report.values(f'{phase}_s', clients)):.2f} s")
    print(f"  server steps ({len(servers)}): {server_s:.2f} s")
    print(f"  rest (set-up, profiler, report): {wall - client_s - server_s:.2f} s")


if __name__ == "__main__":
    main()
