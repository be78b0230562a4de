"""FedAvg: Communication-Efficient Learning of Deep Networks from Decentralized Data (McMahan et al. 2017).

As configured in the PFLEGO paper's experiments (Section 4.2): the whole model (backbone plus one
*shared* linear head whose number of outputs is max_i K_i, local labels 0..K_i-1 sharing output units)
is trained by every participating client with tau full-batch gradient-descent steps of size beta over
its whole local set (phase ``local_steps``), and the server replaces the global weights by their
average weighted by N_i over the participating clients. Every local step is a full forward and
backward pass through the backbone, so the client's cost grows linearly in tau.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (Algorithm, ClientUpdate, EvalResult, Phase, accuracy, as_tensor,
                                      mean_cross_entropy, no_phase)
from edgeprof.nn.backbones import get_params, set_params


class BackboneWithHead(torch.nn.Module):
    """Backbone followed by a linear classifier: the whole network the baselines train."""

    def __init__(self, backbone: torch.nn.Module, num_outputs: int, seed: int = 0) -> None:
        super().__init__()
        self.backbone = backbone
        gen = torch.Generator().manual_seed(seed)
        self.head = torch.nn.Linear(backbone.feature_dim, num_outputs)
        with torch.no_grad():
            bound = 1.0 / np.sqrt(backbone.feature_dim)
            self.head.weight.uniform_(-bound, bound, generator=gen)
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def local_gd(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, steps: int, lr: float,
             params: Sequence[torch.nn.Parameter] | None = None) -> float:
    """``steps`` full-batch gradient-descent steps on the mean cross-entropy; returns the first loss.

    ``params`` restricts the update to those parameters (the others are frozen for these steps).
    """
    params = list(model.parameters()) if params is None else list(params)
    xt, yt = as_tensor(x), as_tensor(y)
    first = float("nan")
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        loss = mean_cross_entropy(model(xt), yt)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        if step == 0:
            first = float(loss.detach())
    return first


def client_round(model: torch.nn.Module, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray,
                 *, tau: int, beta: float, phase: Phase = no_phase) -> tuple[list[np.ndarray], float]:
    """FedAvg's local update on arrays: load the global weights, tau GD steps, return the new weights."""
    set_params(model, weights)
    with phase("local_steps"):
        loss = local_gd(model, x, y, steps=tau, lr=beta)
    return get_params(model), loss


def server_step(updates: Sequence[Sequence[np.ndarray]], n_samples: Sequence[int]) -> list[np.ndarray]:
    """The new global weights: the N_i-weighted average of the participants' weights."""
    return aggregation.weighted_average(updates, n_samples)


class FedAvg(Algorithm):
    """FedAvg run in-process with a shared head of max K_i outputs."""

    name = "fedavg"

    def __init__(self, cfg, clients, backbone) -> None:
        super().__init__(cfg, clients, backbone)
        outputs = max(c.num_classes for c in self.clients)
        self.model = BackboneWithHead(backbone, outputs, seed=cfg.seed)
        self.weights = get_params(self.model)

    def client_round(self, client_id: int, phase: Phase = no_phase) -> ClientUpdate:
        c = self.clients[client_id]
        new, loss = client_round(self.model, self.weights, c.x_train, c.y_train, tau=self.cfg.tau,
                                 beta=self.cfg.beta, phase=phase)
        return ClientUpdate(client_id, c.n_train, loss, new)

    def server_step(self, updates: Sequence[ClientUpdate]) -> None:
        if updates:
            self.weights = server_step([u.payload for u in updates], [u.n_samples for u in updates])

    def evaluate(self, client_id: int) -> EvalResult:
        c = self.clients[client_id]
        set_params(self.model, self.weights)
        with torch.no_grad():
            logits = self.model(as_tensor(c.x_train))
            loss = float(mean_cross_entropy(logits, as_tensor(c.y_train)))
            test_pred = self.model(as_tensor(c.x_test)).argmax(1).numpy() if len(c.y_test) else np.zeros(0)
        return EvalResult(client_id, loss, accuracy(test_pred, c.y_test), c.n_train, len(c.y_test))
