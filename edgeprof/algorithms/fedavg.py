"""FedAvg: Communication-Efficient Learning of Deep Networks from Decentralized Data (McMahan et al. 2017).

As configured in the PFLEGO paper's experiments (Section 4.2): the whole model (backbone plus one
*shared* linear head whose number of outputs is max_i K_i, local labels 0..K_i-1 sharing output units)
is trained by every participating client with tau full-batch gradient-descent steps of size beta over
its whole local set (phase ``local_steps``), and the server replaces the global weights by their
average weighted by N_i over the participating clients. Every local step is a full forward and
backward pass through the backbone, so the client's cost grows linearly in tau. On a GPU the step is one
captured CUDA graph replayed tau times (:mod:`edgeprof.nn.step_program`, captured by the ``prepare`` hook
before any window; the other baselines share it).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings, Runtime,
                                      ServerState, accuracy, mean_cross_entropy, no_phase)
from edgeprof.nn.compute import Compute
from edgeprof.nn.step_program import gd_steps, local_steps, programs_of, sgd_update  # noqa: F401 - re-exported


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


def local_gd(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, steps: int, lr: float,
             params: Sequence[torch.nn.Parameter] | None = None, compute: Compute) -> torch.Tensor:
    """``steps`` full-batch gradient-descent steps on the mean cross-entropy; returns the first loss, on the
    device (:func:`gd_steps`).

    ``params`` restricts the update to those parameters (the others are frozen for these steps). ``compute``
    places the data and runs each step's forward and backward (device, memory format, chunks;
    :mod:`edgeprof.nn.compute`): the step is the full-batch one whatever the plan. The steps replay a captured
    one-step graph where one was prepared (:mod:`edgeprof.nn.step_program`), else run eagerly.
    """
    body = list(model.parameters()) if params is None else list(params)
    _, first = local_steps(compute, model, compute.batches(x, y), len(y), steps=steps, lr=lr, body=body)
    return first


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


def prepare_steps(client: Callable, init_global: Callable[[Runtime], list],
                  init_personal: Optional[Callable] = None) -> Callable[[Runtime, object, RoundSettings], None]:
    """A baseline's ``prepare`` hook: set-up before any window, where the device kind captures graphs, that builds
    and captures every local-step program ``client``'s round will replay (:mod:`edgeprof.nn.step_program`).

    It runs ``client`` once on the run's initial global arrays and the client's initial personal state, with the
    run's step programs in their preparing mode: each local-steps call builds and captures the program of its key
    (model, trained parameters, the client's data, lr, mu, momentum) and takes no step; the results are thrown
    away. A program does not depend on tau, so preparing another tau captures nothing new. On a kind that
    captures nothing (the CPU) it does nothing.
    """

    def prepare(rt: Runtime, data, s: RoundSettings) -> None:
        if not rt.compute.can_capture():
            return
        global0 = init_global(rt)
        personal0 = init_personal(rt, data, global0) if init_personal is not None else None
        with programs_of(rt.compute).preparing():
            client(rt, global0, personal0, data, s.with_phase(no_phase))

    prepare.__doc__ = f"The local-step programs of {getattr(client, '__module__', 'a baseline')}'s rounds, " \
                      "built and captured before any window (:func:`prepare_steps`)."
    return prepare


SPEC = AlgorithmSpec(
    name="fedavg", paper="Communication-Efficient Learning of Deep Networks from Decentralized Data",
    phases=("local_steps",), client=client, server=server, init_global=init_global, evaluate=evaluate,
    evaluation="the global model with the shared head of max_i K_i outputs, after the server step",
    server_kind="average", hyperparams="fedavg", prepare=prepare_steps(client, init_global),
)
