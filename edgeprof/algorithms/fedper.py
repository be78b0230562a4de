"""FedPer: Federated Learning with Personalization Layers (Arivazhagan et al. 2019).

The network is a shared backbone (base layers, theta) plus a personal linear head per client
(``W_i`` K_i x M and ``b_i``, local labels 0..K_i-1). As the PFLEGO paper describes it (Section 2 and
Section 3.5): every participating client takes tau full-batch gradient steps (step beta) on the *joint*
parameters (theta, W_i, b_i) of its mean cross-entropy (phase ``local_steps``), keeps its head, and
sends theta back; the server replaces theta by the N_i-weighted average of the participants' thetas.
Every local step is a full forward and backward pass through the backbone: O(tau) per client round.

This module also holds what the other personal-head baselines share (FedRep, FedBABU, FedSim,
FedAlt, all "with the FedPer architecture" in the PFLEGO paper's words): :func:`device_local_steps`, which
trains any subset of {body, head} (a frozen body still gets a *full* forward pass at every step), and
:func:`head_client`, which turns a local update into a client program, so a variant declares one function.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from edgeprof.algorithms import aggregation
from edgeprof.algorithms.base import (AlgorithmSpec, ClientResult, EvalResult, Phase, Reply, RoundSettings, Runtime,
                                      ServerState, accuracy, mean_cross_entropy, no_phase)
from edgeprof.nn.compute import Compute
from edgeprof.nn.step_program import local_steps as device_steps

Head = list  # [W (K, M) float32, b (K,) float32]


def initial_head(seed: int, client_id: int, num_classes: int, feature_dim: int) -> Head:
    """Client ``client_id``'s first personal head [W, b], the same one PFLEGO starts from."""
    from edgeprof.algorithms.pflego import initial_head as pflego_head

    wb = pflego_head(seed, client_id, num_classes, feature_dim)
    return [wb[:, :-1].copy(), wb[:, -1].copy()]


def local_steps(backbone: torch.nn.Module, head: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray, *,
                steps: int, lr: float, train_body: bool = True, train_head: bool = True,
                momentum: float = 0.0, compute: Compute) -> tuple[Head, float]:
    """:func:`device_local_steps` with its results read back: (new head on the host, first loss)."""
    w, first = device_local_steps(backbone, head, x, y, steps=steps, lr=lr, train_body=train_body,
                                  train_head=train_head, momentum=momentum, compute=compute)
    return compute.hosts_flat(w), compute.scalar(first)


def device_local_steps(backbone: torch.nn.Module, head: Sequence[np.ndarray | torch.Tensor], x: np.ndarray,
                       y: np.ndarray, *, steps: int, lr: float, train_body: bool = True, train_head: bool = True,
                       momentum: float = 0.0, compute: Compute) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``steps`` full-batch GD steps on the mean cross-entropy of ``head(backbone(x))``; (the head [W, b] as
    tensors on the device, the first loss on the device): nothing is read back (the caller reads what it keeps).

    Only the blocks asked for move: the backbone's parameters in place, the head in the returned copy.
    ``head`` is host arrays or tensors already on the device (used as they are, never changed in place).
    With ``train_body=False`` every step still runs the whole forward pass through the backbone (no
    caching, as FedRep and FedAlt do). ``momentum`` > 0 is heavy-ball GD (torch's SGD convention,
    ``v <- m v + g; p <- p - lr v``), its velocity starting at zero. ``compute`` places the data and
    runs each step's forward and backward (:mod:`edgeprof.nn.compute`); the updates are
    :func:`edgeprof.nn.step_program.sgd_update`'s foreach ops. The steps replay a captured one-step graph where
    one was prepared (the head copied into its static one; :mod:`edgeprof.nn.step_program`), else run eagerly.
    """
    body = list(backbone.parameters()) if train_body else []
    w, first = device_steps(compute, backbone, compute.batches(x, y), len(y), steps=steps, lr=lr, body=body,
                           head=list(head), train_head=train_head, momentum=momentum)
    return w, first


def head_loss_accuracy(backbone: torch.nn.Module, head: Sequence[np.ndarray], x_train: np.ndarray,
                       y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                       compute: Compute) -> tuple[float, float]:
    """Training loss and test accuracy of ``head(backbone(.))`` with the backbone's current weights."""
    w = [compute.tensor(a) for a in head]
    with torch.no_grad():
        logits = torch.nn.functional.linear(compute.forward(backbone, x_train), w[0], w[1])
        loss = compute.scalar(mean_cross_entropy(logits, compute.labels(y_train)))
        if not len(y_test):
            return loss, 0.0
        pred = compute.host_labels(torch.nn.functional.linear(compute.forward(backbone, x_test), w[0], w[1]).argmax(1))
    return loss, accuracy(pred, y_test)


def client_round(backbone: torch.nn.Module, body: Sequence[np.ndarray], head: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, *, tau: int, beta: float, phase: Phase = no_phase,
                 compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """FedPer's local update on arrays: tau joint GD steps on (body, head); (new body, new head, first loss)."""
    compute.load(backbone, body)
    with phase("local_steps"):
        w, loss = device_local_steps(backbone, head, x, y, steps=tau, lr=beta, compute=compute)
    return read_body_head(backbone, w, loss, compute)


def alternating_round(backbone: torch.nn.Module, body: Sequence[np.ndarray], head: Sequence[np.ndarray],
                      x: np.ndarray, y: np.ndarray, *, head_steps: int, body_steps: int, beta: float,
                      phases: tuple[str, str], phase: Phase = no_phase,
                      compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """Head steps with the body frozen, then body steps that see the new head (FedRep's and FedAlt's update).

    ``phases`` names the two parts for the profiler. Returns (new body, new head, loss at the first head step).
    """
    compute.load(backbone, body)
    head_phase, body_phase = phases
    with phase(head_phase):
        w, loss = device_local_steps(backbone, head, x, y, steps=head_steps, lr=beta, train_body=False,
                                     compute=compute)
    with phase(body_phase):
        device_local_steps(backbone, w, x, y, steps=body_steps, lr=beta, train_head=False, compute=compute)
    return read_body_head(backbone, w, loss, compute)


def read_body_head(backbone: torch.nn.Module, head: Sequence[torch.Tensor], loss: torch.Tensor,
                   compute: Compute) -> tuple[list[np.ndarray], Head, float]:
    """A round's results back on the host: (body, head) in one transfer, the reported loss in one more."""
    body = list(backbone.parameters())
    arrays = compute.hosts_flat([*body, *head])
    return arrays[:len(body)], arrays[len(body):], compute.scalar(loss)


def server_step(bodies: Sequence[Sequence[np.ndarray]], n_samples: Sequence[int]) -> list[np.ndarray]:
    """The new shared backbone: the N_i-weighted average of the participants' backbones (heads stay home)."""
    return aggregation.weighted_average(bodies, n_samples)


LocalUpdate = Callable[..., "tuple[list[np.ndarray], Head, float]"]


def head_client(local_update: LocalUpdate) -> Callable:
    """A personal-head client program from ``local_update(backbone, body, head, x, y, s, compute)`` -> (body,
    head, loss), ``compute`` the runtime's :class:`~edgeprof.nn.compute.Compute`.

    FedPer, FedRep, FedSim and FedAlt differ only in that local update: the program loads nothing else,
    replies the new body and keeps the new head.
    """

    def client(rt: Runtime, body: list[np.ndarray], personal: Head, data, s: RoundSettings) -> ClientResult:
        new_body, head, loss = local_update(rt.backbone, body, personal, data.x_train, data.y_train, s, rt.compute)
        return ClientResult(new_body, list(head), loss, len(data.y_train))

    client.__doc__ = local_update.__doc__
    return client


def server(rt: Runtime, state: ServerState, replies: Sequence[Reply], s: RoundSettings) -> ServerState:
    """The server program: the N_i-weighted average of the replied backbones."""
    return ServerState(server_step([r.arrays for r in replies], [r.n_samples for r in replies]))


def evaluate(rt: Runtime, body: list[np.ndarray], personal: Head, data, s: RoundSettings) -> EvalResult:
    """The client's personal head on the global backbone."""
    rt.compute.load(rt.backbone, body)
    loss, acc = head_loss_accuracy(rt.backbone, personal, data.x_train, data.y_train, data.x_test, data.y_test,
                                   rt.compute)
    return EvalResult(data.client_id, loss, acc, len(data.y_train), len(data.y_test))


def _fedper_update(backbone, body, head, x, y, s: RoundSettings, compute: Compute):
    """FedPer: tau joint steps on (body, head)."""
    return client_round(backbone, body, head, x, y, tau=s.tau, beta=s.beta, phase=s.phase, compute=compute)


def init_global(rt: Runtime) -> list[np.ndarray]:
    """Round 0's shared backbone: the seeded one."""
    return list(rt.initial_params)


def init_personal(rt: Runtime, data, _global) -> Head:
    """Client ``data``'s first head."""
    return initial_head(rt.seed, data.client_id, data.num_classes, rt.feature_dim)


def prepare_head_client(client: Callable) -> Callable:
    """The ``prepare`` hook of a personal-head baseline whose client program is ``client``: its local-step
    programs captured before any window (:func:`edgeprof.algorithms.fedavg.prepare_steps`). A variant whose
    local update differs from FedPer's (FedRep, FedAlt) declares its own, or its rounds run eagerly (counted in
    the sidecar)."""
    from edgeprof.algorithms.fedavg import prepare_steps

    return prepare_steps(client, init_global, init_personal)


_CLIENT = head_client(_fedper_update)

#: what every personal-head baseline declares alike (FedRep, FedSim, FedAlt replace client, phases, name)
SPEC = AlgorithmSpec(
    name="fedper", paper="Federated Learning with Personalization Layers", phases=("local_steps",),
    client=_CLIENT, server=server, evaluate=evaluate, server_kind="average",
    hyperparams="fedper", init_global=init_global,
    personal="the head [W_i, b_i] (K_i x M and K_i)", init_personal=init_personal,
    prepare=prepare_head_client(_CLIENT),
    evaluation="each client's head on the global backbone, after the server step",
)
