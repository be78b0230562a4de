#!/usr/bin/env python
"""Validate a CUDA machine end to end: the GPU tests, then PFLEGO against FedAvg on the GPU with NVML's joules.

Needs only what a CUDA PyTorch image has (torch 2.1 or newer, onnxruntime, nvidia-ml-py, numpy, scipy, psutil,
typer, rich; no pydantic, flwr, codecarbon or plotly). From the checkout:

    PYTHONPATH=. python scripts/gpu_check.py --out DIR [--device cuda:0] [--taus 5,25,50,100] [--repeats 3]
                                             [--archive FILE.tar.gz]

0. the machine: GPU, driver, CUDA, power limit, torch, onnxruntime and its providers (``DIR/gpu_check.json``);
1. the GPU tests (``tests/test_gpu.py`` under pytest where it is installed, else the same checks of
   ``scripts/gpu_cases.py`` called directly);
2. the GPU's idle power (NVML power samples over ``--idle-seconds`` before anything runs);
3. the rule for PFLEGO's head steps on this device kind (``scripts/bench_head_steps.py``: numpy on the host
   against torch on the device, for a quarter, one and four times ``--samples`` local images);
4. ``sweep --device cuda --algos pflego,fedavg --trace --hold-seconds 2`` on ``cnn-omniglot`` and ``cnn-cifar``
   (one client of ``--samples`` local images; each client window held long enough for NVML's counter), while a thread samples the round's GPU's power (NVML's average and, where the
   GPU answers it, instant field) and utilisation at ``--sample-hz``, and reads its energy counter at both ends;
5. printed and written: the FedAvg/PFLEGO per-round ratio at tau=50 in wall time and in NVML joules (ratio of
   geometric means with its 95% interval), PFLEGO's and FedAvg's growth over tau with the sweep's verdicts and
   whether the claim is shown, the phase split, the GPU's utilisation inside and between the client windows,
   NVML's energy counter against the integral of its power samples (over each window of five samples or more and
   over the whole sweep), the idle power, the profiler's cost (each algorithm's round at tau=50 unprofiled and
   profiled, ``--profiler-rounds`` of each interleaved, their medians and difference beside the profiler's own
   figure of its overhead; the step fails where a profiled round is more than 2% slower), an unprofiled PFLEGO
   round against one bare forward and one forward+backward of the same backbone on the GPU (the floor), and the
   sustained figure: each algorithm's rounds back to back for ``--sustain-seconds`` inside one reading of the
   energy counter (joules per round from a window long against NVML's update period, where one round on a GPU
   may be shorter than it);
6. ``DIR/README.md`` (the table of those figures, the machine, the software and the commands, for
   ``profiles/reference/gpu-<kind>/``), the sweep reports and traces, the dashboard where plotly is installed
   (else the command that writes it elsewhere), and with ``--archive`` all of DIR in one file.

A step that fails is recorded and the next one runs: the figures, README and archive are written whatever failed.
Exit 0 when every step passed, 1 when a step or a GPU test failed; stopped by Ctrl-C, SIGTERM (``timeout``) or
SIGHUP it writes what is done (the JSON says how it stopped) and exits 130, 143 or 129. On a machine whose torch sees no CUDA GPU it
stops with one line (exit 2). ``--dry-run-on-cpu`` runs every step on the CPU instead, to test this script itself
where there is no GPU: it measures nothing about a GPU, and its README says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import shlex
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

from edgeprof.signals import STOP_EXCEPTIONS

ROOT = Path(__file__).resolve().parents[1]
#: this script's folder: gpu_cases.py and bench_head_steps.py, imported from here, lie next to it
HERE = Path(__file__).resolve().parent
BACKBONES = ("cnn-omniglot", "cnn-cifar")
PFLEGO_PHASES = ("cache_forward", "head_steps", "joint_grad")
ALGOS = ("pflego", "fedavg")
#: the most a profiled client round may be slower than the same round unprofiled (profiled / unprofiled - 1)
PROFILER_LIMIT = 0.02
#: rounds of each kind run and dropped before the profiler's cost is timed (kernels, caches, the ONNX session), and
#: the seconds they last at least: on an H200's host a PFLEGO round's first rounds took up to 4x its later ones
#: (2026-11-27; the host settling: the SM clock read 1980 MHz throughout), longer than two rounds of 5 ms
PROFILER_WARMUP = 2
PROFILER_WARMUP_S = 1.0
#: the sweep's metrics the figures are read from: wall time, the round's GPU's NVML joules, the same net of the
#: idle power the sweep measured before it ran (``--idle-seconds``; :mod:`edgeprof.report.gpu_energy`), the total
METRICS = ("wall_s", "gpu_j", "gpu_net_j", "energy_j")
#: the issue's targets (issue 36, Done when): the FedAvg/PFLEGO ratio at tau=50 at least this, in wall time and
#: NVML joules; PFLEGO's unprofiled round at most this many times its floor (one forward + one forward+backward)
RATIO_TARGET = 30.0
FLOOR_TARGET = 1.3


def fail(message: str, code: int = 2) -> None:
    print(f"gpu_check: error: {message}", file=sys.stderr)
    raise SystemExit(code)


#: the longest idle sampling and sustained run the script takes, seconds (a finite check is a finite wait)
MAX_SECONDS = 3600.0


def _finite(text: str) -> float:
    """An option's number, refused (by argparse, in one line) unless finite: ``inf`` or ``nan`` seconds or hertz
    would wait forever or compare false against every bound."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


class _OneLineParser(argparse.ArgumentParser):
    """argparse's refusals as this script's own one line and exit 2 (no usage block)."""

    def error(self, message: str) -> None:
        fail(message)


def parse_args(argv=None) -> argparse.Namespace:
    parser = _OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the reports, dashboard and figures")
    parser.add_argument("--device", default="cuda", help="the GPU to validate: cuda or cuda:N (default cuda)")
    parser.add_argument("--taus", default="5,25,50,100", help="local steps per round (default 5,25,50,100)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per (algorithm, tau) (default 3)")
    parser.add_argument("--samples", type=int, default=600, help="local training images (default 600)")
    parser.add_argument("--idle-seconds", type=_finite, default=3.0, help="idle power sampling (default 3 s)")
    parser.add_argument("--sample-hz", type=_finite, default=50.0, help="NVML sampling rate (default 50 Hz)")
    parser.add_argument("--trace-hz", type=_finite, default=50.0,
                        help="the sweeps' power trace rate (default 50 Hz; 0: no trace)")
    parser.add_argument("--hold-seconds", type=_finite, default=2.0,
                        help="the sweeps hold each client window this long (the round repeated inside it, the row "
                             "one round's mean), so that NVML's 100 ms counter resolves it to about 5%% "
                             "(default 2 s; 0: off)")
    parser.add_argument("--sustain-seconds", type=_finite, default=5.0,
                        help="per algorithm, rounds back to back for this long inside one reading of NVML's energy "
                             "counter, at the ratio's tau (default 5 s; 0: skip)")
    parser.add_argument("--profiler-rounds", type=int, default=15,
                        help="per algorithm, this many rounds at the ratio's tau profiled and as many unprofiled, "
                             "interleaved, for the profiler's cost (default 15; 0: skip)")
    parser.add_argument("--archive", type=Path, default=None,
                        help="also pack all of --out into this .tar.gz (one file to carry back)")
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
    if min(args.sustain_seconds, args.idle_seconds, args.profiler_rounds) < 0 or not 0 <= args.hold_seconds <= 600:
        fail("--sustain-seconds, --idle-seconds and --profiler-rounds must not be negative, --hold-seconds must be "
             "in 0..600")
    if max(args.sustain_seconds, args.idle_seconds) > MAX_SECONDS:
        fail(f"--sustain-seconds and --idle-seconds must be at most {MAX_SECONDS:g}")
    if args.trace_hz and not 1 <= args.trace_hz <= 1000:
        fail(f"--trace-hz must be in 1..1000 (0: no trace), got {args.trace_hz:g}")
    if args.archive is not None and not args.archive.name.endswith(".tar.gz"):
        fail(f"--archive must name a .tar.gz file, got {str(args.archive)!r}")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


# ---------------------------------------------------------------------------------------------------- NVML


def _nvml_try(fn, *args):
    """``fn(*args)``, or None where this GPU or this nvidia-ml-py lacks it."""
    try:
        value = fn(*args)
    except Exception:  # pynvml.NVMLError (not supported, no permission) or a binding too old to have it
        return None
    return value.decode() if isinstance(value, bytes) else value


def instant_power_w(nvml, handle):
    """The GPU's instant power (W), or None where it is not answered (``nvmlDeviceGetPowerUsage`` is a one-second
    average on Ampere (but GA100) and newer GPUs)."""
    from edgeprof.meters.nvml_gpus import instant_power_mw

    milliwatts = instant_power_mw(nvml, handle)
    return None if milliwatts is None else milliwatts / 1000.0


class NvmlSampler:
    """Samples one GPU through NVML on the project's sampling thread (:class:`edgeprof.meters.sampler.Periodic`),
    stamped with time.time(): ``samples`` holds (t, average power W, instant power W or nan, utilisation %);
    ``counter`` the energy counter (t, J) read on entry and on exit (empty where the GPU has none); ``error`` why
    the samples ended early (None while NVML answers)."""

    def __init__(self, nvml, handle, hz: float) -> None:
        from edgeprof.meters.sampler import Periodic

        self._nvml, self._handle = nvml, handle
        self.samples: list[tuple[float, float, float, float]] = []
        self.counter: list[tuple[float, float]] = []
        self._instant = instant_power_w(nvml, handle) is not None
        self._first_error: str | None = None
        self._thread = Periodic(self._sample, hz, "gpu-check-nvml")

    @property
    def error(self) -> str | None:
        return self._first_error or (str(self._thread.error) if self._thread.error is not None else None)

    def _sample(self) -> None:
        nvml, handle = self._nvml, self._handle
        now = time.time()
        power = _nvml_try(nvml.nvmlDeviceGetPowerUsage, handle)
        if power is None:  # no power at all: the samples end here, and say why
            raise RuntimeError("nvmlDeviceGetPowerUsage failed")
        instant = instant_power_w(nvml, handle) if self._instant else None
        util = _nvml_try(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        self.samples.append((now, power / 1000.0, math.nan if instant is None else instant,
                             math.nan if util is None else util))

    def _read_counter(self) -> None:
        millijoules = _nvml_try(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
        if millijoules is not None:
            self.counter.append((time.time(), millijoules / 1000.0))

    def __enter__(self) -> "NvmlSampler":
        self._read_counter()
        try:
            self._sample()  # one sample at the start; the thread takes the next one a period later
        except RuntimeError as err:
            self._first_error = str(err)
            return self
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._thread.stop()
        self._read_counter()


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


def integral_j(samples, start: float, end: float, column: int = 1) -> tuple[float, int]:
    """Trapezoid integral of the power in ``column`` of the samples over [start, end] (samples linearly
    interpolated at the edges; samples without that power skipped), and how many samples lie inside."""
    usable = [(s[0], s[column]) for s in samples if s[column] == s[column]]
    inside = [(t, p) for t, p in usable if start <= t <= end]
    before = [(t, p) for t, p in usable if t < start][-1:]
    after = [(t, p) for t, p in usable if t > end][:1]
    points = before + inside + after
    if len(points) < 2:
        return float("nan"), len(inside)
    ts, ps = zip(*points)
    grid = [start] + [t for t in ts if start < t < end] + [end]
    import numpy as np

    trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy 2 renamed it
    return float(trapezoid(np.interp(grid, ts, ps), grid)), len(inside)


# ---------------------------------------------------------------------------------------------------- steps


def environment(device: str, nvml=None, handle=None) -> dict:
    """The machine and the software the figures were measured with."""
    import torch

    from edgeprof.host import host_info, library_versions

    env = {"device": device, "host": host_info(), "libraries": library_versions(), "commit": _commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    env.update(_software())
    if device != "cpu":
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   multiprocessors=props.multi_processor_count)
    if handle is not None:
        env.update(_nvml_facts(nvml, handle))
    return env


def _software() -> dict:
    import onnxruntime
    import torch

    return {"torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "onnxruntime_providers": onnxruntime.get_available_providers()}


def _nvml_facts(nvml, handle) -> dict:
    limit = _nvml_try(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    cuda_driver = _nvml_try(nvml.nvmlSystemGetCudaDriverVersion)
    return {"driver": _nvml_try(nvml.nvmlSystemGetDriverVersion),
            "cuda_driver": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if cuda_driver else None,
            "power_limit_w": limit / 1000.0 if limit else None,
            "energy_counter": _nvml_try(nvml.nvmlDeviceGetTotalEnergyConsumption, handle) is not None,
            "instant_power_field": instant_power_w(nvml, handle) is not None}


def _commit():
    """The checkout's commit (with ``+changes`` where the tree differs), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def run_tests(out: Path) -> dict:
    """The GPU tests: pytest where installed (its JUnit XML kept in ``out``), else the plain checks. Counts of
    passed, failed and skipped tests."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(HERE))
        import gpu_cases

        counts = {"passed": 0, "failed": 0, "skipped": 0, "runner": "scripts/gpu_cases.py"}
        for check in gpu_cases.CHECKS:
            try:
                check()
                counts["passed"] += 1
                print(f"  pass  {check.__name__}")
            except Exception as err:  # a failing check is reported, the others still run
                counts["failed"] += 1
                print(f"  FAIL  {check.__name__}: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
        return counts
    import xml.etree.ElementTree as ElementTree

    xml = out / "gpu-tests.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-rs", "-p", "no:cacheprovider", "-m", "gpu",
                    f"--junitxml={xml}", "tests/test_gpu.py"], cwd=ROOT)
    root = ElementTree.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    return {"passed": total - failed - errors - skipped, "failed": failed + errors, "skipped": skipped,
            "runner": "pytest tests/test_gpu.py"}


def tests_line(tests) -> str:
    if not tests:
        return "not run"
    text = f"{tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped ({tests['runner']})"
    return ("FAILED: " if tests["failed"] else "") + text


def idle_power_w(nvml, handle, args) -> float:
    """The median of NVML's power samples over ``--idle-seconds`` before anything runs."""
    with NvmlSampler(nvml, handle, args.sample_hz) as idle:
        time.sleep(args.idle_seconds)
    if not idle.samples:
        raise RuntimeError(f"no NVML power sample in {args.idle_seconds:g} s ({idle.error or 'no reason given'})")
    watts = statistics.median(s[1] for s in idle.samples)
    print(f"2. idle power: {watts:.1f} W (median of {len(idle.samples)} samples)")
    return watts


def head_rule(device: str, samples: int) -> dict:
    """``scripts/bench_head_steps.py`` on this device for a quarter, one and four times the local set."""
    sys.path.insert(0, str(HERE))
    from bench_head_steps import measure

    return measure(device, sizes=(max(8, samples // 4), samples, 4 * samples))


def sweep_config(backbone: str, args, device: str):
    from edgeprof.config import EnergySettings, RunConfig
    from edgeprof.rounds.sweep import SweepConfig

    base = RunConfig(dataset="synthetic", synthetic_samples=max(2000, 2 * args.samples), clients=1,
                     participation=1.0, backbone=backbone, device=device, out=args.out,
                     run_name=f"gpu-check-{backbone}", progress=False, hold_seconds=args.hold_seconds,
                     energy=EnergySettings(trace_hz=args.trace_hz, idle_seconds=args.idle_seconds))
    return SweepConfig(base=base, algos=("pflego", "fedavg"), taus=args.taus, repeats=args.repeats,
                       samples_per_client=args.samples)


def sweep(backbone: str, args, device: str):
    from edgeprof.rounds.sweep import run_sweep

    return run_sweep(sweep_config(backbone, args, device))


def tau_for_ratio(taus) -> int:
    """50 where swept, else the largest tau under 50, else the smallest."""
    return 50 if 50 in taus else max(t for t in taus if t <= 50) if min(taus) <= 50 else min(taus)


def ratio_runs(backbone: str, args, device: str):
    """(the ratio's tau, the sweep's clients, each algorithm's run config at that tau): the rounds that the
    sustained figure and the profiler's cost run outside the sweep, on the sweep's client."""
    import dataclasses

    from edgeprof.config import EnergySettings
    from edgeprof.rounds.sweep import sweep_clients

    cfg = sweep_config(backbone, args, device)
    tau = tau_for_ratio(args.taus)
    runs = {algo: dataclasses.replace(cfg.base, algo=algo, tau=tau, energy=EnergySettings()).resolved()
            for algo in ALGOS}
    return tau, sweep_clients(cfg), runs


def sustained(backbone: str, args, device: str, nvml=None, handle=None) -> dict:
    """PFLEGO's and FedAvg's rounds at the ratio's tau, back to back for ``--sustain-seconds`` (three at least)
    inside one reading of NVML's energy counter, on the sweep's client, with no profiler: joules and seconds per
    round from a window long against NVML's update period, where a round alone may be shorter than it."""
    from edgeprof.rounds.simulate import build_federation

    tau, clients, runs = ratio_runs(backbone, args, device)

    def counter_j():
        millijoules = _nvml_try(nvml.nvmlDeviceGetTotalEnergyConsumption, handle) if handle is not None else None
        return None if millijoules is None else millijoules / 1000.0

    out: dict = {"tau": tau, "seconds": args.sustain_seconds}
    for algo, run in runs.items():
        federation = build_federation(run, clients)
        try:
            sync = federation.runtime.compute.sync
            federation.client_round(0)  # warm-up: kernels, caches, the ONNX session
            sync()
            j0, t0, rounds = counter_j(), time.perf_counter(), 0
            while rounds < 3 or time.perf_counter() - t0 < args.sustain_seconds:
                federation.client_round(0)
                rounds += 1
            sync()
            t1, j1 = time.perf_counter(), counter_j()
        finally:
            federation.close()
        entry = {"rounds": rounds, "wall_s": (t1 - t0) / rounds}
        if j0 is not None and j1 is not None:
            entry.update(gpu_j=(j1 - j0) / rounds, power_w=(j1 - j0) / (t1 - t0))
        out[algo] = entry
    out["ratio_wall_s"] = out["fedavg"]["wall_s"] / out["pflego"]["wall_s"]
    if "gpu_j" in out["pflego"] and "gpu_j" in out["fedavg"] and out["pflego"]["gpu_j"] > 0:
        out["ratio_gpu_j"] = out["fedavg"]["gpu_j"] / out["pflego"]["gpu_j"]
    return out


def profiler_cost(backbone: str, args, device: str) -> dict:
    """What the profiler costs a client round: per algorithm, ``--profiler-rounds`` rounds at the ratio's tau with
    no profiler (the federation's client round called with a no-op phase marker) and as many inside a profiler
    window with phases (as the sweep's rounds run: :func:`edgeprof.rounds.simulate.run_round`, traced at
    ``--trace-hz``; one round a window, not held), interleaved after :data:`PROFILER_WARMUP` passes lasting
    :data:`PROFILER_WARMUP_S` at least, on one federation and client (:func:`_interleaved_rounds`). Each round is
    timed with ``time.perf_counter`` between two waits for the device (``Compute.sync``). The meters are this
    machine's, discovered as a run discovers them (NVML on a GPU machine), and stay open throughout, as in a run: a
    thread of theirs that runs all the time slows both kinds alike. A profiled window's figures are made once the
    slow meters' series has passed it, as a run writes its rows (asking for them at once would have the series read
    NVML right then, beside the next round).
    Per algorithm: the median wall of each kind, their difference (:func:`profiler_verdict`) and the median of
    the profiled windows' own figure of their bookkeeping (``WindowResult.overhead_wall_s``)."""
    import contextlib

    from edgeprof.measure.profiler import Profiler
    from edgeprof.meters.discovery import MeterSet
    from edgeprof.session.run import open_meters
    from edgeprof.rounds.simulate import build_federation

    tau, clients, runs = ratio_runs(backbone, args, device)
    out: dict = {"tau": tau, "rounds": args.profiler_rounds, "warmup": PROFILER_WARMUP,
                 "warmup_s": PROFILER_WARMUP_S, "trace_hz": args.trace_hz,
                 "limit": PROFILER_LIMIT, "enforced": device != "cpu"}
    for algo, run in runs.items():
        with contextlib.closing(build_federation(run, clients)) as federation, \
                open_meters(run, federation.runtime.compute.device) as meters:
            compute = federation.runtime.compute
            profiler = Profiler(meters, device=compute)
            # beside it, where the device's queue is marked: a profiler with every phase edge waiting for the
            # device, as the profiler did before (what the markers spare a round), over the run's CPU-clock meters
            # alone: a second series thread reading NVML would disturb every kind's rounds
            waiting = (Profiler(MeterSet([m for m in meters.meters if m.from_cpu_clock]), device=_Waiting(compute))
                       if profiler.marks else None)
            if args.trace_hz:
                profiler.windows.start_trace(args.trace_hz)
            try:
                out[algo] = _interleaved_rounds(federation, profiler, federation.settings_for(run),
                                                args.profiler_rounds, waiting)
            finally:
                profiler.windows.stop_trace()
                profiler.close()  # the slow meters' series, before the meters close
                if waiting is not None:
                    waiting.close()
            out["meters"] = [f"{d.name} ({d.method})" for d in profiler.domains]
            described = profiler.describe()
            out["read_off_thread"], out["phase_edges"] = described["read_off_thread"], described["phase_edges"]
    return out


class _Waiting:
    """A device that cannot mark its queue: the profiler waits for it at every phase edge (its old way)."""

    def __init__(self, compute) -> None:
        self._compute = compute
        self.device, self.kind_name = compute.device, compute.kind_name

    def sync(self) -> None:
        self._compute.sync()

    def reset_peak_memory(self) -> None:
        self._compute.reset_peak_memory()

    def peak_memory_mb(self):
        return self._compute.peak_memory_mb()


def _interleaved_rounds(federation, profiler, settings, rounds: int, waiting=None) -> dict:
    """Client 0's round unprofiled, then profiled (and, with ``waiting``, profiled by a profiler that waits for the
    device at every phase edge), the kinds' order turning by one at each pass so that none always follows another;
    first :data:`PROFILER_WARMUP` passes and at least :data:`PROFILER_WARMUP_S` of them (dropped), then ``rounds``
    passes. The figures: each kind's median; ``paired_difference``, the median over the passes of profiled over
    unprofiled in the same pass, less one (a drift slower than a pass cancels in it)."""
    from edgeprof.algorithms.contract import no_phase

    sync = federation.runtime.compute.sync

    def unprofiled() -> None:
        federation.client_round(0, no_phase, settings)

    def with_profiler(prof):
        def profiled():
            with prof.window("client") as win:
                federation.client_round(0, win.phase, settings)
            return win  # its figures are made after the timing (a slow meter's series is read off this thread)
        return profiled

    kinds = [("unprofiled", unprofiled), ("profiled", with_profiler(profiler))]
    if waiting is not None:
        kinds.append(("waiting", with_profiler(waiting)))
    walls: dict = {kind: [] for kind, _ in kinds}
    overheads, phases = [], []
    unread: list = []  # (timed, window): figures made once the series has passed them, as a run's rows are

    def read(wait: bool) -> None:
        while unread and (wait or unread[0][1].ready()):
            timed, win = unread.pop(0)
            if timed:
                overheads.append(win.result.overhead_wall_s)
                phases.append({n: p.wall_s for n, p in win.result.phases.items()})
            else:
                win.result  # noqa: B018 (made, as a timed window's are)

    passes, warm, started = 0, 0, time.perf_counter()
    while passes < rounds:
        timed = warm >= PROFILER_WARMUP and time.perf_counter() - started >= PROFILER_WARMUP_S
        turn = (passes if timed else warm) % len(kinds)
        for kind, fn in kinds[turn:] + kinds[:turn]:
            sync()
            start = time.perf_counter()
            win = fn()
            sync()
            if timed:
                walls[kind].append(time.perf_counter() - start)
            if kind == "profiled":
                unread.append((timed, win))
            elif win is not None:
                unread.append((False, win))
        read(wait=False)
        passes, warm = (passes + 1, warm) if timed else (passes, warm + 1)
    read(wait=True)
    entry = {"unprofiled_wall_s": statistics.median(walls["unprofiled"]),
             "profiled_wall_s": statistics.median(walls["profiled"]),
             "paired_difference": statistics.median(p / u for p, u in zip(walls["profiled"], walls["unprofiled"]))
             - 1.0,
             "warmup_passes": warm, "walls_s": walls, "overhead_wall_s": statistics.median(overheads),
             "phases_s": {n: statistics.median(p[n] for p in phases) for n in (phases[0] if phases else {})}}
    if waiting is not None:
        entry["waiting_wall_s"] = statistics.median(walls["waiting"])
        entry["waiting_difference"] = entry["waiting_wall_s"] / entry["unprofiled_wall_s"] - 1.0
    return {**entry, **profiler_verdict(entry["unprofiled_wall_s"], entry["profiled_wall_s"])}


def profiler_verdict(unprofiled_s: float, profiled_s: float) -> dict:
    """The rule: ``difference`` = profiled / unprofiled - 1; ``passed`` when it is at most :data:`PROFILER_LIMIT`."""
    difference = profiled_s / unprofiled_s - 1.0
    return {"difference": difference, "passed": difference <= PROFILER_LIMIT}


def check_profiler_cost(cost: dict) -> None:
    """Fail (raise) where a profiled round was more than :data:`PROFILER_LIMIT` slower than the unprofiled one."""
    over = [f"{algo} {cost[algo]['difference']:+.1%}" for algo in ALGOS if not cost[algo]["passed"]]
    if over:
        raise RuntimeError(f"a profiled round is more than {PROFILER_LIMIT:.0%} slower than the same round "
                           f"unprofiled at tau={cost['tau']}: {', '.join(over)}")


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


# ---------------------------------------------------------------------------------------------------- pace

#: the side of the measured float32 GEMM (n x n @ n x n) on a GPU and, in a dry run, on the CPU
GEMM_N = {"gpu": 8192, "cpu": 512}
#: the tau whose round the head steps' share is read at (the sweep's largest where 100 is not swept)
HEAD_SHARE_TAU = 100


def measured_gemm(device: str, repeats: int = 5) -> dict:
    """A large float32 ``torch.mm`` on the device under the run's numerics (FP32), best of ``repeats``,
    synchronised: the matmul ceiling this device reaches, beside its datasheet peak."""
    import numpy as np
    import torch

    from edgeprof.nn.backbones import build_backbone
    from edgeprof.nn.compute import resolve

    compute = resolve(device, "contiguous:all", build_backbone("mlp"), None)
    n = GEMM_N["gpu" if compute.tensor(np.zeros(1, dtype=np.float32)).is_cuda else "cpu"]  # where it really runs
    a, b = (compute.tensor(np.random.default_rng(i).random((n, n), dtype=np.float32)) for i in (0, 1))
    best = float("inf")
    for _ in range(repeats + 1):  # the first one warms cuBLAS up
        compute.sync()
        start = time.perf_counter()
        torch.mm(a, b)
        compute.sync()
        best = min(best, time.perf_counter() - start)
    return {"n": n, "seconds": best, "tflops": 2.0 * n**3 / best / 1e12}


def fp32_peak(device: str) -> dict:
    """The device's datasheet FP32 peak (:mod:`edgeprof.hardware.peak`), TFLOP/s, and how it was obtained."""
    import torch

    from edgeprof.hardware import peak as peaklib

    estimate = (peaklib.cpu_fp32_peak() if device == "cpu"
                else peaklib.gpu_fp32_peak(torch.cuda.get_device_properties(torch.device(device))))
    return {"tflops": estimate.gflops / 1e3, "how": peaklib.describe(estimate)}


def pass_flops(backbone: str, samples: int, classes: int) -> dict:
    """FLOPs (:mod:`edgeprof.hardware.flops`) of one forward (F) and one forward+backward (F+B) of the backbone over
    ``samples`` images, and of one head step (two products of N x K x (M+1))."""
    from edgeprof.hardware.flops import count_flops
    from edgeprof.nn.backbones import build_backbone, input_shape_for

    module = build_backbone(backbone, input_shape_for(backbone, "synthetic"))
    count = count_flops(module, module.input_shape, samples)
    return {"forward": count.forward, "forward_backward": count.train,
            "head_step": 2 * 2 * samples * classes * (module.feature_dim + 1)}


def pace(fig: dict, flops: dict, gemm: dict | None, peak: dict | None) -> dict:
    """Each timed pass's TFLOP/s and share of the FP32 peak and of the measured GEMM; the unprofiled PFLEGO round
    against its floor (one forward + one forward+backward); the ratio's limit by FLOPs,
    tau*(F+B) / (F + F+B + (tau-1) head steps), beside the measured FedAvg/PFLEGO ratio."""
    tau, cost = fig["tau_for_ratio"], fig.get("profiler_cost") or {}
    f, fb, head = flops["forward"], flops["forward_backward"], flops["head_step"]
    timed = {"forward": (f, fig.get("floor_forward_s")), "forward+backward": (fb, fig.get("floor_forward_backward_s"))}
    if cost:
        timed[f"PFLEGO round at tau={tau}"] = (f + fb + (tau - 1) * head, cost["pflego"]["unprofiled_wall_s"])
        timed[f"FedAvg round at tau={tau}"] = (tau * fb, cost["fedavg"]["unprofiled_wall_s"])
    passes = {}
    for name, (count, seconds) in timed.items():
        if seconds:
            rate = count / seconds / 1e12
            passes[name] = {"flops": count, "seconds": seconds, "tflops": rate,
                            "of_peak": rate / peak["tflops"] if peak and peak["tflops"] else None,
                            "of_gemm": rate / gemm["tflops"] if gemm else None}
    floor = (fig.get("floor_forward_s") or 0) + (fig.get("floor_forward_backward_s") or 0)
    return {"tau": tau, "passes": passes, "flops": flops,
            "round_over_floor": cost["pflego"]["unprofiled_wall_s"] / floor if cost and floor else None,
            "ratio_limit": tau * fb / (f + fb + (tau - 1) * head),
            "ratio_measured": (fig["ratio"].get("wall_s") or {}).get("value"), "head_share": fig.get("head_share")}


def pace_lines(p: dict) -> list[tuple[str, str]]:
    """(what, figure) pairs of :func:`pace`."""
    lines = [(f"pace: {name}", f"{_f(a['tflops'], '{:.3g}')} TFLOP/s ({_f(a['flops'] / 1e9, '{:.3g}')} GFLOP in "
                               f"{_f(a['seconds'], '{:.4g}')} s), {_f(a['of_peak'], '{:.1%}')} of FP32 peak, "
                               f"{_f(a['of_gemm'], '{:.1%}')} of the measured GEMM")
             for name, a in p["passes"].items()]
    lines.append(("pace: PFLEGO round unprofiled / floor (forward + forward+backward)",
                  f"{_f(p['round_over_floor'], '{:.2f}')}x"))
    share = p.get("head_share") or {}
    lines.append((f"pace: head steps' share of the PFLEGO round at tau={share.get('tau', '-')}",
                  f"{_f(share.get('share'), '{:.2%}')} (target under 5%)"))
    lines.append((f"pace: FedAvg/PFLEGO at tau={p['tau']}, limit by FLOPs tau*(F+B)/(F + F+B + head) / measured",
                  f"{_f(p['ratio_limit'], '{:.3g}')}x / {_f(p['ratio_measured'], '{:.3g}')}x"))
    return lines


# ---------------------------------------------------------------------------------------------------- figures


def _median(rows, column: str) -> float:
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
    return statistics.median(values) if values else float("nan")


def _interval(iv) -> dict:
    return {"value": iv.value, "lo": iv.lo, "hi": iv.hi}


def _spread(values) -> dict:
    return {"n": len(values), "median": statistics.median(values) if values else None,
            "min": min(values) if values else None, "max": max(values) if values else None}


def figures(csv_path: Path, sampler, taus) -> dict:
    """The figures of one backbone's sweep (and of the NVML samples taken while it ran, where ``sampler``)."""
    from edgeprof.report import gpu_energy
    from edgeprof.report.analysis import analyze, check_claim, is_short

    sidecar = json.loads(Path(csv_path).with_suffix(".json").read_text())
    with open(csv_path, newline="") as f:  # gpu_net_j where the sweep measured the GPU's idle power
        rows = gpu_energy.with_net((r for r in csv.DictReader(f) if r["kind"] == "client"), sidecar)
    by: dict = {}
    for r in rows:
        by.setdefault((r["algo"], int(r["tau"])), []).append(r)
    tau = tau_for_ratio(taus)
    metrics = [m for m in METRICS if any(r.get(m) not in (None, "") for r in rows)]
    analysis = analyze(rows, metrics)
    out: dict = {"tau_for_ratio": tau, "taus": list(taus), "rounds": len(rows), "ratio": {}, "growth": {},
                 "claim": {}}
    for metric in metrics:
        for algo in ("pflego", "fedavg"):  # joules of a window shorter than the meters' update period: unresolved
            cell = [r for r in by.get((algo, tau), []) if not (metric.endswith("_j") and is_short(r))]
            out[f"{algo}_{metric}"] = _median(cell, metric)
        ratio = next((r for r in analysis.ratios if (r.metric, r.variant, r.reference, r.tau)
                      == (metric, "fedavg", "pflego", tau)), None)
        if ratio is not None:
            out["ratio"][metric] = _interval(ratio.ratio)
        for algo in ("pflego", "fedavg"):
            fit = next((f for f in analysis.fits if (f.metric, f.variant) == (metric, algo)), None)
            if fit is not None:
                out["growth"].setdefault(algo, {})[metric] = {"verdict": fit.verdict.label,
                                                              **_interval(fit.verdict.growth)}
        if metric != "energy_j":  # energy_j adds the CPU's figure, an estimate where the host has no counter
            problems = check_claim(analysis, metric)
            out["claim"][metric] = {"shown": not problems, "problems": problems}
    out["phases"] = {algo: {p: _median(by.get((algo, tau), []), f"{p}_s") for p in phases}
                     for algo, phases in (("pflego", PFLEGO_PHASES), ("fedavg", ("local_steps",)))}
    top = HEAD_SHARE_TAU if HEAD_SHARE_TAU in taus else max(taus)
    cell = by.get(("pflego", top), [])
    out["head_share"] = {"tau": top, "share": _median(cell, "head_steps_s") / _median(cell, "wall_s") if cell
                         else None}
    out["gpu_method"] = sorted({r.get("gpu_method", "") for r in rows} - {""})
    out["energy_method"] = sorted({r.get("energy_method", "") for r in rows} - {""})
    out["short_windows"] = sum(is_short(r) for r in rows)
    idle = gpu_energy.gpu_idle(sidecar)
    out["sweep_idle"] = {"power_w": idle.power_w, "why": idle.why} if gpu_energy.measured(rows) else None
    if sampler is not None and sampler.samples:
        out.update(_nvml_figures(rows, sampler))
    return out


def trace_power(csv_path: Path, limit_w: float | None) -> dict | None:
    """The range of the round GPU's power (report column ``gpu``) in the sweep's trace, against the GPU's power
    limit: every interval with watts, the resolved unflagged ones (what the dashboard draws as measured), how many
    the trace flagged (``negative power``, ``above the N W power limit``) and how many lie above ``limit_w`` with
    no flag (the target: none). None where the sweep wrote no trace."""
    from edgeprof.report.trace_file import read_trace, trace_file

    path = trace_file(csv_path, json.loads(Path(csv_path).with_suffix(".json").read_text()))
    if path is None or not path.is_file():
        return None
    rows = [r for r in read_trace(path) if r["column"] == "gpu" and r["w"] == r["w"]]
    plain = [r["w"] for r in rows if not r["flag"]]
    resolved = [r["w"] for r in rows if not r["flag"] and r["resolved"]]
    return {"file": path.name, "intervals": len(rows), "limit_w": limit_w,
            "min_w": min(plain, default=None), "max_w": max(plain, default=None),
            "resolved": len(resolved), "resolved_min_w": min(resolved, default=None),
            "resolved_max_w": max(resolved, default=None),
            "flagged": len([r for r in rows if r["flag"]]), "flags": sorted({r["flag"] for r in rows if r["flag"]}),
            "over_limit_unflagged": len([w for w in plain if limit_w and w > limit_w])}


def check_trace_power(power: dict) -> None:
    """Fail (raise) where the trace holds a GPU power above the power limit with no flag."""
    if power["over_limit_unflagged"]:
        raise RuntimeError(f"{power['file']}: {power['over_limit_unflagged']} interval(s) of the GPU's power above "
                           f"its {power['limit_w']:g} W limit carry no flag (highest {power['max_w']:.0f} W)")


def targets(fig: dict) -> list[tuple[str, str, bool | None]]:
    """(target, the figure, met: True / False / None where not measured) of one backbone, the issue's Done when."""
    out: list[tuple[str, str, bool | None]] = []
    cost = (fig.get("profiler_cost") or {}).get("pflego")
    out.append(("profiler under 2% of PFLEGO's round",
                f"{_f(cost['difference'], '{:+.1%}')} (profiled / unprofiled - 1)" if cost else "not measured",
                cost["difference"] < PROFILER_LIMIT if cost else None))
    power = fig.get("trace_power")
    out.append(("no trace power above the power limit unflagged",
                (f"{power['over_limit_unflagged']} unflagged above {_f(power['limit_w'], '{:.0f}')} W "
                 f"(highest {_f(power['max_w'], '{:.0f}')} W; {power['flagged']} flagged)") if power else "no trace",
                power["over_limit_unflagged"] == 0 if power else None))
    for metric in ("wall_s", "gpu_j"):
        growth = fig["growth"].get("pflego", {}).get(metric)
        out.append((f"PFLEGO flat over tau in {metric}",
                    f"{_iv(growth, '{:+.1%}')}: {growth['verdict']}" if growth else "not measured",
                    growth["verdict"] == "flat" if growth else None))
    for metric in ("wall_s", "gpu_j"):
        ratio = fig["ratio"].get(metric)
        out.append((f"FedAvg/PFLEGO at tau={fig['tau_for_ratio']} at least {RATIO_TARGET:g}x in {metric}",
                    _iv(ratio, suffix="x") if ratio else "not measured",
                    ratio["value"] >= RATIO_TARGET if ratio else None))
    floor = (fig.get("pace") or {}).get("round_over_floor")
    out.append((f"PFLEGO's unprofiled round at most {FLOOR_TARGET:g}x its floor",
                f"{_f(floor, '{:.2f}')}x" if floor else "not measured", floor <= FLOOR_TARGET if floor else None))
    return out


def window_spans(rows) -> list[tuple[float, float, float]]:
    """(start, end, the round's GPU's joules) of each row's whole window, on time.time()'s clock: a held window
    (``held_rounds``) lasted its rounds' mean times their number, and drew as much more."""
    windows = []
    for r in rows:
        rounds = int(r["held_rounds"]) if r.get("held_rounds") else 1
        end = float(r["timestamp_s"])
        joules = float(r["gpu_j"]) * rounds if r.get("gpu_j") else math.nan
        windows.append((end - float(r["wall_s"]) * rounds, end, joules))
    return windows


def _nvml_figures(rows, sampler) -> dict:
    samples = sampler.samples
    windows = window_spans(rows)

    def in_a_window(t: float) -> bool:
        return any(s <= t <= e for s, e, _ in windows)

    first, last = min(w[0] for w in windows), max(w[1] for w in windows)
    inside = [s[3] for s in samples if s[3] == s[3] and in_a_window(s[0])]
    between = [s[3] for s in samples if s[3] == s[3] and first <= s[0] <= last and not in_a_window(s[0])]
    out: dict = {"gpu_util_in_windows_pct": statistics.mean(inside) if inside else math.nan,
                 "gpu_util_between_windows_pct": statistics.mean(between) if between else math.nan,
                 "nvml_samples": len(samples), "counter_over_integral": {}}
    columns = {"average": 1} | ({"instant": 2} if any(s[2] == s[2] for s in samples) else {})
    for name, column in columns.items():
        ratios = []
        for s, e, counter in windows:
            integral, n = integral_j(samples, s, e, column)
            if n >= 5 and counter == counter and integral > 0:
                ratios.append(counter / integral)
        entry = {"windows": _spread(ratios)}
        if len(sampler.counter) == 2:
            (t0, j0), (t1, j1) = sampler.counter
            integral, n = integral_j(samples, t0, t1, column)
            entry["whole_sweep"] = {"seconds": t1 - t0, "counter_j": j1 - j0, "integral_j": integral,
                                    "ratio": (j1 - j0) / integral if integral > 0 else None, "samples": n}
        out["counter_over_integral"][name] = entry
    return out


def _f(value, fmt: str = "{:.3g}") -> str:
    return "-" if value is None or value != value else fmt.format(value)


def _iv(entry, fmt: str = "{:.3g}", suffix: str = "") -> str:
    if not entry:
        return "-"
    text = _f(entry["value"], fmt) + suffix
    if entry.get("lo") is not None and entry.get("hi") is not None:
        text += f" [{_f(entry['lo'], fmt)}, {_f(entry['hi'], fmt)}]"
    return text


def figure_lines(fig: dict) -> list[tuple[str, str]]:
    """(what, figure) pairs of one backbone: the printed summary and the README's table rows."""
    tau, (lo, hi) = fig["tau_for_ratio"], (min(fig["taus"]), max(fig["taus"]))
    lines = [(f"FedAvg/PFLEGO per round at tau={tau}, wall",
              f"{_iv(fig['ratio'].get('wall_s'), suffix='x')} ({_f(fig['fedavg_wall_s'], '{:.4g}')} / "
              f"{_f(fig['pflego_wall_s'], '{:.4g}')} s)")]
    if "gpu_j" in fig["ratio"]:
        lines.append((f"FedAvg/PFLEGO per round at tau={tau}, NVML joules ({', '.join(fig['gpu_method'])})",
                      f"{_iv(fig['ratio']['gpu_j'], suffix='x')} ({_f(fig['fedavg_gpu_j'], '{:.4g}')} / "
                      f"{_f(fig['pflego_gpu_j'], '{:.4g}')} J)"))
    elif fig["gpu_method"]:
        lines.append((f"FedAvg/PFLEGO per round at tau={tau}, NVML joules",
                      f"not resolved: {fig['short_windows']} of {fig['rounds']} windows shorter than NVML's update "
                      "period (see the sustained figure)"))
    else:
        lines.append((f"FedAvg/PFLEGO per round at tau={tau}, NVML joules", "no NVML joules in the report"))
    if "gpu_net_j" in fig["ratio"]:
        lines.append((f"FedAvg/PFLEGO per round at tau={tau}, NVML joules net of idle",
                      f"{_iv(fig['ratio']['gpu_net_j'], suffix='x')} ({_f(fig['fedavg_gpu_net_j'], '{:.4g}')} / "
                      f"{_f(fig['pflego_gpu_net_j'], '{:.4g}')} J)"))
    for algo in ("pflego", "fedavg"):
        for metric, growth in fig["growth"].get(algo, {}).items():
            if metric != "energy_j":
                lines.append((f"{algo} growth tau {lo} -> {hi}, {metric}",
                              f"{_iv(growth, '{:+.1%}')}: {growth['verdict']}"))
    for metric, claim in fig["claim"].items():
        lines.append((f"claim (PFLEGO flat, FedAvg linear) in {metric}",
                      "shown" if claim["shown"] else "not shown: " + "; ".join(claim["problems"])))
    for algo, phases in fig["phases"].items():
        lines.append((f"{algo} phases at tau={tau}", ", ".join(f"{p} {_f(s, '{:.4f}')} s" for p, s in phases.items())))
    cost = fig.get("profiler_cost")
    if cost:
        lines += profiler_lines(cost)
    forward, both = fig.get("floor_forward_s"), fig.get("floor_forward_backward_s")
    if both:
        lines.append(("floor: one forward, one forward+backward", f"{_f(forward, '{:.4f}')} s, {_f(both, '{:.4f}')} s"))
        bare = cost["pflego"]["unprofiled_wall_s"] / both if cost else None
        lines.append(("PFLEGO round unprofiled / forward+backward", f"{_f(bare, '{:.2f}')}x"))
    if "gpu_util_in_windows_pct" in fig:
        lines.append(("GPU utilisation in / between client windows",
                      f"{_f(fig['gpu_util_in_windows_pct'], '{:.0f}')}% / "
                      f"{_f(fig['gpu_util_between_windows_pct'], '{:.0f}')}%"))
        for name, entry in fig["counter_over_integral"].items():
            w = entry["windows"]
            text = (f"windows: median {_f(w['median'], '{:.3f}')} ({_f(w['min'], '{:.3f}')}..{_f(w['max'], '{:.3f}')},"
                    f" {w['n']} windows of 5+ samples)")
            if "whole_sweep" in entry:
                s = entry["whole_sweep"]
                text += (f"; whole sweep: {_f(s['ratio'], '{:.3f}')} ({_f(s['counter_j'], '{:.1f}')} J counter / "
                         f"{_f(s['integral_j'], '{:.1f}')} J integral over {_f(s['seconds'], '{:.1f}')} s)")
            lines.append((f"NVML energy counter / integral of its {name} power", text))
    lines.append(("short windows (under NVML's update period)", str(fig["short_windows"])))
    idle = fig.get("sweep_idle")
    if idle is not None:
        lines.append(("the GPU's idle power the sweep measured (gpu_net_j = gpu_j - idle W x wall_s)",
                      f"{_f(idle['power_w'], '{:.1f}')} W" if idle["power_w"] is not None else f"none: {idle['why']}"))
    power = fig.get("trace_power")
    if power:
        lines.append(("the trace's GPU power: all unflagged intervals / resolved ones; flagged; the power limit",
                      f"{_f(power['min_w'], '{:.0f}')}..{_f(power['max_w'], '{:.0f}')} W over {power['intervals']} "
                      f"intervals / {_f(power['resolved_min_w'], '{:.0f}')}..{_f(power['resolved_max_w'], '{:.0f}')} W "
                      f"over {power['resolved']}; {power['flagged']} flagged"
                      + (f" ({', '.join(power['flags'])})" if power["flags"] else "")
                      + f"; limit {_f(power['limit_w'], '{:.0f}')} W, {power['over_limit_unflagged']} above it unflagged"))
    if fig.get("pace"):
        lines += pace_lines(fig["pace"])
    held = fig.get("sustained")
    if held:
        what = f"sustained: rounds back to back at tau={held['tau']} for {held['seconds']:g} s, one counter reading"
        text = f"FedAvg/PFLEGO {_f(held['ratio_wall_s'], '{:.3g}')}x wall"
        if "ratio_gpu_j" in held:
            text += f", {_f(held['ratio_gpu_j'], '{:.3g}')}x NVML joules"
        for algo in ("pflego", "fedavg"):
            a = held[algo]
            text += f"; {algo} {a['rounds']} rounds, {_f(a['wall_s'], '{:.4g}')} s"
            if "gpu_j" in a:
                text += f", {_f(a['gpu_j'], '{:.4g}')} J, {_f(a['power_w'], '{:.0f}')} W"
        lines.append((what, text))
    for what, text, met in targets(fig):
        lines.append((f"target: {what}", f"{'MET' if met else 'not measured' if met is None else 'MISSED'}: {text}"))
    return lines


def profiler_lines(cost: dict) -> list[tuple[str, str]]:
    """(what, figure) pairs of the profiler's cost: per algorithm, its round unprofiled and profiled."""
    how = f"median of {cost['rounds']} each, interleaved" + (f", traced at {cost['trace_hz']:g} Hz"
                                                              if cost["trace_hz"] else "")
    lines = []
    for algo in ALGOS:
        a = cost[algo]
        verdict = f"{'within' if a['passed'] else 'OVER'} the {cost['limit']:.0%} limit" + (
            "" if cost["enforced"] else "; not enforced on the CPU")
        lines.append((f"{algo} round at tau={cost['tau']}, unprofiled / profiled ({how})",
                      f"{_f(a['unprofiled_wall_s'], '{:.4g}')} / {_f(a['profiled_wall_s'], '{:.4g}')} s: "
                      f"{_f(a['difference'], '{:+.1%}')} ({verdict})"))
        if "paired_difference" in a:
            lines.append((f"{algo} profiled over unprofiled in the same pass, median of the {cost['rounds']} passes",
                          f"{_f(a['paired_difference'], '{:+.1%}')}"))
        if "waiting_wall_s" in a:
            lines.append((f"{algo} round profiled with a wait for the device at every phase edge (the old way; "
                          "its meters the CPU-clock ones alone)",
                          f"{_f(a['waiting_wall_s'], '{:.4g}')} s: {_f(a['waiting_difference'], '{:+.1%}')} against "
                          "unprofiled"))
        if a.get("phases_s"):
            lines.append((f"{algo} profiled round's phases ({cost.get('phase_edges', '-')})",
                          ", ".join(f"{n} {_f(v, '{:.4g}')} s" for n, v in a["phases_s"].items())))
        lines.append((f"{algo} profiled window, the profiler's own overhead_wall_s ({', '.join(cost['meters'])})",
                      f"{_f(a['overhead_wall_s'], '{:.3g}')} s ("
                      f"{_f(a['overhead_wall_s'] / a['unprofiled_wall_s'], '{:.1%}')} of the unprofiled round)"))
    return lines


def print_figures(backbone: str, fig: dict) -> None:
    print(f"\n{backbone} ({fig['rounds']} client rounds):")
    for what, value in figure_lines(fig):
        print(f"  {what}: {value}")


def write_readme(result: dict, out: Path, args) -> Path:
    """``out/README.md``: the machine, the software, the figures and the commands."""
    env = result["environment"]
    libs, host = env.get("libraries", {}), env.get("host", {})
    dry = env["device"] == "cpu"
    title = "DRY RUN ON THE CPU: no figure here measures a GPU" if dry else f"GPU reference: {env.get('gpu')}"
    lines = [f"# {title}", "",
             f"Written by `scripts/gpu_check.py` on {env.get('date', '-')} (commit {env.get('commit') or 'unknown'}).", "",
             "| machine | |", "|---|---|"]
    rows = [("device", env["device"] + (f" ({env['gpu']}, {env['gpu_memory_gib']} GiB, "
                                        f"{env['multiprocessors']} SMs)" if env.get("gpu") else "")),
            ("driver / CUDA", f"{env.get('driver') or '-'} / driver CUDA {env.get('cuda_driver') or '-'}, "
                              f"torch's CUDA {env.get('torch_cuda') or '-'}, cuDNN {env.get('cudnn') or '-'}"),
            ("power limit", f"{_f(env.get('power_limit_w'), '{:.0f}')} W"),
            ("NVML", f"energy counter: {env.get('energy_counter', '-')}, instant power field: "
                     f"{env.get('instant_power_field', '-')}, nvidia-ml-py {libs.get('nvidia-ml-py') or '-'}"),
            ("host CPU", f"{host.get('cpu_model', '-')}, {host.get('cpu_cores_logical', '-')} logical cores, "
                         f"{host.get('memory_gib', '-')} GiB"),
            ("software", f"torch {libs.get('torch')}, onnxruntime {libs.get('onnxruntime')} "
                         f"({', '.join(env['onnxruntime_providers'])}), numpy {libs.get('numpy')}, "
                         f"Python {host.get('python', '-')}"),
            ("idle power", f"{_f(result.get('idle_power_w'), '{:.1f}')} W (NVML, median)"),
            ("GPU tests", tests_line(result.get("tests")))]
    lines += [f"| {a} | {b} |" for a, b in rows]
    rule = result.get("head_rule")
    if rule and "rows" in rule:
        lines += ["", f"PFLEGO's head steps on {rule['device']} ({rule['steps']} steps, M={rule['features']}, "
                      f"K={rule['classes']}); the rule for this kind: {rule['rule']}.", "",
                  "| N | numpy on the host, s | torch on the device, s | torch/numpy |", "|---|---|---|---|"]
        lines += [f"| {r['n']} | {r['numpy_s']:.4f} | {r['torch_s']:.4f} | {r['torch_over_numpy']:.2f}x |"
                  for r in rule["rows"]]
    figs = {b: f for b, f in result["backbones"].items() if "error" not in f}
    if figs:
        names = list(figs)
        table = {}
        for b, fig in figs.items():
            for what, value in figure_lines(fig):
                table.setdefault(what, {})[b] = value
        held = (f", each client window held {args.hold_seconds:g} s (the round repeated inside it, the row one "
                f"round's mean)" if args.hold_seconds else "")
        lines += ["", f"Sweeps: one client of {args.samples} images, taus {','.join(map(str, args.taus))}, "
                      f"{args.repeats} rounds each{held}; ratios are of geometric means with their 95% intervals, "
                      "growth is the fitted line's over the swept taus.", "",
                  "| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines += [f"| {what} | " + " | ".join(v.get(b, "-").replace("|", "/") for b in names) + " |"
                  for what, v in table.items()]
    for b, fig in result["backbones"].items():
        if "error" in fig:
            lines += ["", f"{b}: FAILED: {fig['error']}"]
    if result.get("stopped"):
        lines += ["", f"STOPPED EARLY: {result['stopped']}; the figures above cover only what finished."]
    if result.get("failed_steps"):
        lines += ["", "Failed steps: " + "; ".join(f"{name} ({result.get('errors', {}).get(name, 'see the log')})"
                                                   for name in result["failed_steps"])]
    commands = [f"PYTHONPATH=. python scripts/gpu_check.py {shlex.join(args.argv)}"]
    if figs:
        reports = " ".join(f"gpu-check-{b}.csv" for b in figs)
        commands.append(f"edgeprof dashboard {reports} --out . --name dashboard   # where plotly is installed")
        if args.trace_hz:
            commands.append(f"edgeprof trace gpu-check-{next(iter(figs))}.csv   # the median client window, per phase")
    lines += ["", "## Commands", "", "```bash", *commands, "```", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def write_dashboard(paths, out: Path) -> None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        print("dashboard: not written: plotly is not installed (where it is, in this folder: edgeprof dashboard "
              f"{' '.join(p.name for p in paths)} --out . --name dashboard)")
        return
    from edgeprof.report.dashboard import write_dashboard as write

    print(f"dashboard: {write(paths, out / 'dashboard.html', title='edgeprof GPU check')}")


def archive(out: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        tar.add(out, arcname=out.name, filter=lambda info: None if Path(info.name).name == target.name else info)
    print(f"archive: {target} ({target.stat().st_size / 1e6:.1f} MB)")


class Steps:
    """Runs the steps, records a failing one's error in the result and goes on."""

    def __init__(self, result: dict) -> None:
        self.result, self.failed = result, []

    def run(self, name: str, fn, *args):
        try:
            return fn(*args)
        except (Exception, SystemExit) as err:
            text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500]
            self.failed.append(name)
            self.result.setdefault("errors", {})[name] = text
            print(f"  FAILED {name}: {text}")
            traceback.print_exc(file=sys.stdout)
            return None


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
    result: dict = {"device": device, "tests": None, "backbones": {}}
    steps = Steps(result)
    nvml = handle = None
    stopped = None
    try:
        if device != "cpu":
            nvml, handle = steps.run("nvml", nvml_handle, device) or (None, None)
        env = steps.run("environment", environment, device, nvml, handle) or {
            "device": device, "host": {}, "libraries": {}, "onnxruntime_providers": []}
        result["environment"] = env
        print(f"gpu_check: {env.get('gpu', 'no GPU: dry run on the CPU')}, driver {env.get('driver', '-')}, "
              f"torch {env['libraries'].get('torch')}, onnxruntime {env['libraries'].get('onnxruntime')} "
              f"({', '.join(env['onnxruntime_providers'])}), device {device}")
        if not args.skip_tests:
            print("1. the GPU tests")
            result["tests"] = steps.run("tests", run_tests, args.out)
            print(f"  {tests_line(result['tests'])}")
        if handle is not None:
            result["idle_power_w"] = steps.run("idle power", idle_power_w, nvml, handle, args)
        print(f"3. PFLEGO's head steps: numpy on the host against torch on {device}")
        rule = result["head_rule"] = steps.run("head_rule", head_rule, device, args.samples) or {}
        for row in rule.get("rows", []):
            print(f"  N={row['n']}: numpy {row['numpy_s']:.4f} s, torch {row['torch_s']:.4f} s "
                  f"({row['torch_over_numpy']:.2f}x); the rule: {rule['rule']}")
        print(f"3b. the pace's ceilings on {device}: the FP32 peak and a float32 GEMM")
        peak = result["fp32_peak"] = steps.run("fp32 peak", fp32_peak, device)
        gemm = result["gemm"] = steps.run("gemm", measured_gemm, device)
        if peak and gemm:
            share = gemm["tflops"] / peak["tflops"] if peak["tflops"] else None
            print(f"  {peak['how']}\n  GEMM {gemm['n']}x{gemm['n']} float32: {gemm['tflops']:.3g} TFLOP/s "
                  f"({_f(share, '{:.1%}')} of the peak)")
        reports = []
        for backbone in BACKBONES:
            print(f"4. sweep on {backbone} ({args.samples} images, taus {','.join(map(str, args.taus))}, "
                  f"{args.repeats} repeats, trace {args.trace_hz:g} Hz)")
            sampler = NvmlSampler(nvml, handle, args.sample_hz) if handle is not None else None
            if sampler is not None:
                with sampler:
                    done = steps.run(f"sweep {backbone}", sweep, backbone, args, device)
            else:
                done = steps.run(f"sweep {backbone}", sweep, backbone, args, device)
            if done is None:
                result["backbones"][backbone] = {"error": result["errors"][f"sweep {backbone}"]}
                continue
            reports.append(done.csv_path)
            fig = steps.run(f"figures {backbone}", figures, done.csv_path, sampler, args.taus)
            if fig is None:
                result["backbones"][backbone] = {"error": result["errors"][f"figures {backbone}"]}
                continue
            fig["sweep_status"] = done.status
            limit = result["environment"].get("power_limit_w")
            power = fig["trace_power"] = steps.run(f"trace power {backbone}", trace_power, done.csv_path, limit)
            if power:
                steps.run(f"trace within the power limit {backbone}", check_trace_power, power)
            floor = steps.run(f"floor {backbone}", floor_s, backbone, device, args.samples)
            if floor is not None:
                fig["floor_forward_s"], fig["floor_forward_backward_s"] = floor
            if args.profiler_rounds:
                cost = fig["profiler_cost"] = steps.run(f"profiler cost {backbone}", profiler_cost, backbone, args,
                                                        device)
                if cost and cost["enforced"]:
                    steps.run(f"profiler within {PROFILER_LIMIT:.0%} {backbone}", check_profiler_cost, cost)
            flops = steps.run(f"flops {backbone}", pass_flops, backbone, args.samples,
                              sweep_config(backbone, args, device).base.synthetic_classes)
            if flops is not None:
                fig["pace"] = steps.run(f"pace {backbone}", pace, fig, flops, gemm, peak)
            if args.sustain_seconds:
                fig["sustained"] = steps.run(f"sustained rounds {backbone}", sustained, backbone, args, device, nvml,
                                             handle)
            result["backbones"][backbone] = fig
            print_figures(backbone, fig)
        if reports:
            steps.run("dashboard", write_dashboard, reports, args.out)
    except STOP_EXCEPTIONS as err:  # Ctrl-C, or SIGTERM / SIGHUP run as a script (``timeout``): keep what is done
        stopped = err
        result["stopped"] = getattr(err, "reason", "interrupted (SIGINT)")
        print(f"gpu_check: {result['stopped']}: writing what is done")
    finally:
        tests = result["tests"]
        if tests and (tests["failed"] or (device != "cpu" and tests["skipped"])):
            steps.failed.append("the GPU tests")
        result["failed_steps"] = steps.failed
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
        if "environment" in result:
            print(f"README: {write_readme(result, args.out, args)}")
        print(f"figures: {args.out / 'gpu_check.json'}")
        if args.archive is not None:
            archive(args.out, args.archive)
    if stopped is not None:
        from edgeprof.signals import exit_code

        return exit_code(stopped)
    if steps.failed:
        print(f"gpu_check: failed: {', '.join(steps.failed)}")
        return 1
    return 0


if __name__ == "__main__":
    from edgeprof.signals import stop_once

    stop_once()  # the first Ctrl-C, SIGTERM or SIGHUP stops the run, later ones cannot break the files' writing
    sys.stdout.reconfigure(line_buffering=True)  # piped into a log (tee), every line is there if the run is killed
    raise SystemExit(main())
