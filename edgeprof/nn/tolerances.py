"""Tolerances derived from float32 rounding, not tuned to one CPU's kernels: what the numerics tests and the GPU
check (``scripts/gpu_cases.py``, run by ``scripts/gpu_check.py`` where pytest is absent) compare with. No run uses
them; they live in the package so that the GPU check finds them without the test suite on its path.

Two float32 computations of the same quantity (ONNX Runtime against torch, AVX-512 against AVX2
kernels, one summation order against another) may differ by the standard forward-error bound of a
length-n dot product, ``gamma_n * sum |a_k b_k| <= gamma_n * n_terms * max|a b|`` with
``gamma_n = n u / (1 - n u)`` and ``u = 2**-24`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, section 3.1). A chain of ``depth`` such operations (layers forward and backward, head
steps) adds at most ``depth`` such terms to first order. The bounds below are worst cases: the
differences actually seen are one to three orders of magnitude smaller, whatever the kernels.

Adam is the one place where rounding is not merely propagated: its first step moves each parameter by
``lr * g / (|g| + eps)``, so a gradient element near ``eps`` may move by up to ``lr`` on one CPU and
by much less on another. :func:`adam_first_step_bound` is the exact per-element difference of that map
for two gradients, so theta after Adam is compared through what it depends on.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: unit roundoff of float32
U32 = 2.0**-24


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of an n-term float32 sum or dot product."""
    return n * U32 / (1.0 - n * U32)


def float32_atol(reference: np.ndarray | Sequence[np.ndarray], fan_in: int, depth: int = 1) -> float:
    """Absolute tolerance for comparing two float32 evaluations of ``reference``.

    ``fan_in`` is the longest reduction in the computation (a layer's input width, a batch size);
    ``depth`` the number of chained reductions. Scaled by the largest magnitude in ``reference``.
    """
    arrays = [reference] if isinstance(reference, np.ndarray) else list(reference)
    scale = max(float(np.max(np.abs(a))) for a in arrays if a.size)
    return depth * gamma(fan_in) * scale


def adam_first_step_bound(g_a: np.ndarray, g_b: np.ndarray, lr: float, eps: float = 1e-8) -> np.ndarray:
    """|lr g_a/(|g_a|+eps) - lr g_b/(|g_b|+eps)|, the difference of one Adam step from zero state
    (bias-corrected m/sqrt(v) = g/|g|), computed in float64, plus one float32 ulp of a unit step."""
    a = np.asarray(g_a, dtype=np.float64)
    b = np.asarray(g_b, dtype=np.float64)
    step = lambda g: lr * g / (np.abs(g) + eps)  # noqa: E731
    return np.abs(step(a) - step(b)) + lr * 4 * U32
