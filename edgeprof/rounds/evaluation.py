"""How a round's accuracy and loss are formed, under the two evaluation protocols (``--eval-protocol``).

``global`` (edgeprof's default): after the server step, every client is scored with the model it would
use now (the algorithm's declared evaluation: its head on the global backbone, the global model, its
personal model, ...); the loss is equation (1)'s sum_i alpha_i l_i and the accuracy the unweighted mean of
the per-client test accuracies. It answers "how good is the federation now, for everyone".

``paper`` (the PFLEGO authors' reference code, hence the paper's Table 1): only the clients sampled in the
round are scored, each right after its local update and before the server step, with its locally trained
model (for FedAvg and FedProx the whole model after its tau steps; for PFLEGO its updated head on the
round's theta); the accuracy is the sum of correct test predictions over those clients divided by the sum of
their test samples, and the loss the N_i-weighted mean of their training losses. It is the number to compare
with the literature; for FedAvg it is much higher than ``global``, because each score is taken from a model
just fitted to that client's classes.
"""

from __future__ import annotations

import math

from typing import Sequence

import numpy as np

from edgeprof.algorithms.contract import EvalResult


def global_score(results: Sequence[EvalResult]) -> tuple[float, float]:
    """(sum_i alpha_i l_i, mean_i accuracy_i) over every client, alpha_i = N_i / sum_j N_j; the accuracy's mean is
    over the clients with a test sample (one with none has no accuracy; its 0.0 pulled the mean down), NaN where no
    client has one."""
    n = np.array([r.n_train for r in results], dtype=float)
    loss = float(np.dot(n / n.sum(), [r.train_loss for r in results]))
    scored = [r.test_accuracy for r in results if r.n_test > 0]
    return loss, float(np.mean(scored)) if scored else float("nan")


def paper_score(results: Sequence[EvalResult]) -> tuple[float, float]:
    """(N_i-weighted mean loss, summed correct / summed test samples) over the round's scored clients; the accuracy is
    NaN where they have no test sample (it was 0.0)."""
    n_train = sum(r.n_train for r in results)
    n_test = sum(r.n_test for r in results)
    loss = sum(r.train_loss * r.n_train for r in results) / n_train if n_train else float("nan")
    correct = sum(round(r.test_accuracy * r.n_test) for r in results)
    return float(loss), (correct / n_test if n_test else float("nan"))


def accuracy_cell(accuracy: float) -> str:
    """An eval row's ``test_accuracy`` cell: the score, or empty where there was no test sample to score (NaN)."""
    return f"{accuracy:.6g}" if math.isfinite(accuracy) else ""
