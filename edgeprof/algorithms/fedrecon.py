"""FedRecon: Federated Reconstruction, partially local federated learning (Singhal et al. 2021).

Shared backbone theta (global) and a personal head W_i (K_i x (M+1), bias column, as PFLEGO's) that
is *not* stored between rounds: FedRecon's clients are stateless, so every round (and every
evaluation) reconstructs the head from the client's fixed initial head. Client i, round t:

1. ``reconstruction`` (Singhal et al., Algorithm 1, local-parameter update with theta frozen): the
   features phi(X_i; theta) are computed once in ONNX Runtime and cached, as the PFLEGO authors'
   reference code does, then tau-1 full-batch gradient steps (step beta) on W_i with the closed-form
   softmax gradient in numpy (:mod:`edgeprof.nn.head`).
2. ``body_steps`` (global-parameter update with W_i frozen): one full-batch gradient step on theta with
   one torch forward and backward pass; the client returns theta_i = theta - beta * grad.

Server: the pseudo-gradient theta - sum_i (N_i / sum_j N_j) theta_i over the participants goes to the
server optimizer (Adam with step rho by default, ``--server-optimizer sgd``), FedOpt-style as in
FedRecon. Cost: one cached forward, tau-1 cheap head steps and one forward+backward: like PFLEGO, its
client round is *nearly flat in tau* (the PFLEGO paper's O(1)-vs-O(tau) claim is against the other
baselines, not against FedRecon). beta and rho: Table 7 for Omniglot, the documented fallback
(``edgeprof.hyperparams``) elsewhere.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import Algorithm, ClientUpdate, EvalResult, Phase, accuracy, no_phase
from edgeprof.algorithms.pflego import initial_head, torch_joint_gradient
from edgeprof.nn import head as headlib
from edgeprof.nn.backbones import get_params

FeatureFn = Callable[[np.ndarray], np.ndarray]
#: body_grad(head, x, y) -> (loss, grad_theta) at the current theta with the head frozen
BodyGradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], "tuple[float, list[np.ndarray]]"]


def reconstruct(features: FeatureFn, head0: np.ndarray, x: np.ndarray, y: np.ndarray, *, steps: int,
                lr: float) -> tuple[np.ndarray, np.ndarray]:
    """(reconstructed head, cached bias-augmented features): ``steps`` head GD steps on cached features."""
    feats_b = headlib.with_bias(features(x))
    return headlib.gradient_steps(head0, feats_b, y, lr, steps), feats_b


def client_round(features: FeatureFn, body_grad: BodyGradFn, theta: Sequence[np.ndarray], head0: np.ndarray,
                 x: np.ndarray, y: np.ndarray, *, tau: int, beta: float,
                 phase: Phase = no_phase) -> tuple[list[np.ndarray], np.ndarray, float]:
    """One FedRecon client round on arrays: (theta_i, reconstructed head, loss at the body step)."""
    with phase("reconstruction"):
        head, _ = reconstruct(features, head0, x, y, steps=tau - 1, lr=beta)
    with phase("body_steps"):
        loss, grad = body_grad(head, x, y)
        new_theta = [(p - np.float32(beta) * g).astype(np.float32) for p, g in zip(theta, grad)]
    return new_theta, head, loss


def server_step(theta: Sequence[np.ndarray], client_thetas: Sequence[Sequence[np.ndarray]],
                n_samples: Sequence[int], optimizer) -> list[np.ndarray]:
    """theta_t = optimizer(theta, theta - weighted_average(theta_i)) (FedOpt pseudo-gradient)."""
    mean = aggregation.weighted_average(client_thetas, n_samples)
    return optimizer.step(theta, [p - m for p, m in zip(theta, mean)])


class FedRecon(Algorithm):
    """FedRecon run in-process: stateless heads reconstructed on cached features, theta by FedOpt."""

    name = "fedrecon"

    def __init__(self, cfg, clients, backbone) -> None:
        super().__init__(cfg, clients, backbone)
        from edgeprof.nn.ort import FeatureRunner

        self.theta = get_params(backbone)
        m = backbone.feature_dim
        self.initial_heads = [initial_head(cfg.seed, c.client_id, c.num_classes, m) for c in self.clients]
        self.optimizer = aggregation.make_optimizer(cfg.server_optimizer, cfg.rho)
        self.runner = FeatureRunner(backbone, threads=cfg.threads)

    def _features(self, x: np.ndarray) -> np.ndarray:
        return self.runner.features(x, self.theta)

    def _body_grad(self, head, x, y):
        loss, _, grad = torch_joint_gradient(self.backbone, self.theta, head, x, y)
        return loss, grad

    def client_round(self, client_id: int, phase: Phase = no_phase) -> ClientUpdate:
        c = self.clients[client_id]
        new_theta, _, loss = client_round(self._features, self._body_grad, self.theta,
                                          self.initial_heads[client_id], c.x_train, c.y_train,
                                          tau=self.cfg.tau, beta=self.cfg.beta, phase=phase)
        return ClientUpdate(client_id, c.n_train, loss, new_theta)

    def server_step(self, updates: Sequence[ClientUpdate]) -> None:
        if updates:
            self.theta = server_step(self.theta, [u.payload for u in updates], [u.n_samples for u in updates],
                                     self.optimizer)

    def evaluate(self, client_id: int) -> EvalResult:
        c = self.clients[client_id]
        head, train_b = reconstruct(self._features, self.initial_heads[client_id], c.x_train, c.y_train,
                                    steps=self.cfg.tau - 1, lr=self.cfg.beta)
        loss, _ = headlib.loss_and_grad(head, train_b, c.y_train)
        acc = accuracy(headlib.predict(head, headlib.with_bias(self._features(c.x_test))), c.y_test) \
            if c.n_test else 0.0
        return EvalResult(client_id, loss, acc, c.n_train, c.n_test)
