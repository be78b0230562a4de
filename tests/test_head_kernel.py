"""PFLEGO's head-steps Triton kernel (:mod:`edgeprof.nn.head_kernel`), run in Triton's interpreter on the CPU.

The interpreter runs a launch's programs one after another, so only the one-program kernel (no barrier) runs
here; the kernel with several programs is checked on a GPU (``scripts/gpu_cases.py``). Each result is held against
the numpy head's steps (:func:`edgeprof.nn.head.gradient_steps`, an independent computation) to the float32 floor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeprof.nn import head as headlib
from edgeprof.nn.compute import Compute, DeviceKind

triton = pytest.importorskip("triton", reason="triton is a dev dependency on Linux x86_64 (pyproject)")


@pytest.fixture
def interpreted():
    """The kernel module, its kernel run by Triton's interpreter (conftest sets TRITON_INTERPRET=1 where there is no
    GPU, before triton is imported); on a GPU machine it runs compiled, and scripts/gpu_cases.py checks it there."""
    import os

    from edgeprof.nn import head_kernel

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernel runs compiled here (a GPU): scripts/gpu_cases.py checks it on the GPU")
    return head_kernel


def _problem(rng, n: int, m: int, k: int):
    feats_b = headlib.with_bias(rng.normal(size=(n, m)).astype(np.float32))
    labels = rng.integers(0, k, size=n)
    return feats_b, labels, rng.normal(scale=0.1, size=(k, m + 1)).astype(np.float32)


def _atol(want: np.ndarray, n: int, m: int, steps: int) -> float:
    """Each step chains three float32 roundings (the logits' dot of length M+1, the residual, the update's dot of
    length N, here split over tiles of images), one more for the step's subtraction."""
    from edgeprof.nn.tolerances import float32_atol

    return float32_atol(want, fan_in=max(n, m + 1), depth=3 * steps + 1)


@pytest.mark.parametrize("n,m,k,steps", [(600, 64, 5, 9), (37, 16, 3, 5), (5, 8, 2, 3), (130, 1, 20, 4),
                                         (70, 200, 10, 2)])
def test_the_one_program_kernel_equals_the_numpy_head(rng, interpreted, n, m, k, steps):
    """Tiles of images that do not divide N, one feature, more classes than a tile's 16, a width past 128: the
    kernel's head equals the numpy head's steps, and moved."""
    feats_b, labels, w0 = _problem(rng, n, m, k)
    w = torch.from_numpy(w0.copy())
    kernel = interpreted.HeadKernel(n, k, m + 1, 1, w)

    kernel.launch(w, torch.from_numpy(feats_b), torch.from_numpy(labels), torch.tensor(0.3 / n), steps)

    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, steps)
    assert not np.allclose(want, w0), "the steps moved the head"
    np.testing.assert_allclose(w.numpy(), want, rtol=0, atol=_atol(want, n, m, steps))


@pytest.mark.parametrize("programs", [0, 3, 128])
def test_a_program_count_that_is_no_power_of_two_in_range_is_refused(programs):
    from edgeprof.nn.head_kernel import MAX_PROGRAMS, HeadKernel

    with pytest.raises(ValueError, match=f"power of two in 1..{MAX_PROGRAMS}"):
        HeadKernel(600, 5, 65, programs, torch.zeros(1))


class _KernelKind(DeviceKind):
    """The CPU kind, except that it "captures" (the replay runs the body eagerly) and offers the head kernel at the
    given program counts: HeadPrograms.prepare then tries the graphs' splits and the kernel, as on a GPU."""

    def __init__(self, programs: tuple) -> None:
        self.programs = programs

    def can_capture(self, device):
        return True

    def capture(self, run, device, pool=None):
        run()  # the warm-up a real capture does
        return run

    def head_kernel_programs(self, device):
        return self.programs


def test_prepare_tries_the_kernel_beside_the_graphs_and_keeps_the_fastest(rng, interpreted, monkeypatch):
    """The kernel is one more variant of the head program: timed at set-up beside every split, kept when fastest
    (here its replay's time is said to be the shortest: the interpreter runs it far slower), replayed by the rounds, its head the numpy head's; the sidecar's
    description names each variant's time."""
    from edgeprof.nn import head_program

    real = head_program.HeadPrograms._replay_s
    ran = []

    def timed(self, program):  # each candidate replayed for real; the interpreter's time made the fastest
        ran.append(program.variant)
        real(self, program)
        return 0.001 if program.kernel is not None else 0.02

    monkeypatch.setattr(head_program.HeadPrograms, "_replay_s", timed)
    n, m, k, steps = 50, 8, 3, 4
    feats_b, labels, w0 = _problem(rng, n, m, k)
    programs = head_program.HeadPrograms(Compute(kind=_KernelKind((1,))))

    prepared = programs.prepare(n, k, m + 1, steps)
    got = programs.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), 0.3, steps).numpy()

    assert prepared.variant == "kernel 1 programs" and prepared.kernel is not None
    times = programs.tuning[prepared.key]
    assert set(times) == set(ran) == {f"graph split {s}" for s in head_program.SPLITS} | {"kernel 1 programs"}
    assert times["kernel 1 programs"] == min(times.values())
    described = programs.describe()
    assert described["kernel_programs_tried"] == [1] and described["failed"] == {}
    assert described["keys"][0]["variant"] == "kernel 1 programs"
    assert (programs.captures, programs.replays, programs.eager_runs) == (1, 1, 0)
    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, steps)
    np.testing.assert_allclose(got, want, rtol=0, atol=_atol(want, n, m, steps))


def test_a_kernel_variant_that_cannot_be_built_is_skipped_and_said(rng, interpreted):
    """A kernel variant that fails to build (here a program count the kernel refuses) is left out of the tuning and
    named in the description with its error; the graphs run the steps, equal to the numpy head."""
    from edgeprof.nn import head_program

    n, m, k, steps = 40, 8, 3, 3
    feats_b, labels, w0 = _problem(rng, n, m, k)
    programs = head_program.HeadPrograms(Compute(kind=_KernelKind((3,))))

    prepared = programs.prepare(n, k, m + 1, steps)
    got = programs.run(w0, torch.from_numpy(feats_b), torch.from_numpy(labels), 0.3, steps).numpy()

    assert prepared.variant.startswith("graph split")
    assert set(programs.tuning[prepared.key]) == {f"graph split {s}" for s in head_program.SPLITS}
    (name, why), = programs.describe()["failed"].items()
    assert name.startswith("kernel 3 programs") and "ValueError" in why and "power of two" in why
    want = headlib.gradient_steps(w0, feats_b, labels, 0.3, steps)
    np.testing.assert_allclose(got, want, rtol=0, atol=_atol(want, n, m, steps))
