"""Server-side math as pure numpy functions on lists of arrays (one array per parameter tensor).

- :func:`weighted_average`: FedAvg's sum_i (N_i / sum_j N_j) w_i over the participating clients.
- :func:`unbiased_gradient`: PFLEGO's equation (4)/(6): (I/r) sum_{i in I_t} alpha_i g_i with
  alpha_i = N_i / sum over *all* I clients of N_j.
- :class:`SGD` and :class:`Adam`: the server optimizers (Adam as in Kingma & Ba, bias-corrected).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Params = list[np.ndarray]


def _check_shapes(updates: Sequence[Sequence[np.ndarray]]) -> None:
    shapes = [tuple(a.shape for a in u) for u in updates]
    if any(s != shapes[0] for s in shapes):
        raise ValueError("client updates have different parameter shapes")


def weighted_sum(updates: Sequence[Sequence[np.ndarray]], weights: Sequence[float]) -> Params:
    """sum_i weights[i] * updates[i], tensor by tensor, in float64 then cast back to float32."""
    if len(updates) != len(weights) or not updates:
        raise ValueError("need one weight per update and at least one update")
    _check_shapes(updates)
    out = []
    for tensors in zip(*updates):
        acc = np.zeros(tensors[0].shape, dtype=np.float64)
        for weight, tensor in zip(weights, tensors):
            acc += float(weight) * tensor
        out.append(acc.astype(np.float32))
    return out


def weighted_average(updates: Sequence[Sequence[np.ndarray]], n_samples: Sequence[int]) -> Params:
    """FedAvg aggregation: weights proportional to each client's number of samples."""
    total = float(sum(n_samples))
    if total <= 0:
        raise ValueError("total number of samples must be positive")
    return weighted_sum(updates, [n / total for n in n_samples])


def alphas(n_samples_all: Sequence[int]) -> np.ndarray:
    """alpha_i = N_i / sum_j N_j over all I clients (equation (1))."""
    n = np.asarray(n_samples_all, dtype=np.float64)
    return n / n.sum()


def unbiased_gradient(grads: Sequence[Sequence[np.ndarray]], client_alphas: Sequence[float],
                      scale: float) -> Params:
    """Equation (6): the stochastic gradient of theta, (I/r) * sum_{i in I_t} alpha_i g_i.

    ``client_alphas`` are N_i / sum over *all* I clients (:func:`alphas`), as in equations (4) and (6). The
    authors' reference code normalises N_i over the sampled clients and then multiplies by I/r: a gradient
    sum_j N_j / sum_{j in I_t} N_j times larger (I/r times when every N_i is equal), which Adam's scale
    invariance hides but SGD's step does not. We keep equation (4).
    """
    return weighted_sum(grads, [scale * a for a in client_alphas])


class SGD:
    """theta <- theta - lr * g."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def step(self, params: Sequence[np.ndarray], grads: Sequence[np.ndarray]) -> Params:
        return [(p - self.lr * g).astype(np.float32) for p, g in zip(params, grads)]


class Adam:
    """Adam with bias correction; state (m, v, t) lives in the object, one per server."""

    def __init__(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.t = 0
        self.m: Params | None = None
        self.v: Params | None = None

    def step(self, params: Sequence[np.ndarray], grads: Sequence[np.ndarray]) -> Params:
        if self.m is None:
            self.m = [np.zeros_like(g, dtype=np.float64) for g in grads]
            self.v = [np.zeros_like(g, dtype=np.float64) for g in grads]
        self.t += 1
        c1 = 1.0 - self.beta1**self.t
        c2 = 1.0 - self.beta2**self.t
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            self.m[i] = self.beta1 * self.m[i] + (1.0 - self.beta1) * g
            self.v[i] = self.beta2 * self.v[i] + (1.0 - self.beta2) * np.square(g, dtype=np.float64)
            update = self.lr * (self.m[i] / c1) / (np.sqrt(self.v[i] / c2) + self.eps)
            out.append((p - update).astype(np.float32))
        return out


#: the server optimizers by name (``--server-optimizer``), the first the default
_OPTIMIZERS = {"adam": Adam, "sgd": SGD}
SERVER_OPTIMIZERS = tuple(_OPTIMIZERS)


def make_optimizer(name: str, lr: float):
    """The server optimizer ``name`` (one of :data:`SERVER_OPTIMIZERS`) with step size lr."""
    return _OPTIMIZERS[name](lr)
