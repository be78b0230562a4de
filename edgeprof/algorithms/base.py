"""The torch and numpy helpers the algorithm modules share.

The contract every algorithm implements (client and server programs on plain data, its declaration)
is in :mod:`edgeprof.algorithms.contract`; this module re-exports the names the algorithm modules use.
"""

from __future__ import annotations

import numpy as np
import torch

from edgeprof.algorithms.contract import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings,
                                          Runtime, ServerState, no_phase)

__all__ = ["AlgorithmSpec", "ClientResult", "EvalResult", "Phase", "Reply", "RoundSettings", "Runtime",
           "ServerState", "no_phase", "mean_cross_entropy", "accuracy"]


def mean_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy, the per-sample loss of equation (2)."""
    return torch.nn.functional.cross_entropy(logits, labels, reduction="mean")


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction correct; 0.0 for an empty set."""
    return float(np.mean(predictions == labels)) if len(labels) else 0.0
