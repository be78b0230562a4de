"""FedRep: Exploiting Shared Representations for Personalized Federated Learning (Collins et al. 2021).

Shared backbone (the representation, theta) plus a personal linear head per client, as FedPer
(:mod:`edgeprof.algorithms.fedper`). Each participating client, round t (Collins et al., Algorithm 1,
with full-batch gradient steps):

1. ``head_epochs``: tau GD steps (step beta) on its head with theta frozen. As in the FedRep paper and
   code, every step runs the *whole* forward pass through the backbone again (no feature cache).
2. ``body_epochs``: ``body_steps(tau) = max(1, tau // 10)`` GD steps on theta with the new head frozen:
   the paper's ratio of 10 head epochs to 1 representation epoch.

The server averages theta by N_i; heads never leave the client. Cost: about 1.1 tau forward passes and
0.1 tau backward passes through the backbone, O(tau).

Note on cost: the head steps see a frozen backbone, so caching the features once per round (as
PFLEGO and FedRecon do) would give the same result and make ``head_epochs`` nearly free; edgeprof
keeps FedRep as published, so its measured cost is FedRep's, not that of a cached variant.
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

#: the server step: N_i-weighted average of the backbones (heads stay personal)
server_step = fedper.server_step

#: head epochs per representation epoch, as in the FedRep paper (10 : 1)
HEAD_TO_BODY = 10


def body_steps(tau: int) -> int:
    """Representation steps of a round with tau head steps."""
    return max(1, tau // HEAD_TO_BODY)


def client_round(backbone: torch.nn.Module, body: Sequence[np.ndarray], head: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, *, head_steps: int, n_body_steps: int, beta: float,
                 phase: Phase = no_phase, compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """FedRep's local update on arrays: head steps (body frozen), then body steps (head frozen).

    Returns (new body, new head, loss at the first head step).
    """
    return fedper.alternating_round(backbone, body, head, x, y, head_steps=head_steps, body_steps=n_body_steps,
                                    beta=beta, phases=("head_epochs", "body_epochs"), phase=phase, compute=compute)


def _update(backbone, body, head, x, y, s: RoundSettings, compute: Compute):
    """FedRep: tau head steps, then body_steps(tau) body steps."""
    return client_round(backbone, body, head, x, y, head_steps=s.tau, n_body_steps=body_steps(s.tau), beta=s.beta,
                        phase=s.phase, compute=compute)


_CLIENT = fedper.head_client(_update)

SPEC = dataclasses.replace(
    fedper.SPEC, name="fedrep", paper="Exploiting Shared Representations for Personalized Federated Learning",
    phases=("head_epochs", "body_epochs"), client=_CLIENT, hyperparams="fedrep", cost=(0.0, 1.3),
    prepare=fedper.prepare_head_client(_CLIENT))
