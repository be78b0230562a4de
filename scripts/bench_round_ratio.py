#!/usr/bin/env python
"""Benchmark: FedAvg / PFLEGO client-round time at tau=50, measured side by side in one run.

Setting of the paper's Table 3 comparison, scaled to one device: the ``cnn-omniglot`` backbone, one client
with 600 local 28x28 training images (synthetic, seeded), 2 threads. Rounds of the two algorithms are
interleaved (PFLEGO, FedAvg, PFLEGO, ...) after a warm-up, each inside the same profiler window the
``measure`` command uses; the script prints the per-round medians, the per-phase split and the ratio, for
each execution plan of ``--executions`` (both algorithms always run the same plan: the ratio is never taken
with one side slowed; ``contiguous:all`` is edgeprof's path before plans), with the ratio of the geometric
means and its 95% interval (Welch t on the log round times: :func:`edgeprof.report.analysis.ratio_of_means`).
For PFLEGO's joint gradient and cached forward it prints the achieved GFLOP/s against a measured sgemm and the
CPU's FP32 peak (FLOPs counted from the backbone, peak from vector width, FMA units, cores and clock; one line per
rate, never above 100% without why: :func:`edgeprof.hardware.rate_line`). Then PFLEGO's round at tau =
``--growth-taus`` (its time should not grow with tau). A ratio is what this script reports: absolute
seconds depend on the machine and its load (printed first).

    python scripts/bench_round_ratio.py [--tau 50] [--repeats 3] [--samples 600] [--threads 2] [--backbone NAME]
                                        [--executions auto,contiguous:all] [--growth-taus 5,100] [--ghz GHZ]

``--backbone`` takes anything ``edgeprof measure --backbone`` does (a torchvision name, ``module:factory``);
the images then come in that backbone's shape (README, "Your own backbone").
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does


def make_client(samples: int, seed: int, backbone: str = "cnn-omniglot"):
    from edgeprof.data import ClientData, load_dataset
    from edgeprof.nn.backbones import input_shape_for

    data = load_dataset("synthetic", shape=input_shape_for(backbone, "synthetic"), seed=seed, synthetic_classes=5,
                        synthetic_samples=samples)
    x = data.x
    classes = np.unique(data.y)
    local = np.searchsorted(classes, data.y)
    return ClientData(0, classes, x, local, x[:5], local[:5])


def build(algo: str, client, tau: int, threads: int, backbone: str = "cnn-omniglot", execution: str = "auto"):
    from edgeprof.config import RunConfig
    from edgeprof.rounds.simulate import build_federation

    cfg = RunConfig(algo=algo, tau=tau, clients=1, participation=1.0, dataset="synthetic",
                    backbone=backbone, threads=threads, progress=False, execution=execution).resolved()
    return build_federation(cfg, [client])


def timed_round(profiler, algorithm, settings=None) -> tuple[float, dict, float]:
    with profiler.window("client") as win:
        algorithm.client_round(0, win.phase, settings)
    algorithm.server_step([])
    return win.result.wall_s, {k: v.wall_s for k, v in win.result.phases.items()}, win.result.overhead_s


def interleaved_rounds(profiler, algos: dict, repeats: int, settings: dict | None = None):
    """Per algorithm: the round walls, phase splits and profiler overheads of ``repeats`` interleaved rounds,
    after one warm-up round each at tau=1 (first ONNX session, first torch kernels)."""
    settings = settings or {}
    for name, algorithm in algos.items():
        timed_round(profiler, algorithm, dataclasses.replace(settings.get(name, algorithm.settings), tau=1))
    walls: dict[str, list[float]] = {n: [] for n in algos}
    phases: dict[str, list[dict]] = {n: [] for n in algos}
    overheads: dict[str, list[float]] = {n: [] for n in algos}
    for _ in range(repeats):
        for name, algorithm in algos.items():
            wall, split, overhead = timed_round(profiler, algorithm, settings.get(name))
            walls[name].append(wall)
            overheads[name].append(overhead)
            phases[name].append(split)
    return walls, phases, overheads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--executions", default="auto,contiguous:all",
                        help="execution plans to compare, each run by both algorithms")
    parser.add_argument("--growth-taus", default="5,100", help="PFLEGO taus for the growth check ('' to skip)")
    parser.add_argument("--ghz", type=float, default=None, help="clock for the FP32 peak (default: as /proc says)")
    args = parser.parse_args()

    import torch

    from edgeprof.hardware import count_flops, roofs
    from edgeprof.meters.discovery import discover
    from edgeprof.nn.backbones import build_backbone, input_shape_for
    from edgeprof.measure.profiler import Profiler
    from edgeprof.report.analysis import ratio_of_means

    torch.set_num_threads(args.threads)
    roof = roofs(threads=args.threads, ghz=args.ghz)
    client = make_client(args.samples, seed=0, backbone=args.backbone)
    shape = input_shape_for(args.backbone, "synthetic")
    flops = count_flops(build_backbone(args.backbone, shape), shape, batch=len(client.y_train))
    profiler = Profiler(discover())
    print(f"{args.backbone}, {args.samples} local samples {'x'.join(map(str, shape))}, tau={args.tau}, "
          f"{args.threads} threads, {args.repeats} interleaved repeats")
    for line in roof.lines():
        print(line)
    ratios = {}
    for execution in [e for e in args.executions.split(",") if e]:
        algos = {name: build(name, client, args.tau, args.threads, args.backbone, execution)
                 for name in ("pflego", "fedavg")}
        start = time.perf_counter()
        walls, phases, overheads = interleaved_rounds(profiler, algos, args.repeats)
        med = {n: statistics.median(w) for n, w in walls.items()}
        plan = algos["pflego"].runtime.compute.plan
        print(f"\nexecution {execution!r} -> {plan.spec} ({plan.source}); {time.perf_counter() - start:.0f} s")
        for name in algos:
            split = {k: statistics.median(p[k] for p in phases[name]) for k in phases[name][0]}
            parts = ", ".join(f"{k} {v:.3f} s" for k, v in split.items())
            share = sum(overheads[name]) / sum(walls[name])
            print(f"  {name:7s} median round {med[name]:8.3f} s   (all: {', '.join(f'{w:.3f}' for w in walls[name])})"
                  f"  [{parts}]; profiler overhead {share:.4%}")
            if name == "pflego":
                print(f"  joint gradient: {roof.rate(flops.train, split['joint_grad'])}")
                print(f"  cached forward: {roof.rate(flops.forward, split['cache_forward'])}")
        ratios[plan.spec] = med["fedavg"] / med["pflego"]
        spread = ratio_of_means(walls["fedavg"], walls["pflego"])
        interval = "" if spread.lo is None else f", 95% interval [{spread.lo:.2f}, {spread.hi:.2f}]"
        print(f"  FedAvg/PFLEGO per-round time ratio at tau={args.tau}, both {plan.spec}: {ratios[plan.spec]:.1f}x "
              f"(medians; of geometric means {spread.value:.2f}x{interval}, {args.repeats} rounds each)")

    taus = [int(t) for t in args.growth_taus.split(",") if t]
    if taus:
        fed = build("pflego", client, max(taus), args.threads, args.backbone, args.executions.split(",")[0])
        named = {f"tau={t}": dataclasses.replace(fed.settings, tau=t) for t in taus}
        walls, _, _ = interleaved_rounds(profiler, {n: fed for n in named}, args.repeats, named)
        med = {n: statistics.median(w) for n, w in walls.items()}
        print(f"\nPFLEGO round against tau ({fed.runtime.compute.plan.spec}): "
              + ", ".join(f"{n} {v:.3f} s" for n, v in med.items()))
        first, last = med[f"tau={taus[0]}"], med[f"tau={taus[-1]}"]
        print(f"  growth tau {taus[0]} -> {taus[-1]}: {100 * (last / first - 1):+.1f}% (target < 10%)")


if __name__ == "__main__":
    main()
