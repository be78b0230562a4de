"""Split a :class:`Dataset` into personalized federated clients (PFLEGO paper, Sections 4.2-4.3 and Appendix A.2).

The degree of personalization is the number K of classes each client holds: ``"high"`` K=2,
``"medium"`` K=C//2, ``"none"`` K=C (paper, Section 4.3). Classes are assigned at random but
balanced: clients draw K distinct classes in turn from a stream of concatenated seeded permutations
of all classes, so every class is held by about the same number of clients. The samples of every
class are then dealt round-robin (Appendix A.2): shuffle the class, keep the clients that hold it,
give one sample to each in turn until none is left. ``"group"`` instead gives each client one group
of ``Dataset.groups`` (Omniglot: one alphabet per client, Section 4.2). Finally every client splits
each of its classes into train and test (``test_fraction``, 25% in the paper) and renumbers its
labels 0..K_i-1 in the order of the global class ids.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from edgeprof.data.base import ClientData, Dataset
from edgeprof.errors import ConfigError

DEGREES = ("high", "medium", "none", "group")


def partition(
    dataset: Dataset,
    num_clients: int,
    degree: str = "high",
    *,
    seed: int = 0,
    test_fraction: float = 0.25,
    classes_per_client: int | None = None,
) -> list[ClientData]:
    """Split ``dataset`` among ``num_clients`` clients; deterministic given ``seed``.

    ``classes_per_client`` overrides the K of ``degree`` (not allowed with ``"group"``). Every client
    keeps at least one training sample of each class it holds. Raises ConfigError for an unknown
    degree, an impossible K, more clients than groups, or too few samples of a class for the
    clients that hold it.
    """
    if num_clients < 1:
        raise ConfigError(f"need at least one client, got {num_clients}")
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test fraction must be in [0, 1), got {test_fraction}")
    assign_seq, shuffle_seq, order_seq = np.random.SeedSequence(seed).spawn(3)
    if degree == "group":
        if classes_per_client is not None:
            raise ConfigError("classes_per_client does not apply to degree 'group'")
        members = _group_members(dataset, num_clients, np.random.default_rng(assign_seq))
    else:
        k = classes_for_degree(degree, dataset.num_classes, classes_per_client)
        held = assign_classes(dataset.num_classes, num_clients, k, np.random.default_rng(assign_seq))
        members = round_robin(dataset.y, held, np.random.default_rng(shuffle_seq))
    order_rng = np.random.default_rng(order_seq)
    return [_client(dataset, i, idx, test_fraction, order_rng) for i, idx in enumerate(members)]


def classes_for_degree(degree: str, num_classes: int, classes_per_client: int | None = None) -> int:
    """K, the number of classes per client, for a degree of personalization (or the override)."""
    table = {"high": 2, "medium": num_classes // 2, "none": num_classes}
    if degree not in table:
        raise ConfigError(f"unknown degree of personalization {degree!r}; choose one of {', '.join(DEGREES)}")
    k = table[degree] if classes_per_client is None else classes_per_client
    if not 1 <= k <= num_classes:
        raise ConfigError(f"cannot give each client {k} classes: the dataset has {num_classes}")
    return k


def assign_classes(num_classes: int, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """K distinct classes per client (sorted), drawn from concatenated permutations of all classes.

    A class a client already holds is set aside and offered first to the next client, so how many
    clients hold each class differs by at most a small constant.
    """
    stream: deque[int] = deque()
    held = []
    for _ in range(num_clients):
        chosen: list[int] = []
        skipped: list[int] = []
        while len(chosen) < k:
            if not stream:
                stream.extend(int(c) for c in rng.permutation(num_classes))
            c = stream.popleft()
            (skipped if c in chosen else chosen).append(c)
        stream.extendleft(reversed(skipped))
        held.append(np.array(sorted(chosen), dtype=np.int64))
    return held


def round_robin(y: np.ndarray, held: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Sample indices per client: each class shuffled and dealt cyclically to its holders (Appendix A.2).

    Within a class the holders are taken in client order, so their counts differ by at most one.
    Raises ConfigError when a class has fewer samples than clients holding it.
    """
    parts: list[list[np.ndarray]] = [[] for _ in held]
    for c in np.unique(np.concatenate(held)):
        holders = [i for i, classes in enumerate(held) if c in classes]
        samples = rng.permutation(np.flatnonzero(y == c))
        if len(samples) < len(holders):
            raise ConfigError(
                f"too few samples for {len(held)} clients: class {c} has {len(samples)} samples "
                f"but {len(holders)} clients hold it; use fewer clients or more classes per client"
            )
        for position, client in enumerate(holders):
            parts[client].append(samples[position :: len(holders)])
    return [np.concatenate(p) for p in parts]


def _group_members(dataset: Dataset, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sample indices of one group per client; a seeded choice of groups when there are more than clients."""
    if dataset.groups is None:
        raise ConfigError(f"degree 'group' needs a dataset with groups (e.g. omniglot), not {dataset.name}")
    groups = np.unique(dataset.groups)
    if num_clients > len(groups):
        raise ConfigError(f"degree 'group' gives one group per client: {dataset.name} has only {len(groups)} groups "
                          f"for {num_clients} clients")
    chosen = np.sort(rng.choice(groups, size=num_clients, replace=False))
    return [rng.permutation(np.flatnonzero(dataset.groups == g)) for g in chosen]


def _client(dataset: Dataset, client_id: int, idx: np.ndarray, test_fraction: float,
            rng: np.random.Generator) -> ClientData:
    """Split one client's samples per class into train/test and renumber labels locally."""
    y = dataset.y[idx]
    classes = np.unique(y)
    train, test = [], []
    for c in classes:
        own = idx[y == c]
        n_test = min(int(np.floor(len(own) * test_fraction + 0.5)), len(own) - 1)
        test.append(own[:n_test])
        train.append(own[n_test:])
    train_idx = rng.permutation(np.concatenate(train))
    test_idx = rng.permutation(np.concatenate(test))
    return ClientData(
        client_id=client_id,
        classes=classes.astype(np.int64),
        x_train=dataset.x[train_idx],
        y_train=np.searchsorted(classes, dataset.y[train_idx]).astype(np.int64),
        x_test=dataset.x[test_idx],
        y_test=np.searchsorted(classes, dataset.y[test_idx]).astype(np.int64),
    )
