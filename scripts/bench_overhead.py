#!/usr/bin/env python
"""What one measured window costs the profiler, in microseconds, with a realistic meter set.

A window of a PFLEGO client round takes 8 samples (its two edges and the edges of ``cache_forward``,
``head_steps`` and ``joint_grad``); each sample reads the clocks and every meter. This script opens
``--windows`` such windows with nothing inside them over RAPL trees of 1, 8 and 16 package zones
(real files in a temporary folder, read by the production :class:`~edgeprof.meters.rapl.RaplMeter`) and
0, 2 and 8 GPUs (NVML through a stand-in module with pynvml's functions, one energy-counter call per GPU
a sample), and prints per window: the profiler's own accounting (``overhead_s``, thread CPU, and
``overhead_wall_s``) and the wall time of the empty window, all in microseconds.

With ``--trace-hz`` (default 50) it also prints what the power trace (``--trace``) costs over the same meter
sets: one tick (a sample of every cheap meter, timed here on the calling thread: the tracer's thread pays it, no
window is charged), turning a window's samples into trace rows (per interval), and, with the real tracer thread
over a ``--trace-seconds`` window, the rate it achieved and the share of one core the process used meanwhile (the
window's own thread sleeps).

A slow meter (a read above 200 us, NVML's energy counter on data-centre GPUs) is read off the measured thread:
``scripts/bench_undisturbed.py`` shows what that does to a round.

Side by side in the same run it times one counter read the way the RAPL meter reads now (the file kept
open, one ``os.pread``) against opening, reading and closing it each time (how it read before), and prints
the ratio.

Caveats printed with the figures: a tmpfs file is cheaper to read than a real ``energy_uj`` (the kernel
reads an MSR or MMIO register for each read, a few microseconds more a zone), and the stand-in NVML is a
Python function where the real one is a driver call (tens of microseconds a GPU on current drivers).

    python scripts/bench_overhead.py [--windows 2000] [--zones 1,8,16] [--gpus 0,2,8] [--trace-hz 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

from edgeprof.meters.discovery import MeterSet
from edgeprof.meters.nvml import NvmlMeter
from edgeprof.meters.rapl import RaplMeter
from edgeprof.meters.sysfs import IntFile
from edgeprof.measure.profiler import Profiler

#: the phases of a PFLEGO client round
PHASES = ("cache_forward", "head_steps", "joint_grad")


def powercap_tree(root: Path, zones: int) -> Path:
    """``class/powercap/intel-rapl:<i>`` with ``name`` package-<i>, ``energy_uj`` and its range."""
    for i in range(zones):
        zone = root / "class" / "powercap" / f"intel-rapl:{i}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{i}\n")
        (zone / "energy_uj").write_text(f"{1000 + i}\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
    return root


def nvml_stand_in(gpus: int) -> types.ModuleType:
    """pynvml's functions over ``gpus`` GPUs with energy counters (distinct PCI ids and UUIDs)."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        value = 3

    class PciInfo:
        def __init__(self, i: int) -> None:
            self.busId = f"00000000:{0x10 + i:02X}:00.0".encode()

    energy = [0] * gpus

    def total_energy(handle: int) -> int:
        energy[handle] += 1
        return energy[handle]

    def not_supported(*_):
        raise NVMLError()

    mod.NVMLError = NVMLError
    mod.NVML_ERROR_NOT_SUPPORTED = 3
    funcs = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: i, "nvmlDeviceGetName": lambda h: f"stand-in GPU {h}",
        "nvmlDeviceGetTotalEnergyConsumption": total_energy, "nvmlDeviceGetPowerUsage": lambda h: 50_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: (100_000, 300_000),
        "nvmlDeviceGetPciInfo": lambda h: PciInfo(h), "nvmlDeviceGetUUID": lambda h: f"GPU-{h:08d}-stand-in",
        "nvmlDeviceGetMigMode": not_supported,
    }
    for name, fn in funcs.items():
        setattr(mod, name, fn)
    return mod


def window_cost_us(meters: MeterSet, windows: int) -> tuple[float, float, float]:
    """Median per window over ``windows`` empty PFLEGO-shaped windows: (overhead_s, overhead_wall_s, wall_s), us."""
    profiler = Profiler(meters)
    cpu, wall_bookkeeping, wall = [], [], []
    for _ in range(windows):
        t0 = time.perf_counter()
        with profiler.window("client") as win:
            for phase in PHASES:
                with win.phase(phase):
                    pass
        wall.append(time.perf_counter() - t0)
        cpu.append(win.result.overhead_s)
        wall_bookkeeping.append(win.result.overhead_wall_s)
    return tuple(statistics.median(v) * 1e6 for v in (cpu, wall_bookkeeping, wall))


def trace_cost(meters: MeterSet, ticks: int, hz: float, seconds: float) -> tuple[float, float, float, float]:
    """The trace's cost: (one tick's thread CPU, us; trace rows per interval, us; achieved rate of the real
    tracer thread, Hz; the share of one core the process used while only the tracer worked, %)."""
    from edgeprof.measure.trace import trace_rows

    profiler = Profiler(meters)
    profiler.windows.start_trace(hz, thread=False)
    with profiler.window("client") as win:
        t0 = time.thread_time()
        for _ in range(ticks):
            profiler.windows.trace_tick()
        tick_us = (time.thread_time() - t0) / ticks * 1e6
    points = win.trace_points
    t0 = time.perf_counter()
    trace_rows(points, profiler.domains, hz=hz)
    rows_us = (time.perf_counter() - t0) / (len(points) - 1) * 1e6
    profiler.windows.start_trace(hz)  # the real thread, over an idle window
    cpu0 = time.process_time()
    with profiler.window("client") as win:
        time.sleep(seconds)
    share = (time.process_time() - cpu0) / win.result.wall_s * 100
    taken = profiler.windows.stop_trace()
    return tick_us, rows_us, taken / win.result.wall_s, share


def read_cost_us(path: Path, reads: int) -> tuple[float, float]:
    """One counter read, microseconds: (kept open + pread, open/read/close), best of 5 batches each."""
    kept = IntFile(path, "RAPL counter", "")

    def reopen() -> int:
        with open(path) as fh:
            return int(fh.read())

    best = {}
    for name, read in (("pread", kept.read), ("open", reopen)):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reads):
                read()
            times.append((time.perf_counter() - t0) / reads)
        best[name] = min(times) * 1e6
    kept.close()
    return best["pread"], best["open"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--zones", default="1,8,16")
    parser.add_argument("--gpus", default="0,2,8")
    parser.add_argument("--trace-hz", type=float, default=50.0)
    parser.add_argument("--trace-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    zones = [int(v) for v in args.zones.split(",")]
    gpus = [int(v) for v in args.gpus.split(",")]
    if args.windows < 1 or min(zones) < 1 or min(gpus) < 0:
        print("bench_overhead: --windows and --zones must be >= 1, --gpus >= 0", file=sys.stderr)
        return 2

    print(f"{os.cpu_count()} CPUs; {args.windows} empty windows of {1 + len(PHASES)} spans (8 samples) each; "
          "medians per window, microseconds")
    print(f"{'RAPL zones':>10} {'GPUs':>5} {'overhead (thread CPU)':>22} {'overhead (wall)':>16} "
          f"{'empty window (wall)':>20} {'per sample (wall)':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for n_zones in zones:
            root = powercap_tree(Path(tmp) / f"z{n_zones}", n_zones)
            for n_gpus in gpus:
                meters = [RaplMeter(root)] + ([NvmlMeter(nvml_stand_in(n_gpus))] if n_gpus else [])
                with MeterSet(meters) as meter_set:
                    cpu, book, wall = window_cost_us(meter_set, args.windows)
                print(f"{n_zones:>10} {n_gpus:>5} {cpu:>22.1f} {book:>16.1f} {wall:>20.1f} {book / 8:>18.1f}")
        print(f"power trace at {args.trace_hz:g} Hz: one tick (thread CPU), trace rows per interval, and the real "
              f"tracer thread over an idle {args.trace_seconds:g} s window")
        print(f"{'RAPL zones':>10} {'GPUs':>5} {'tick (us)':>10} {'rows/interval (us)':>19} "
              f"{'achieved (Hz)':>14} {'of one core':>12}")
        for n_zones in zones:
            root = Path(tmp) / f"z{n_zones}"
            for n_gpus in gpus:
                meters = [RaplMeter(root)] + ([NvmlMeter(nvml_stand_in(n_gpus))] if n_gpus else [])
                with MeterSet(meters) as meter_set:
                    tick, rows, rate, share = trace_cost(meter_set, args.windows, args.trace_hz, args.trace_seconds)
                print(f"{n_zones:>10} {n_gpus:>5} {tick:>10.1f} {rows:>19.1f} {rate:>14.1f} {share:>11.3f}%")
        counter = Path(tmp) / "z1" / "class" / "powercap" / "intel-rapl:0" / "energy_uj"
        pread_us, open_us = read_cost_us(counter, 20_000)
    print(f"one counter read: kept open + pread {pread_us:.2f} us, open/read/close {open_us:.2f} us "
          f"(ratio {open_us / pread_us:.2f}x)")
    print("caveats: tmpfs files stand in for sysfs (a real energy_uj read adds the kernel's register read, a few "
          "us a zone); the NVML stand-in is a Python function (a real driver call is tens of us a GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
