"""PFLEGO's tau-1 head steps as one Triton kernel: every step in one launch, the images' sum split over programs.

A captured graph of the eager steps (:mod:`edgeprof.nn.head_program`) still launches four to six kernels a step,
each tiny: ~17 us a step replayed on an H100, 20..28% of a PFLEGO round at tau=100. This kernel runs all the steps
in one launch. ``programs`` programs each own a slice of the N images; at every step each computes its slice's
logits ``phi_b W^T``, their softmax and the residual against the one-hot targets, and its share of the update's
product ``R^T phi_b``; writes that share to a buffer; waits at a barrier until every program has written its share
(an atomic counter in device memory); then sums the shares in the same order as every other program and takes
the step ``W <- W - (lr / N) * sum``, so every program holds the same ``W`` and program 0 writes it out at the end.
The shares alternate between two buffers, one per step's parity: a program can only write step s+2's shares once
every program has passed step s+1's barrier, so after it has read step s's.

The products are float32 (``input_precision="ieee"``: no TF32), the softmax takes the row's maximum first, as
:func:`edgeprof.nn.head.gradient_steps` does; the rounding differs from numpy's in the order of the operations, within
the float32 floor the tests hold it to.

The barrier needs every program resident on the device at once: ``programs`` is at most :data:`MAX_PROGRAMS` and at
most the GPU's multiprocessor count (:meth:`edgeprof.nn.cuda.CudaKind.head_kernel_programs`). A GPU shared so that
fewer multiprocessors than that are ever free together (an MPS client limited to a share of the threads) would
leave the kernel waiting at its first barrier: ``EDGEPROF_HEAD_KERNEL=off`` turns the kernel off (the captured
graphs then run the steps). One program has no barrier, and is what Triton's interpreter (``TRITON_INTERPRET=1``, on the CPU: it runs a launch's programs one
after another, so a barrier would never open) runs in the tests; several programs are checked on a GPU
(``scripts/gpu_cases.py``). :func:`available` says whether this module can be used (Triton importable).
"""

from __future__ import annotations

import functools
from typing import Optional

#: the most programs a launch may use: each must be resident at once for the barrier (one a multiprocessor at most:
#: H100 and H200 have 132), a power of two (each sums one equal slice of the programs' shares)
MAX_PROGRAMS = 64
#: the program counts :class:`edgeprof.nn.head_program.HeadPrograms` tries on a GPU (those up to its multiprocessor
#: count): on an H200, 99 steps at N=600, M=64, K=5 took 3.678 / 1.045 / 0.766 / 0.688 / 0.528 ms at 1 / 8 / 16 /
#: 32 / 64 programs (the best captured graph: 1.740 ms); each program's tile products dominate
PROGRAM_COUNTS = (1, 8, 16, 32, 64)
#: the most floats in a tile of the features (rows x padded width): 32 KiB (a first version's tile of 64 images by
#: 512 padded columns, M=384, asked an H200 for 289 KiB of shared memory, over its 227 KiB)
TILE_ELEMENTS = 8192
#: the environment variable that turns the kernel off (``off``, ``0``, ``no``, ``false``)
SWITCH = "EDGEPROF_HEAD_KERNEL"


def switched_off() -> bool:
    """Whether :data:`SWITCH` turns the kernel off."""
    import os

    return os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "no", "false")


@functools.lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why the kernel cannot run here (Triton not importable), or None."""
    import importlib

    try:
        importlib.import_module("triton.language")
    except Exception as err:  # an ImportError, or a Triton that fails to load its backend
        return f"triton is not importable ({type(err).__name__}: {err})"
    return None


def available() -> bool:
    return unavailable() is None


def _next_pow2(n: int, least: int = 16) -> int:
    p = least
    while p < n:
        p *= 2
    return p


@functools.lru_cache(maxsize=None)
def _kernel():
    """The Triton kernel (:mod:`edgeprof.nn._head_triton`), imported on first use: importing this module never
    imports Triton."""
    from edgeprof.nn import _head_triton

    return _head_triton.head_steps


class HeadKernel:
    """The launch of the kernel for one shape (N images, K classes, ``width`` = M+1) and program count, on static
    device tensors: :meth:`launch` steps ``w`` (K, width) in place ``steps`` times on ``feats_b`` (at least N rows,
    width columns), ``labels`` (int64) and the 0-d ``scale`` (lr / N). Its scratch (the shares, the counter) is
    allocated here, beside ``w``; the counter is zeroed at each launch (a captured graph zeroes it at each replay)."""

    def __init__(self, n: int, classes: int, width: int, programs: int, like) -> None:
        import torch

        if not 1 <= programs <= MAX_PROGRAMS or programs & (programs - 1):
            raise ValueError(f"programs must be a power of two in 1..{MAX_PROGRAMS}, not {programs}")
        self.n, self.classes, self.width, self.programs = int(n), int(classes), int(width), int(programs)
        self.rows = -(-self.n // self.programs)  # each program's slice of the images
        self.block_k, self.block_d = _next_pow2(self.classes), _next_pow2(self.width - 1)
        # a tile of the features is at most TILE_ELEMENTS floats (registers, and the dots' operands in shared memory)
        self.block_n = max(16, min(_next_pow2(self.rows), TILE_ELEMENTS // self.block_d))
        # per parity: each program's share of the update, then their sum (each K x M, then K for the bias)
        shares = 2 * (self.programs + 1) * self.block_k * (self.block_d + 1) if self.programs > 1 else 1
        self.shares = torch.zeros(shares, dtype=torch.float32, device=like.device)
        self.count = torch.zeros(1, dtype=torch.int32, device=like.device)

    def launch(self, w, feats_b, labels, scale, steps: int) -> None:
        self.count.zero_()
        _kernel()[(self.programs,)](
            w, feats_b, labels, scale, self.shares, self.count, self.n, self.classes, self.width, int(steps),
            self.rows, BLOCK_N=self.block_n, BLOCK_K=self.block_k, BLOCK_D=self.block_d, PROGRAMS=self.programs,
            KD=self.block_k * self.block_d, SLICE=self.block_k * self.block_d // self.programs,
            num_warps=4, num_stages=1)

    def describe(self) -> dict:
        return {"programs": self.programs, "block_n": self.block_n, "block_k": self.block_k, "block_d": self.block_d}
