#!/usr/bin/env python
"""Validate a CUDA machine end to end: the GPU tests, then PFLEGO against FedAvg on the GPU with NVML's joules.

Needs only what a CUDA PyTorch image has (torch 2.11 or newer, onnxruntime, nvidia-ml-py, numpy, scipy, psutil,
typer, rich; no flwr, codecarbon or plotly). From the checkout:

    PYTHONPATH=. python scripts/gpu_check.py --out DIR [--device cuda:0] [--taus 5,25,50,100] [--repeats 3]

1. the GPU tests (``tests/test_gpu.py`` under pytest where it is installed, else the same checks of
   ``tests/gpu_cases.py`` called directly);
2. the GPU's idle power (NVML power samples over ``--idle-seconds`` before anything runs);
3. ``sweep --device cuda --algos pflego,fedavg`` on ``cnn-omniglot`` and ``cnn-cifar`` (one client of 600 local
   images), while a thread samples the round's GPU's power and utilisation through NVML at ``--sample-hz``;
4. printed and written to ``DIR/gpu_check.json``: the FedAvg/PFLEGO per-round ratio at tau=50 in wall time and in
   NVML joules, PFLEGO's growth from the smallest to the largest tau, the phase split, the GPU's utilisation inside
   the client windows and between them, NVML's energy counter against the integral of its power samples over the
   same windows, the idle power, and a PFLEGO round against one bare forward and one forward+backward of the same
   backbone on the GPU (the floor);
5. the sweep reports in DIR, and the dashboard where plotly is installed (else one line says it is not).

On a machine whose torch sees no CUDA GPU it stops with one line (exit 2). ``--dry-run-on-cpu`` runs every step on
the CPU instead, to test this script itself where there is no GPU: it measures nothing about a GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKBONES = ("cnn-omniglot", "cnn-cifar")
PFLEGO_PHASES = ("cache_forward", "head_steps", "joint_grad")


def fail(message: str, code: int = 2) -> None:
    print(f"gpu_check: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the reports, dashboard and figures")
    parser.add_argument("--device", default="cuda", help="the GPU to validate: cuda or cuda:N (default cuda)")
    parser.add_argument("--taus", default="5,25,50,100", help="local steps per round (default 5,25,50,100)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per (algorithm, tau) (default 3)")
    parser.add_argument("--samples", type=int, default=600, help="local training images (default 600)")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="idle power sampling (default 3 s)")
    parser.add_argument("--sample-hz", type=float, default=50.0, help="NVML sampling rate (default 50 Hz)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the GPU tests first")
    parser.add_argument("--dry-run-on-cpu", action="store_true",
                        help="run every step on the CPU (tests this script where there is no GPU; measures no GPU)")
    args = parser.parse_args(argv)
    try:
        args.taus = tuple(sorted({int(t) for t in args.taus.split(",")}))
    except ValueError:
        fail(f"--taus must be a comma-separated list of integers, got {args.taus!r}")
    if not args.taus or args.taus[0] < 1 or args.repeats < 1 or args.samples < 1 or args.sample_hz <= 0:
        fail("--taus, --repeats, --samples and --sample-hz must be positive")
    return args


# ---------------------------------------------------------------------------------------------------- NVML sampling


class NvmlSampler:
    """A thread that samples one GPU's power (W) and utilisation (%) through NVML, stamped with time.time()."""

    def __init__(self, nvml, handle, hz: float) -> None:
        self._nvml, self._handle, self._period = nvml, handle, 1.0 / hz
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-check-nvml", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            power = self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
            util = float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            self.samples.append((now, power, util))
            self._stop.wait(self._period)

    def __enter__(self) -> "NvmlSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def nvml_handle(device: str):
    """(pynvml, the NVML handle of the GPU torch calls ``device``), matched by PCI bus id or UUID."""
    import pynvml
    import torch

    from edgeprof.meters.nvml import round_gpu

    pynvml.nvmlInit()
    mapped = round_gpu(pynvml, str(torch.device(device)))
    if mapped is None:
        raise SystemExit(f"gpu_check: {device} is no CUDA device")
    print(f"  NVML GPU {mapped.nvml_index} runs {device} ({mapped.how})")
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(mapped.nvml_index)


def integral_j(samples, start: float, end: float) -> tuple[float, int]:
    """Trapezoid integral of the power samples over [start, end] (samples linearly interpolated at the edges), and
    how many samples lie inside."""
    inside = [(t, p) for t, p, _ in samples if start <= t <= end]
    before = [(t, p) for t, p, _ in samples if t < start][-1:]
    after = [(t, p) for t, p, _ in samples if t > end][:1]
    points = before + inside + after
    if len(points) < 2:
        return float("nan"), len(inside)
    ts, ps = zip(*points)
    grid = [start] + [t for t in ts if start < t < end] + [end]
    import numpy as np

    trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy 2 renamed it
    return float(trapezoid(np.interp(grid, ts, ps), grid)), len(inside)


# ---------------------------------------------------------------------------------------------------- steps


def run_tests() -> bool:
    """The GPU tests: pytest where installed, else the plain checks. True when all pass."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "tests"))
        import gpu_cases

        ok = True
        for check in gpu_cases.CHECKS:
            try:
                check()
                print(f"  pass  {check.__name__}")
            except Exception as err:  # a failing check is reported, the others still run
                ok = False
                print(f"  FAIL  {check.__name__}: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
        return ok
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "gpu",
                           "tests/test_gpu.py"], cwd=ROOT)
    return done.returncode == 0


def sweep(backbone: str, args, device: str) -> Path:
    from edgeprof.config import RunConfig
    from edgeprof.rounds.sweep import SweepConfig, run_sweep

    base = RunConfig(dataset="synthetic", synthetic_samples=max(2000, 2 * args.samples), clients=1,
                     participation=1.0, backbone=backbone, device=device, out=args.out,
                     run_name=f"gpu-check-{backbone}", progress=False)
    cfg = SweepConfig(base=base, algos=("pflego", "fedavg"), taus=args.taus, repeats=args.repeats,
                      samples_per_client=args.samples)
    return run_sweep(cfg).csv_path


def floor_s(backbone: str, device: str, samples: int, repeats: int = 5) -> tuple[float, float]:
    """(one bare forward, one forward+backward) of the backbone and a linear head over ``samples`` images on the
    device, best of ``repeats``, synchronised: the floor under any round."""
    import numpy as np

    from edgeprof.nn.backbones import build_backbone, input_shape_for
    from edgeprof.nn.compute import resolve

    module = build_backbone(backbone, input_shape_for(backbone, "synthetic"))
    compute = resolve(device, "auto", module, None)
    module = compute.module(module)
    x = np.random.default_rng(0).random((samples, *module.input_shape), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 5, samples)
    head = compute.tensor(np.zeros((5, module.feature_dim)), requires_grad=True)
    params = [head, *module.parameters()]

    def timed(fn) -> float:
        fn()
        best = float("inf")
        for _ in range(repeats):
            compute.sync()
            start = time.perf_counter()
            fn()
            compute.sync()
            best = min(best, time.perf_counter() - start)
        return best

    forward = timed(lambda: compute.forward(module, x))
    both = timed(lambda: compute.mean_loss_and_grads(lambda xb: module(xb) @ head.T, compute.batches(x, y),
                                                     samples, params))
    return forward, both


# ---------------------------------------------------------------------------------------------------- figures


def _median(rows, column: str) -> float:
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
    return statistics.median(values) if values else float("nan")


def figures(csv_path: Path, samples, taus) -> dict:
    rows = [r for r in csv.DictReader(open(csv_path, newline="")) if r["kind"] == "client"]
    by = {(r["algo"], int(r["tau"])): [] for r in rows}
    for r in rows:
        by[(r["algo"], int(r["tau"]))].append(r)
    tau = 50 if 50 in taus else max(t for t in taus if t <= 50) if min(taus) <= 50 else min(taus)
    out: dict = {"tau_for_ratio": tau}
    for metric in ("wall_s", "gpu_j", "energy_j"):
        p, f = _median(by.get(("pflego", tau), []), metric), _median(by.get(("fedavg", tau), []), metric)
        out[f"pflego_{metric}"], out[f"fedavg_{metric}"], out[f"ratio_{metric}"] = p, f, f / p if p else float("nan")
    lo, hi = min(taus), max(taus)
    out["pflego_growth"] = _median(by.get(("pflego", hi), []), "wall_s") / _median(by.get(("pflego", lo), []),
                                                                                     "wall_s") - 1.0
    out["growth_taus"] = [lo, hi]
    out["phases"] = {algo: {p: _median(by.get((algo, tau), []), f"{p}_s") for p in phases}
                     for algo, phases in (("pflego", PFLEGO_PHASES), ("fedavg", ("local_steps",)))}
    out["gpu_method"] = sorted({r.get("gpu_method", "") for r in rows} - {""})
    windows = []
    for r in rows:
        end = float(r["timestamp_s"])
        windows.append((end - float(r["wall_s"]), end, float(r["gpu_j"]) if r.get("gpu_j") else float("nan")))
    if samples:
        inside = [u for t, _, u in samples if any(s <= t <= e for s, e, _ in windows)]
        first, last = min(w[0] for w in windows), max(w[1] for w in windows)
        between = [u for t, _, u in samples if first <= t <= last and not any(s <= t <= e for s, e, _ in windows)]
        out["gpu_util_in_windows_pct"] = statistics.mean(inside) if inside else float("nan")
        out["gpu_util_between_windows_pct"] = statistics.mean(between) if between else float("nan")
        ratios = []
        for s, e, counter in windows:
            integral, n = integral_j(samples, s, e)
            if n >= 5 and counter == counter and integral > 0:
                ratios.append(counter / integral)
        out["counter_over_integral"] = {"windows": len(ratios), "median": statistics.median(ratios) if ratios else None,
                                        "min": min(ratios) if ratios else None, "max": max(ratios) if ratios else None}
    return out


def print_figures(backbone: str, fig: dict, floor: tuple[float, float]) -> None:
    tau = fig["tau_for_ratio"]
    joules = (f"{fig['ratio_gpu_j']:.2f}x NVML joules ({fig['fedavg_gpu_j']:.4g} / {fig['pflego_gpu_j']:.4g} J; "
              f"method {', '.join(fig['gpu_method'])})") if fig["gpu_method"] else "no NVML joules in the report"
    print(f"\n{backbone}: FedAvg/PFLEGO at tau={tau}: {fig['ratio_wall_s']:.2f}x wall "
          f"({fig['fedavg_wall_s']:.4f} / {fig['pflego_wall_s']:.4f} s), {joules}")
    lo, hi = fig["growth_taus"]
    print(f"  PFLEGO growth tau {lo} -> {hi}: {100 * fig['pflego_growth']:+.1f}% (wall)")
    for algo, phases in fig["phases"].items():
        print(f"  {algo} phases at tau={tau}: " + ", ".join(f"{p} {s:.4f} s" for p, s in phases.items()))
    if "gpu_util_in_windows_pct" in fig:
        c = fig["counter_over_integral"]
        print(f"  GPU utilisation: {fig['gpu_util_in_windows_pct']:.0f}% in the client windows, "
              f"{fig['gpu_util_between_windows_pct']:.0f}% between them")
        if c["median"] is not None:
            print(f"  NVML energy counter / integral of its power samples over the same windows: median "
                  f"{c['median']:.3f} (min {c['min']:.3f}, max {c['max']:.3f}) over {c['windows']} windows")
    forward, both = floor
    print(f"  floor: one forward {forward:.4f} s, one forward+backward {both:.4f} s; a PFLEGO round is "
          f"{fig['pflego_wall_s'] / both:.2f}x the forward+backward")


def write_dashboard(paths, out: Path) -> None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        print("dashboard: not written: plotly is not installed (pip install plotly; then edgeprof dashboard "
              f"{' '.join(str(p) for p in paths)})")
        return
    from edgeprof.report.dashboard import write_dashboard as write

    print(f"dashboard: {write(paths, out / 'gpu-check.html', title='edgeprof GPU check')}")


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.dry_run_on_cpu:
        device = "cpu"
    elif not torch.cuda.is_available():
        fail(f"torch {torch.__version__} sees no CUDA GPU on this machine: gpu_check validates a CUDA machine "
             "(--dry-run-on-cpu tests the script itself)")
    else:
        device = args.device
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(torch.device(device))})" if device != "cpu" else " (dry run)"))
    tests_ok = True
    if not args.skip_tests:
        print("1. the GPU tests")
        tests_ok = run_tests()
    nvml = handle = None
    if device != "cpu":
        nvml, handle = nvml_handle(device)
    result: dict = {"device": device, "torch": torch.__version__, "tests_passed": tests_ok, "backbones": {}}
    if handle is not None:
        with NvmlSampler(nvml, handle, args.sample_hz) as idle:
            time.sleep(args.idle_seconds)
        result["idle_power_w"] = statistics.median(p for _, p, _ in idle.samples)
        print(f"2. idle power: {result['idle_power_w']:.1f} W (median of {len(idle.samples)} samples)")
    reports = []
    for backbone in BACKBONES:
        print(f"3. sweep on {backbone} ({args.samples} images, taus {','.join(map(str, args.taus))}, "
              f"{args.repeats} repeats)")
        if handle is not None:
            with NvmlSampler(nvml, handle, args.sample_hz) as sampler:
                path = sweep(backbone, args, device)
            samples = sampler.samples
        else:
            path, samples = sweep(backbone, args, device), []
        reports.append(path)
        fig = figures(path, samples, args.taus)
        floor = floor_s(backbone, device, args.samples)
        fig["floor_forward_s"], fig["floor_forward_backward_s"] = floor
        result["backbones"][backbone] = fig
        print_figures(backbone, fig, floor)
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
    write_dashboard(reports, args.out)
    print(f"figures: {args.out / 'gpu_check.json'}")
    return 0 if tests_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
