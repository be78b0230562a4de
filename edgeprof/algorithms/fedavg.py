"""FedAvg: Communication-Efficient Learning of Deep Networks from Decentralized Data (McMahan et al. 2017).

As configured in the PFLEGO paper's experiments (Section 4.2): the whole model (backbone plus one
*shared* linear head whose number of outputs is max_i K_i, local labels 0..K_i-1 sharing output units)
is trained by every participating client with tau full-batch gradient-descent steps of size beta over
its whole local set (phase ``local_steps``), and the server replaces the global weights by their
average weighted by N_i over the participating clients. Every local step is a full forward and
backward pass through the backbone, so the client's cost grows linearly in tau.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings, Runtime,
                                      ServerState, accuracy, mean_cross_entropy, no_phase)
from edgeprof.nn.compute import Compute


def shared_head(feature_dim: int, num_outputs: int, seed: int) -> list[np.ndarray]:
    """[W, b] of the shared head: W uniform in +-1/sqrt(M) from a generator seeded with ``seed``, b zero."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / np.sqrt(feature_dim)
    weight = torch.empty(num_outputs, feature_dim).uniform_(-bound, bound, generator=gen)  # host-only: seeded draw
    return [weight.numpy(), np.zeros(num_outputs, dtype=np.float32)]  # host-only: drawn on the host


class BackboneWithHead(torch.nn.Module):
    """Backbone followed by a linear classifier: the whole network the baselines train."""

    def __init__(self, backbone: torch.nn.Module, num_outputs: int, seed: int = 0) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.feature_dim, num_outputs)
        weight, bias = shared_head(backbone.feature_dim, num_outputs, seed)
        with torch.no_grad():
            self.head.weight.copy_(torch.from_numpy(weight))  # host-only: built on the host, then placed
            self.head.bias.copy_(torch.from_numpy(bias))  # host-only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def sgd_update(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr: float, *,
               velocity: Sequence[torch.Tensor] | None = None, momentum: float = 0.0,
               anchors: Sequence[torch.Tensor] | None = None, mu: float = 0.0) -> None:
    """One gradient step on every parameter at once, in place, with torch's foreach ops (a few kernels a step
    for the whole model, not a few per tensor).

    ``anchors`` adds the proximal term: g <- g + mu (p - anchor) (FedProx, Ditto); ``velocity`` is heavy-ball
    momentum in torch's SGD convention: v <- momentum v + g (FedBABU). Then p <- p - lr g.
    """
    with torch.no_grad():
        if anchors is not None:
            step = torch._foreach_sub(list(params), list(anchors))
            torch._foreach_mul_(step, mu)
            torch._foreach_add_(step, list(grads))
            grads = step
        if velocity is not None:
            torch._foreach_mul_(list(velocity), momentum)
            torch._foreach_add_(list(velocity), list(grads))
            grads = velocity
        torch._foreach_add_(list(params), list(grads), alpha=-lr)


def gd_steps(loss_and_grads: Callable[[], "tuple[torch.Tensor, list]"], params: Sequence[torch.Tensor], *,
             steps: int, lr: float, momentum: float = 0.0, anchors: Sequence[torch.Tensor] | None = None,
             mu: float = 0.0) -> torch.Tensor:
    """``steps`` full-batch gradient steps (:func:`sgd_update`); returns the first step's loss *on the device*.

    ``loss_and_grads()`` gives (loss, gradients of ``params``) at the current point without reading anything
    back (:meth:`~edgeprof.nn.compute.Compute.loss_and_grads`): the loop queues its work and never waits for the
    device; the caller reads the one loss it reports (``compute.scalar``), once a round. A velocity for
    ``momentum`` starts at zero. NaN (on the parameters' device) when ``steps`` is 0.
    """
    velocity = [torch.zeros_like(p) for p in params] if momentum else None
    first = None
    for _ in range(steps):
        loss, grads = loss_and_grads()
        sgd_update(params, grads, lr, velocity=velocity, momentum=momentum, anchors=anchors, mu=mu)
        first = loss if first is None else first
    return first if first is not None else params[0].new_full((), float("nan"), dtype=torch.float64)


def local_gd(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, steps: int, lr: float,
             params: Sequence[torch.nn.Parameter] | None = None, compute: Compute) -> torch.Tensor:
    """``steps`` full-batch gradient-descent steps on the mean cross-entropy; returns the first loss, on the
    device (:func:`gd_steps`).

    ``params`` restricts the update to those parameters (the others are frozen for these steps). ``compute``
    places the data and runs each step's forward and backward (device, memory format, chunks;
    :mod:`edgeprof.nn.compute`): the step is the full-batch one whatever the plan.
    """
    params = list(model.parameters()) if params is None else list(params)
    batches = compute.batches(x, y)
    return gd_steps(lambda: compute.loss_and_grads(model, batches, len(y), params), params, steps=steps, lr=lr)


def client_round(model: torch.nn.Module, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray,
                 *, tau: int, beta: float, phase: Phase = no_phase,
                 compute: Compute) -> tuple[list[np.ndarray], float]:
    """FedAvg's local update on arrays: load the global weights, tau GD steps, return the new weights.

    Nothing is read back inside the phase: after it, the weights come back in one transfer and the first
    step's loss in one more.
    """
    compute.load(model, weights)
    with phase("local_steps"):
        loss = local_gd(model, x, y, steps=tau, lr=beta, compute=compute)
    return compute.hosts_flat(list(model.parameters())), compute.scalar(loss)


def server_step(updates: Sequence[Sequence[np.ndarray]], n_samples: Sequence[int]) -> list[np.ndarray]:
    """The new global weights: the N_i-weighted average of the participants' weights."""
    return aggregation.weighted_average(updates, n_samples)


def whole_model(rt: Runtime) -> BackboneWithHead:
    """The runtime's backbone with the shared head of max_i K_i outputs (built once per runtime)."""
    return rt.cached("whole-model", lambda: rt.compute.module(BackboneWithHead(rt.backbone, rt.num_outputs,
                                                                               seed=rt.seed)))


def init_global(rt: Runtime) -> list[np.ndarray]:
    """Round 0's whole model: the seeded backbone and the seeded shared head."""
    return list(rt.initial_params) + shared_head(rt.feature_dim, rt.num_outputs, rt.seed)


def client(rt: Runtime, weights: list[np.ndarray], personal, data, s: RoundSettings) -> ClientResult:
    """The client program: tau GD steps on the whole model; replies the new weights, keeps nothing."""
    new, loss = client_round(whole_model(rt), weights, data.x_train, data.y_train, tau=s.tau, beta=s.beta,
                             phase=s.phase, compute=rt.compute)
    return ClientResult(new, None, loss, len(data.y_train))


def server(rt: Runtime, state: ServerState, replies: Sequence[Reply], s: RoundSettings) -> ServerState:
    """The server program: the N_i-weighted average of the replied models."""
    return ServerState(server_step([r.arrays for r in replies], [r.n_samples for r in replies]))


def model_loss_accuracy(model: torch.nn.Module, weights: Sequence[np.ndarray], data,
                        compute: Compute) -> EvalResult:
    """Training loss and test accuracy of ``model`` loaded with ``weights`` on one client's data."""
    compute.load(model, weights)
    loss = compute.scalar(mean_cross_entropy(compute.forward(model, data.x_train), compute.labels(data.y_train)))
    pred = compute.host_labels(compute.forward(model, data.x_test).argmax(1)) if len(data.y_test) else np.zeros(0)
    return EvalResult(data.client_id, loss, accuracy(pred, data.y_test), len(data.y_train), len(data.y_test))


def evaluate(rt: Runtime, weights: list[np.ndarray], personal, data, s: RoundSettings) -> EvalResult:
    """The global model with its shared head on the client's data."""
    return model_loss_accuracy(whole_model(rt), weights, data, rt.compute)


SPEC = AlgorithmSpec(
    name="fedavg", paper="Communication-Efficient Learning of Deep Networks from Decentralized Data",
    phases=("local_steps",), client=client, server=server, init_global=init_global, evaluate=evaluate,
    evaluation="the global model with the shared head of max_i K_i outputs, after the server step",
    server_kind="average", hyperparams="fedavg",
)
