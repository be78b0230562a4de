"""How should fresh backbone weights reach ONNX Runtime each federated round? Measure, side by side.

Each federated round a client gets a new theta and runs exactly one forward pass over its whole local
set, so the figure that matters is seconds per round = weight refresh + one forward. For every
:data:`edgeprof.nn.ort.STRATEGIES` entry this prints the median over ``--repeats`` rounds of

* ``new theta``: a round with weights never seen before (refresh + forward),
* ``same theta``: the same call again (what the other clients of one round pay; the rebuilding
  strategies reuse their session),

next to torch's no-grad forward (after loading the weights) as the reference, with the ratios of the
new-theta figure to torch's and to the best method's. ``setup s`` is the one-off construction of the
runner (the export is cached per process, so only the first runner of a backbone pays for it).

``--device cuda`` runs torch on the GPU (synchronised after each forward) and ONNX Runtime on its GPU
providers where the installed build has them: the evidence for :data:`edgeprof.nn.ort.GPU_STRATEGY`.

    python scripts/bench_onnx_weights.py [--threads 2] [--batch 600] [--repeats 7] [--backbones mlp cnn-omniglot]
                                         [--device cpu|cuda|cuda:N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

from edgeprof.nn.backbones import BACKBONES, build_backbone, get_params
from edgeprof.nn.compute import Compute, resolve
from edgeprof.nn.ort import STRATEGIES, FeatureRunner, default_strategy


Step = Callable[[int], object]


def _thetas(base: list[np.ndarray], count: int, seed: int = 1) -> list[list[np.ndarray]]:
    """``count + 1`` distinct thetas (index -1 is the warm-up's), fresh arrays each, near ``base``."""
    rng = np.random.default_rng(seed)
    return [[p + rng.normal(0, 1e-3, p.shape).astype(np.float32) for p in base] for _ in range(count + 1)]


def _torch_steps(compute: Compute, module, x: np.ndarray, thetas) -> tuple[Step, Step]:
    """(new theta, same theta) rounds in torch on the compute's device: load the weights, a no-grad forward,
    wait for the device."""
    module = compute.module(module)

    def round_(i: int) -> None:
        compute.load(module, thetas[i])
        compute.forward(module, x)
        compute.sync()

    return round_, lambda i: round_(0)


def _ort_steps(runner: FeatureRunner, x: np.ndarray, thetas) -> tuple[Step, Step]:
    return (lambda i: runner.features(x, thetas[i])), (lambda i: runner.features(x, thetas[0]))


def _interleaved_medians(steps: list[tuple[Step, Step]], repeats: int) -> list[tuple[float, float]]:
    """Median (new theta s, same theta s) per method; the methods take turns within every repeat.

    Taking turns spreads any background load over all methods alike instead of over whichever ran
    while it lasted. One untimed warm-up round per method comes first.
    """
    for new_step, same_step in steps:
        new_step(-1)
        same_step(-1)
    times = [([], []) for _ in steps]
    for round_index in range(repeats):
        for (new_step, same_step), (new_times, same_times) in zip(steps, times):
            for step, bucket in ((new_step, new_times), (same_step, same_times)):
                start = time.perf_counter()
                step(round_index)
                bucket.append(time.perf_counter() - start)
    return [(statistics.median(new), statistics.median(same)) for new, same in times]


def bench_backbone(name: str, batch: int, compute: Compute, repeats: int) -> list[tuple[str, float, float, float]]:
    """Rows (method, new-theta s, same-theta s, runner construction s) for one backbone."""
    module = build_backbone(name)
    x = np.random.default_rng(0).random((batch, *module.input_shape), dtype=np.float32)
    thetas = _thetas(get_params(module), repeats)
    steps = [_torch_steps(compute, build_backbone(name), x, thetas)]
    methods, setup_s = [f"torch no-grad ({compute.device})"], [0.0]
    for strategy in STRATEGIES:
        start = time.perf_counter()
        runner = FeatureRunner(module, threads=compute.threads, strategy=strategy, providers=compute.ort_providers())
        setup_s.append(time.perf_counter() - start)
        methods.append(f"ort {strategy}")
        steps.append(_ort_steps(runner, x, thetas))
    medians = _interleaved_medians(steps, repeats)
    return [(method, new_s, same_s, built_s) for method, (new_s, same_s), built_s in zip(methods, medians, setup_s)]


def print_table(name: str, batch: int, rows: list[tuple[str, float, float, float]]) -> None:
    reference = rows[0][1]
    best = min(row[1] for row in rows)
    shape = "x".join(map(str, build_backbone(name).input_shape))
    print(f"\n{name}: {batch}x{shape} images, seconds per round (median)")
    print(f"{'method':<28}{'new theta s':>12}{'same theta s':>14}{'new-same s':>11}{'vs torch':>10}{'vs best':>9}{'setup s':>9}")
    for method, new_s, same_s, built_s in rows:
        print(
            f"{method:<28}{new_s:>12.4f}{same_s:>14.4f}{new_s - same_s:>11.4f}"
            f"{new_s / reference:>9.2f}x{new_s / best:>8.2f}x{built_s:>9.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backbones", nargs="+", choices=BACKBONES, default=["cnn-omniglot", "mlp"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    args = parser.parse_args()
    import torch

    compute = resolve(args.device, "contiguous:all", build_backbone(args.backbones[0]), args.threads)
    providers = compute.ort_providers()
    if not providers:
        raise SystemExit(f"this onnxruntime has no execution provider for {compute.device}")
    names = [p if isinstance(p, str) else p[0] for p in providers]
    print(f"torch {torch.__version__} on {compute.device}, {args.threads} threads; onnxruntime providers "
          f"{', '.join(names)}, default strategy there: {default_strategy(providers)}")
    for name in args.backbones:
        print_table(name, args.batch, bench_backbone(name, args.batch, compute, args.repeats))


if __name__ == "__main__":
    main()
