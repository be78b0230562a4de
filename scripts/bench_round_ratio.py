#!/usr/bin/env python
"""Benchmark: FedAvg / PFLEGO client-round time at tau=50, measured side by side in one run.

Setting of the paper's Table 3 comparison, scaled to one device: the ``cnn-omniglot`` backbone, one client
with 600 local 28x28 training images (synthetic, seeded), 2 threads. Rounds of the two algorithms are
interleaved (PFLEGO, FedAvg, PFLEGO, ...) after a warm-up, each inside the same profiler window the
``measure`` command uses; the script prints the per-round medians, the per-phase split and the ratio.
A ratio is what this script reports: absolute seconds depend on the machine and its load.

    python scripts/bench_round_ratio.py [--tau 50] [--repeats 3] [--samples 600] [--threads 2] [--backbone NAME]

``--backbone`` takes anything ``edgeprof measure --backbone`` does (a torchvision name, ``module:factory``);
the images then come in that backbone's shape (README, "Your own backbone").
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np


def make_client(samples: int, seed: int, backbone: str = "cnn-omniglot"):
    from edgeprof.data import ClientData, load_dataset
    from edgeprof.nn.backbones import input_shape_for

    data = load_dataset("synthetic", shape=input_shape_for(backbone, "synthetic"), seed=seed, synthetic_classes=5,
                        synthetic_samples=samples)
    x = data.x
    classes = np.unique(data.y)
    local = np.searchsorted(classes, data.y)
    return ClientData(0, classes, x, local, x[:5], local[:5])


def build(algo: str, client, tau: int, threads: int, backbone: str = "cnn-omniglot"):
    from edgeprof.config import RunConfig
    from edgeprof.simulate import build_federation

    cfg = RunConfig(algo=algo, tau=tau, clients=1, participation=1.0, dataset="synthetic",
                    backbone=backbone, threads=threads, progress=False).resolved()
    return build_federation(cfg, [client])


def timed_round(profiler, algorithm, settings=None) -> tuple[float, dict, float]:
    with profiler.window("client") as win:
        algorithm.client_round(0, win.phase, settings)
    algorithm.server_step([])
    return win.result.wall_s, {k: v.wall_s for k, v in win.result.phases.items()}, win.result.overhead_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backbone", default="cnn-omniglot")
    args = parser.parse_args()

    import torch

    from edgeprof.meters.discovery import discover
    from edgeprof.profiler import Profiler

    torch.set_num_threads(args.threads)
    client = make_client(args.samples, seed=0, backbone=args.backbone)
    algos = {name: build(name, client, args.tau, args.threads, args.backbone) for name in ("pflego", "fedavg")}
    profiler = Profiler(discover())
    for algorithm in algos.values():  # warm-up at tau=1: first ONNX session, first torch kernels
        timed_round(profiler, algorithm, dataclasses.replace(algorithm.settings, tau=1))
    walls: dict[str, list[float]] = {n: [] for n in algos}
    phases: dict[str, list[dict]] = {n: [] for n in algos}
    overheads: dict[str, list[float]] = {n: [] for n in algos}
    start = time.perf_counter()
    for _ in range(args.repeats):
        for name, algorithm in algos.items():
            wall, split, overhead = timed_round(profiler, algorithm)
            walls[name].append(wall)
            overheads[name].append(overhead)
            phases[name].append(split)
    med = {n: statistics.median(w) for n, w in walls.items()}
    shape = "x".join(map(str, client.x_train.shape[1:]))
    print(f"{args.backbone}, {args.samples} local samples {shape}, tau={args.tau}, {args.threads} threads, "
          f"{args.repeats} interleaved repeats ({time.perf_counter() - start:.0f} s)")
    for name in algos:
        split = {k: statistics.median(p[k] for p in phases[name]) for k in phases[name][0]}
        parts = ", ".join(f"{k} {v:.3f} s" for k, v in split.items())
        share = sum(overheads[name]) / sum(walls[name])
        print(f"  {name:7s} profiler overhead {share:.4%} of the round's wall time")
        print(f"  {name:7s} median round {med[name]:8.3f} s   (all: {', '.join(f'{w:.3f}' for w in walls[name])})  [{parts}]")
    print(f"FedAvg/PFLEGO per-round time ratio at tau={args.tau}: {med['fedavg'] / med['pflego']:.1f}x")


if __name__ == "__main__":
    main()
