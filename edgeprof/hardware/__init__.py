"""Hardware figures for benchmark scripts: FLOP counts, FP32 peaks, measured GEMM ceilings, % of each.

* :mod:`.flops`: :func:`count_flops` / :func:`forward_flops` / :func:`train_flops`, the floating-point operations of
  a torch module (its docstring states the FLOP convention);
* :mod:`.peak`: :func:`cpu_fp32_peak` and :func:`gpu_fp32_peak`, theoretical peaks as a :class:`PeakEstimate` that
  says where each figure came from, and :func:`describe`;
* :mod:`.rates`: :func:`gemm_gflops` (a measured torch matmul on a CPU or a CUDA device), :func:`rate_line` (the
  one line a benchmark prints: GFLOP/s, % of the measured GEMM, % of the peak, never above 100% without why),
  :class:`Roofs` and :func:`roofs`.

No heavy import at module level: torch is imported inside the functions that use it.
"""

from edgeprof.hardware.flops import FlopCount, count_flops, forward_flops, train_flops
from edgeprof.hardware.peak import PeakEstimate, cpu_fp32_peak, describe, gpu_fp32_peak
from edgeprof.hardware.rates import Roofs, gemm_gflops, rate_line, roofs, sgemm_gflops

__all__ = ["FlopCount", "count_flops", "forward_flops", "train_flops", "PeakEstimate", "cpu_fp32_peak",
           "gpu_fp32_peak", "describe", "gemm_gflops", "sgemm_gflops", "rate_line", "Roofs", "roofs"]
