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

import dataclasses

from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import fedavg
from edgeprof.algorithms.base import ClientResult, EvalResult, Phase, RoundSettings, Runtime, no_phase
from edgeprof.algorithms.fedprox import device_copy, prox_gd
from edgeprof.nn.compute import Compute


def client_round(model: torch.nn.Module, global_w: Sequence[np.ndarray], personal: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, *, tau: int, beta: float, lam: float,
                 phase: Phase = no_phase,
                 compute: Compute) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Ditto's local work on arrays: (new local global weights, new personal weights, personal first loss).

    Nothing is read back inside the phases: the global steps' result is kept on the device, and after the
    personal steps both models come back in one transfer, the personal first loss in one more.
    """
    compute.load(model, global_w)
    anchor = device_copy(model)  # w^t, already on the device
    with phase("global_steps"):
        fedavg.local_gd(model, x, y, steps=tau, lr=beta, compute=compute)
        local_global = device_copy(model)
    compute.load(model, personal)
    with phase("personal_steps"):
        loss = prox_gd(model, x, y, steps=tau, lr=beta, mu=lam, anchor=anchor, compute=compute)
    arrays = compute.hosts_flat([*local_global, *model.parameters()])
    return arrays[:len(local_global)], arrays[len(local_global):], compute.scalar(loss)


#: the server averages the global models by N_i, as FedAvg
server_step = fedavg.server_step


def client(rt: Runtime, weights: list[np.ndarray], personal: list[np.ndarray], data, s: RoundSettings) -> ClientResult:
    """The client program: global then personal steps (lambda = ``s.mu``); replies the global model, keeps v_i."""
    new, new_personal, loss = client_round(fedavg.whole_model(rt), weights, personal, data.x_train, data.y_train,
                                           tau=s.tau, beta=s.beta, lam=s.mu, phase=s.phase, compute=rt.compute)
    return ClientResult(new, new_personal, loss, len(data.y_train))


def evaluate(rt: Runtime, weights: list[np.ndarray], personal: list[np.ndarray], data, s: RoundSettings) -> EvalResult:
    """The client's personal model v_i on its data."""
    return fedavg.model_loss_accuracy(fedavg.whole_model(rt), personal, data, rt.compute)


def init_personal(rt: Runtime, data, global0: list[np.ndarray]) -> list[np.ndarray]:
    """v_i at round 0: a copy of the initial global model."""
    return [a.copy() for a in global0]


SPEC = dataclasses.replace(
    fedavg.SPEC, name="ditto", paper="Ditto: Fair and Robust Federated Learning Through Personalization",
    phases=("global_steps", "personal_steps"), client=client, evaluate=evaluate, hyperparams="ditto",
    personal="the personal model v_i (whole network), starting at round 0's global model",
    init_personal=init_personal, prepare=fedavg.prepare_steps(client, fedavg.init_global, init_personal),
    evaluation="each client's personal model v_i", cost=(0.0, 6.0))
