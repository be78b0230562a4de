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
(``edgeprof.algorithms.hyperparams``) elsewhere.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings, Runtime,
                                      ServerState, accuracy, no_phase)
from edgeprof.algorithms.pflego import initial_head, torch_joint_gradient
from edgeprof.nn import head as headlib

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


def _initial_head(rt: Runtime, data) -> np.ndarray:
    return initial_head(rt.seed, data.client_id, data.num_classes, rt.feature_dim)


def client(rt: Runtime, theta: list[np.ndarray], personal, data, s: RoundSettings) -> ClientResult:
    """The client program: reconstruct the head from its initial value, one body step; replies theta_i."""

    def body_grad(head, x, y):
        loss, _, grad = torch_joint_gradient(rt.backbone, theta, head, x, y, rt.compute)
        return loss, grad

    new_theta, _, loss = client_round(lambda x: rt.features(x, theta), body_grad, theta, _initial_head(rt, data),
                                      data.x_train, data.y_train, tau=s.tau, beta=s.beta, phase=s.phase)
    return ClientResult(new_theta, None, loss, len(data.y_train))


def server(rt: Runtime, state: ServerState, replies: Sequence[Reply], s: RoundSettings) -> ServerState:
    """The server program: FedOpt on the pseudo-gradient theta - average(theta_i)."""
    theta = server_step(state.arrays, [r.arrays for r in replies], [r.n_samples for r in replies], state.optimizer)
    return ServerState(theta, state.optimizer)


def evaluate(rt: Runtime, theta: list[np.ndarray], personal, data, s: RoundSettings) -> EvalResult:
    """A head reconstructed from its initial value (tau-1 steps) on the global theta's features."""
    features = lambda x: rt.features(x, theta)  # noqa: E731
    head, train_b = reconstruct(features, _initial_head(rt, data), data.x_train, data.y_train, steps=s.tau - 1,
                                lr=s.beta)
    loss, _ = headlib.loss_and_grad(head, train_b, data.y_train)
    acc = accuracy(headlib.predict(head, headlib.with_bias(features(data.x_test))), data.y_test) \
        if len(data.y_test) else 0.0
    return EvalResult(data.client_id, loss, acc, len(data.y_train), len(data.y_test))


SPEC = AlgorithmSpec(
    name="fedrecon", paper="Federated Reconstruction: Partially Local Federated Learning",
    phases=("reconstruction", "body_steps"), engines=("onnx",), client=client, server=server, evaluate=evaluate,
    server_kind="pseudo-gradient", hyperparams="fedrecon", init_global=lambda rt: list(rt.initial_params),
    evaluation="a head reconstructed on each client's features of the global theta (clients are stateless)",
    cost=(4.0, 0.0),
)
