#!/usr/bin/env python
"""Benchmark: every torch forward and backward against the hardware, side by side in one run.

One client with ``--samples`` synthetic images (seeded) of the backbone's shape, ``--threads`` threads. After a
warm-up, every variant below runs once per repeat, interleaved (variant 1, 2, ..., 1, 2, ...), and the medians are
printed with achieved GFLOP/s against a measured sgemm and the CPU's FP32 peak (vector width, FMA units, cores,
clock), one line per rate that never shows a share above 100% without why (:func:`edgeprof.hardware.rate_line`):

1. the joint gradient (PFLEGO's torch forward+backward over the whole local set) in each memory format and chunk
   size, ``contiguous:all`` being edgeprof's path before execution plans;
2. the cached forward in ONNX Runtime over the whole set and in chunks;
3. PFLEGO's whole round (onnx engine, ``--pflego-tau``) with edgeprof's path before plans and with the plan
   ``--execution`` resolves to (the issue's target: at most 0.55x);
4. every baseline's client round (``--tau`` local steps) through edgeprof's client program against a plain PyTorch
   loop a user would write for the same update (model + ``torch.optim.SGD``) in the same layout: channels_last
   over the whole set, and channels_last in the plan's chunks with gradient accumulation (the target: edgeprof
   at most 1.05x the plain loop of the same layout and chunks).
5. ``--only table``: the evidence for :data:`edgeprof.nn.execution.TABLE`: the joint gradient's time per image
   for every calibration candidate, for each Table 4 backbone at ``--table-sizes`` local images.

    python scripts/bench_execution.py [--backbone cnn-omniglot] [--samples 600] [--threads 2] [--repeats 5]
                                      [--tau 5] [--pflego-tau 50] [--ghz GHZ] [--only joint,forward,round,baselines]
    python scripts/bench_execution.py --only table [--table-sizes 150,600,2400] [--repeats 2]

Ratios are what this script reports; absolute seconds depend on the machine and its load (printed first).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Callable

import numpy as np

from edgeprof.host import prefer_passive_openmp

prefer_passive_openmp()  # before torch loads, as the CLI does

BASELINES = ("fedavg", "fedprox", "fedper", "fedrep", "fedbabu", "ditto", "fedsim", "fedalt")
JOINT_PLANS = ("contiguous:all", "channels_last:all", "channels_last:128", "channels_last:64", "channels_last:32")


def interleaved(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each variant: one warm-up each, then ``repeats`` rounds of all of them in turn."""
    for run in variants.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


# --------------------------------------------------------------------------------------------- plain loops


def plain_loop(algo: str, whole, body_params, head_params, batches, n: int, tau: int, lr: float, mu: float):
    """The local update of ``algo`` as a user would write it with ``torch.optim.SGD``, over ``batches``
    (one batch: the whole set; several: chunks with gradient accumulation)."""
    import torch
    from torch.nn.functional import cross_entropy

    from edgeprof.algorithms import fedbabu, fedrep

    def sgd_steps(params, steps, *, momentum=0.0, anchor=None, body_frozen=False):
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            for xb, yb in batches:
                if body_frozen:
                    with torch.no_grad():
                        feats = whole.backbone(xb)
                    logits = whole.head(feats)
                else:
                    logits = whole(xb)
                loss = cross_entropy(logits, yb, reduction="sum") / n
                if anchor is not None:
                    loss = loss + 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor)) / len(batches)
                loss.backward()
            opt.step()

    everything = body_params + head_params
    if algo in ("fedavg", "fedper", "fedsim"):
        sgd_steps(everything, tau)
    elif algo == "fedprox":
        sgd_steps(everything, tau, anchor=[p.detach().clone() for p in everything])
    elif algo == "ditto":
        anchor = [p.detach().clone() for p in everything]
        sgd_steps(everything, tau)
        sgd_steps(everything, tau, anchor=anchor)
    elif algo == "fedbabu":
        sgd_steps(body_params, tau, momentum=fedbabu.MOMENTUM)
    elif algo in ("fedrep", "fedalt"):
        sgd_steps(head_params, tau, body_frozen=True)
        sgd_steps(body_params, fedrep.body_steps(tau) if algo == "fedrep" else tau)
    else:
        raise ValueError(algo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="cnn-omniglot")
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tau", type=int, default=5, help="local steps of the baselines' rounds")
    parser.add_argument("--pflego-tau", type=int, default=50)
    parser.add_argument("--execution", default="auto", help="the plan compared with edgeprof's path before plans")
    parser.add_argument("--ghz", type=float, default=None, help="clock for the FP32 peak (default: as /proc says)")
    parser.add_argument("--only", default="joint,forward,round,baselines")
    parser.add_argument("--table-sizes", default="150,600,2400")
    parser.add_argument("--algos", default=",".join(BASELINES), help="the baselines of part 4")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if parts == {"table"}:
        table(args)
        return

    import torch

    from bench_round_ratio import build, make_client
    from edgeprof.algorithms import fedavg, pflego
    from edgeprof.hardware import count_flops, roofs
    from edgeprof.nn.backbones import build_backbone, get_params, input_shape_for
    from edgeprof.nn.execution import parse, resolve
    from edgeprof.nn.ort import FeatureRunner

    torch.set_num_threads(args.threads)
    roof = roofs(threads=args.threads, ghz=args.ghz)
    client = make_client(args.samples, seed=0, backbone=args.backbone)
    x, y = client.x_train, client.y_train
    shape = input_shape_for(args.backbone, "synthetic")
    module = build_backbone(args.backbone, shape, seed=0)
    flops = count_flops(module, shape, batch=len(y))
    plan = resolve(args.execution, module, args.threads)
    print(f"{args.backbone}, {len(y)} images {'x'.join(map(str, shape))}, {args.threads} threads, "
          f"{args.repeats} interleaved repeats; forward {flops.forward / 1e9:.2f} GFLOP, forward+backward "
          f"{flops.train / 1e9:.2f} GFLOP")
    for line in roof.lines():
        print(line)
    print(f"plan {args.execution!r} -> {plan.spec} ({plan.source})")

    if "joint" in parts:
        theta = get_params(module)
        head = np.random.default_rng(0).normal(scale=0.1, size=(5, module.feature_dim + 1)).astype(np.float32)
        specs = list(dict.fromkeys([*JOINT_PLANS, plan.spec]))
        modules = {s: parse(s).prepare(copy.deepcopy(module)) for s in specs}
        med = interleaved({s: (lambda s=s: pflego.torch_joint_gradient(modules[s], theta, head, x, y, parse(s)))
                           for s in specs}, args.repeats)
        print("\n1. joint gradient (torch forward+backward over the local set)")
        for s in specs:
            mark = "  <- before plans" if s == "contiguous:all" else ("  <- the plan" if s == plan.spec else "")
            print(f"  {s:20s} {med[s]:7.3f} s  {roof.rate(flops.train, med[s])}{mark}")

    if "forward" in parts:
        runner = FeatureRunner(module, threads=args.threads)
        theta = get_params(module)
        chunked = lambda c: np.concatenate([runner.features(x[i:i + c], theta) for i in range(0, len(x), c)])  # noqa
        variants = {"whole set": lambda: runner.features(x, theta)}
        variants.update({f"chunks of {c}": (lambda c=c: chunked(c)) for c in (64, 128, 256) if c < len(x)})
        med = interleaved(variants, args.repeats)
        print("\n2. cached forward (ONNX Runtime, the round's one forward over the local set)")
        for name, sec in med.items():
            print(f"  {name:20s} {sec:7.3f} s  {roof.rate(flops.forward, sec)}")

    if "round" in parts:
        feds = {spec: build("pflego", client, args.pflego_tau, args.threads, args.backbone, execution=spec)
                for spec in ("contiguous:all", args.execution)}
        med = interleaved({spec: (lambda f=f: f.client_round(0)) for spec, f in feds.items()}, args.repeats)
        print(f"\n3. PFLEGO client round, onnx engine, tau={args.pflego_tau}")
        for spec, sec in med.items():
            print(f"  {spec:20s} {sec:7.3f} s")
        print(f"  with the plan / before plans: {med[args.execution] / med['contiguous:all']:.2f}x (target <= 0.55x)")

    if "baselines" in parts:
        print(f"\n4. baselines' client rounds, tau={args.tau}: edgeprof's client program against a plain "
              f"torch.optim.SGD loop of the same update, same layout")
        same = parse(plan.spec)
        whole_set = parse("channels_last:all" if same.channels_last else "contiguous:all")
        rows = []
        for algo in args.algos.split(","):
            fed = build(algo, client, args.tau, args.threads, args.backbone, execution=plan.spec)
            s = fed.settings
            plain_model = same.prepare(fedavg.BackboneWithHead(copy.deepcopy(module), fed.runtime.num_outputs))
            body, head = list(plain_model.backbone.parameters()), list(plain_model.head.parameters())
            loops = {"edgeprof": lambda fed=fed: fed.client_round(0)}
            for label, layout in (("plain, same chunks", same), ("plain, whole set", whole_set)):
                batches = layout.batches(x, y)
                loops[label] = (lambda a=algo, b=batches: plain_loop(a, plain_model, body, head, b, len(y), args.tau,
                                                                    s.beta, s.mu or 0.0))
            med = interleaved(loops, args.repeats)
            rows.append((algo, med))
            print(f"  {algo:8s} edgeprof {med['edgeprof']:7.3f} s | plain same chunks {med['plain, same chunks']:7.3f}"
                  f" s ({med['edgeprof'] / med['plain, same chunks']:.2f}x) | plain whole set "
                  f"{med['plain, whole set']:7.3f} s ({med['edgeprof'] / med['plain, whole set']:.2f}x)", flush=True)
        worst = max(m["edgeprof"] / m["plain, same chunks"] for _, m in rows)
        print(f"  worst edgeprof / plain loop with the same layout and chunks: {worst:.2f}x (target <= 1.05x)")


def table(args) -> None:
    """Per Table 4 backbone and local-set size: the joint gradient per image for every calibration candidate."""
    import os

    import torch

    from bench_round_ratio import make_client
    from edgeprof.algorithms import pflego
    from edgeprof.nn.backbones import BACKBONES, build_backbone, get_params, input_shape_for
    from edgeprof.nn.execution import CANDIDATES, has_convolutions, parse

    torch.set_num_threads(args.threads)
    print(f"joint gradient, us per image (median of {args.repeats}, interleaved; * the fastest, (x) against it), "
          f"{args.threads} threads; load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for name in BACKBONES:
        shape = input_shape_for(name, "synthetic")
        module = build_backbone(name, shape, seed=0)
        theta = get_params(module)
        specs = CANDIDATES[has_convolutions(module)]
        modules = {s: parse(s).prepare(copy.deepcopy(module)) for s in specs}
        head = np.random.default_rng(0).normal(scale=0.1, size=(5, module.feature_dim + 1)).astype(np.float32)
        for n in (int(v) for v in args.table_sizes.split(",")):
            c = make_client(n, seed=0, backbone=name)
            med = interleaved({s: (lambda s=s: pflego.torch_joint_gradient(modules[s], theta, head, c.x_train,
                                                                           c.y_train, parse(s))) for s in specs},
                              args.repeats)
            best = min(med.values())
            cells = ", ".join(f"{s} {1e6 * t / n:.0f}{'*' if t == best else ''} ({t / best:.2f})"
                              for s, t in med.items())
            print(f"  {name:12s} N={n:5d}: {cells}", flush=True)


if __name__ == "__main__":
    main()
