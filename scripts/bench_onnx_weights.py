"""How should fresh backbone weights reach ONNX Runtime each federated round? Measure, side by side.

Each federated round a client gets a new theta and runs exactly one forward pass over its whole local
set, so the figure that matters is seconds per round = weight refresh + one forward. For every
:data:`edgeprof.nn.ort.STRATEGIES` entry this prints the median over ``--repeats`` rounds of

* ``new theta``: a round with weights never seen before (refresh + forward),
* ``same theta``: the same call again (what the other clients of one round pay; the rebuilding
  strategies reuse their session),

next to torch's no-grad forward (after ``set_params``) as the reference, with the ratios.

    python scripts/bench_onnx_weights.py [--threads 2] [--batch 600] [--repeats 7] [--backbones mlp cnn-omniglot]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import torch

from edgeprof.nn.backbones import BACKBONES, build_backbone, get_params, set_params
from edgeprof.nn.ort import DEFAULT_STRATEGY, STRATEGIES, FeatureRunner


def _median_s(step: Callable[[int], object], repeats: int) -> float:
    """Median wall time of ``step(round)`` over ``repeats`` rounds, after one untimed warm-up round."""
    step(-1)
    times = []
    for round_index in range(repeats):
        start = time.perf_counter()
        step(round_index)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _thetas(base: list[np.ndarray], count: int, seed: int = 1) -> list[list[np.ndarray]]:
    """``count + 1`` distinct thetas (index -1 is the warm-up's), fresh arrays each, near ``base``."""
    rng = np.random.default_rng(seed)
    return [[p + rng.normal(0, 1e-3, p.shape).astype(np.float32) for p in base] for _ in range(count + 1)]


def _torch_rows(module: torch.nn.Module, x: np.ndarray, thetas, repeats: int) -> tuple[float, float]:
    images = torch.from_numpy(x)

    def round_(i: int) -> None:
        set_params(module, thetas[i])
        with torch.no_grad():
            module(images)

    def forward_only(_: int) -> None:
        with torch.no_grad():
            module(images)

    return _median_s(round_, repeats), _median_s(forward_only, repeats)


def _ort_rows(runner: FeatureRunner, x: np.ndarray, thetas, repeats: int) -> tuple[float, float]:
    new_theta = _median_s(lambda i: runner.features(x, thetas[i]), repeats)
    same_theta = _median_s(lambda i: runner.features(x, thetas[0]), repeats)
    return new_theta, same_theta


def bench_backbone(name: str, batch: int, threads: int, repeats: int) -> list[tuple[str, float, float, float]]:
    """Rows (method, new-theta s, same-theta s, construction s) for one backbone."""
    module = build_backbone(name)
    x = np.random.default_rng(0).random((batch, *module.input_shape), dtype=np.float32)
    thetas = _thetas(get_params(module), repeats)
    rows = [("torch no-grad", *_torch_rows(module, x, thetas, repeats), 0.0)]
    for strategy in STRATEGIES:
        start = time.perf_counter()
        runner = FeatureRunner(module, threads=threads, strategy=strategy)
        built_s = time.perf_counter() - start
        rows.append((f"ort {strategy}", *_ort_rows(runner, x, thetas, repeats), built_s))
    return rows


def print_table(name: str, batch: int, rows: list[tuple[str, float, float, float]]) -> None:
    reference = rows[0][1]
    best = min(row[1] for row in rows)
    shape = "x".join(map(str, build_backbone(name).input_shape))
    print(f"\n{name}: {batch}x{shape} images, seconds per round (median)")
    print(f"{'method':<28}{'new theta s':>12}{'same theta s':>14}{'refresh s':>11}{'vs torch':>10}{'vs best':>9}{'setup s':>9}")
    for method, new_s, same_s, built_s in rows:
        print(
            f"{method:<28}{new_s:>12.4f}{same_s:>14.4f}{max(new_s - same_s, 0.0):>11.4f}"
            f"{new_s / reference:>9.2f}x{new_s / best:>8.2f}x{built_s:>9.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backbones", nargs="+", choices=BACKBONES, default=["cnn-omniglot", "mlp"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, default strategy: {DEFAULT_STRATEGY}")
    for name in args.backbones:
        print_table(name, args.batch, bench_backbone(name, args.batch, args.threads, args.repeats))


if __name__ == "__main__":
    main()
