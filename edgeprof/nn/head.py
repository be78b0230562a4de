"""The personal linear head: softmax regression on cached features, in plain numpy.

As in the authors' reference code, client i's head ``W_i`` is ``K_i x (M+1)``: a bias column is appended
to the features (``phi_b = [phi, 1]``), logits are ``z = phi_b @ W_i.T`` and the loss is the mean
softmax cross-entropy over the client's whole local set (equation (2) of the PFLEGO paper). Its
gradient has the closed form ``(softmax(z) - onehot(y)).T @ phi_b / N``: no autodiff.
"""

from __future__ import annotations

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


def _probabilities(head: np.ndarray, feats_b: np.ndarray) -> np.ndarray:
    logits = feats_b @ head.T
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def loss_and_grad(head: np.ndarray, feats_b: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy of the head on bias-augmented features, and its gradient wrt the head."""
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
    head = head.astype(np.float32, copy=True)
    for _ in range(steps):
        _, grad = loss_and_grad(head, feats_b, labels)
        head -= np.float32(lr) * grad
    return head


def predict(head: np.ndarray, feats_b: np.ndarray) -> np.ndarray:
    """Local class predictions (argmax of the logits)."""
    return np.argmax(feats_b @ head.T, axis=1)
