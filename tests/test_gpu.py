"""The GPU checks of ``scripts/gpu_cases.py`` under pytest: marked ``gpu``, skipped with the reason where torch sees no
GPU. The checks lie next to ``scripts/gpu_check.py``, which runs them without pytest where it is absent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

CASES = Path(__file__).resolve().parents[1] / "scripts" / "gpu_cases.py"
_SPEC = importlib.util.spec_from_file_location("gpu_cases", CASES)
gpu_cases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_cases)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: torch.cuda.is_available() is False")]


@pytest.mark.parametrize("check", gpu_cases.CHECKS, ids=lambda c: c.__name__)
def test_on_the_gpu(check):
    check()
