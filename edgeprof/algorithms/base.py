"""What every algorithm provides to the simulation loop, and the torch helpers they share.

An algorithm object (built from the config, the clients and a seeded backbone; anything random it needs
is derived from ``cfg.seed``) owns the federation's state (global weights, personal heads, optimizer state) and
exposes three operations the loop profiles: :meth:`Algorithm.client_round` (one participating client's
local work, split into named phases), :meth:`Algorithm.server_step` (aggregate the round's updates) and
:meth:`Algorithm.evaluate` (loss and accuracy of one client, outside the profiled windows).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import numpy as np
import torch

from edgeprof.config import RunConfig
from edgeprof.data import ClientData

Phase = Callable[[str], ContextManager]


def no_phase(_name: str) -> ContextManager:
    """The phase marker used when nothing is profiling."""
    return contextlib.nullcontext()


@dataclass
class ClientUpdate:
    """What a client sends back at the end of its round."""

    client_id: int
    n_samples: int
    loss: float
    payload: list[np.ndarray]


@dataclass(frozen=True)
class EvalResult:
    """A client's training loss (its l_i) and test accuracy under the current model."""

    client_id: int
    train_loss: float
    test_accuracy: float
    n_train: int
    n_test: int


class Algorithm(ABC):
    """Base of every federated algorithm run in-process."""

    name = "algorithm"

    def __init__(self, cfg: RunConfig, clients: Sequence[ClientData], backbone: torch.nn.Module) -> None:
        self.cfg = cfg
        self.clients = list(clients)
        self.backbone = backbone

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @abstractmethod
    def client_round(self, client_id: int, phase: Phase = no_phase) -> ClientUpdate:
        """Run one participating client's local round."""

    @abstractmethod
    def server_step(self, updates: Sequence[ClientUpdate]) -> None:
        """Aggregate the updates of one round into the global state."""

    @abstractmethod
    def evaluate(self, client_id: int) -> EvalResult:
        """Loss on the client's training set and accuracy on its test set, current model."""

    def close(self) -> None:
        """Release sessions and files."""


def as_tensor(x: np.ndarray) -> torch.Tensor:
    """A float32 or int64 CPU tensor sharing memory with x where possible."""
    return torch.from_numpy(np.ascontiguousarray(x))


def mean_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy, the per-sample loss of equation (2)."""
    return torch.nn.functional.cross_entropy(logits, labels, reduction="mean")


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction correct; 0.0 for an empty set."""
    return float(np.mean(predictions == labels)) if len(labels) else 0.0
