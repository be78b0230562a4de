#!/usr/bin/env python
"""Server-step seconds against the number of participating clients r (the paper: O(r |theta|)).

Builds PFLEGO (Adam server, equation (4)) and FedAvg (weighted average) over ``max(r)`` clients with the
chosen backbone, hands each server step r client updates of theta's shapes (seeded random values; the
step's cost does not depend on them), times it with the same profiler window ``measure`` uses, and prints
the median seconds per r and the least-squares slope (seconds per extra client, 95% interval) and
intercept from :func:`edgeprof.report.analysis.fit_line`. Values of r are interleaved (seeded order) over the
repeats so machine drift is spread across them.

    python scripts/bench_server_r.py [--rs 1,2,5,10,20,50] [--repeats 5] [--backbone cnn-omniglot]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def build(algo: str, backbone_name: str, clients: int):
    from edgeprof.config import RunConfig
    from edgeprof.data import ClientData
    from edgeprof.nn.backbones import default_input_shape
    from edgeprof.rounds.simulate import build_federation

    shape = default_input_shape(backbone_name)
    x = np.zeros((4, *shape), dtype=np.float32)
    y = np.array([0, 1, 0, 1])
    data = [ClientData(i, np.array([0, 1]), x, y, x[:2], y[:2]) for i in range(clients)]
    cfg = RunConfig(algo=algo, clients=clients, participation=1.0, dataset="synthetic", backbone=backbone_name,
                    progress=False).resolved()
    return build_federation(cfg, data)


def updates_for(algorithm, r: int, rng: np.random.Generator):
    from edgeprof.rounds.federation import ClientUpdate

    shapes = [a.shape for a in algorithm.global_arrays]
    return [ClientUpdate(i, 4, 0.0, [rng.standard_normal(s).astype(np.float32) * 1e-3 for s in shapes])
            for i in range(r)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rs", default="1,2,5,10,20,50")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from edgeprof.report.analysis import fit_line
    from edgeprof.meters.discovery import discover
    from edgeprof.measure.profiler import Profiler

    torch.set_num_threads(args.threads)
    rs = [int(r) for r in args.rs.split(",")]
    rng = np.random.default_rng(0)
    profiler = Profiler(discover())
    for algo in ("pflego", "fedavg"):
        algorithm = build(algo, args.backbone, max(rs))
        prepared = {r: updates_for(algorithm, r, rng) for r in rs}
        algorithm.server_step(prepared[rs[0]])  # warm-up
        cells = [r for r in rs for _ in range(args.repeats)]
        times: dict[int, list[float]] = {r: [] for r in rs}
        for i in rng.permutation(len(cells)):
            r = cells[i]
            with profiler.window("server") as win:
                algorithm.server_step(prepared[r])
            times[r].append(win.result.wall_s)
        fit = fit_line([float(r) for r in cells], [t for r in rs for t in times[r]])
        lo, hi = fit.ci_b
        n_theta = sum(a.size for a in algorithm.global_arrays)
        print(f"{algo}: server step, {args.backbone} (|theta| = {n_theta:,}), {args.repeats} repeats per r")
        for r in rs:
            print(f"  r = {r:3d}: median {statistics.median(times[r]) * 1e3:8.2f} ms")
        print(f"  fit: {fit.a * 1e3:.2f} ms + {fit.b * 1e3:.3f} ms per client [{lo * 1e3:.3f}, {hi * 1e3:.3f}]; "
              f"{fit.b / n_theta * 1e9:.2f} ns per client per parameter")


if __name__ == "__main__":
    main()
