"""PFLEGO: Personalized Federated Learning with Exact Stochastic Gradient Descent.

Implements Algorithm 1 and equations (3)-(4) of Georgatos et al. (shared/papers/001_*.txt):

client i, round t, theta_{t-1} frozen:
  1. ``cache_forward``: phi = phi(X_i; theta_{t-1}) once over the whole local training set (ONNX Runtime)
  2. ``head_steps``: tau-1 steps W_i <- W_i - beta * grad_W l_i(W_i, theta_{t-1}) on the cached
     features, closed-form softmax cross-entropy gradient in numpy (:mod:`edgeprof.nn.head`), or on a GPU as one
     captured device program (:mod:`edgeprof.nn.head_program`, captured by :func:`prepare` before any window)
  3. ``joint_grad``: one forward+backward in torch for (grad_W l_i, grad_theta l_i); then
     W_i <- W_i - rho * (I/r) * grad_W l_i (equation (3)) and g_i = grad_theta l_i is returned.
server: theta_t = opt(theta_{t-1}, (I/r) * sum_{i in I_t} alpha_i g_i) with alpha_i = N_i / sum_j N_j
  (equation (4)); ``opt`` is SGD(rho) as in the paper's analysis or Adam(rho) as in its experiments.

Engines (``--engine``): ``onnx`` is the paper's client, two forwards (ONNX Runtime for the cache, torch
for the joint gradient) and one backward. ``torch-reuse`` (beyond the paper, :class:`GraphReuse`) runs
the single forward of ``cache_forward`` in torch *with* autograd and keeps its graph through the head
steps (theta is frozen during them, so the graph stays valid), then ``joint_grad`` only evaluates the
new head on those features and backpropagates: one forward and one backward per round. It trades
memory for time: the forward's activations stay alive from ``cache_forward`` to ``joint_grad``.

About alpha_i and W_i: equation (5) writes W_i's stochastic gradient with alpha_i, but equation (3) and
the authors' code step W_i with rho*I/r*grad l_i, *without* alpha_i. We follow equation (3). Seen as
one SGD step on L(psi) = sum_i alpha_i l_i, this is a per-block step size: W_i moves with step
rho/alpha_i on dL/dW_i while theta moves with step rho on dL/dtheta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings, Runtime,
                                      ServerState, accuracy, no_phase)
from edgeprof.nn import head as headlib
from edgeprof.nn.compute import Compute

FeatureFn = Callable[[np.ndarray], np.ndarray]
JointGradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], "tuple[float, np.ndarray, list[np.ndarray]]"]


@dataclass
class PflegoClientResult:
    """A client's new head, its theta gradient g_i and the loss at the joint-gradient point."""

    head: np.ndarray
    theta_grad: list[np.ndarray]
    loss: float
    n_samples: int


def head_logits(feats: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The head's logits ``[phi, 1] @ W.T`` on a batch of features."""
    return torch.cat([feats, feats.new_ones((feats.shape[0], 1))], dim=1) @ w.T


def torch_joint_gradient(module: torch.nn.Module, theta: Sequence[np.ndarray], head: np.ndarray | torch.Tensor,
                         x: np.ndarray, y: np.ndarray,
                         compute: Compute) -> tuple[float, np.ndarray, list[np.ndarray]]:
    """(l_i, grad_W l_i, grad_theta l_i) at (head, theta) with one torch forward and backward pass.

    ``compute`` places the data and says how that pass runs (:mod:`edgeprof.nn.compute`): in chunks, the
    gradients are accumulated over them and equal the full-batch ones to float32 rounding. Loads theta, then
    :func:`joint_gradient`.
    """
    compute.load(module, theta)
    return joint_gradient(module, head, x, y, compute)


def joint_gradient(module: torch.nn.Module, head: np.ndarray | torch.Tensor, x: np.ndarray, y: np.ndarray,
                   compute: Compute) -> tuple[float, np.ndarray, list[np.ndarray]]:
    """:func:`torch_joint_gradient` at the weights already loaded in ``module``: ``head`` a host array or a
    tensor already on the device (used as it is). The gradients come back in one transfer, the loss in one."""
    module.zero_grad(set_to_none=True)
    w = _leaf(head, compute)
    loss, grads = compute.loss_and_grads(lambda xb: head_logits(module(xb), w), compute.batches(x, y), len(y),
                                         [w, *module.parameters()])
    return _read_back(loss, grads, compute)


def _leaf(head: np.ndarray | torch.Tensor, compute: Compute) -> torch.Tensor:
    """The head as a leaf that takes a gradient: a device tensor as it is (no copy), a host array placed once."""
    if isinstance(head, torch.Tensor):
        return head.detach().requires_grad_(True)
    return compute.tensor(head, requires_grad=True)


def _read_back(loss: torch.Tensor, grads: Sequence[torch.Tensor],
               compute: Compute) -> tuple[float, np.ndarray, list[np.ndarray]]:
    """(loss, grad_W, grad_theta) on the host: every gradient in one flat transfer, then the loss."""
    host = compute.hosts_flat(grads)
    return compute.scalar(loss), host[0], host[1:]


class GraphReuse:
    """The ``torch-reuse`` engine: a features fn and a joint-gradient fn sharing one torch forward.

    :meth:`features` loads theta, runs the backbone with autograd on (chunk by chunk, as the plan says)
    and keeps the output tensors (and so the graphs); :meth:`joint_grad` must then be called with the same
    ``x``: it computes the loss of the given head on the kept features, backpropagates once through head
    and backbone, chunk by chunk, and drops the graphs. The result equals :func:`torch_joint_gradient` at
    the same (head, theta) to float32 rounding. With ``on_device`` the features are returned as the device
    tensor (for head steps on the device), else as a host array.
    """

    def __init__(self, module: torch.nn.Module, theta: Sequence[np.ndarray], compute: Compute,
                 on_device: bool = False) -> None:
        self.module = module
        self.theta = theta
        self.compute = compute
        self.on_device = on_device
        self._x: np.ndarray | None = None
        self._feats: list[torch.Tensor] | None = None

    def features(self, x: np.ndarray) -> np.ndarray | torch.Tensor:
        self.compute.load(self.module, self.theta)
        self.module.zero_grad(set_to_none=True)
        self._x = x
        self._feats = [self.module(xb) for xb, _ in self.compute.batches(x)]
        feats = torch.cat([f.detach() for f in self._feats])
        return feats if self.on_device else self.compute.host(feats, copy=False)

    def joint_grad(self, head: np.ndarray | torch.Tensor, x: np.ndarray,
                   y: np.ndarray) -> tuple[float, np.ndarray, list[np.ndarray]]:
        if self._feats is None or x is not self._x:
            raise RuntimeError("GraphReuse.joint_grad needs the x of the preceding features() call")
        feats, self._feats, self._x = iter(self._feats), None, None
        compute = self.compute
        w = _leaf(head, compute)
        labels = compute.split(compute.labels(y))
        loss, grads = compute.loss_and_grads(lambda _: head_logits(next(feats), w), [(None, yb) for yb in labels],
                                             len(y), [w, *self.module.parameters()])
        return _read_back(loss, grads, compute)


class TorchForward:
    """The ``onnx`` engine where ONNX Runtime has no provider for the device: the cached forward runs in torch
    there, and theta is loaded into the module once a round for both passes (not once per pass). With
    ``on_device`` the features stay a device tensor (for head steps on the device)."""

    def __init__(self, module: torch.nn.Module, theta: Sequence[np.ndarray], compute: Compute,
                 on_device: bool = False) -> None:
        self.module, self.theta, self.compute, self.on_device = module, theta, compute, on_device

    def features(self, x: np.ndarray) -> np.ndarray | torch.Tensor:
        self.compute.load(self.module, self.theta)
        feats = self.compute.forward(self.module, x)
        return feats if self.on_device else self.compute.host(feats, copy=False)

    def joint_grad(self, head, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, list[np.ndarray]]:
        return joint_gradient(self.module, head, x, y, self.compute)


def client_round(features: FeatureFn, joint_grad: JointGradFn, head: np.ndarray, x: np.ndarray,
                 y: np.ndarray, *, tau: int, beta: float, rho: float, scale: float,
                 phase: Phase = no_phase, head_steps: headlib.HostHead | headlib.DeviceHead = headlib.HOST_HEAD
                 ) -> PflegoClientResult:
    """One PFLEGO client round (Algorithm 1, ClientI_Update) on arrays.

    ``features(x)`` returns phi(x; theta_{t-1}); ``joint_grad(head, x, y)`` returns the loss and both
    gradients at theta_{t-1}; ``scale`` is I/r; ``head_steps`` runs the tau-1 head steps (numpy on the host, or
    torch on the device: :func:`edgeprof.nn.head.steps_for`), and the head it gives goes to ``joint_grad`` as
    it is (on the device where they ran there).
    """
    with phase("cache_forward"):
        feats_b = head_steps.cache(features(x))
    with phase("head_steps"):
        head = head_steps.steps(head, feats_b, y, beta, tau - 1)
    with phase("joint_grad"):
        loss, grad_head, grad_theta = joint_grad(head, x, y)
        head = head_steps.host(head) - np.float32(rho * scale) * grad_head
    return PflegoClientResult(head, grad_theta, loss, len(y))


def initial_head(seed: int, client_id: int, num_classes: int, feature_dim: int) -> np.ndarray:
    """Client ``client_id``'s first head, from (seed, client id) alone: the same wherever the client runs."""
    return headlib.init_head(num_classes, feature_dim, np.random.default_rng([seed, client_id]))


def server_step(theta: Sequence[np.ndarray], grads: Sequence[Sequence[np.ndarray]],
                client_alphas: Sequence[float], scale: float, optimizer) -> list[np.ndarray]:
    """Equation (4): theta_t = optimizer(theta_{t-1}, (I/r) * sum alpha_i g_i)."""
    return optimizer.step(theta, aggregation.unbiased_gradient(grads, client_alphas, scale))


def _engine(rt: Runtime, theta: Sequence[np.ndarray], on_device: bool) -> tuple[FeatureFn, JointGradFn]:
    """The round's features and joint-gradient functions for the runtime's engine (``on_device``: torch features
    stay on the device, for head steps there)."""
    if rt.engine == "torch-reuse":
        engine = GraphReuse(rt.backbone, theta, rt.compute, on_device)
        return engine.features, engine.joint_grad
    if not rt.ort_here:
        forward = TorchForward(rt.backbone, theta, rt.compute, on_device)
        return forward.features, forward.joint_grad
    return (lambda x: rt.features(x, theta)), \
        (lambda h, x, y: torch_joint_gradient(rt.backbone, theta, h, x, y, rt.compute))


def client(rt: Runtime, theta: list[np.ndarray], personal: list[np.ndarray], data, s: RoundSettings) -> ClientResult:
    """The client program: one round from W_i = ``personal[0]``; replies grad_theta l_i, keeps the new W_i."""
    head_steps = headlib.steps_for(rt.compute)
    features, joint = _engine(rt, theta, head_steps.on_device)
    res = client_round(features, joint, personal[0], data.x_train, data.y_train, tau=s.tau, beta=s.beta,
                       rho=s.rho, scale=s.scale, phase=s.phase, head_steps=head_steps)
    return ClientResult(res.theta_grad, [res.head], res.loss, res.n_samples)


def prepare(rt: Runtime, data, s: RoundSettings) -> None:
    """Set-up before any window: the client's tau-1 head steps built as one device program for its shapes (N_i,
    K_i, M+1) and, where the device kind captures graphs, captured (:mod:`edgeprof.nn.head_program`); numpy on the
    host builds nothing."""
    headlib.steps_for(rt.compute).prepare(len(data.y_train), data.num_classes, rt.feature_dim + 1, s.tau - 1)


def server(rt: Runtime, state: ServerState, replies: Sequence[Reply], s: RoundSettings) -> ServerState:
    """The server program: equation (4) with the server optimizer."""
    theta = server_step(state.arrays, [r.arrays for r in replies], [r.alpha for r in replies], s.scale,
                        state.optimizer)
    return ServerState(theta, state.optimizer)


def evaluate(rt: Runtime, theta: list[np.ndarray], personal: list[np.ndarray], data, s: RoundSettings) -> EvalResult:
    """The client's head on phi(.; theta): training loss l_i and test accuracy."""
    head = personal[0]
    train_b = headlib.with_bias(rt.features(data.x_train, theta))
    loss, _ = headlib.loss_and_grad(head, train_b, data.y_train)
    test_acc = accuracy(headlib.predict(head, headlib.with_bias(rt.features(data.x_test, theta))), data.y_test) \
        if len(data.y_test) else 0.0
    return EvalResult(data.client_id, loss, test_acc, len(data.y_train), len(data.y_test))


SPEC = AlgorithmSpec(
    name="pflego", paper="Personalized Federated Learning with Exact Stochastic Gradient Descent",
    phases=("cache_forward", "head_steps", "joint_grad"), engines=("onnx", "torch-reuse"),
    client=client, server=server, evaluate=evaluate, server_kind="gradient", hyperparams="pflego",
    init_global=lambda rt: list(rt.initial_params),
    personal="the linear head W_i (K_i x (M+1))",
    init_personal=lambda rt, data, _global: [initial_head(rt.seed, data.client_id, data.num_classes,
                                                          rt.feature_dim)],
    evaluation="each client's head on the global theta's features, after the server step",
    cost=(4.0, 0.0),
    prepare=prepare,
)
