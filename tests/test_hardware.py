"""edgeprof.hardware: FLOP counts against hand arithmetic, CPU and GPU peaks from real-layout files and stand-in
properties, sgemm sanity, and the one rate line (measured GEMM first, never above 100% without why)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from edgeprof.hardware import (PeakEstimate, Roofs, count_flops, cpu_fp32_peak, describe, forward_flops, gemm_gflops,
                               gpu_fp32_peak, rate_line, sgemm_gflops, train_flops)
from edgeprof.hardware import rates
from edgeprof.nn.backbones import build_backbone


def tiny_net() -> nn.Sequential:
    # input (2, 9, 9) -> conv 3x3 stride 1 pad 0 -> (4, 7, 7) -> ReLU -> MaxPool 2 -> (4, 3, 3)
    # -> conv 3x3 pad 1, groups 2, no bias -> (6, 3, 3) -> flatten 54 -> Linear 54->10 -> Linear 10->3 (no bias)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False),
        nn.Flatten(), nn.Linear(54, 10), nn.Linear(10, 3, bias=False),
    )  # fmt: skip


def test_tiny_net_by_hand():
    # multiply-adds per image:
    conv1 = 4 * 7 * 7 * 2 * 3 * 3  # Cout*Hout*Wout*(Cin/groups)*kh*kw = 3528
    conv2 = 6 * 3 * 3 * (4 // 2) * 3 * 3  # = 972
    fc1 = 54 * 10  # = 540
    fc2 = 10 * 3  # = 30
    assert (conv1, conv2, fc1, fc2) == (3528, 972, 540, 30)
    bias = 4 * 7 * 7 + 10  # conv1 and fc1 have biases: 196 + 10 = 206
    macs = conv1 + conv2 + fc1 + fc2  # 5070
    forward = 2 * macs + bias  # 10140 + 206 = 10346
    grad_input = 2 * (macs - conv1)  # the first layer's input is the data: 2 * 1542 = 3084
    grad_weight = 2 * macs  # 10140
    assert forward == 10346 and grad_input == 3084 and grad_weight == 10140

    net, batch = tiny_net(), 5
    assert forward_flops(net, (2, 9, 9)) == forward
    assert forward_flops(net, (2, 9, 9), batch=batch) == batch * forward == 51730
    assert train_flops(net, (2, 9, 9), batch) == batch * (forward + grad_input + grad_weight) == 117850

    count = count_flops(net, (2, 9, 9), batch)
    assert count.forward_matmul == batch * 2 * macs and count.forward_bias == batch * bias
    assert count.backward_input == batch * grad_input and count.backward_weight == batch * grad_weight
    # extras, not in the totals: bias gradients (one add per biased output), ReLU on 4*7*7, max-pool windows
    # of 4 elements (3 comparisons) over the 4*3*3 outputs
    assert count.extras == {"bias_grad": batch * 206, "relu": batch * 196, "maxpool": batch * 4 * 3 * 3 * 3}
    assert count.uncounted == ()


def test_frozen_weights_and_modes_untouched():
    net = tiny_net()
    net.train()
    for p in net[0].parameters():
        p.requires_grad_(False)
    count = count_flops(net, (2, 9, 9))
    # conv1 frozen: no weight gradient for it; conv2's input still needs no gradient (nothing trainable before it)
    assert count.backward_weight == 2 * (972 + 540 + 30)
    assert count.backward_input == 2 * (540 + 30)
    assert count.extras["bias_grad"] == 10  # fc1's only; conv1's bias is frozen
    assert all(m.training for m in net.modules())


def test_uncounted_and_batchnorm_listed():
    count = count_flops(nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2)), (1, 4, 4), batch=3)
    assert count.extras["batchnorm"] == 3 * 2 * 2 * 16
    assert count.forward == 3 * (2 * 2 * 16 * 1 + 2 * 16)

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return x * self.w

    count = count_flops(nn.Sequential(nn.Linear(4, 4), Scale()), (4,))
    assert count.uncounted == ("1 (Scale)",)
    assert count.forward == 2 * 16 + 4


def test_cnn_omniglot_reproduces_34_8_gflop():
    # four Conv 3x3 64 (padding 1), each followed by MaxPool 2: 28 -> 14 -> 7 -> 3 -> 1
    conv = [64 * 28 * 28 * 1 * 9, 64 * 14 * 14 * 64 * 9, 64 * 7 * 7 * 64 * 9, 64 * 3 * 3 * 64 * 9]
    assert conv == [451_584, 7_225_344, 1_806_336, 331_776]
    macs = sum(conv)  # 9,815,040
    bias = 64 * (28 * 28 + 14 * 14 + 7 * 7 + 3 * 3)  # 66,432
    per_image = (2 * macs + bias) + 2 * (macs - conv[0]) + 2 * macs  # forward + grad input + grad weight
    assert per_image == 58_053_504
    backbone = build_backbone("cnn-omniglot")
    assert train_flops(backbone, (1, 28, 28), 600) == 600 * per_image == 34_832_102_400

    head = 2 * 64 * 5 + 5 + 2 * 64 * 5 + 2 * 64 * 5  # forward with bias, grad input, grad weight: 1925
    with_head = nn.Sequential(backbone, nn.Linear(64, 5))
    total = train_flops(with_head, (1, 28, 28), 600)
    assert total == 600 * (per_image + head) == 34_833_257_400
    assert round(total / 1e9, 1) == 34.8
    # the conventions the figure is not: the first layer's input gradient counted, or bias gradients counted
    assert round((total + 600 * 2 * conv[0]) / 1e9, 1) == 35.4
    assert round((total + count_flops(with_head, (1, 28, 28), 600).extras["bias_grad"]) / 1e9, 1) == 34.9


# ------------------------------------------------------------------------------------------------ CPU peak

XEON_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ss ht syscall nx pdpe1gb rdtscp lm "
              "constant_tsc pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c "
              "rdrand avx2 bmi1 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl")
EPYC_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ht syscall nx mmxext lm pni pclmulqdq "
              "ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor avx2 bmi1 bmi2 sha_ni")
SSE_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat clflush mmx fxsr sse sse2 ss ht lm"


def write_cpuinfo(path: Path, model: str, flags: str, mhz: list[float], vendor: str = "x", family: int = 6) -> Path:
    blocks = []
    for cpu, speed in enumerate(mhz):
        blocks.append(
            f"processor\t: {cpu}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel name\t: {model}\nstepping\t: 4\n"
            f"cpu MHz\t\t: {speed:.3f}\ncache size\t: 28160 KB\nphysical id\t: 0\ncore id\t\t: {cpu}\n"
            f"flags\t\t: {flags}\nbogomips\t: 4800.00\n"
        )
    path.write_text("\n".join(blocks) + "\n")
    return path


def write_sysfs(root: Path, max_khz: int | None, siblings: int = 1) -> Path:
    """``cpu<N>/topology/{core_id,physical_package_id}`` (and ``cpufreq/cpuinfo_max_freq``) for every CPU this
    process may run on; ``siblings`` consecutive CPUs share a core."""
    for cpu in os.sched_getaffinity(0):
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "core_id").write_text(f"{cpu // siblings}\n")
        (topo / "physical_package_id").write_text("0\n")
        if max_khz is not None:
            freq = root / f"cpu{cpu}" / "cpufreq"
            freq.mkdir()
            (freq / "cpuinfo_max_freq").write_text(f"{max_khz}\n")
            (freq / "scaling_cur_freq").write_text("1000000\n")
    return root


def test_avx512_xeon_with_cpufreq(tmp_path):
    info = write_cpuinfo(tmp_path / "cpuinfo", "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", XEON_FLAGS, [1000.0, 2400.0])
    sysfs = write_sysfs(tmp_path / "cpu", 3_700_000)
    peak = cpu_fp32_peak(info, sysfs, cores=4)
    assert (peak.lanes, peak.fma_units, peak.cores, peak.isa, peak.fma) == (16, 2, 4, "avx512f", True)
    assert peak.ghz == 3.7 and peak.flops_per_cycle == 64
    assert peak.gflops == pytest.approx(4 * 3.7 * 16 * 2 * 2) == pytest.approx(947.2)
    assert peak.model == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    assert "clock: cpuinfo_max_freq" in peak.how and "cores: 4, given" in peak.how
    assert "some Xeons have 1 AVX-512 FMA unit" in peak.how
    # a Xeon with a single AVX-512 FMA unit, at a given AVX-512 clock
    one = cpu_fp32_peak(info, sysfs, cores=4, fma_units=1, ghz=2.0)
    assert one.gflops == pytest.approx(4 * 2.0 * 16 * 2 * 1) == pytest.approx(256.0)
    assert "units: 1, given" in one.how and "clock: given" in one.how


def test_avx2_epyc_without_cpufreq(tmp_path):
    info = write_cpuinfo(tmp_path / "cpuinfo", "AMD EPYC 7B13", EPYC_FLAGS, [2445.43, 2449.0])
    sysfs = write_sysfs(tmp_path / "cpu", None)
    peak = cpu_fp32_peak(info, sysfs)
    allowed = len(os.sched_getaffinity(0))
    assert (peak.lanes, peak.fma_units, peak.isa, peak.cores) == (8, 2, "avx2", allowed)
    assert peak.ghz == pytest.approx(2.449)  # the highest cpu MHz line
    assert peak.gflops == pytest.approx(allowed * 2.449 * 8 * 2 * 2)
    assert "clock: /proc/cpuinfo cpu MHz (current, not max" in peak.how
    assert f"{allowed} CPUs in os.sched_getaffinity" in peak.how
    assert peak.fraction(peak.gflops * 1e9 * 0.5, 1.0) == pytest.approx(0.5)
    line = describe(peak)
    assert line.startswith("AMD EPYC 7B13: FP32 peak ") and "32 flop/cycle" in line and "\n" not in line


def test_smt_siblings_counted_once(tmp_path):
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs in the affinity set")
    info = write_cpuinfo(tmp_path / "cpuinfo", "AMD EPYC", EPYC_FLAGS, [2000.0])
    sysfs = write_sysfs(tmp_path / "cpu", 2_000_000, siblings=10**6)  # every CPU on core 0
    peak = cpu_fp32_peak(info, sysfs)
    assert peak.cores == 1 and peak.gflops == pytest.approx(2.0 * 32)
    assert f"1 physical cores under the {len(allowed)} CPUs" in peak.how


def test_sse_only_machine(tmp_path):
    info = write_cpuinfo(tmp_path / "cpuinfo", "Intel(R) Core(TM)2 Duo CPU E8400 @ 3.00GHz", SSE_FLAGS, [3000.0])
    sysfs = write_sysfs(tmp_path / "cpu", 3_000_000)
    peak = cpu_fp32_peak(info, sysfs, cores=2)
    assert (peak.lanes, peak.fma_units, peak.isa, peak.fma) == (4, 1, "sse2", False)
    assert peak.flops_per_cycle == 8  # one 4-wide multiply and one 4-wide add per cycle
    assert peak.gflops == pytest.approx(2 * 3.0 * 8) == pytest.approx(48.0)
    assert "mul+add pair (no fma flag)" in peak.how


def test_unreadable_files(tmp_path):
    peak = cpu_fp32_peak(tmp_path / "missing", tmp_path / "nothing", cores=1)
    assert isinstance(peak, PeakEstimate) and peak.gflops == 0.0 and peak.lanes == 1
    assert "unknown" in peak.how


# ------------------------------------------------------------------------------------------------ sgemm, imports


def test_sgemm_returns_a_positive_rate():
    threads = torch.get_num_threads()
    rate = sgemm_gflops(n=64, threads=1, repeats=2)
    assert rate > 0 and math.isfinite(rate)
    assert torch.get_num_threads() == threads


def test_module_imports_no_torch():
    code = "import sys, edgeprof.hardware; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_roofs_state_the_rate_against_the_peak_and_sgemm_and_flag_a_peak_below_sgemm(tmp_path):
    from edgeprof.hardware import Roofs

    info = write_cpuinfo(tmp_path / "cpuinfo", "AMD EPYC 7B13", EPYC_FLAGS, [2500.0, 2500.0])
    peak = cpu_fp32_peak(info, tmp_path / "nosys", cores=2)  # 2 x 2.5 GHz x 32 = 160 GFLOP/s
    assert peak.gflops == pytest.approx(160.0)
    line = Roofs(peak, 128.0).rate(flops=40e9, seconds=0.5)  # 80 GFLOP/s
    assert line == "  80.0 GFLOP/s =   62% of measured sgemm,   50% of FP32 peak"
    assert not any("overstated" in x for x in Roofs(peak, 128.0).lines())
    lines = Roofs(peak, 176.0).lines()
    assert "sgemm 2048^3 measured: 176.0 GFLOP/s = 110% of that peak" in lines
    assert any("overstated" in x and "--ghz" in x for x in lines)


# ------------------------------------------------------------------------------------------------ % of peak, honestly


@pytest.mark.parametrize(("gflops", "measured", "peak", "line"), [
    (80.0, 128.0, 160.0, "  80.0 GFLOP/s =   62% of measured sgemm,   50% of FP32 peak"),
    (128.0, 128.0, 160.0, " 128.0 GFLOP/s =  100% of measured sgemm,   80% of FP32 peak"),
    # the EPYC figures: a cached forward at 1.67x the measured sgemm and 1.13x the computed peak
    (200.4, 120.0, 177.0, " 200.4 GFLOP/s = >100% of measured sgemm (1.67x), >100% of FP32 peak (1.13x): "
                          + rates.ABOVE_GEMM),
    # under the measured sgemm but above a peak that sgemm itself exceeds: the peak is wrong
    (171.0, 176.0, 160.0, " 171.0 GFLOP/s =   97% of measured sgemm, >100% of FP32 peak (1.07x): " + rates.ABOVE_PEAK),
    (200.0, 180.0, 160.0, " 200.0 GFLOP/s = >100% of measured sgemm (1.11x), >100% of FP32 peak (1.25x): "
                          + rates.ABOVE_GEMM + "; " + rates.ABOVE_PEAK),
    (50.0, 128.0, 0.0, "  50.0 GFLOP/s =   39% of measured sgemm, FP32 peak unknown"),
])
def test_the_rate_line_is_against_the_measured_gemm_then_the_peak(gflops, measured, peak, line):
    assert rate_line(gflops, measured, peak) == line


@pytest.mark.parametrize("gflops", [0.5, 99.4, 100.0, 100.6, 160.0, 250.0, 1e4])
def test_no_share_above_100_percent_is_printed_without_why(gflops):
    line = rate_line(gflops, 100.0, 150.0)

    shares = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)% of", line)]
    assert all(x <= 100 for x in shares)
    assert (">100%" in line) == (gflops > 100.0) and ("direct convolution" in line) == (gflops > 100.0)


def test_a_gpu_rate_names_its_gemm_and_datasheet_peak():
    h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                                 clock_rate=1_980_000)  # kHz
    peak = gpu_fp32_peak(h100)

    line = Roofs(peak, 50_000.0, "cuBLAS sgemm").rate(flops=30e12, seconds=1.0)

    assert peak.gflops == pytest.approx(132 * 1.98 * 128 * 2) == pytest.approx(66_908.16)
    assert describe(peak).startswith("NVIDIA H100 80GB HBM3: FP32 peak 66908.2 GFLOP/s = 132 SMs x 1.98 GHz")
    assert line == "30000.0 GFLOP/s =   60% of measured cuBLAS sgemm,   45% of FP32 peak"
    assert gpu_fp32_peak(types.SimpleNamespace(major=5, minor=2, multi_processor_count=24, clock_rate=1e6)).gflops == 0


def test_zen4_avx512_runs_on_256_bit_pipes(tmp_path):
    info = write_cpuinfo(tmp_path / "cpuinfo", "AMD EPYC 9R14", XEON_FLAGS, [3700.0], vendor="AuthenticAMD", family=25)

    peak = cpu_fp32_peak(info, tmp_path / "nosys", cores=2, ghz=3.7)

    assert (peak.lanes, peak.fma_units, peak.flops_per_cycle, peak.isa) == (8, 2, 32, "avx512f")
    assert peak.gflops == pytest.approx(2 * 3.7 * 32) and "Zen 4" in peak.how


def test_a_gemm_is_timed_between_two_synchronisations():
    events, t = [], iter(range(100))
    clock = lambda: events.append("clock") or next(t)  # noqa: E731

    best = rates._best_seconds(lambda: events.append("mm"), lambda: events.append("sync"), 2, clock)

    assert events == ["sync", "clock", "mm", "sync", "clock"] * 2 and best == 1


def test_a_gemm_reaches_its_device_and_waits_for_it_through_the_compute_seam(monkeypatch):
    """The GEMM's operands are placed, and its timings synchronised, by the device's kind through the compute seam
    (a recording kind whose tensors stay in host memory): two placements, a sync before and after each timing."""
    from edgeprof.nn import compute as computelib
    from test_compute import RecordingKind

    kind = RecordingKind()
    monkeypatch.setitem(computelib.DEVICE_KINDS, "fake", kind)

    rate = gemm_gflops("fake:1", n=16, repeats=3)

    assert rate > 0 and math.isfinite(rate)
    assert [e for e in kind.log if e[0] == "to_device"] == [("to_device", "fake:1", (16, 16))] * 2
    assert kind.count("sync") == 2 * 3 and {e[1] for e in kind.log if e[0] == "sync"} == {"fake:1"}


def test_gemm_on_the_cpu_returns_a_positive_rate():
    assert gemm_gflops("cpu", n=64, repeats=1) > 0 and gemm_gflops(torch.device("cpu"), n=32, dtype=torch.float64) > 0
