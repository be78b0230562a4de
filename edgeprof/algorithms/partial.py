"""FedSim and FedAlt: Federated Learning with Partial Model Personalization (Pillutla et al. 2022).

Algorithms 1-3 of shared/papers/002_*.txt with the *output layer* as the personal part v_i (a K_i x M
linear head plus bias) and the backbone as the shared part u, full-batch gradient steps:

- FedSim (Algorithm 2, LocalSim), phase ``local_steps``: tau steps updating u and v_i *simultaneously*,
  both partial gradients evaluated at the same point (u_k, v_k). With the output layer personal this is
  exactly FedPer's local update (:func:`edgeprof.algorithms.fedper.client_round`).
- FedAlt (Algorithm 3, LocalAlt): ``personal_steps``: tau_v = tau steps on v_i with u fixed (a full
  forward pass through the backbone each step), then ``shared_steps``: tau_u = tau steps on u with the
  *updated* v_i fixed. tau_v = tau_u, as in the paper's experiments (one local epoch each).

Server (Algorithm 1, line 7): u is replaced by the average of the participants' u_i, weighted by N_i
(the paper's alpha_i-weighted objective (3)); v_i stays on the device. Step sizes gamma_u = gamma_v =
beta. Cost: FedSim tau, FedAlt 2 tau forward passes (tau backward through the backbone): both O(tau).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import fedper
from edgeprof.algorithms.base import Phase, RoundSettings, no_phase
from edgeprof.algorithms.fedper import Head
from edgeprof.nn.compute import Compute

#: the shared part's server step: N_i-weighted average of the participants' u_i
server_step = fedper.server_step


def local_sim(backbone: torch.nn.Module, shared: Sequence[np.ndarray], personal: Sequence[np.ndarray],
              x: np.ndarray, y: np.ndarray, *, tau: int, beta: float,
              phase: Phase = no_phase, compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """LocalSim on arrays: (new u_i, new v_i, first loss)."""
    return fedper.client_round(backbone, shared, personal, x, y, tau=tau, beta=beta, phase=phase, compute=compute)


def local_alt(backbone: torch.nn.Module, shared: Sequence[np.ndarray], personal: Sequence[np.ndarray],
              x: np.ndarray, y: np.ndarray, *, tau_v: int, tau_u: int, beta: float,
              phase: Phase = no_phase, compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """LocalAlt on arrays: v_i first with u fixed, then u with the new v_i fixed; (new u_i, new v_i, first loss)."""
    return fedper.alternating_round(backbone, shared, personal, x, y, head_steps=tau_v, body_steps=tau_u, beta=beta,
                                    phases=("personal_steps", "shared_steps"), phase=phase, compute=compute)


def _sim(backbone, shared, personal, x, y, s: RoundSettings, compute: Compute):
    """FedSim: LocalSim."""
    return local_sim(backbone, shared, personal, x, y, tau=s.tau, beta=s.beta, phase=s.phase, compute=compute)


def _alt(backbone, shared, personal, x, y, s: RoundSettings, compute: Compute):
    """FedAlt: LocalAlt with tau_v = tau_u = tau."""
    return local_alt(backbone, shared, personal, x, y, tau_v=s.tau, tau_u=s.tau, beta=s.beta, phase=s.phase,
                     compute=compute)


PAPER = "Federated Learning with Partial Model Personalization"
#: FedSim borrows FedPer's row of the tables (the same local update), FedAlt FedRep's (head steps, then body)
#: each captures the step programs of its own client program before any window (:mod:`edgeprof.nn.step_program`)
FEDSIM = dataclasses.replace(fedper.SPEC, name="fedsim", paper=PAPER, client=fedper.head_client(_sim),
                             prepare=fedper.prepare_head_client(fedper.head_client(_sim)), hyperparams="fedper")
FEDALT = dataclasses.replace(fedper.SPEC, name="fedalt", paper=PAPER, phases=("personal_steps", "shared_steps"),
                             client=fedper.head_client(_alt), prepare=fedper.prepare_head_client(fedper.head_client(_alt)),
                             hyperparams="fedrep", cost=(0.0, 6.0))
