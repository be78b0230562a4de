"""Theoretical FP32 peaks: a CPU's from /proc/cpuinfo and sysfs, a GPU's from torch's device properties.

Each is a :class:`PeakEstimate` that says how every figure was obtained; :func:`describe` puts one in a line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

# --------------------------------------------------------------------------------------------- CPU FP32 peak


@dataclass(frozen=True)
class PeakEstimate:
    """A theoretical FP32 peak: ``gflops = cores * ghz * lanes * 2 * fma_units``.

    ``lanes``: FP32 lanes of the widest vector unit; ``fma_units``: FMA pipes per core (without an ``fma``
    flag: pairs of one multiply pipe and one add pipe, so the 2 is still a multiply and an add);
    ``how``: one clause per figure saying how it was obtained; ``unit``: what ``cores`` counts (``SMs`` on a GPU).
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
    unit: str = "cores"

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

    lanes, isa = _lanes(flags, first)
    has_fma = "fma" in flags or isa == "asimd"  # every ARMv8 asimd unit has fused multiply-add
    how = [f"lanes: {lanes} fp32 ({isa} in /proc/cpuinfo flags"
           + ("; AMD family 25 (Zen 4): 256-bit pipes, a 512-bit op in two halves)" if lanes == 8 and isa == "avx512f"
              else ")")]

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


def _lanes(flags: set[str], first: dict[str, str]) -> tuple[int, str]:
    """FP32 lanes of the widest vector unit the flags name, and that unit's name."""
    if "avx512f" in flags and _zen4(first):
        return 8, "avx512f"  # Zen 4 runs a 512-bit operation as two halves on its 256-bit FMA pipes
    if "avx512f" in flags:
        return 16, "avx512f"
    if "avx2" in flags or "avx" in flags:
        return 8, "avx2" if "avx2" in flags else "avx"
    for isa, lanes in (("sse2", 4), ("asimd", 4)):
        if isa in flags:
            return lanes, isa
    return 1, "scalar"


def _zen4(block: dict[str, str]) -> bool:
    """An AMD family-25 (0x19) processor: Zen 3 (no AVX-512) or Zen 4, whose FMA pipes are 256 bits wide."""
    return block.get("vendor_id") == "AuthenticAMD" and block.get("cpu family") == "25"


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


# --------------------------------------------------------------------------------------------- GPU FP32 peak

#: FP32 lanes (CUDA cores) per SM by compute capability (major, minor), from NVIDIA's architecture whitepapers
FP32_LANES_PER_SM = {(6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64,
                     (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128}


def gpu_fp32_peak(props: Any) -> PeakEstimate:
    """The datasheet FP32 peak (no tensor cores) of a GPU from torch's device properties: ``SMs x boost clock
    (clock_rate, kHz) x FP32 lanes per SM x 2``. An architecture not in :data:`FP32_LANES_PER_SM` (newer than
    Hopper: 128 assumed from major 10 on) or a missing clock gives 0 with the reason in ``how``."""
    cc = (int(getattr(props, "major", 0)), int(getattr(props, "minor", 0)))
    lanes = FP32_LANES_PER_SM.get(cc, 128 if cc[0] >= 10 else 0)
    sms, ghz = int(getattr(props, "multi_processor_count", 0)), int(getattr(props, "clock_rate", 0) or 0) / 1e6
    lanes_how = ("whitepaper" if cc in FP32_LANES_PER_SM else "assumed as Hopper's" if lanes else "unknown")
    how = (f"lanes: {lanes} FP32 per SM for compute capability {cc[0]}.{cc[1]} ({lanes_how}); SMs: {sms}, "
           f"clock: {ghz:.3f} GHz (torch device properties: multi_processor_count, clock_rate)")
    return PeakEstimate(gflops=sms * ghz * lanes * 2, lanes=lanes, fma_units=1, cores=sms, ghz=ghz,
                        model=str(getattr(props, "name", "GPU")), isa=f"sm_{cc[0]}{cc[1]}", fma=True, how=how,
                        unit="SMs")


def describe(peak: PeakEstimate) -> str:
    """One line: the peak, its factors, and how they were obtained."""
    name = peak.model or "CPU"
    return (f"{name}: FP32 peak {peak.gflops:.1f} GFLOP/s = {peak.cores} {peak.unit} x {peak.ghz:.2f} GHz x "
            f"{peak.flops_per_cycle} flop/cycle ({peak.lanes} lanes x 2 x {peak.fma_units} units) [{peak.how}]")
