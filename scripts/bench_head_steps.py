#!/usr/bin/env python
"""PFLEGO's tau-1 head steps: numpy on the host (one BLAS thread) against torch on a device, side by side.

The evidence for the rule :attr:`edgeprof.nn.compute.DeviceKind.head_on_device` (``edgeprof.nn.head.steps_for``):
on the CPU the head runs in numpy, on a CUDA GPU in torch on the device. For local sets of N samples with the
cached features of ``--backbone`` (M features plus the bias column, K classes), this times, interleaved, best of
``--repeats``: :func:`edgeprof.nn.head.gradient_steps` on host arrays, and
:func:`edgeprof.nn.head.device_gradient_steps` on the device, each from host features to a host head (what a
round pays: on a device, the features' copy there and the head's copy back), and prints torch/numpy per N.

    python scripts/bench_head_steps.py [--device cpu|cuda] [--sizes 150,600,2400] [--steps 49] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from edgeprof.nn import head as headlib
from edgeprof.nn.backbones import build_backbone
from edgeprof.nn.compute import resolve


def best_of(fn, repeats: int, sync) -> float:
    fn()  # warm-up: kernels, caches
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def measure(device: str, backbone: str = "cnn-omniglot", sizes=(150, 600, 2400), classes: int = 5,
            steps: int = 49, repeats: int = 5, threads=None) -> dict:
    """The rule for ``device``'s kind and, per local set size N, the best-of-``repeats`` seconds of the head steps
    in numpy on the host and in torch on the device (interleaved)."""
    module = build_backbone(backbone)
    compute = resolve(device, "contiguous:all", module, threads)
    m = module.feature_dim
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        feats_b = headlib.with_bias(rng.random((n, m), dtype=np.float32))
        labels = rng.integers(0, classes, n)
        head = headlib.init_head(classes, m, rng)
        host = best_of(lambda: headlib.gradient_steps(head, feats_b, labels, 0.1, steps), repeats, compute.sync)
        on_device = best_of(lambda: headlib.device_gradient_steps(compute, head, feats_b, labels, 0.1, steps),
                            repeats, compute.sync)
        rows.append({"n": n, "numpy_s": host, "torch_s": on_device, "torch_over_numpy": on_device / host})
    return {"device": compute.device, "backbone": backbone, "features": m, "classes": classes, "steps": steps,
            "rule": "torch on the device" if compute.kind.head_on_device else "numpy on the host", "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--sizes", default="150,600,2400")
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--steps", type=int, default=49, help="tau-1 (default 49: tau=50)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    result = measure(args.device, args.backbone, tuple(int(s) for s in args.sizes.split(",")), args.classes,
                     args.steps, args.repeats, args.threads)
    print(f"{args.steps} head steps, M={result['features']} features ({args.backbone}), K={args.classes}; "
          f"device {result['device']}; the rule for it: {result['rule']}")
    print(f"{'N':>6}{'numpy s':>11}{'torch s':>11}{'torch/numpy':>13}")
    for row in result["rows"]:
        print(f"{row['n']:>6}{row['numpy_s']:>11.4f}{row['torch_s']:>11.4f}{row['torch_over_numpy']:>12.2f}x")


if __name__ == "__main__":
    main()
