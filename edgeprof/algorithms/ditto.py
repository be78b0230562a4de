"""Ditto: Fair and Robust Federated Learning Through Personalization (Li et al. 2021).

Algorithm 1 of Li et al., with full-batch gradient steps. Each participating client i, round t:

1. ``global_steps``: from the global weights w^t, tau GD steps (step beta) on its loss F_i(w), as in
   FedAvg (whole model, one shared head of max K_i outputs); the result goes to the server.
2. ``personal_steps``: tau GD steps on its personal model v_i (same architecture, kept on the client)
   with the regulariser of Ditto's objective (its equation (2)):
   v_i <- v_i - beta * (grad F_i(v_i) + lambda (v_i - w^t)).

The server averages the returned global weights by N_i. Accuracy and loss are the *personal* model's;
a client that never took part still has v_i at the initial weights. lambda is the mu of the PFLEGO
paper's Table 6 row "Ditto" (0.25 for High-Pers; ``--mu`` overrides it). Cost: 2 tau full forward and
backward passes per client round, O(tau).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import fedavg
from edgeprof.algorithms.base import ClientUpdate, EvalResult, Phase, accuracy, as_tensor, mean_cross_entropy, no_phase
from edgeprof.algorithms.fedprox import prox_gd
from edgeprof.nn.backbones import get_params, set_params


def client_round(model: torch.nn.Module, global_w: Sequence[np.ndarray], personal: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, *, tau: int, beta: float, lam: float,
                 phase: Phase = no_phase) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Ditto's local work on arrays: (new local global weights, new personal weights, personal first loss)."""
    set_params(model, global_w)
    with phase("global_steps"):
        fedavg.local_gd(model, x, y, steps=tau, lr=beta)
        local_global = get_params(model)
    set_params(model, personal)
    with phase("personal_steps"):
        loss = prox_gd(model, x, y, steps=tau, lr=beta, mu=lam, anchor=global_w)
        new_personal = get_params(model)
    return local_global, new_personal, loss


#: the server averages the global models by N_i, as FedAvg
server_step = fedavg.server_step


class Ditto(fedavg.FedAvg):
    """FedAvg's global model plus a regularised personal model per client."""

    name = "ditto"

    def __init__(self, cfg, clients, backbone) -> None:
        super().__init__(cfg, clients, backbone)
        self.personal = [[a.copy() for a in self.weights] for _ in self.clients]

    def client_round(self, client_id: int, phase: Phase = no_phase) -> ClientUpdate:
        c = self.clients[client_id]
        new, personal, loss = client_round(self.model, self.weights, self.personal[client_id], c.x_train,
                                           c.y_train, tau=self.cfg.tau, beta=self.cfg.beta, lam=self.cfg.mu,
                                           phase=phase)
        self.personal[client_id] = personal
        return ClientUpdate(client_id, c.n_train, loss, new)

    def evaluate(self, client_id: int) -> EvalResult:
        c = self.clients[client_id]
        set_params(self.model, self.personal[client_id])
        with torch.no_grad():
            loss = float(mean_cross_entropy(self.model(as_tensor(c.x_train)), as_tensor(c.y_train)))
            pred = self.model(as_tensor(c.x_test)).argmax(1).numpy() if c.n_test else np.zeros(0)
        return EvalResult(client_id, loss, accuracy(pred, c.y_test), c.n_train, c.n_test)
