"""FedProx: Federated Optimization in Heterogeneous Networks (Li et al. 2020).

FedAvg (:mod:`edgeprof.algorithms.fedavg`: whole model with one shared head of max K_i outputs) whose
local objective carries the proximal term of Li et al.'s equation (2):

    h_i(w; w^t) = l_i(w) + mu/2 ||w - w^t||^2,

w^t the global weights received at the start of the round. The client takes tau full-batch gradient
steps w <- w - beta * (grad l_i(w) + mu (w - w^t)) (phase ``local_steps``); the server averages the
weights by N_i as FedAvg does. mu = 0.25 as in the PFLEGO paper (Table 6, Appendix A.3). Each step
is a full forward and backward pass: O(tau) per client round.
"""

from __future__ import annotations

import dataclasses

from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import fedavg
from edgeprof.algorithms.base import ClientResult, Phase, RoundSettings, Runtime, no_phase
from edgeprof.nn.compute import Compute
from edgeprof.nn.step_program import local_steps


def prox_gd(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, steps: int, lr: float, mu: float,
            anchor: Sequence[np.ndarray | torch.Tensor], compute: Compute) -> torch.Tensor:
    """``steps`` GD steps on mean cross-entropy + mu/2 ||w - anchor||^2; returns the first cross-entropy, on the
    device (nothing read back inside the loop).

    ``anchor`` holds one array (or tensor already on the device) per parameter of ``model``, in
    ``model.parameters()`` order; ``compute`` places the arrays and runs each step's forward and backward
    (:mod:`edgeprof.nn.compute`). The steps replay a captured one-step graph where one was prepared (the anchors
    copied into its static ones; :mod:`edgeprof.nn.step_program`), else run eagerly.
    """
    _, first = local_steps(compute, model, compute.batches(x, y), len(y), steps=steps, lr=lr,
                           body=list(model.parameters()), anchors=list(anchor), mu=mu)
    return first


def device_copy(model: torch.nn.Module) -> list[torch.Tensor]:
    """Copies of the module's parameters where they lie (on the device): its weights kept, nothing moved."""
    return [p.detach().clone() for p in model.parameters()]


def client_round(model: torch.nn.Module, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray, *,
                 tau: int, beta: float, mu: float, phase: Phase = no_phase,
                 compute: Compute) -> tuple[list[np.ndarray], float]:
    """FedProx's local update on arrays: tau proximal GD steps from (and towards) the global weights."""
    compute.load(model, weights)
    anchor = device_copy(model)  # the global weights, already on the device
    with phase("local_steps"):
        loss = prox_gd(model, x, y, steps=tau, lr=beta, mu=mu, anchor=anchor, compute=compute)
    return compute.hosts_flat(list(model.parameters())), compute.scalar(loss)


#: the server step is FedAvg's N_i-weighted average
server_step = fedavg.server_step


def client(rt: Runtime, weights: list[np.ndarray], personal, data, s: RoundSettings) -> ClientResult:
    """The client program: tau proximal GD steps (mu = ``s.mu``); replies the new weights."""
    new, loss = client_round(fedavg.whole_model(rt), weights, data.x_train, data.y_train, tau=s.tau, beta=s.beta,
                             mu=s.mu, phase=s.phase, compute=rt.compute)
    return ClientResult(new, None, loss, len(data.y_train))


SPEC = dataclasses.replace(fedavg.SPEC, name="fedprox", paper="Federated Optimization in Heterogeneous Networks",
                           client=client, hyperparams="fedprox",
                           prepare=fedavg.prepare_steps(client, fedavg.init_global))
