#!/usr/bin/env python
"""Benchmark: PFLEGO's round time per local image from 150 to 2,400 images, on a quiet and on a loaded machine.

One client per size N (synthetic, seeded, the backbone's shape), PFLEGO with the onnx engine at ``--tau``. Each
repeat runs one round of every size in turn (interleaved), with a real server step after each so that theta
changes between rounds as in a run (the ONNX session is rebuilt inside the round's cache_forward, as it is in a
run). The medians per image and per phase are printed for each execution plan of ``--executions`` (by default
the plan ``auto`` resolves to, and ``contiguous:all``, edgeprof's path before plans), first on the machine as it
is ("quiet"), then while ``--load-procs`` busy processes (default: one per core) spin beside it ("loaded").
The spread, max/min of the per-image medians, is the figure to watch (target: within 15%, i.e. at most 1.15),
for the wall time and for the CPU time of the round (what the energy estimate charges; under load the wall time
also holds the time the scheduler gave the busy processes).

    python scripts/bench_linear_data.py [--sizes 150,300,600,1200,2400] [--tau 50] [--repeats 3] [--threads 2]
                                        [--executions auto,contiguous:all] [--load-procs N] [--loads quiet,loaded]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does


def _spin(stop) -> None:
    """A busy process: pure-Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x = (x + i * i) % 1_000_003


def measure(sizes, clients, tau: int, threads: int, backbone: str, execution: str, repeats: int):
    """Median seconds per image of the whole round (wall and CPU) and of each phase (wall), per size."""
    from bench_round_ratio import build

    from edgeprof.meters.discovery import discover
    from edgeprof.measure.profiler import Profiler

    profiler = Profiler(discover())
    feds = {n: build("pflego", clients[n], tau, threads, backbone, execution) for n in sizes}
    walls: dict[int, list[float]] = {n: [] for n in sizes}
    cpus: dict[int, list[float]] = {n: [] for n in sizes}
    phases: dict[int, list[dict]] = {n: [] for n in sizes}
    for rep in range(repeats + 1):  # the first pass warms up
        for n, fed in feds.items():
            with profiler.window("client") as win:
                update = fed.client_round(0, win.phase)
            fed.server_step([update])
            if rep:
                walls[n].append(win.result.wall_s)
                cpus[n].append(win.result.cpu_s)
                phases[n].append({k: v.wall_s for k, v in win.result.phases.items()})
    plan = next(iter(feds.values())).runtime.compute.plan.spec
    per_image = {n: statistics.median(walls[n]) / n for n in sizes}
    cpu_per_image = {n: statistics.median(cpus[n]) / n for n in sizes}
    split = {n: {k: statistics.median(p[k] for p in phases[n]) / n for k in phases[n][0]} for n in sizes}
    return plan, per_image, cpu_per_image, split


def report(label: str, plan: str, per_image: dict, cpu_per_image: dict, split: dict) -> None:
    spread = max(per_image.values()) / min(per_image.values())
    cpu_spread = max(cpu_per_image.values()) / min(cpu_per_image.values())
    print(f"  {label}, {plan}: spread (max/min per image; target <= 1.15) wall {spread:.2f}, CPU {cpu_spread:.2f}")
    for n, us in per_image.items():
        parts = ", ".join(f"{k} {1e6 * v:.0f}" for k, v in split[n].items())
        print(f"    N={n:5d}  wall {1e6 * us:6.0f} us per image  [{parts}]  CPU {1e6 * cpu_per_image[n]:6.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="150,300,600,1200,2400")
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--executions", default="auto,contiguous:all")
    parser.add_argument("--load-procs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--loads", default="quiet,loaded", help="which of quiet, loaded to measure")
    args = parser.parse_args()

    import torch

    from bench_round_ratio import make_client

    torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    clients = {n: make_client(n, seed=0, backbone=args.backbone) for n in sizes}
    print(f"PFLEGO round per image, {args.backbone}, tau={args.tau}, {args.threads} threads, "
          f"{args.repeats} interleaved repeats; load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    wanted = args.loads.split(",")
    loads = [(label, procs) for key, label, procs in (("quiet", "quiet", 0), ("loaded", f"loaded by "
              f"{args.load_procs} busy processes", args.load_procs)) if key in wanted]
    for label, procs in loads:
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(procs)]
        for w in workers:
            w.start()
        try:
            for execution in [e for e in args.executions.split(",") if e]:
                report(label, *measure(sizes, clients, args.tau, args.threads, args.backbone, execution,
                                       args.repeats))
        finally:
            stop.set()
            for w in workers:
                w.join()


if __name__ == "__main__":
    main()
