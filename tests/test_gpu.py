"""The GPU checks of :mod:`gpu_cases` under pytest: marked ``gpu``, skipped with the reason where torch sees no GPU."""

from __future__ import annotations

import pytest
import torch

import gpu_cases

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: torch.cuda.is_available() is False")]


@pytest.mark.parametrize("check", gpu_cases.CHECKS, ids=lambda c: c.__name__)
def test_on_the_gpu(check):
    check()
