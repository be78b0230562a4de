"""PFLEGO in the Table 1 setting gives the same bits with 1 and 2 threads on one machine.

The claim ``scripts/experiments/pflego_threads.py`` measured over 100 rounds (docs/reproduction.md, "PFLEGO at the
paper's rho: thread count and reproducibility"): each part of a round (ONNX Runtime's features, torch's joint
gradient and sums, the numpy head on one BLAS thread) is thread-invariant at these sizes, so a run's theta and
heads do not depend on the thread count. Across kernel families or library versions they may differ, and that is
not claimed (tests/test_reproducibility.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_reproducibility import run_in_process, torch_threads  # noqa: F401 (a fixture)


def _table1_run(threads: int) -> list[np.ndarray]:
    """Rounds of PFLEGO at Table 6's rho on digits, High-Pers, 20 clients, 20% participation, tau=25, mlp, through
    the in-process driver: theta and every client's head after the last round."""
    from edgeprof.config import RunConfig

    theta, heads = run_in_process(RunConfig(algo="pflego", dataset="digits", degree="high", clients=20,
                                            participation=0.2, tau=25, rounds=6, backbone="mlp", seed=1,
                                            threads=threads))
    return theta + heads


def test_one_and_two_threads_give_a_bitwise_identical_pflego_run(torch_threads):
    from edgeprof.host import max_threads

    if max_threads() < 2:
        pytest.skip("2 threads need 2 cores")

    one, two = _table1_run(1), _table1_run(2)

    assert len(one) == len(two) == 2 + 20  # the mlp's theta (weight, bias) and 20 heads
    assert [a.tobytes() for a in one] == [b.tobytes() for b in two]
    assert any(np.any(h) for h in one[2:])  # the rounds trained heads: an all-zero run would prove nothing
