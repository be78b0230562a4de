#!/usr/bin/env python
"""Where a PFLEGO round's time goes on a GPU, part by part: a short diagnostic run beside ``scripts/gpu_check.py``.

    PYTHONPATH=. python scripts/gpu_probe.py [--device cuda] [--rounds 12] [--json OUT.json]

Prints, each measured on this machine (``--device cpu`` runs the same code on the CPU, to test this script):

1. the host cost of each call a profiler window makes (median over many calls, microseconds): the clocks, a CUDA
   event made and recorded, the current stream, the device's peak-memory reset and read, the peak-RSS reset and
   read, NVML's energy counter; and the threads in the process (the process CPU clock sums theirs);
2. PFLEGO's head steps (N=600, K=5, M=64 and 384, tau 50 and 100): every variant ``HeadPrograms.prepare`` tunes
   (captured graphs of the eager steps per split, the Triton kernel per program count), each checked against the
   numpy head to the float32 floor, and its replay time;
3. the upload of a round's weights (``Compute.load``) for cnn-omniglot and cnn-cifar: one copy per tensor against
   the staged single transfer, each alone and before a forward, against the forward alone (synchronised, best of 20);
4. a PFLEGO and a FedAvg round at tau=50 on both backbones, unprofiled and profiled (``gpu_check``'s interleaved
   rounds) and the host seconds spent inside each of the window engine's calls (begin, phase edges, end, resolve);
5. (``--parts nvml``) PFLEGO rounds at tau=50 on both backbones, unprofiled and back to back, with no other thread,
   then beside a thread reading NVML's energy counter every 24 ms (four readings a counter update, the series'
   old period) and every :func:`edgeprof.measure.series.period_for` of that counter (the series' period now):
   each set's median, mean and slowest round (a read stalls the measured thread's CUDA work now and then);
6. (``--parts edges``) the profiler inside real PFLEGO rounds at tau=50 on both backbones: rounds unprofiled,
   profiled with their figures made later (as a run writes its rows: when the series has passed them), profiled
   with each window's figures asked for at once (a read of the slow meters forced after every round, as
   ``gpu_check`` did; that kind's time holds the wait for the reading), and profiled with every engine call and every profiler piece in it timed (the sync, the
   peak resets and reads, the sample, the clocks, the device marker), interleaved; per set the median round, and
   per engine call and piece the median microseconds; then the same pieces alone, in a tight loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def _us(fn, n: int = 2000) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _pieces(compute, device: str) -> dict:
    """The host cost of each call a profiler window makes, alone in a tight loop (median us of many calls): the
    clocks, the peak-RSS reset and read, the device's peak reset and read, its sync; on a device whose queue is
    marked, the kind's kept current stream, an event of the marker's own type made and recorded, a marker made new
    (the kind's free events unused) and one recorded again from them; the threads in the process."""
    from edgeprof.measure.profiler import PeakRss

    compute.tensor(np.zeros(1024, dtype=np.float32))  # the allocator made (a peak reset refuses before it)
    out = {"threads": threading.active_count(), "perf_counter": _us(time.perf_counter),
           "process_time": _us(time.process_time), "thread_time": _us(time.thread_time)}
    try:
        import os

        out["os_threads"] = len(os.listdir("/proc/self/task"))
    except OSError:
        pass
    rss = PeakRss()
    out["peak_rss_reset"], out["peak_rss_read"] = _us(rss.reset), _us(rss.read_mb)
    out["device_peak_reset"], out["device_peak_read"] = _us(compute.reset_peak_memory), _us(compute.peak_memory_mb)
    out["sync_idle"] = _us(compute.sync)
    if compute.can_mark():
        # through the seam (scripts never reach torch's device API themselves)
        out["current_stream_kept"] = _us(lambda: compute.kind.current_stream(device))
        event_type = type(compute.mark())
        out["event_new"] = _us(lambda: event_type(enable_timing=True))
        stream, event = compute.kind.current_stream(device), event_type(enable_timing=True)
        out["event_record"] = _us(lambda: event.record(stream))
        out["compute_mark"] = _us(compute.mark)  # nothing given back: each a new event
        compute.sync()
        compute.release([compute.mark()])
        out["compute_mark_reused"] = _us(lambda: compute.release([compute.mark()]))  # one event, recorded again
        compute.sync()
    return out


def host_costs(device: str) -> dict:
    from edgeprof.nn.compute import device_compute

    compute = device_compute(device)
    out = _pieces(compute, device)
    out.update(_window_costs(compute, device))
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["nvml_energy"] = _us(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), 200)
    except Exception as err:  # no NVML here
        out["nvml_energy"] = f"unavailable: {type(err).__name__}"
    return out


def _window_costs(compute, device: str) -> dict:
    """A profiler with the device over this machine's meters (as a run opens them): each of a window's pieces alone,
    then empty windows of three empty phases (median per call, us) in three set-ups: traced at 50 Hz, not traced,
    and over the CPU-time estimate alone (no NVML: no series or sampler thread beside the measured one), so that
    what the threads beside it cost the measured thread shows."""
    from edgeprof.config import RunConfig
    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.meters.estimate import CpuTimeEstimateMeter
    from edgeprof.session.run import open_meters

    out = {}
    with open_meters(RunConfig(device=device), compute.device) as meters:
        profiler = Profiler(meters, device=compute)
        try:
            out["sample"] = _us(profiler.sample, 500)
            out["clocks"] = _us(profiler.clocks, 500)
            out["reset_peak_rss"] = _us(profiler.reset_peak_rss, 500)
            out["read_peak_rss"] = _us(profiler.read_peak_rss_mb, 500)
            out["reset_device_peak"] = _us(profiler.reset_device_peak, 500)
            out["read_device_peak"] = _us(profiler.read_device_peak_mb, 500)
            if profiler.marks:
                out["profiler_mark"] = _us(profiler.mark, 500)
            out["meters"] = [f"{d.name} ({d.method})" for d in profiler.domains]
            profiler.windows.start_trace(50.0)
            out["traced"] = _empty_windows(compute, profiler)
            out["traced_profiled"] = _profiled_windows(compute, profiler)
            profiler.windows.stop_trace()
            out["untraced"] = _empty_windows(compute, profiler)
        finally:
            profiler.windows.stop_trace()
            profiler.close()
    alone = Profiler(MeterSet([CpuTimeEstimateMeter()]), device=compute)
    try:
        out["estimate_only_untraced"] = _empty_windows(compute, alone)
    finally:
        alone.close()
    return out


def _profiled_windows(compute, profiler, windows: int = 300, top: int = 20) -> list:
    """The empty windows of :func:`_empty_windows` under cProfile: the functions with the most own time, each as
    "own us a window, calls a window, name" (cProfile slows every call; the shares are what it tells)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    _empty_windows(compute, profiler, windows)
    profile.disable()
    stats = pstats.Stats(profile).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    return [f"{tt / windows * 1e6:.1f} us, {nc / windows:.1f} calls: {name} ({Path(file).name}:{line})"
            for (file, line, name), (_, nc, tt, _, _) in rows]


def _empty_windows(compute, profiler, windows: int = 300) -> dict:
    """Medians (us) of an empty window's begin, of its six phase edges (three empty phases) each, of its end."""
    engine = profiler.windows
    begins, ends, edges = [], [], []
    for _ in range(windows):
        compute.sync()
        t0 = time.perf_counter()
        win = engine.begin("client")
        t1 = time.perf_counter()
        for name in ("a", "b", "c"):
            with win.phase(name):
                pass
        t2 = time.perf_counter()
        engine.end(win)
        t3 = time.perf_counter()
        win.result  # noqa: B018 (resolved after the timing, as the rounds' windows are)
        begins.append(t1 - t0)
        edges.append((t2 - t1) / 6)
        ends.append(t3 - t2)
    return {"begin": statistics.median(begins) * 1e6, "phase_edge": statistics.median(edges) * 1e6,
            "end": statistics.median(ends) * 1e6}


def head_variants(device: str) -> list:
    from edgeprof.nn import head as headlib
    from edgeprof.nn.compute import device_compute
    from edgeprof.nn.head_program import HeadPrograms
    from edgeprof.nn.tolerances import float32_atol

    compute = device_compute(device)
    rows = []
    for m, steps in ((64, 49), (64, 99), (384, 49)):
        rng = np.random.default_rng(m + steps)
        n, k = 600, 5
        feats_b = headlib.with_bias(rng.normal(size=(n, m)).astype(np.float32))
        labels = rng.integers(0, k, size=n)
        w0 = rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32)
        programs = HeadPrograms(compute)
        t0 = time.perf_counter()
        best = programs.prepare(n, k, m + 1, steps)
        setup = time.perf_counter() - t0
        want = headlib.gradient_steps(w0, feats_b, labels, 0.2, steps)
        atol = float32_atol(want, fan_in=max(n, m + 1), depth=3 * steps + 1)
        f, y = compute.tensor(feats_b), compute.labels(labels)
        errors = {}
        for variant in [best.variant] + [v for v in programs.tuning.get(best.key, {}) if v != best.variant]:
            program = _program_of(programs, best, variant)
            got = compute.host(program.run(w0, f, y, 0.2))
            errors[variant] = float(np.abs(got - want).max())
        rows.append({"n": n, "m": m, "k": k, "steps": steps, "kept": best.variant, "setup_s": setup, "atol": atol,
                     "failed": dict(programs.failed),
                     "replay_ms": {v: t * 1e3 for v, t in programs.tuning.get(best.key, {}).items()},
                     "max_error": errors, "within": all(e <= atol for e in errors.values())})
    return rows


def _program_of(programs, best, variant: str):
    """The kept program, or a fresh capture of another variant (for its check)."""
    from edgeprof.nn.head_program import HeadProgram

    if variant == best.variant:
        return best
    words = variant.split()
    split, kernel = (int(words[2]), 0) if words[0] == "graph" else (1, int(words[1]))
    program = HeadProgram(programs.compute, best.key, best.w, split, kernel)
    if programs.compute.can_capture():
        program.capture()
    return program


def uploads(device: str) -> list:
    import torch

    from edgeprof.nn.backbones import build_backbone, input_shape_for
    from edgeprof.nn.compute import PerTensorUpload, resolve

    rows = []
    for backbone in ("cnn-omniglot", "cnn-cifar"):
        module = build_backbone(backbone, input_shape_for(backbone, "synthetic"))
        compute = resolve(device, "auto", module, None)
        module = compute.module(module)
        arrays = [np.random.default_rng(i).normal(size=tuple(p.shape)).astype(np.float32) * 0.01
                  for i, p in enumerate(module.parameters())]
        x = np.random.default_rng(0).random((600, *module.input_shape), dtype=np.float32)
        staged = compute.kind.uploader(compute.device)
        per = PerTensorUpload(compute.kind, compute.device)
        targets = list(module.parameters())

        def best(fn, repeats: int = 20) -> float:
            fn()
            times = []
            for _ in range(repeats):
                compute.sync()
                t0 = time.perf_counter()
                fn()
                compute.sync()
                times.append(time.perf_counter() - t0)
            return min(times) * 1e3

        with torch.no_grad():
            row = {"backbone": backbone, "parameters": sum(a.size for a in arrays), "tensors": len(arrays),
                   "uploader": staged.describe(),
                   "per_tensor_ms": best(lambda: per.load(targets, arrays)),
                   "staged_ms": best(lambda: staged.load(targets, arrays)),
                   "forward_ms": best(lambda: compute.forward(module, x)),
                   "per_tensor_then_forward_ms": best(lambda: (per.load(targets, arrays), compute.forward(module, x))),
                   "staged_then_forward_ms": best(lambda: (staged.load(targets, arrays), compute.forward(module, x)))}
            staged.load(targets, arrays)
            compute.sync()
            row["staged_exact"] = all(np.array_equal(compute.host(t), a) for t, a in zip(targets, arrays))
        rows.append(row)
    return rows


class _Timed:
    """Host seconds inside each of the window engine's calls, summed (patched onto the class for the run)."""

    NAMES = ("begin", "end", "_enter_phase", "_exit_phase", "_resolve")

    def __init__(self) -> None:
        from edgeprof.measure import windows

        self.windows = windows
        self.seconds = {n: 0.0 for n in self.NAMES}
        self.calls = {n: 0 for n in self.NAMES}
        self._saved = {n: getattr(windows.Windows, n) for n in self.NAMES}

    def __enter__(self):
        for name, real in self._saved.items():
            setattr(self.windows.Windows, name, self._wrap(name, real))
        return self

    def _wrap(self, name, real):
        def timed(engine, *a, **kw):
            t0 = time.perf_counter()
            try:
                return real(engine, *a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
        return timed

    def __exit__(self, *exc) -> None:
        for name, real in self._saved.items():
            setattr(self.windows.Windows, name, real)

    def per_call_us(self) -> dict:
        return {n: round(self.seconds[n] / self.calls[n] * 1e6, 1) for n in self.NAMES if self.calls[n]}


def rounds(device: str, n_rounds: int) -> dict:
    import gpu_check

    out = {}
    for backbone in ("cnn-omniglot", "cnn-cifar"):
        args = gpu_check.parse_args(["--out", "/tmp/probe", "--device", device, "--taus", "50",
                                     "--profiler-rounds", str(n_rounds)])
        with _Timed() as timed:
            cost = gpu_check.profiler_cost(backbone, args, device)
        cost["engine_calls_us"] = timed.per_call_us()
        out[backbone] = cost
    return out


#: the periods of the neighbour thread :func:`nvml_neighbours` reads NVML's counter at (None: no such thread)
NEIGHBOUR_PERIODS = (None, 0.024, "series", None)


def nvml_neighbours(device: str, n_rounds: int, backbones=("cnn-omniglot", "cnn-cifar"), warmup_s: float = 1.0
                    ) -> dict:
    """PFLEGO's round at tau=50 back to back, alone and beside a thread reading NVML's energy counter (ms: median,
    mean, slowest of ``n_rounds``), per backbone; the counter's read cost and the series' period for it."""
    import gpu_check
    import pynvml

    from types import SimpleNamespace

    from edgeprof.meters.nvml import COUNTER_PERIOD_S
    from edgeprof.meters.sampler import Periodic
    from edgeprof.measure.series import period_for
    from edgeprof.rounds.simulate import build_federation

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read() -> None:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)

    cost = min(_us(read, 1) for _ in range(5)) / 1e6  # the fastest of five, as a run's meters measure it
    series_s = period_for([SimpleNamespace(update_period_s=COUNTER_PERIOD_S)], cost)  # what a run's series takes
    out: dict = {"read_ms": cost * 1e3, "series_period_s": series_s}
    args = gpu_check.parse_args(["--out", "/tmp/probe", "--device", device, "--taus", "50"])
    for backbone in backbones:
        _, clients, runs = gpu_check.ratio_runs(backbone, args, device)
        federation = build_federation(runs["pflego"], clients)
        sync = federation.runtime.compute.sync

        def round_ms() -> float:
            sync()
            start = time.perf_counter()
            federation.client_round(0)
            sync()
            return (time.perf_counter() - start) * 1e3

        try:
            start = time.perf_counter()
            while time.perf_counter() - start < warmup_s:
                round_ms()
            rows = []
            for period in NEIGHBOUR_PERIODS:
                seconds = series_s if period == "series" else period
                reader = None if seconds is None else Periodic(read, 1.0 / seconds, "probe-neighbour").start()
                try:
                    times = [round_ms() for _ in range(n_rounds)]
                finally:
                    if reader is not None:
                        reader.stop()
                rows.append({"reader_period_s": seconds, "median_ms": statistics.median(times),
                             "mean_ms": statistics.fmean(times), "max_ms": max(times)})
        finally:
            federation.close()
        out[backbone] = rows
    return out


#: the profiler's pieces :func:`edges` times inside each engine call (methods of the Profiler)
PIECES = ("sync", "reset_peak_rss", "reset_device_peak", "sample", "clocks", "mark", "read_peak_rss_mb",
          "read_device_peak_mb")
#: the engine's calls on the measured thread
ENGINE_CALLS = ("begin", "_enter_phase", "_exit_phase", "end")


class _InSitu:
    """Every engine call and every profiler piece of one profiler timed (per call, in microseconds), patched onto
    that profiler and its engine only."""

    def __init__(self, profiler) -> None:
        self.times: dict = {n: [] for n in (*ENGINE_CALLS, *PIECES)}
        for owner, names in ((profiler, PIECES), (profiler.windows, ENGINE_CALLS)):
            for name in names:
                setattr(owner, name, self._timed(name, getattr(owner, name)))

    def _timed(self, name, real):
        times = self.times[name]

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                times.append((time.perf_counter() - t0) * 1e6)
        return timed

    def medians(self) -> dict:
        return {n: round(statistics.median(t), 2) for n, t in self.times.items() if t}

    def calls(self) -> dict:
        return {n: len(t) for n, t in self.times.items() if t}


def edges(device: str, n_rounds: int, backbones=("cnn-omniglot", "cnn-cifar"), warmup_s: float = 1.0) -> dict:
    """The profiler inside PFLEGO's rounds at tau=50 (see the module docstring, item 6), per backbone; then the
    same pieces alone in a tight loop (:func:`_pieces`)."""
    import contextlib

    import gpu_check

    from edgeprof.algorithms.contract import no_phase
    from edgeprof.measure.profiler import Profiler
    from edgeprof.rounds.simulate import build_federation
    from edgeprof.session.run import open_meters

    args = gpu_check.parse_args(["--out", "/tmp/probe", "--device", device, "--taus", "50"])
    out: dict = {}
    for backbone in backbones:
        _, clients, runs = gpu_check.ratio_runs(backbone, args, device)
        run = runs["pflego"]
        with contextlib.closing(build_federation(run, clients)) as federation, \
                open_meters(run, federation.runtime.compute.device) as meters:
            compute = federation.runtime.compute
            settings = federation.settings_for(run)
            plain = Profiler(meters, device=compute)
            timed_profiler = Profiler(meters, device=compute)
            in_situ = _InSitu(timed_profiler)
            later: list = []

            def profiled(profiler, kind: str, force: bool):
                def round_() -> None:
                    with profiler.window("client") as win:
                        federation.client_round(0, win.phase, settings)
                    if force:
                        win.result  # noqa: B018 (asked for at once: the series reads now)
                    later.append((kind, win))
                return round_

            kinds = [("unprofiled", lambda: federation.client_round(0, no_phase, settings)),
                     ("profiled_later", profiled(plain, "profiled_later", False)),
                     ("profiled_at_once", profiled(plain, "profiled_at_once", True)),
                     ("profiled_timed", profiled(timed_profiler, "profiled_timed", False))]
            walls: dict = {k: [] for k, _ in kinds}
            own: dict = {k: [] for k, _ in kinds[1:]}

            def made(keep: bool) -> None:  # the windows' figures made (the series has passed most of them by now)
                for kind, win in later:
                    if keep:
                        own[kind].append(win.result.overhead_wall_s * 1e6)
                    else:
                        win.result  # noqa: B018
                later.clear()

            try:
                start = time.perf_counter()
                while time.perf_counter() - start < warmup_s:
                    for _, fn in kinds:
                        fn()
                        compute.sync()
                    made(False)
                for values in in_situ.times.values():
                    values.clear()
                for n in range(n_rounds):
                    turn = n % len(kinds)
                    for kind, fn in kinds[turn:] + kinds[:turn]:
                        compute.sync()
                        t0 = time.perf_counter()
                        fn()
                        compute.sync()
                        walls[kind].append(time.perf_counter() - t0)
                    if len(later) > 30:
                        made(True)
                made(True)
            finally:
                plain.close()
                timed_profiler.close()
            unprofiled = statistics.median(walls["unprofiled"])
            out[backbone] = {
                "rounds": {k: {"median_ms": round(statistics.median(v) * 1e3, 4),
                               "over_unprofiled": round(statistics.median(v) / unprofiled - 1.0, 4),
                               "paired": round(statistics.median(a / b for a, b in zip(v, walls["unprofiled"]))
                                               - 1.0, 4),
                               "own_us": round(statistics.median(own[k]), 2) if own.get(k) else None}
                           for k, v in walls.items()},
                "in_situ_us": in_situ.medians(), "in_situ_calls": in_situ.calls(),
                "series": plain.describe().get("series")}
    from edgeprof.nn.compute import device_compute

    out["alternatives_us"] = _pieces(device_compute(device), device)  # the same pieces alone, in a tight loop
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--parts", default="host,head,upload,rounds")
    args = parser.parse_args()
    parts = args.parts.split(",")
    results = {}
    for name, fn in (("host", lambda: host_costs(args.device)), ("head", lambda: head_variants(args.device)),
                     ("upload", lambda: uploads(args.device)), ("rounds", lambda: rounds(args.device, args.rounds)),
                     ("nvml", lambda: nvml_neighbours(args.device, max(args.rounds, 30))),
                     ("edges", lambda: edges(args.device, max(args.rounds, 30)))):
        if name not in parts:
            continue
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as err:  # a part that fails is reported and the next one runs
            import traceback

            traceback.print_exc()
            results[name] = f"FAILED: {type(err).__name__}: {err}"
        print(f"== {name} ({time.perf_counter() - t0:.1f} s)")
        print(json.dumps(results[name], indent=1, default=str), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
