"""PFLEGO's tau-1 head steps as one device program: built once per shape, captured once as a CUDA graph, replayed.

Eagerly, each head step is four small kernels (the logits' product, the softmax, the scaled residual, the update's
product) and on a GPU each costs its launch: ~50 us a step on an H200, so the steps grew a round by +12..28% over
tau 5..100. A :class:`HeadProgram` owns static device tensors (the head ``W``, the bias-augmented features, the
labels, the one-hot targets and the step size ``lr / N``) and runs the steps on them; where the device kind says it
captures graphs (:meth:`~edgeprof.nn.compute.DeviceKind.can_capture`: a CUDA GPU) the whole run of steps is
captured once (``torch.cuda.CUDAGraph``) and each round copies its inputs into the static tensors and replays the
graph: one launch. The CPU and the test kinds run the same program eagerly.

The update's product, ``R^T phi_b`` (K x N by N x (M+1)), has a tiny output and a long sum over the N images: one
matrix product gives it to a few thread blocks, and on an H100 a replayed step took ~40 us for M=64, K=2 (~18 us for
M=192). A program may instead split the images into ``split`` equal blocks (zero rows pad N to a multiple; a zero
feature row adds nothing to the product), take the blocks' products side by side (one batched product) and sum
them.

Where the kind runs Triton kernels (:meth:`~edgeprof.nn.compute.DeviceKind.head_kernel_programs`: a CUDA GPU with
Triton importable), a program may instead be one launch of :mod:`edgeprof.nn.head_kernel` for all its steps, the
images' sum split over a few programs that meet at a barrier each step (no four to six launches a step).

Where the kind captures graphs, :meth:`HeadPrograms.prepare` captures one program per variant (each split of
:data:`SPLITS`, and the kernel at each of the kind's program counts), times a few replays of each and keeps the
fastest (``describe()`` gives the times); elsewhere a program does not split and runs eagerly.

A program is keyed by :class:`ProgramKey` (steps, N, K, M+1, dtype, device): a new tau, local set size, class count
or feature width builds (and captures) a new one. The learning rate is *not* in the key: it is a device tensor the
program reads (``scale = lr / N``, written before each run), so a changed lr replays the same graph.

Capture (and the warm-up run it needs) is set-up: :meth:`HeadPrograms.prepare` does it before any profiler window
(PFLEGO's ``prepare`` hook, called by the driver); a round never captures. A round whose key was not prepared runs
the program eagerly and counts it (``eager_runs``), so a window holds either a replay or the eager steps, never a
capture. :meth:`HeadPrograms.describe` goes to the sidecar (``numerics.compute.programs.head_steps``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

#: the splits of the images' sum a capturing kind tries for each program (1: one matrix product)
SPLITS = (1, 4, 16, 64)
#: replays of each captured candidate timed at set-up (the fastest of them is its time)
TUNING_REPLAYS = 3


def variant_name(split: int, kernel_programs: int = 0) -> str:
    """A head program's variant as the tuning and the sidecar name it: ``graph split S`` (the eager steps, captured
    where the kind captures) or ``kernel P programs``."""
    return f"kernel {kernel_programs} programs" if kernel_programs else f"graph split {split}"


def padded_rows(n: int, split: int) -> int:
    """N rounded up to a multiple of ``split``."""
    return -(-n // split) * split


@dataclass(frozen=True)
class ProgramKey:
    """What a head program's shapes and capture depend on (never the learning rate)."""

    steps: int
    n: int
    classes: int
    width: int  # M+1: the features with their bias column
    dtype: str
    device: str


def scaled_steps(w, feats_b, neg_target, scale, steps: int, split: int = 1):
    """``steps`` head steps on tensors where they lie, in place on ``w`` (K, M+1): ``neg_target`` is
    ``-scale * onehot(y)`` (N, K) and ``scale`` a 0-d tensor ``lr / N``. Each step is
    ``W <- W - (scale * softmax(phi_b W^T) - scale * onehot).T @ phi_b``, the closed form of
    :func:`edgeprof.nn.head.gradient_steps`. Four kernels a step (``split`` > 1: the update's product as
    ``split`` blocks of rows side by side, then their sum: six; N must be a multiple of ``split``); nothing is
    read back."""
    import torch

    n, width = feats_b.shape
    blocks = feats_b.view(split, n // split, width) if split > 1 else None
    for _ in range(steps):
        residual = torch.addcmul(neg_target, torch.softmax(feats_b @ w.T, dim=1), scale)
        if blocks is None:
            w.addmm_(residual.T, feats_b, alpha=-1.0)
        else:
            parts = torch.bmm(residual.view(split, n // split, -1).transpose(1, 2), blocks)
            w.sub_(parts.sum(0))
    return w


class HeadProgram:
    """The head steps of one :class:`ProgramKey` on static device tensors, run eagerly or as a captured graph.

    :meth:`run` copies a round's head, features and labels into the static tensors and writes the step size; the
    targets are made from the labels inside the program. The result is a fresh tensor (a copy of the static head),
    so a later run does not overwrite a head a round still holds.
    """

    def __init__(self, compute, key: ProgramKey, like, split: int = 1, kernel_programs: int = 0) -> None:
        """``like``: any tensor on the device; the static tensors are allocated beside it (no host copy).
        ``split``: the blocks of the update's sum (:func:`scaled_steps`); the static rows past N stay zero.
        ``kernel_programs`` > 0: the steps are one launch of :class:`~edgeprof.nn.head_kernel.HeadKernel` with that
        many programs instead (``split`` is then 1)."""
        import torch

        self.compute, self.key = compute, key
        self.kernel_programs = int(kernel_programs)
        self.split = 1 if self.kernel_programs else int(split)
        rows = padded_rows(key.n, self.split)
        zeros = lambda *shape: like.new_zeros(shape, dtype=getattr(torch, key.dtype))  # noqa: E731
        self.w, self.feats_b = zeros(key.classes, key.width), zeros(rows, key.width)
        self.neg_target, self.scale = zeros(rows, key.classes), zeros()
        self.labels = like.new_zeros((rows,), dtype=torch.int64)
        self.kernel = None
        if self.kernel_programs:
            from edgeprof.nn.head_kernel import HeadKernel

            self.kernel = HeadKernel(key.n, key.classes, key.width, self.kernel_programs, self.w)
        self._replay: Optional[Callable[[], Any]] = None
        self.setup_s = 0.0

    @property
    def captured(self) -> bool:
        return self._replay is not None

    @property
    def variant(self) -> str:
        """How the steps run (:func:`variant_name`)."""
        return variant_name(self.split, self.kernel_programs)

    def _body(self) -> None:
        """The program: targets from the labels, then the steps (what a capture records); or the kernel's launch."""
        if self.kernel is not None:
            self.kernel.launch(self.w, self.feats_b, self.labels, self.scale, self.key.steps)
            return
        self.neg_target.zero_().scatter_(1, self.labels.unsqueeze(1), 1.0).mul_(-self.scale)
        scaled_steps(self.w, self.feats_b, self.neg_target, self.scale, self.key.steps, self.split)

    def capture(self) -> None:
        """Capture the body as one device program (the kind warms it up first); its wall time is set-up."""
        start = time.perf_counter()
        self._replay = self.compute.capture(self._body)
        self.compute.sync()
        self.setup_s = time.perf_counter() - start

    def run(self, w, feats_b, labels, lr: float):
        """The steps from head ``w`` (a device tensor or host array) on ``feats_b`` and device ``labels``; a new
        device tensor. Replays the graph where one was captured, else runs the body eagerly."""
        import torch

        with torch.no_grad():
            self.w.copy_(w if isinstance(w, torch.Tensor) else self.compute.tensor(w))
            self.feats_b[:self.key.n].copy_(feats_b)
            self.labels[:self.key.n].copy_(labels)
            self.scale.fill_(float(lr) / self.key.n)
            (self._replay or self._body)()
            return self.w.clone()


class HeadPrograms:
    """A run's head programs by key, with what was built, captured, replayed and run eagerly (for the sidecar)."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self._programs: dict[ProgramKey, HeadProgram] = {}
        self.builds = self.captures = self.replays = self.eager_runs = 0
        #: per key prepared on a capturing kind: each variant's replay time at set-up (s), the fastest kept
        self.tuning: dict[ProgramKey, dict[str, float]] = {}
        self.capture_setup_s = 0.0  # every candidate's capture, the ones not kept included
        #: kernel variants that could not be built or launched here, and why (never a graph: that error is raised)
        self.failed: dict[str, str] = {}

    def key(self, n: int, classes: int, width: int, steps: int) -> ProgramKey:
        return ProgramKey(int(steps), int(n), int(classes), int(width), "float32", str(self.compute.device))

    def _get(self, key: ProgramKey, like=None) -> HeadProgram:
        program = self._programs.get(key)
        if program is None:
            if like is None:  # set-up: one element placed on the device to allocate beside
                import numpy as np

                like = self.compute.tensor(np.zeros(1, dtype=np.float32))
            program = self._programs[key] = HeadProgram(self.compute, key, like)
            self.builds += 1
        return program

    def prepare(self, n: int, classes: int, width: int, steps: int) -> HeadProgram:
        """Set-up, outside any window: the program of these shapes built and, where the kind captures graphs,
        captured (once per key)."""
        key = self.key(n, classes, width, steps)
        program = self._get(key)
        if program.captured or steps <= 0 or not self.compute.can_capture():
            return program
        times: dict[str, float] = {}
        best = None
        variants = [(split, 0) for split in SPLITS] + [(1, p) for p in self.compute.head_kernel_programs()]
        for split, kernel_programs in variants:
            try:
                candidate = (program if (split, kernel_programs) == (program.split, program.kernel_programs)
                             else HeadProgram(self.compute, key, program.w, split, kernel_programs))
                candidate.capture()
            except Exception as err:  # a kernel this device cannot build or launch (e.g. out of shared memory)
                if not kernel_programs:
                    raise
                self.failed[f"{variant_name(split, kernel_programs)} ({key.n}x{key.width}, {key.steps} steps)"] = \
                    f"{type(err).__name__}: {err}".splitlines()[0][:300]
                continue
            self.capture_setup_s += candidate.setup_s
            times[candidate.variant] = self._replay_s(candidate)
            if best is None or times[candidate.variant] < times[best.variant]:
                best = candidate
        self.captures += 1  # one program kept per key; one graph captured per variant for it
        self._programs[key], self.tuning[key] = best, times
        return best

    def _replay_s(self, program: HeadProgram) -> float:
        """The fastest of :data:`TUNING_REPLAYS` replays of a captured program on its zero inputs, synchronised."""
        best = float("inf")
        for _ in range(TUNING_REPLAYS):
            self.compute.sync()
            start = time.perf_counter()
            program._replay()
            self.compute.sync()
            best = min(best, time.perf_counter() - start)
        return best

    def run(self, w, feats_b, labels, lr: float, steps: int):
        """A round's head steps: the prepared program of these shapes replayed, or the program run eagerly (built
        here where none was prepared; a round never captures)."""
        key = self.key(feats_b.shape[0], w.shape[0], w.shape[1], steps)
        program = self._get(key, feats_b)
        if program.captured:
            self.replays += 1
        else:
            self.eager_runs += 1
        return program.run(w, feats_b, labels, lr)

    def describe(self) -> dict:
        """How the head steps ran: captured graphs replayed, or eagerly; the set-up each capture took."""
        captured = [p for p in self._programs.values() if p.captured]
        how = "captured device graph, replayed" if captured else "eager torch on the device"
        if captured and self.eager_runs:
            how += f"; {self.eager_runs} round(s) eagerly, their shapes not prepared before the windows"
        return {"head_steps": how, "programs_built": self.builds, "captures": self.captures,
                "replays": self.replays, "eager_runs": self.eager_runs, "lr_in_key": False,
                "capture_setup_s": round(self.capture_setup_s, 6), "splits_tried": list(SPLITS),
                "kernel_programs_tried": list(self.compute.head_kernel_programs()), "failed": dict(self.failed),
                "keys": [{**asdict(p.key), "split": p.split, "kernel_programs": p.kernel_programs,
                          "variant": p.variant,
                          **({"variant_replay_s": {k: round(v, 7) for k, v in self.tuning[p.key].items()}}
                             if p.key in self.tuning else {})}
                         for p in self._programs.values()]}
