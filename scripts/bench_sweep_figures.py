#!/usr/bin/env python
"""The README's figures, measured side by side in one sweep: FedAvg/PFLEGO per-round ratio at tau=50 (both
PFLEGO engines), PFLEGO's cost growth from tau=5 to tau=100, and the peak memory of each engine.

Runs ``edgeprof.rounds.sweep.run_sweep`` (``cnn-omniglot``, 600 local 28x28 synthetic samples, 2 threads, PFLEGO with
the ``onnx`` and ``torch-reuse`` engines and FedAvg, cells interleaved in a seeded random order after a
warm-up), or reads an existing sweep report with ``--report``, and prints the figures with their 95%
intervals (:mod:`edgeprof.report.analysis`) and the machine's load average before and after.

Peak memory: the sweep's ``peak_rss_mb`` is the high-water mark of the one process that runs every
variant, so memory that one variant's allocator keeps hides the others' differences. The script therefore
also runs each variant alone in a fresh process (``--memory-probe``: build, then 3 rounds, tau=50 for
PFLEGO, 2 for FedAvg) and prints its resident memory before the rounds and the peak during them.

    python scripts/bench_sweep_figures.py [--taus 1,5,10,25,50,100] [--repeats 3] [--max-baseline-tau 50]
                                          [--out profiles/reference] [--run-name NAME] [--report CSV]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path


def measure(args) -> Path:
    from edgeprof.config import RunConfig
    from edgeprof.rounds.sweep import SweepConfig, run_sweep

    base = RunConfig(dataset="synthetic", backbone="cnn-omniglot", clients=1, participation=1.0, seed=0,
                     out=Path(args.out), threads=args.threads, run_name=args.run_name, progress=False)
    cfg = SweepConfig(base=base, algos=("pflego:onnx", "pflego:torch-reuse", "fedavg"),
                      taus=tuple(int(t) for t in args.taus.split(",")), repeats=args.repeats,
                      samples_per_client=args.samples, max_baseline_tau=args.max_baseline_tau)
    result = run_sweep(cfg, progress=lambda done, total: print(f"\r{done}/{total} cells", end="", flush=True))
    print()
    return result.csv_path


def _values(rows, variant: str, tau: int, column: str) -> list[float]:
    from edgeprof.report.analysis import variant_of

    return [float(r[column]) for r in rows if r["kind"] == "client" and r.get(column)
            and variant_of(r["algo"], r["engine"]) == variant and int(r["tau"]) == tau]


def _iv(iv, fmt="{:.1f}") -> str:
    if iv.lo is None:
        return fmt.format(iv.value)
    return f"{fmt.format(iv.value)} [{fmt.format(iv.lo)}, {fmt.format(iv.hi)}]"


def report_figures(csv_path: Path) -> None:
    from edgeprof.report.analysis import analyze, ratio_of_means
    from edgeprof.report.writer import read_report

    report = read_report(csv_path)
    rows = report.rows
    analysis = analyze(rows)
    print(f"report: {csv_path}")
    for metric in ("wall_s", "cpu_s"):
        for r in analysis.ratios:
            if r.metric == metric and r.tau == 50 and r.variant == "fedavg":
                print(f"FedAvg / {r.reference} per client round at tau=50 ({metric}): {_iv(r.ratio)}x "
                      f"({r.n_variant} vs {r.n_reference} rounds)")
    for variant in ("pflego", "pflego[torch-reuse]"):
        for metric in ("wall_s", "cpu_s"):
            hi, lo = _values(rows, variant, 100, metric), _values(rows, variant, 5, metric)
            if hi and lo:
                g = ratio_of_means(hi, lo)
                print(f"{variant} growth tau=5 -> tau=100 ({metric}): {(g.value - 1):+.1%}"
                      + (f" [{g.lo - 1:+.1%}, {g.hi - 1:+.1%}]" if g.lo is not None else ""))
        fit = analysis.fit_for(next(iter({f.host for f in analysis.fits})), variant, "wall_s")
        if fit is not None:
            print(f"{variant} verdict (wall_s): {fit.verdict.label}: {fit.verdict.reason}")
    fed = analysis.fit_for(next(iter({f.host for f in analysis.fits})), "fedavg", "wall_s")
    if fed is not None:
        print(f"fedavg verdict (wall_s): {fed.verdict.label}: {fed.verdict.reason}")
    rates(rows)
    for variant in ("pflego", "pflego[torch-reuse]", "fedavg"):
        peaks = [float(r["peak_rss_mb"]) for r in rows if r["kind"] == "client" and r["peak_rss_mb"]
                 and _variant(r) == variant]
        if peaks:
            print(f"{variant:20s} peak RSS per client round: median {statistics.median(peaks):.0f} MiB, "
                  f"max {max(peaks):.0f} MiB")


def rates(rows, threads: int | None = None, ghz: float | None = None) -> None:
    """PFLEGO's joint gradient and cached forward (onnx engine, every tau) in GFLOP/s against this machine's
    measured sgemm and FP32 peak (:func:`edgeprof.hardware.rate_line`; the FLOPs from the backbone and the rows'
    sample count).
    Meaningful for a report measured on this machine."""
    from edgeprof.hardware import count_flops, roofs
    from edgeprof.nn.backbones import build_backbone, input_shape_for

    cells = [r for r in rows if r["kind"] == "client" and _variant(r) == "pflego" and r.get("joint_grad_s")]
    if not cells:
        return
    backbone, n = cells[0]["backbone"], int(cells[0]["n_samples"])
    shape = input_shape_for(backbone, cells[0]["dataset"])
    flops = count_flops(build_backbone(backbone, shape), shape, batch=n)
    roof = roofs(threads=threads, ghz=ghz)
    for line in roof.lines():
        print(line)
    joint = statistics.median(float(r["joint_grad_s"]) for r in cells)
    forward = statistics.median(float(r["cache_forward_s"]) for r in cells)
    print(f"pflego joint gradient ({n} images, median of {len(cells)} rounds): {joint:.3f} s, "
          f"{roof.rate(flops.train, joint)}")
    print(f"pflego cached forward ({n} images, median of {len(cells)} rounds): {forward:.3f} s, "
          f"{roof.rate(flops.forward, forward)}")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def memory_probe(item: str, samples: int, threads: int) -> None:
    """Run one variant alone in this (fresh) process and print its memory as one JSON line."""
    import json

    from edgeprof.config import RunConfig
    from edgeprof.measure.profiler import PeakRss
    from edgeprof.nn.compute import set_threads
    from edgeprof.rounds.simulate import build_federation
    from edgeprof.rounds.sweep import SweepConfig, sweep_clients

    tau = 50 if item.startswith("pflego") else 2
    base = RunConfig(dataset="synthetic", backbone="cnn-omniglot", clients=1, participation=1.0, threads=threads,
                     progress=False)
    cfg = SweepConfig(base=base, algos=(item,), taus=(tau,), samples_per_client=samples)
    set_threads(threads)
    variant = cfg.variants()[0]
    algorithm = build_federation(cfg.run_config(variant, tau), sweep_clients(cfg))
    rss = PeakRss()
    before = _status_mb("VmRSS")
    rss.reset()
    for _ in range(3):
        algorithm.server_step([algorithm.client_round(0)])
    print(json.dumps({"variant": variant.label, "rss_before_mb": before, "peak_mb": rss.read_mb(),
                      "per_window": rss.per_window}))


def memory_table(samples: int, threads: int) -> None:
    import json
    import subprocess
    import sys

    for item in ("pflego:onnx", "pflego:torch-reuse", "fedavg"):
        out = subprocess.run([sys.executable, __file__, "--memory-probe", item, "--samples", str(samples),
                              "--threads", str(threads)], capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{m['variant']:20s} alone in a fresh process: {m['rss_before_mb']:.0f} MiB before its rounds, "
              f"peak {m['peak_mb']:.0f} MiB during 3 rounds (+{m['peak_mb'] - m['rss_before_mb']:.0f} MiB)")


def _variant(row) -> str:
    from edgeprof.report.analysis import variant_of

    return variant_of(row["algo"], row["engine"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taus", default="1,5,10,25,50,100")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-baseline-tau", type=int, default=50)
    parser.add_argument("--out", default="profiles")
    parser.add_argument("--run-name", default=None)
    parser.add_argument("--report", type=Path, default=None, help="print the figures of this report instead")
    parser.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe, args.samples, args.threads)
        return
    if args.report is None:
        before = os.getloadavg()
        csv_path = measure(args)
        after = os.getloadavg()
        print(f"load average (1, 5, 15 min) before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}; "
              f"after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}; {os.cpu_count()} logical CPUs")
    else:
        csv_path = args.report
    report_figures(csv_path)
    memory_table(args.samples, args.threads)


if __name__ == "__main__":
    main()
