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

``split="paper"`` follows the PFLEGO authors' reference code instead (:func:`draw_classes`,
:func:`official_test`): every client draws its K classes independently, any class no client drew is
patched in, and the official train and test samples of each class are dealt round-robin to its
holders separately, so every test sample comes from the set's official test split (or, for sets
without one, a seeded stratified hold-out). ``"group"`` is the same under both splits.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from edgeprof.data.base import ClientData, Dataset
from edgeprof.data.names import DEGREES, SPLITS
from edgeprof.errors import ConfigError


def partition(
    dataset: Dataset,
    num_clients: int,
    degree: str = "high",
    *,
    seed: int = 0,
    test_fraction: float = 0.25,
    classes_per_client: int | None = None,
    split: str = "balanced",
) -> list[ClientData]:
    """Split ``dataset`` among ``num_clients`` clients; deterministic given ``seed``.

    ``classes_per_client`` overrides the K of ``degree`` (not allowed with ``"group"``). ``split`` is one
    of :data:`SPLITS` (see the module docstring); with ``"paper"`` and a set that has an official test
    split, ``test_fraction`` is not used. Every client keeps at least one training sample of each class
    it holds. Raises ConfigError for an unknown degree or split, an impossible K, more clients than
    groups, or too few (training) samples of a class for the clients that hold it.
    """
    if num_clients < 1:
        raise ConfigError(f"need at least one client, got {num_clients}")
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test fraction must be in [0, 1), got {test_fraction}")
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    seqs = np.random.SeedSequence(seed).spawn(4)  # the first three are those of every earlier version
    if degree != "group" and split == "paper":
        k = classes_for_degree(degree, dataset.num_classes, classes_per_client)
        return _paper_clients(dataset, num_clients, k, test_fraction, seqs)
    assign_seq, shuffle_seq, order_seq, _ = seqs
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


def round_robin(y: np.ndarray, held: list[np.ndarray], rng: np.random.Generator, *,
                what: str = "samples", at_least_one: bool = True) -> list[np.ndarray]:
    """Sample indices per client: each class shuffled and dealt cyclically to its holders (Appendix A.2).

    Within a class the holders are taken in client order, so their counts differ by at most one.
    Raises ConfigError when a class has fewer samples than clients holding it, unless ``at_least_one``
    is False (then the last holders of a short class get none); ``what`` names the samples in it.
    """
    parts: list[list[np.ndarray]] = [[] for _ in held]
    for c in np.unique(np.concatenate(held)):
        holders = [i for i, classes in enumerate(held) if c in classes]
        samples = rng.permutation(np.flatnonzero(y == c))
        if at_least_one and len(samples) < len(holders):
            raise ConfigError(
                f"too few {what} for {len(held)} clients: class {c} has {len(samples)} {what} "
                f"but {len(holders)} clients hold it; use fewer clients or more classes per client"
            )
        for position, client in enumerate(holders):
            parts[client].append(samples[position :: len(holders)])
    return [np.concatenate(p) for p in parts]


def draw_classes(num_classes: int, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """K distinct classes per client (sorted), as the reference code draws them, then every class patched in.

    Each client draws ``rng.choice(num_classes, k, replace=False)`` on its own, so how many clients hold
    a class varies by chance. Then, for every class no client drew (in class order), one holding is
    chosen uniformly among those whose class at least two clients hold, and that class is replaced by
    the missing one: no client loses its K, no other class is lost, every class ends up held. (The
    reference code's own patch overwrites the first clients with pairs of a fresh permutation, which
    only fits K=2.) When ``num_clients * k < num_classes`` not every class can be held, and the patch
    stops once no class is held twice.
    """
    drawn = np.stack([rng.choice(num_classes, k, replace=False) for _ in range(num_clients)]).astype(np.int64)
    flat = drawn.reshape(-1)  # a view: patching it patches drawn
    holders = np.bincount(flat, minlength=num_classes)
    for c in np.flatnonzero(holders == 0):
        spare = np.flatnonzero(holders[flat] >= 2)
        if not len(spare):
            break
        slot = spare[rng.integers(len(spare))]
        holders[flat[slot]] -= 1
        flat[slot], holders[c] = c, 1
    return [np.sort(classes) for classes in drawn]


def official_test(dataset: Dataset, test_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Which samples the ``"paper"`` split deals to test sets: ``dataset.is_test``, or a stand-in.

    A set without an official test split (``is_test`` None: digits, synthetic, omniglot) gets a seeded
    stratified hold-out instead: of each class, ``test_fraction`` of the samples (rounded, at least one
    left for training) chosen at random.
    """
    if dataset.is_test is not None:
        return dataset.is_test
    is_test = np.zeros(len(dataset), dtype=bool)
    for c in np.unique(dataset.y):
        own = rng.permutation(np.flatnonzero(dataset.y == c))
        is_test[own[: _test_count(len(own), test_fraction)]] = True
    return is_test


def _paper_clients(dataset: Dataset, num_clients: int, k: int, test_fraction: float,
                   seqs: list[np.random.SeedSequence]) -> list[ClientData]:
    """The ``"paper"`` split: :func:`draw_classes`, then :func:`official_test`'s two parts dealt apart."""
    assign_seq, shuffle_seq, order_seq, holdout_seq = seqs
    held = draw_classes(dataset.num_classes, num_clients, k, np.random.default_rng(assign_seq))
    is_test = official_test(dataset, test_fraction, np.random.default_rng(holdout_seq))
    train, test = _deal_apart(dataset.y, is_test, held, np.random.default_rng(shuffle_seq))
    order_rng = np.random.default_rng(order_seq)
    return [_make_client(dataset, i, held[i], train[i], test[i], order_rng) for i in range(num_clients)]


def _deal_apart(y: np.ndarray, is_test: np.ndarray, held: list[np.ndarray], rng: np.random.Generator
                ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per client, its train and its test sample indices: each part of each class dealt round-robin on its own.

    Every holder needs a training sample of each class it holds (ConfigError otherwise); a class with
    fewer test samples than holders leaves its last holders without a test sample of it.
    """
    train_idx, test_idx = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    train = round_robin(y[train_idx], held, rng, what="training samples")
    test = round_robin(y[test_idx], held, rng, what="test samples", at_least_one=False)
    return [train_idx[t] for t in train], [test_idx[t] for t in test]


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


def own_client(dataset: Dataset, client_id: int, test_fraction: float, seed: int = 0) -> ClientData:
    """A device's own data set as its client's local set: every class it holds, each split train/test by
    ``test_fraction`` (at least one sample of a class stays for training), labels local, order seeded."""
    rng = np.random.default_rng([seed, client_id])
    return _client(dataset, client_id, rng.permutation(len(dataset.y)), test_fraction, rng)


def _client(dataset: Dataset, client_id: int, idx: np.ndarray, test_fraction: float,
            rng: np.random.Generator) -> ClientData:
    """Split one client's samples per class into train/test and renumber labels locally."""
    y = dataset.y[idx]
    classes = np.unique(y)
    train, test = [], []
    for c in classes:
        own = idx[y == c]
        n_test = _test_count(len(own), test_fraction)
        test.append(own[:n_test])
        train.append(own[n_test:])
    return _make_client(dataset, client_id, classes, np.concatenate(train), np.concatenate(test), rng)


def _test_count(n: int, test_fraction: float) -> int:
    """How many of a class's ``n`` samples go to test: ``test_fraction`` of them rounded, leaving one for training."""
    return min(int(np.floor(n * test_fraction + 0.5)), n - 1)


def _make_client(dataset: Dataset, client_id: int, classes: np.ndarray, train: np.ndarray, test: np.ndarray,
                 rng: np.random.Generator) -> ClientData:
    """A client from its sorted global ``classes`` and sample indices, each part shuffled, labels local."""
    train_idx = rng.permutation(train)
    test_idx = rng.permutation(test)
    return ClientData(
        client_id=client_id,
        classes=classes.astype(np.int64),
        x_train=dataset.x[train_idx],
        y_train=np.searchsorted(classes, dataset.y[train_idx]).astype(np.int64),
        x_test=dataset.x[test_idx],
        y_test=np.searchsorted(classes, dataset.y[test_idx]).astype(np.int64),
    )
