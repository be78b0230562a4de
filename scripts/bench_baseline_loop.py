#!/usr/bin/env python
"""Benchmark: FedAvg's client round through edgeprof against a plain PyTorch loop at its best, side by side.

Issue 35, item 4: a baseline is never slower than what a user would write. One client with ``--samples`` seeded
synthetic images of the backbone's shape; both sides do the same work on the same device and data: load the
global weights into the model, ``--tau`` full-batch SGD steps (step 0.05), read the new weights and the first
step's loss back to the host. edgeprof's side is :func:`edgeprof.algorithms.fedavg.client_round` (foreach
updates, the loss read once a round, the weights in one transfer); the plain side is the loop a user writes at its
best: the data placed once, ``torch.optim.SGD(foreach=True)``, the first loss kept as a tensor and read once,
``load_state_dict`` and a ``.cpu()`` per parameter. The two run interleaved (``--repeats`` times each after a
warm-up); the medians and their ratio are printed (the issue's target: at most 1.05x).

    python scripts/bench_baseline_loop.py [--backbone cnn-omniglot] [--samples 600] [--tau 10] [--threads 2]
                                          [--repeats 5] [--device cpu]

The figures in the issue's closing note are this CPU's; the GPU figure waits for a GPU session (``--device
cuda`` there: the same two sides, synchronised before each clock read).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does


def interleaved(variants: dict[str, Callable[[], object]], repeats: int, sync: Callable[[], None]) -> dict:
    """Median seconds of each variant: one warm-up each, then ``repeats`` rounds of all of them in turn."""
    for run in variants.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            sync()
            start = time.perf_counter()
            run()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def plain_round(model, weights: list, x, y, tau: int, lr: float):
    """A user's FedAvg local update at its best: SGD with foreach updates, the loss read once."""
    import torch

    names = [name for name, _ in model.named_parameters()]
    model.load_state_dict(dict(zip(names, (torch.from_numpy(w) for w in weights))), strict=False)
    opt = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)
    first = None
    for _ in range(tau):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        first = loss.detach() if first is None else first
    return [p.detach().cpu().numpy() for p in model.parameters()], float(first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--tau", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import copy

    import torch

    from edgeprof.algorithms import fedavg
    from edgeprof.nn.backbones import build_backbone, get_params, input_shape_for
    from edgeprof.nn.compute import Compute, set_threads

    set_threads(args.threads)
    shape = input_shape_for(args.backbone, "digits")
    rng = np.random.default_rng(0)
    x = rng.random((args.samples, *shape), dtype=np.float32)
    y = (np.arange(args.samples) % 5).astype(np.int64)
    compute = Compute(args.device)
    ours = compute.module(fedavg.BackboneWithHead(build_backbone(args.backbone, shape, seed=0), 5, seed=0))
    theirs = copy.deepcopy(ours)
    weights = get_params(fedavg.BackboneWithHead(build_backbone(args.backbone, shape, seed=0), 5, seed=0))
    xt, yt = compute.images(x), compute.labels(y)  # the plain side's data, placed once as a user would
    lr = 0.05

    edgeprof_round = lambda: fedavg.client_round(ours, weights, x, y, tau=args.tau, beta=lr, compute=compute)  # noqa: E731
    plain = lambda: plain_round(theirs, weights, xt, yt, args.tau, lr)  # noqa: E731
    (new_a, loss_a), (new_b, loss_b) = edgeprof_round(), plain()
    drift = max(float(np.max(np.abs(a - b))) for a, b in zip(new_a, new_b))
    med = interleaved({"edgeprof": edgeprof_round, "plain": plain}, args.repeats, compute.sync)

    print(f"{args.backbone}, {args.samples} images, tau={args.tau}, {args.threads} threads, device {args.device}, "
          f"torch {torch.__version__}, median of {args.repeats}")
    print(f"  same update: max |weight difference| {drift:.2e}, losses {loss_a:.6f} / {loss_b:.6f}")
    print(f"  edgeprof fedavg.client_round  {med['edgeprof'] * 1e3:9.2f} ms")
    print(f"  plain torch loop (foreach SGD) {med['plain'] * 1e3:8.2f} ms")
    print(f"  ratio edgeprof / plain        {med['edgeprof'] / med['plain']:9.3f}x   (target <= 1.05x)")


if __name__ == "__main__":
    main()
