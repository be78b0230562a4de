#!/usr/bin/env python
"""What the profiler does to a round when a meter is slow to read, side by side in one run.

NVML's energy counter took about 2.7 ms a read on an H200 and moves about every 100 ms. This script stands in for
it with the test suite's fake pynvml (``tests/fixtures_sysfs.slow_stepping_pynvml``: each energy read sleeps
``--read-ms``, releasing the GIL as the binding's ctypes call does; the counter steps every ``--period-ms`` at a
constant ``--power-w``) and runs one PFLEGO client round (``--backbone``, ``--tau``) on this CPU, round after
round on one federation and client, taking turns:

* ``unprofiled``: the client round alone;
* ``cheap meters``: inside a profiler window with its phases, over the CPU estimate only (no GPU meter);
* ``slow meter, series``: the same with the fake NVML found slow at start and read off the measured thread
  (edgeprof's way now);
* ``slow meter, at edges``: the same meters with no read cost measured, so every edge reads the fake NVML on the
  measured thread (the way before: 8 reads a PFLEGO round).

It prints each one's median round and its ratio to the unprofiled one, the profiler's own figure of its wall time
on the measured thread, then the power trace (``--trace-hz``) of a window of ``--trace-seconds`` over the slow
stepping counter, with the constant power it should show: the range of the rows drawn as measured (resolved) and
of all rows, edgeprof's spans of two update periods against the same samples differenced interval by interval.

    python scripts/bench_undisturbed.py [--rounds 200] [--tau 50] [--read-ms 3] [--trace-hz 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures_sysfs import fake_pynvml, slow_stepping_pynvml  # noqa: E402

from edgeprof.config import RunConfig  # noqa: E402
from edgeprof.meters import discover  # noqa: E402
from edgeprof.meters.discovery import MeterSet  # noqa: E402
from edgeprof.measure.profiler import Profiler  # noqa: E402

KINDS = ("unprofiled", "cheap meters", "slow meter, series", "slow meter, at edges")


def stand_in(args):
    return slow_stepping_pynvml(power_w=args.power_w, period_s=args.period_ms / 1000, read_s=args.read_ms / 1000)


def profilers(args, compute) -> dict:
    """A profiler per kind (None: unprofiled) over its own meters, all with the round's device."""
    cheap = discover(nvml_module=fake_pynvml([], init_error=9))
    series = discover(nvml_module=stand_in(args))
    at_edges = MeterSet(list(discover(nvml_module=stand_in(args)).meters))  # no read cost known: all read at edges
    return {"unprofiled": None, "cheap meters": Profiler(cheap, device=compute),
            "slow meter, series": Profiler(series, device=compute),
            "slow meter, at edges": Profiler(at_edges, device=compute)}


def rounds(args) -> dict:
    """Median round per kind (s), and each profiler's mean wall per edge (us)."""
    from edgeprof.rounds.simulate import build_federation, load_clients

    cfg = RunConfig(algo="pflego", dataset="synthetic", synthetic_samples=args.samples, synthetic_classes=5,
                    clients=2, participation=1.0, backbone=args.backbone, tau=args.tau, threads=1,
                    device="cpu").resolved()
    federation = build_federation(cfg, load_clients(cfg))
    settings = federation.settings_for(cfg)
    found = profilers(args, federation.runtime.compute)
    walls: dict = {k: [] for k in KINDS}
    for _ in range(5):
        federation.client_round(0, settings=settings)
    for i in range(args.rounds * len(KINDS)):
        kind = KINDS[i % len(KINDS)]
        profiler = found[kind]
        if profiler is None:
            start = time.perf_counter()
            federation.client_round(0, settings=settings)
            walls[kind].append(time.perf_counter() - start)
            continue
        with profiler.window("client") as win:
            federation.client_round(0, win.phase, settings)
        walls[kind].append(win.result.wall_s)
    per_edge = {k: p.describe().get("edge_wall_us_mean") for k, p in found.items() if p is not None}
    for p in found.values():
        if p is not None:
            p.close()
            p.meters.close()
    federation.close()
    return {k: statistics.median(v) for k, v in walls.items()}, per_edge


def trace_range(args, at_edges: bool) -> dict:
    """A traced window over the slow stepping counter: the range of its gpu rows' watts, all and resolved ones."""
    meters = discover(nvml_module=stand_in(args))
    if at_edges:
        meters = MeterSet(list(meters.meters))
    profiler = Profiler(meters)
    profiler.windows.start_trace(args.trace_hz)
    with profiler.window("client") as win:
        time.sleep(args.trace_seconds)
    profiler.windows.stop_trace()
    result = win.result
    profiler.close()
    meters.close()
    rows = [r for r in result.trace if r.column in ("gpu", "gpu_other")]
    if at_edges:  # the samples differenced interval by interval, as traces were drawn before
        from edgeprof.measure.trace import trace_rows

        rows = [r for r in trace_rows([*win.trace_points], profiler.domains, hz=args.trace_hz)
                if r.column in ("gpu", "gpu_other")]
    resolved = [r.w for r in rows if r.resolved]
    return {"rows": len(rows), "min": min(r.w for r in rows), "max": max(r.w for r in rows),
            "resolved": len(resolved), "resolved_min": min(resolved, default=None),
            "resolved_max": max(resolved, default=None)}


def _w(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds of each kind (default 200)")
    parser.add_argument("--tau", type=int, default=50)
    parser.add_argument("--backbone", default="mlp")
    parser.add_argument("--samples", type=int, default=600, help="synthetic samples in all (default 600)")
    parser.add_argument("--read-ms", type=float, default=3.0, help="one energy read of the stand-in (default 3)")
    parser.add_argument("--period-ms", type=float, default=100.0, help="its counter's update period (default 100)")
    parser.add_argument("--power-w", type=float, default=100.0, help="its constant power (default 100)")
    parser.add_argument("--trace-hz", type=float, default=50.0)
    parser.add_argument("--trace-seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.tau < 1 or min(args.read_ms, args.period_ms, args.power_w, args.trace_hz,
                                               args.trace_seconds) <= 0:
        print("bench_undisturbed: every figure must be positive", file=sys.stderr)
        return 2
    medians, per_edge = rounds(args)
    base = medians["unprofiled"]
    print(f"PFLEGO round, {args.backbone}, tau={args.tau}, {args.rounds} rounds of each kind in turn; stand-in NVML: "
          f"{args.read_ms:g} ms a read, counter every {args.period_ms:g} ms")
    print(f"{'':24} {'median round':>13} {'/ unprofiled':>13} {'profiler wall per edge':>23}")
    for kind in KINDS:
        edge = per_edge.get(kind)
        print(f"{kind:24} {medians[kind] * 1e3:>10.3f} ms {medians[kind] / base:>12.3f}x "
              f"{'-' if edge is None else f'{edge:.1f} us':>23}")
    print(f"power trace at {args.trace_hz:g} Hz over {args.trace_seconds:g} s, the stand-in drawing "
          f"{args.power_w:g} W:")
    print(f"{'':24} {'rows':>5} {'all rows W':>18} {'resolved rows':>14} {'resolved W':>18}")
    for name, at_edges in (("spans (now)", False), ("interval by interval", True)):
        t = trace_range(args, at_edges)
        print(f"{name:24} {t['rows']:>5} {_w(t['min']):>8} .. {_w(t['max']):<8} {t['resolved']:>14} "
              f"{_w(t['resolved_min']):>8} .. {_w(t['resolved_max']):<8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
