"""FedPer: Federated Learning with Personalization Layers (Arivazhagan et al. 2019).

The network is a shared backbone (base layers, theta) plus a personal linear head per client
(``W_i`` K_i x M and ``b_i``, local labels 0..K_i-1). As the PFLEGO paper describes it (Section 2 and
Section 3.5): every participating client takes tau full-batch gradient steps (step beta) on the *joint*
parameters (theta, W_i, b_i) of its mean cross-entropy (phase ``local_steps``), keeps its head, and
sends theta back; the server replaces theta by the N_i-weighted average of the participants' thetas.
Every local step is a full forward and backward pass through the backbone: O(tau) per client round.

This module also holds what the other personal-head baselines share (FedRep, FedBABU, FedSim,
FedAlt, all "with the FedPer architecture" in the PFLEGO paper's words): :func:`local_steps`, which
trains any subset of {body, head} (a frozen body still gets a *full* forward pass at every step), and
:class:`PersonalHeadAlgorithm`, whose variants override one method.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (Algorithm, ClientUpdate, EvalResult, Phase, accuracy, as_tensor,
                                      mean_cross_entropy, no_phase)
from edgeprof.nn.backbones import get_params, set_params

Head = list  # [W (K, M) float32, b (K,) float32]


def initial_head(seed: int, client_id: int, num_classes: int, feature_dim: int) -> Head:
    """Client ``client_id``'s first personal head [W, b], the same one PFLEGO starts from."""
    from edgeprof.algorithms.pflego import initial_head as pflego_head

    wb = pflego_head(seed, client_id, num_classes, feature_dim)
    return [wb[:, :-1].copy(), wb[:, -1].copy()]


def local_steps(backbone: torch.nn.Module, head: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray, *,
                steps: int, lr: float, train_body: bool = True, train_head: bool = True,
                momentum: float = 0.0) -> tuple[Head, float]:
    """``steps`` full-batch GD steps on the mean cross-entropy of ``head(backbone(x))``; (new head, first loss).

    Only the blocks asked for move: the backbone's parameters in place, the head in the returned copy.
    With ``train_body=False`` every step still runs the whole forward pass through the backbone (no
    caching, as FedRep and FedAlt do). ``momentum`` > 0 is heavy-ball GD (torch's SGD convention,
    ``v <- m v + g; p <- p - lr v``), its velocity starting at zero.
    """
    xt, yt = as_tensor(x), as_tensor(y)
    w = [torch.tensor(np.asarray(a, dtype=np.float32), requires_grad=train_head) for a in head]
    params = (list(backbone.parameters()) if train_body else []) + (w if train_head else [])
    velocity = [torch.zeros_like(p) for p in params] if momentum else None
    first = float("nan")
    for step in range(steps):
        with torch.set_grad_enabled(train_body):
            feats = backbone(xt)
        loss = mean_cross_entropy(torch.nn.functional.linear(feats, w[0], w[1]), yt)
        grads = torch.autograd.grad(loss, params) if params else []
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(params, grads)):
                if velocity is not None:
                    g = velocity[i].mul_(momentum).add_(g)
                p.sub_(lr * g)
        if step == 0:
            first = float(loss.detach())
    return [t.detach().numpy().copy() for t in w], first


def head_loss_accuracy(backbone: torch.nn.Module, head: Sequence[np.ndarray], x_train: np.ndarray,
                       y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> tuple[float, float]:
    """Training loss and test accuracy of ``head(backbone(.))`` with the backbone's current weights."""
    w = [torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in head]
    with torch.no_grad():
        logits = torch.nn.functional.linear(backbone(as_tensor(x_train)), w[0], w[1])
        loss = float(mean_cross_entropy(logits, as_tensor(y_train)))
        if not len(y_test):
            return loss, 0.0
        pred = torch.nn.functional.linear(backbone(as_tensor(x_test)), w[0], w[1]).argmax(1).numpy()
    return loss, accuracy(pred, y_test)


def client_round(backbone: torch.nn.Module, body: Sequence[np.ndarray], head: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, *, tau: int, beta: float,
                 phase: Phase = no_phase) -> tuple[list[np.ndarray], Head, float]:
    """FedPer's local update on arrays: tau joint GD steps on (body, head); (new body, new head, first loss)."""
    set_params(backbone, body)
    with phase("local_steps"):
        head, loss = local_steps(backbone, head, x, y, steps=tau, lr=beta)
    return get_params(backbone), head, loss


def alternating_round(backbone: torch.nn.Module, body: Sequence[np.ndarray], head: Sequence[np.ndarray],
                      x: np.ndarray, y: np.ndarray, *, head_steps: int, body_steps: int, beta: float,
                      phases: tuple[str, str], phase: Phase = no_phase) -> tuple[list[np.ndarray], Head, float]:
    """Head steps with the body frozen, then body steps that see the new head (FedRep's and FedAlt's update).

    ``phases`` names the two parts for the profiler. Returns (new body, new head, loss at the first head step).
    """
    set_params(backbone, body)
    head_phase, body_phase = phases
    with phase(head_phase):
        head, loss = local_steps(backbone, head, x, y, steps=head_steps, lr=beta, train_body=False)
    with phase(body_phase):
        local_steps(backbone, head, x, y, steps=body_steps, lr=beta, train_head=False)
    return get_params(backbone), head, loss


def server_step(bodies: Sequence[Sequence[np.ndarray]], n_samples: Sequence[int]) -> list[np.ndarray]:
    """The new shared backbone: the N_i-weighted average of the participants' backbones (heads stay home)."""
    return aggregation.weighted_average(bodies, n_samples)


class PersonalHeadAlgorithm(Algorithm):
    """Shared backbone averaged by the server, one personal head per client that never leaves it.

    Variants override :meth:`local_update` only.
    """

    name = "personal-head"

    def __init__(self, cfg, clients, backbone) -> None:
        super().__init__(cfg, clients, backbone)
        m = backbone.feature_dim
        self.body = get_params(backbone)
        self.heads = [initial_head(cfg.seed, c.client_id, c.num_classes, m) for c in self.clients]

    def local_update(self, body, head, x, y, phase: Phase) -> tuple[list[np.ndarray], Head, float]:
        """One client's local work: (new body, new head, loss)."""
        return client_round(self.backbone, body, head, x, y, tau=self.cfg.tau, beta=self.cfg.beta, phase=phase)

    def client_round(self, client_id: int, phase: Phase = no_phase) -> ClientUpdate:
        c = self.clients[client_id]
        body, head, loss = self.local_update(self.body, self.heads[client_id], c.x_train, c.y_train, phase)
        self.heads[client_id] = head
        return ClientUpdate(client_id, c.n_train, loss, body)

    def server_step(self, updates: Sequence[ClientUpdate]) -> None:
        if updates:
            self.body = server_step([u.payload for u in updates], [u.n_samples for u in updates])

    def evaluate(self, client_id: int) -> EvalResult:
        c = self.clients[client_id]
        set_params(self.backbone, self.body)
        loss, acc = head_loss_accuracy(self.backbone, self.heads[client_id], c.x_train, c.y_train, c.x_test,
                                       c.y_test)
        return EvalResult(client_id, loss, acc, c.n_train, c.n_test)


class FedPer(PersonalHeadAlgorithm):
    """FedPer run in-process: joint local steps, backbone averaged, heads personal."""

    name = "fedper"
