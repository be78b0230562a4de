"""The personal linear head: softmax regression on cached features, in plain numpy.

As in the authors' reference code, client i's head ``W_i`` is ``K_i x (M+1)``: a bias column is appended
to the features (``phi_b = [phi, 1]``), logits are ``z = phi_b @ W_i.T`` and the loss is the mean
softmax cross-entropy over the client's whole local set (equation (2) of the PFLEGO paper). Its
gradient has the closed form ``(softmax(z) - onehot(y)).T @ phi_b / N``: no autodiff.

numpy's BLAS runs on one thread inside :func:`loss_and_grad`, :func:`gradient_steps` and :func:`predict`
(:func:`one_blas_thread`), so that the head does not depend on the machine's core count. OpenBLAS takes as
many threads as there are cores (or ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``), which ``--threads``
does not govern, and for large local sets (from about 1,500 samples with M=200) it splits the sum over
samples between them, which changes the head's last bits. ``scripts/bench_head_blas.py`` measures the cost:
none at a few hundred samples; with thousands, a second thread gained up to 14% or lost up to 3.5x
depending on the load on a 2-core machine.

On a device whose kind says so (``DeviceKind.head_on_device``: a CUDA GPU, not the CPU) PFLEGO's tau-1 head
steps run in torch on the device instead (:class:`DeviceHead`, the same closed form): features computed on the
device stay there (their bias column appended there), host features cross once per round, and the head crosses
once and stays a device tensor through the joint gradient; :func:`steps_for` picks by that rule and
``scripts/bench_head_steps.py`` measures both on a device. There the steps are one program per shape
(:mod:`edgeprof.nn.head_program`): captured once as a CUDA graph before any window and replayed each round.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np


def with_bias(features: np.ndarray) -> np.ndarray:
    """Append the constant-1 bias column: (N, M) -> (N, M+1), float32."""
    ones = np.ones((features.shape[0], 1), dtype=np.float32)
    return np.concatenate([features.astype(np.float32, copy=False), ones], axis=1)


def init_head(num_classes: int, feature_dim: int, rng: np.random.Generator) -> np.ndarray:
    """A fresh K x (M+1) head: uniform(+-1/sqrt(M)) weights like torch.nn.Linear, zero bias."""
    bound = 1.0 / np.sqrt(feature_dim)
    head = rng.uniform(-bound, bound, size=(num_classes, feature_dim + 1)).astype(np.float32)
    head[:, -1] = 0.0
    return head


class _OneBlasThread:
    """Reference-counted pin of numpy's BLAS to one thread: the first caller in pins, the last one out restores.

    Counting (under a lock) keeps nested calls free and keeps the pin while any Python thread of the process
    is inside, since the BLAS thread count is process-wide. threadpoolctl finds the BLAS libraries once (numpy's,
    loaded with numpy); their thread counts are then read and set directly, about 10 us per pin.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: list = []

    @functools.cached_property
    def _libraries(self) -> list:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # a scikit-learn dependency, so normally present
            return []
        return list(ThreadpoolController().select(user_api="blas").lib_controllers)

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._saved = [(lib, lib.get_num_threads()) for lib in self._libraries]
                for lib, threads in self._saved:
                    if threads != 1:
                        lib.set_num_threads(1)
            self._depth += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                for lib, threads in self._saved:
                    if threads != 1:
                        lib.set_num_threads(threads)
                self._saved = []


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> contextlib.AbstractContextManager:
    """Context manager: numpy's BLAS on one thread inside, the previous setting restored on exit.

    A no-op where threadpoolctl is not installed.
    """
    return _ONE_BLAS_THREAD


def _probabilities(head: np.ndarray, feats_b: np.ndarray) -> np.ndarray:
    logits = feats_b @ head.T
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def loss_and_grad(head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy of the head on bias-augmented features, and its gradient wrt the head."""
    with one_blas_thread():
        return _loss_and_grad(head, feats_b, labels)


def _loss_and_grad(head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    n = feats_b.shape[0]
    probs = _probabilities(head, feats_b)
    rows = np.arange(n)
    loss = float(-np.log(np.maximum(probs[rows, labels], 1e-30)).mean())
    probs[rows, labels] -= 1.0
    grad = probs.T @ feats_b
    grad /= n
    return loss, grad.astype(np.float32, copy=False)


def gradient_steps(head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray, lr: float, steps: int) -> np.ndarray:
    """``steps`` full-batch gradient-descent steps on the head (theta frozen); returns a new array."""
    with one_blas_thread():
        return _gradient_steps(head, feats_b, labels, lr, steps)


def _gradient_steps(head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray, lr: float, steps: int) -> np.ndarray:
    head = head.astype(np.float32, copy=True)
    for _ in range(steps):
        _, grad = _loss_and_grad(head, feats_b, labels)
        head -= np.float32(lr) * grad
    return head


class HostHead:
    """PFLEGO's head steps in numpy on the host (:func:`gradient_steps`): features and head are host arrays."""

    on_device = False

    def cache(self, features: np.ndarray) -> np.ndarray:
        """The bias-augmented features the steps run on."""
        return with_bias(features)

    def steps(self, head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray, lr: float, steps: int) -> np.ndarray:
        return gradient_steps(head, feats_b, labels, lr, steps)

    def prepare(self, n: int, classes: int, width: int, steps: int) -> None:
        """Nothing to set up: numpy builds nothing ahead."""

    def host(self, head: np.ndarray) -> np.ndarray:
        """The stepped head as a host array."""
        return head


class DeviceHead:
    """PFLEGO's head steps in torch on ``compute``'s device, as one program per shape
    (:class:`~edgeprof.nn.head_program.HeadPrograms`, kept on the compute for the run: a captured CUDA graph
    replayed where the kind captures, else the same steps eagerly).

    Features that are already a device tensor get their bias column there (no round trip through the host);
    host features cross once, with theirs. The head crosses to the device once and stays there as a tensor
    until :meth:`host` (the joint gradient uses that tensor as it is).
    """

    on_device = True

    def __init__(self, compute) -> None:
        from edgeprof.nn.head_program import HeadPrograms

        self.compute = compute
        self.programs = compute.programs("head_steps", HeadPrograms)

    def cache(self, features):
        import torch

        if isinstance(features, torch.Tensor):
            return torch.cat([features, features.new_ones((features.shape[0], 1))], dim=1)
        return self.compute.tensor(with_bias(features))

    def steps(self, head: np.ndarray, feats_b, labels: np.ndarray, lr: float, steps: int):
        if steps == 0:
            return self.compute.tensor(head, requires_grad=True).detach()  # a copy of its own
        return self.programs.run(head, feats_b, self.compute.labels(labels), lr, steps)

    def prepare(self, n: int, classes: int, width: int, steps: int) -> None:
        """Set-up before any window: the program of these shapes built and, where the kind captures, captured."""
        self.programs.prepare(n, classes, width, steps)

    def host(self, head) -> np.ndarray:
        return self.compute.host(head)


#: the host rule's head steps (no state)
HOST_HEAD = HostHead()


def device_gradient_steps(compute, head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray, lr: float,
                          steps: int) -> np.ndarray:
    """:func:`gradient_steps` in torch on ``compute``'s device (same closed-form gradient); a new host array."""
    on_device = DeviceHead(compute)
    return on_device.host(on_device.steps(head, compute.tensor(feats_b), labels, lr, steps))


def steps_for(compute):
    """The head steps of ``compute``'s device kind: :data:`HOST_HEAD` (numpy), or :class:`DeviceHead`."""
    if not getattr(compute.kind, "head_on_device", False):
        return HOST_HEAD
    return DeviceHead(compute)


def predict(head: np.ndarray, feats_b: np.ndarray) -> np.ndarray:
    """Local class predictions (argmax of the logits)."""
    with one_blas_thread():
        return np.argmax(feats_b @ head.T, axis=1)
