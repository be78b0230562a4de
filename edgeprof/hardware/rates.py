"""Achieved GFLOP/s against a measured ceiling and the datasheet peak, for benchmark scripts.

:func:`gemm_gflops` measures the ceiling (a CPU's sgemm, a GPU's cuBLAS GEMM of the same precision);
:func:`rate_line` is the one line every benchmark prints, never a share above 100% without why; :class:`Roofs`
holds a machine's figures and :func:`roofs` measures them. torch is imported inside the functions.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

from edgeprof.hardware.peak import PeakEstimate, cpu_fp32_peak, describe, gpu_fp32_peak

# --------------------------------------------------------------------------------------------- measured rate


def _best_seconds(run: Any, sync: Any, repeats: int, clock: Any = time.perf_counter) -> float:
    """The shortest of ``repeats`` timings of ``run()``, each from a synchronised start to a synchronised end
    (so a GPU's time is its kernel's, not its launch's)."""
    best = math.inf
    for _ in range(max(1, repeats)):
        sync()
        start = clock()
        run()
        sync()
        best = min(best, clock() - start)
    return best


def gemm_gflops(device: Any = "cpu", n: int = 2048, threads: int | None = None, repeats: int = 3,
                dtype: Any = None) -> float:
    """The best of ``repeats`` timed ``n x n @ n x n`` torch matmuls on ``device`` (a torch device or its name, a
    device word of :data:`edgeprof.nn.compute.DEVICE_KINDS`), in GFLOP/s (``2 n^3`` FLOPs each): MKL/OpenBLAS sgemm on a
    CPU, cuBLAS on a GPU.

    ``dtype`` defaults to float32; on CUDA a float32 product uses TF32 tensor cores when
    ``torch.backends.cuda.matmul.allow_tf32`` is set, as the benchmark's own products do then. The operands reach
    the device, and every timing starts and ends synchronised, through the compute seam
    (:class:`~edgeprof.nn.compute.Compute`: its :meth:`~edgeprof.nn.compute.Compute.tensor` and
    :meth:`~edgeprof.nn.compute.Compute.sync`; :func:`_best_seconds`), after one untimed product that warms the
    kernels. ``threads`` (default: torch's current setting) is set for the measurement and restored afterwards.
    """
    import numpy as np
    import torch

    from edgeprof.nn.compute import Compute

    compute, dtype = Compute(str(device)), dtype or torch.float32
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        gen = np.random.default_rng(0)
        a, b = (compute.tensor(gen.standard_normal((n, n), dtype=np.float32)).to(dtype=dtype) for _ in range(2))
        out = torch.empty_like(a)
        torch.mm(a, b, out=out)
        best = _best_seconds(lambda: torch.mm(a, b, out=out), compute.sync, repeats)
    finally:
        torch.set_num_threads(saved)
    return 2.0 * n**3 / max(best, 1e-9) / 1e9


def sgemm_gflops(n: int = 2048, threads: int | None = None, repeats: int = 3) -> float:
    """:func:`gemm_gflops` of float32 on the CPU: the ceiling the CPU benchmarks compare with."""
    return gemm_gflops("cpu", n=n, threads=threads, repeats=repeats)


#: why a rate can exceed the measured GEMM: the FLOP count, or a GEMM that is not this machine's best
ABOVE_GEMM = ("the FLOP count assumes direct convolution and dense products (a Winograd or FFT kernel does fewer "
              "FLOPs than counted), or the measured GEMM is not this machine's ceiling (a BLAS that does not use "
              "its widest vectors)")
#: why a rate can exceed the peak while the GEMM does too: the peak's figures, or units the peak leaves out
ABOVE_PEAK = ("the peak is below the measured GEMM: its clock or vector width is wrong for this machine (on a CPU "
              "pass --ghz), or the GEMM runs on units the peak leaves out (TF32 tensor cores)")


def _share(gflops: float, ceiling: float, name: str) -> str:
    if not ceiling > 0 or not math.isfinite(ceiling):
        return f"{name} unknown"
    if gflops > ceiling:
        return f">100% of {name} ({gflops / ceiling:.2f}x)"
    return f"{100 * gflops / ceiling:4.0f}% of {name}"


def rate_line(gflops: float, measured_gflops: float, peak_gflops: float, *, gemm: str = "sgemm",
              peak: str = "FP32 peak") -> str:
    """``x GFLOP/s = a% of measured <gemm>, b% of <peak>``: the rate against the measured ceiling first, the
    datasheet figure beside it. No share above 100% is printed as a percentage: it reads ``>100% (k x)`` and the
    line ends with why (:data:`ABOVE_GEMM`, :data:`ABOVE_PEAK`)."""
    line = (f"{gflops:6.1f} GFLOP/s = {_share(gflops, measured_gflops, f'measured {gemm}')}, "
            f"{_share(gflops, peak_gflops, peak)}")
    why = [ABOVE_GEMM] if gflops > measured_gflops > 0 else []
    if gflops > peak_gflops > 0 and measured_gflops > peak_gflops:
        why.append(ABOVE_PEAK)
    return f"{line}: {'; '.join(why)}" if why else line


@dataclass(frozen=True)
class Roofs:
    """What a benchmark compares an achieved rate with: a measured GEMM (``sgemm_gflops``; ``gemm`` names it)
    and the datasheet peak."""

    peak: PeakEstimate
    sgemm_gflops: float
    gemm: str = "sgemm"

    def rate(self, flops: float, seconds: float) -> str:
        """:func:`rate_line` for ``flops`` done in ``seconds``."""
        gflops = flops / seconds / 1e9 if seconds > 0 else float("nan")
        return rate_line(gflops, self.sgemm_gflops, self.peak.gflops, gemm=self.gemm)

    def lines(self) -> list[str]:
        """The machine: load average, the peak with how it was obtained, the measured GEMM."""
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
        out = [f"load average (1, 5, 15 min): {load}", describe(self.peak),
               f"{self.gemm} 2048^3 measured: {self.sgemm_gflops:.1f} GFLOP/s = "
               f"{100 * self.sgemm_gflops / self.peak.gflops:.0f}% of that peak" if self.peak.gflops > 0 else
               f"{self.gemm} 2048^3 measured: {self.sgemm_gflops:.1f} GFLOP/s (peak unknown)"]
        if self.sgemm_gflops > self.peak.gflops:
            out.append(f"  the measured {self.gemm} exceeds the peak: fractions of peak are overstated; on a CPU the "
                       "cores run above the clock used for the peak: pass --ghz with the sustained all-core clock")
        return out


def roofs(threads: int | None = None, ghz: float | None = None, device: Any = "cpu") -> Roofs:
    """This machine's :class:`Roofs` for ``device``: on a CPU the peak at ``ghz`` (default: as
    :func:`cpu_fp32_peak` reads the clock) for ``threads`` cores (default: every allowed core) and sgemm with that
    many threads; on a CUDA device its datasheet peak (:func:`gpu_fp32_peak`) and a cuBLAS float32 GEMM."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        tf32 = " (TF32 allowed)" if torch.backends.cuda.matmul.allow_tf32 else ""
        return Roofs(gpu_fp32_peak(torch.cuda.get_device_properties(dev)), gemm_gflops(dev), f"cuBLAS sgemm{tf32}")
    return Roofs(cpu_fp32_peak(cores=threads, ghz=ghz), sgemm_gflops(threads=threads))
