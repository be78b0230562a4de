#!/usr/bin/env python
"""PFLEGO's numpy head steps with numpy's BLAS pinned to one thread (as edgeprof runs them) vs its default.

For local sets of N samples (M=200 features, K=2 classes, tau-1=24 steps at beta=0.189): the time of
:func:`edgeprof.nn.head.gradient_steps` (pinned) and of the same steps with OpenBLAS at its default thread
count (the machine's cores, or ``OPENBLAS_NUM_THREADS``), measured interleaved, best of ``--repeats``; and
whether the two heads are bitwise equal (OpenBLAS splits the sum over samples between its threads for large N).
Also the cost of entering and leaving the pin.

    python scripts/bench_head_blas.py [--sizes 67,600,1500,3000,6000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_info

from edgeprof.nn import head as headlib  # numpy only: no torch, no OpenMP pool to configure


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="67,600,1500,3000,6000")
    parser.add_argument("--features", type=int, default=200)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    default_threads = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"numpy BLAS default threads: {default_threads}; M={args.features}, K=2, {args.steps} steps\n")
    print("| N | pinned (1 thread) ms | default threads ms | default / pinned | bitwise equal |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.sizes.split(",")):
        feats_b = headlib.with_bias(np.maximum(rng.normal(size=(n, args.features)), 0).astype(np.float32))
        labels = rng.integers(0, 2, n)
        head = headlib.init_head(2, args.features, rng)
        pinned = lambda: headlib.gradient_steps(head, feats_b, labels, 0.189, args.steps)  # noqa: E731
        default = lambda: headlib._gradient_steps(head, feats_b, labels, 0.189, args.steps)  # noqa: E731
        pinned(), default()  # warm up
        t_pin, t_def = float("inf"), float("inf")
        for _ in range(args.repeats):  # interleaved, so that a load change hits both
            t_pin = min(t_pin, best_time(pinned, 1))
            t_def = min(t_def, best_time(default, 1))
        equal = np.array_equal(pinned(), default())
        print(f"| {n} | {1e3 * t_pin:.2f} | {1e3 * t_def:.2f} | {t_def / t_pin:.2f} | {'yes' if equal else 'no'} |")
    loops = 2000
    start = time.perf_counter()
    for _ in range(loops):
        with headlib.one_blas_thread():
            pass
    print(f"\nentering and leaving the pin: {1e6 * (time.perf_counter() - start) / loops:.0f} us")


if __name__ == "__main__":
    main()
