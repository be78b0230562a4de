"""Achieved GFLOP/s and the fraction of the CPU's FP32 peak, for benchmark scripts.

Four pieces, no heavy import at module level (torch is imported inside the functions that use it):

* :func:`count_flops` / :func:`forward_flops` / :func:`train_flops`: the floating-point operations of a
  torch module, counted with forward hooks on its leaf modules.
* :func:`cpu_fp32_peak`: the theoretical FP32 peak of the CPUs this process may run on, from
  /proc/cpuinfo and sysfs, as a :class:`PeakEstimate` that says where each figure came from.
* :func:`sgemm_gflops`: a measured torch float32 matmul rate, the reality check to print beside the peak.
* :func:`describe`: one line about a :class:`PeakEstimate`.

FLOP convention
---------------
Counted (the figures in :attr:`FlopCount.forward` and :attr:`FlopCount.train`):

* ``Conv1d/2d/3d``: 2 FLOPs per multiply-add, ``2 * Cout * Hout * Wout * (Cin/groups) * kh * kw`` per image
  for a Conv2d, plus one add per output element for the bias (``Cout * Hout * Wout``) when it has one.
* ``Linear``: ``2 * in * out`` per row, plus ``out`` bias adds when it has a bias.
* Backward (training) adds, for each of those layers, the two products of the same size as the forward one:
  the gradient with respect to the layer's input (``2 * MACs``; skipped where the input needs no gradient,
  e.g. the first layer, whose input is the data) and the gradient with respect to the weight (``2 * MACs``;
  skipped for a frozen weight). So ``train ~= 3 * forward`` for a conv/linear network.

Reported separately and NOT in those totals (:attr:`FlopCount.extras`, forward pass only): the bias
gradient (a sum of the output gradient over the batch and positions: one add per output element),
``ReLU``-family activations (1 per element), ``MaxPool`` (``k - 1`` comparisons per output for a window of
``k`` elements), ``AvgPool`` (``k`` per output), ``BatchNorm`` (2 per element: scale and shift). Leaf modules
with parameters that are none of these (an ``Embedding``, an ``LSTM``, ...) are listed in
:attr:`FlopCount.uncounted` rather than guessed.

This is the convention of the 34.8 GFLOP figure for one pass of cnn-omniglot training (forward + backward)
over 600 images of 1x28x28: its four 3x3 convolutions are 9,815,040 multiply-adds per image, so
forward = 2 * 9,815,040 + 66,432 bias adds = 19,696,512; backward = 2 * (9,815,040 - 451,584) (no input
gradient for the first convolution) + 2 * 9,815,040 (weights) = 38,356,992; 600 * 58,053,504 = 34.832 GFLOP,
plus 1.2 MFLOP for a 64->5 linear head = 34.833 GFLOP. Counting the first layer's input gradient would give
35.38 (35.4), and counting the bias gradients too would give 34.87 (34.9), so neither is the convention of 34.8.
Leaving the forward bias adds out as well would give 34.79, also 34.8: the figure alone does not say whether
they are in; they are counted here (0.1% of the total).
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = ["FlopCount", "count_flops", "forward_flops", "train_flops", "PeakEstimate", "cpu_fp32_peak",
           "sgemm_gflops", "describe"]


# --------------------------------------------------------------------------------------------- FLOP counting


@dataclass(frozen=True)
class FlopCount:
    """The FLOPs of one pass over a batch (see the module docstring for what is counted).

    ``forward = forward_matmul + forward_bias``; ``train = forward + backward_input + backward_weight``.
    ``extras`` (not in either total) maps a kind (``bias_grad``, ``relu``, ``maxpool``, ``avgpool``,
    ``batchnorm``) to its count; ``uncounted`` names the leaf modules with parameters that were not counted.
    """

    forward_matmul: int = 0
    forward_bias: int = 0
    backward_input: int = 0
    backward_weight: int = 0
    extras: dict[str, int] = field(default_factory=dict)
    uncounted: tuple[str, ...] = ()

    @property
    def forward(self) -> int:
        return self.forward_matmul + self.forward_bias

    @property
    def backward(self) -> int:
        return self.backward_input + self.backward_weight

    @property
    def train(self) -> int:
        return self.forward + self.backward


def count_flops(module: Any, input_shape: Sequence[int], batch: int = 1) -> FlopCount:
    """Count the FLOPs of ``module`` on ``batch`` inputs of shape ``input_shape`` (e.g. (C, H, W)).

    The module runs once on a zero tensor of batch 1 (in eval mode, restored afterwards, so batch-norm
    statistics are not touched) with forward hooks on every leaf module; the counts, all linear in the
    batch, are multiplied by ``batch``. Gradient mode is on during that pass so that each layer sees
    whether its input needs a gradient (it does not when nothing with parameters lies before it).
    """
    import torch
    from torch import nn

    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    totals = {"forward_matmul": 0, "forward_bias": 0, "backward_input": 0, "backward_weight": 0}
    extras: dict[str, int] = {}
    uncounted: list[str] = []

    def add_extra(kind: str, count: int) -> None:
        extras[kind] = extras.get(kind, 0) + count

    def hook(name: str, layer: Any, inputs: tuple, output: Any) -> None:
        x = inputs[0] if inputs else None
        if isinstance(layer, (nn.modules.conv._ConvNd, nn.Linear)) and not isinstance(
            layer, nn.modules.conv._ConvTransposeNd
        ):
            if isinstance(layer, nn.Linear):
                positions = output.numel() // layer.out_features  # rows: every leading dim
                macs = positions * layer.in_features * layer.out_features
            else:
                per_output = (layer.in_channels // layer.groups) * math.prod(layer.kernel_size)
                macs = output.numel() * per_output
            totals["forward_matmul"] += 2 * macs
            if layer.bias is not None:
                totals["forward_bias"] += output.numel()
                if layer.bias.requires_grad:
                    add_extra("bias_grad", output.numel())
            if x is not None and x.requires_grad:
                totals["backward_input"] += 2 * macs
            if layer.weight.requires_grad:
                totals["backward_weight"] += 2 * macs
        elif isinstance(layer, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Hardswish)):
            add_extra("relu", output.numel())
        elif isinstance(layer, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd)):
            window = math.prod(_tuple(layer.kernel_size, output.dim() - 2))
            if isinstance(layer, nn.modules.pooling._MaxPoolNd):
                add_extra("maxpool", output.numel() * (window - 1))
            else:
                add_extra("avgpool", output.numel() * window)
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm):
            add_extra("batchnorm", 2 * output.numel())
        elif any(True for _ in layer.parameters(recurse=False)):
            uncounted.append(f"{name or '<root>'} ({type(layer).__name__})")

    leaves = [(name, m) for name, m in module.named_modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(lambda layer, i, o, name=name: hook(name, layer, i, o)) for name, m in leaves]
    modes = [(m, m.training) for m in module.modules()]
    first = next(iter(module.parameters()), None)
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    device = first.device if first is not None else None
    try:
        module.eval()
        with torch.enable_grad():
            module(torch.zeros((1, *tuple(input_shape)), dtype=dtype, device=device))
    finally:
        for handle in handles:
            handle.remove()
        for m, training in modes:
            m.training = training
    return FlopCount(**{k: v * batch for k, v in totals.items()}, extras={k: v * batch for k, v in extras.items()},
                     uncounted=tuple(uncounted))


def forward_flops(module: Any, input_shape: Sequence[int], batch: int = 1) -> int:
    """FLOPs of one forward pass over ``batch`` inputs: conv/linear multiply-adds (2 each) plus bias adds."""
    return count_flops(module, input_shape, batch).forward


def train_flops(module: Any, input_shape: Sequence[int], batch: int) -> int:
    """Forward + backward FLOPs over ``batch`` inputs: forward, input gradients (not for the first layer) and
    weight gradients of the conv/linear layers; about 3x :func:`forward_flops`."""
    return count_flops(module, input_shape, batch).train


def _tuple(value: Any, dims: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * dims


# --------------------------------------------------------------------------------------------- CPU FP32 peak


@dataclass(frozen=True)
class PeakEstimate:
    """A theoretical FP32 peak: ``gflops = cores * ghz * lanes * 2 * fma_units``.

    ``lanes``: FP32 lanes of the widest vector unit; ``fma_units``: FMA pipes per core (without an ``fma``
    flag: pairs of one multiply pipe and one add pipe, so the 2 is still a multiply and an add);
    ``how``: one clause per figure saying how it was obtained.
    """

    gflops: float
    lanes: int
    fma_units: int
    cores: int
    ghz: float
    model: str
    isa: str
    fma: bool
    how: str

    @property
    def flops_per_cycle(self) -> int:
        """FP32 FLOPs per cycle per core."""
        return self.lanes * 2 * self.fma_units

    def fraction(self, flops: float, seconds: float) -> float:
        """The fraction of this peak that ``flops`` done in ``seconds`` achieve."""
        return flops / seconds / (self.gflops * 1e9) if seconds > 0 and self.gflops > 0 else float("nan")


def cpu_fp32_peak(
    cpuinfo_path: str | os.PathLike = "/proc/cpuinfo",
    sysfs_root: str | os.PathLike = "/sys/devices/system/cpu",
    cores: int | None = None,
    fma_units: int | None = None,
    ghz: float | None = None,
) -> PeakEstimate:
    """Estimate the FP32 peak of the CPUs this process may run on.

    * Lanes, from the first processor's flags: ``avx512f`` -> 16, ``avx2`` or ``avx`` -> 8, ``sse2`` -> 4
      (ARM ``asimd`` -> 4), else 1 (scalar).
    * FMA units: ``fma_units`` if given; else an ASSUMPTION of 2 per core for a core with ``fma`` and AVX2 or
      AVX-512 (true of recent Intel and AMD server/desktop cores, but some Xeons - e.g. Xeon Silver and
      Bronze, Gold 5xxx - have a single AVX-512 FMA unit: pass ``fma_units=1`` there), else 1 (one FMA pipe,
      or without ``fma`` one multiply and one add pipe).
    * Cores: ``cores`` if given (pass ``torch.get_num_threads()`` to match the threads a run uses); else the
      CPUs of ``os.sched_getaffinity(0)``, counted once per physical core when sysfs ``topology`` says which
      are SMT siblings (they share the FMA units).
    * Clock: ``ghz`` if given; else the highest sysfs ``cpufreq/cpuinfo_max_freq`` (kHz) among those CPUs;
      else the highest ``cpu MHz`` line of /proc/cpuinfo, which is the CURRENT clock, not the maximum; in a
      VM without cpufreq it is often the nominal (TSC) clock, which the host's boost exceeds, so that a
      measured :func:`sgemm_gflops` can come out above this "peak" (on a 2-vCPU AMD EPYC Zen 3 VM: cpu MHz
      2445, peak 156.5, sgemm 170-183 GFLOP/s, i.e. ~2.7-2.9 GHz actual): pass ``ghz=`` the boost clock there.
      AVX-512 code often runs below the nominal maximum, so with cpufreq the peak is an upper bound.
    """
    blocks = _cpuinfo_blocks(Path(cpuinfo_path))
    first = blocks[0] if blocks else {}
    flags = set((first.get("flags") or first.get("features") or "").split())
    model = first.get("model name") or first.get("hardware") or ""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))

    if "avx512f" in flags:
        lanes, isa = 16, "avx512f"
    elif "avx2" in flags or "avx" in flags:
        lanes, isa = 8, "avx2" if "avx2" in flags else "avx"
    elif "sse2" in flags:
        lanes, isa = 4, "sse2"
    elif "asimd" in flags:
        lanes, isa = 4, "asimd"
    else:
        lanes, isa = 1, "scalar"
    has_fma = "fma" in flags or isa == "asimd"  # every ARMv8 asimd unit has fused multiply-add
    how = [f"lanes: {lanes} fp32 ({isa} in /proc/cpuinfo flags)"]

    if fma_units is not None:
        units, units_how = int(fma_units), "given"
    elif has_fma and isa in ("avx2", "avx512f"):
        units, units_how = 2, "assumed 2 per core (AVX2/AVX-512 server core; some Xeons have 1 AVX-512 FMA unit)"
    else:
        units, units_how = 1, "assumed 1 per core"
    pipe = "FMA" if has_fma else "mul+add pair (no fma flag)"
    how.append(f"{pipe} units: {units}, {units_how}")

    if cores is not None:
        n_cores, cores_how = int(cores), "given"
    else:
        n_cores, cores_how = _physical_cores(Path(sysfs_root), allowed)
    how.append(f"cores: {n_cores}, {cores_how}")

    if ghz is not None:
        clock, clock_how = float(ghz), "given"
    else:
        clock, clock_how = _clock_ghz(Path(sysfs_root), allowed, blocks)
    how.append(f"clock: {clock_how}")

    gflops = n_cores * clock * lanes * 2 * units
    return PeakEstimate(gflops=gflops, lanes=lanes, fma_units=units, cores=n_cores, ghz=clock, model=model,
                        isa=isa, fma=has_fma, how="; ".join(how))


def _cpuinfo_blocks(path: Path) -> list[dict[str, str]]:
    """/proc/cpuinfo as one ``{lower-case key: value}`` dict per processor (blank-line separated)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    blocks: list[dict[str, str]] = []
    for chunk in re.split(r"\n\s*\n", text):
        block = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                block.setdefault(key.strip().lower(), value.strip())
        if block:
            blocks.append(block)
    return blocks


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _physical_cores(root: Path, allowed: Iterable[int]) -> tuple[int, str]:
    allowed = list(allowed)
    ids = []
    for cpu in allowed:
        topo = root / f"cpu{cpu}" / "topology"
        core, package = _read_int(topo / "core_id"), _read_int(topo / "physical_package_id")
        if core is None or package is None:
            return len(allowed), (f"{len(allowed)} CPUs in os.sched_getaffinity "
                                  "(no sysfs topology: SMT siblings not merged)")
        ids.append((package, core))
    cores = len(set(ids))
    if cores == len(allowed):
        return cores, f"{cores} CPUs in os.sched_getaffinity, each its own core (sysfs topology)"
    return cores, f"{cores} physical cores under the {len(allowed)} CPUs of os.sched_getaffinity (sysfs topology)"


def _clock_ghz(root: Path, allowed: Iterable[int], blocks: list[dict[str, str]]) -> tuple[float, str]:
    khz = [v for cpu in allowed if (v := _read_int(root / f"cpu{cpu}" / "cpufreq" / "cpuinfo_max_freq"))]
    if khz:
        return max(khz) / 1e6, "cpuinfo_max_freq (sysfs cpufreq)"
    mhz = []
    for block in blocks:
        try:
            mhz.append(float(block["cpu mhz"]))
        except (KeyError, ValueError):
            pass
    if mhz:
        return max(mhz) / 1e3, "/proc/cpuinfo cpu MHz (current, not max; in a VM often the nominal clock)"
    return 0.0, "unknown (no cpufreq, no cpu MHz: pass ghz=)"


# --------------------------------------------------------------------------------------------- measured rate


def sgemm_gflops(n: int = 2048, threads: int | None = None, repeats: int = 3) -> float:
    """The best of ``repeats`` timed ``n x n @ n x n`` torch float32 matmuls, in GFLOP/s (``2 n^3`` FLOPs each).

    One untimed product first warms the kernels; ``threads`` (default: torch's current setting) is set for
    the measurement and restored afterwards.
    """
    import torch

    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen, dtype=torch.float32)
        b = torch.randn(n, n, generator=gen, dtype=torch.float32)
        out = torch.empty(n, n, dtype=torch.float32)
        torch.mm(a, b, out=out)
        best = math.inf
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(saved)
    return 2.0 * n**3 / max(best, 1e-9) / 1e9


def describe(peak: PeakEstimate) -> str:
    """One line: the peak, its factors, and how they were obtained."""
    name = peak.model or "CPU"
    return (f"{name}: FP32 peak {peak.gflops:.1f} GFLOP/s = {peak.cores} cores x {peak.ghz:.2f} GHz x "
            f"{peak.flops_per_cycle} flop/cycle ({peak.lanes} lanes x 2 x {peak.fma_units} units) [{peak.how}]")


@dataclass(frozen=True)
class Roofs:
    """What a benchmark compares an achieved rate with: the FP32 peak formula and a measured sgemm."""

    peak: PeakEstimate
    sgemm_gflops: float

    def rate(self, flops: float, seconds: float) -> str:
        """``X GFLOP/s = Y% of FP32 peak, Z% of sgemm`` for ``flops`` done in ``seconds``."""
        gflops = flops / seconds / 1e9 if seconds > 0 else float("nan")
        return (f"{gflops:6.1f} GFLOP/s = {100 * gflops / self.peak.gflops:4.0f}% of FP32 peak, "
                f"{100 * gflops / self.sgemm_gflops:4.0f}% of sgemm")

    def lines(self) -> list[str]:
        """The machine: CPU, load average, the peak with how it was obtained, the sgemm rate."""
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
        out = [f"load average (1, 5, 15 min): {load}", describe(self.peak),
               f"sgemm 2048^3 measured: {self.sgemm_gflops:.1f} GFLOP/s = "
               f"{100 * self.sgemm_gflops / self.peak.gflops:.0f}% of that peak"]
        if self.sgemm_gflops > self.peak.gflops:
            out.append("  the cores run above the clock used for the peak (sgemm exceeds it): fractions of peak are "
                       "overstated; pass --ghz with the sustained all-core clock to correct them")
        return out


def roofs(threads: int | None = None, ghz: float | None = None) -> Roofs:
    """This machine's :class:`Roofs`: the peak at ``ghz`` (default: as :func:`cpu_fp32_peak` reads the clock)
    for ``threads`` cores (default: every allowed core), and sgemm with that many threads."""
    peak = cpu_fp32_peak(cores=threads, ghz=ghz)
    return Roofs(peak, sgemm_gflops(threads=threads))
