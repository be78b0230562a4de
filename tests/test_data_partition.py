"""The partitioner: balanced class assignment, the round-robin deal of Appendix A.2, per-class train/test split."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from edgeprof.data import ClientData, Dataset, classes_for_degree, partition
from edgeprof.errors import ConfigError

NUM_CLASSES = 10
#: uneven class sizes, so round-robin balance is tested on remainders
CLASS_SIZES = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]


def make_dataset(groups_of_class: list[int] | None = None) -> Dataset:
    """A tiny dataset whose pixel [0, 0, 0] is the sample's index, so every sample can be traced."""
    y = np.concatenate([np.full(n, c) for c, n in enumerate(CLASS_SIZES)]).astype(np.int64)
    y = np.random.default_rng(9).permutation(y)
    x = np.zeros((len(y), 1, 2, 2), dtype=np.float32)
    x[:, 0, 0, 0] = np.arange(len(y)) / len(y)
    groups = None if groups_of_class is None else np.asarray(groups_of_class, dtype=np.int64)[y]
    return Dataset("traced", x, y, NUM_CLASSES, groups)


def sample_ids(x: np.ndarray, n: int) -> np.ndarray:
    return np.rint(x[:, 0, 0, 0] * n).astype(np.int64)


def all_ids(client: ClientData, n: int) -> np.ndarray:
    return np.concatenate([sample_ids(client.x_train, n), sample_ids(client.x_test, n)])


DEGREE_K = [("high", 2), ("medium", 5), ("none", 10)]


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_every_client_holds_exactly_k_sorted_classes(degree: str, k: int) -> None:
    # Execute
    clients = partition(make_dataset(), 7, degree, seed=1)
    # Assert
    assert [c.client_id for c in clients] == list(range(7))
    for client in clients:
        assert client.num_classes == k and client.classes.dtype == np.int64
        assert list(client.classes) == sorted(set(client.classes.tolist()))


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_samples_are_dealt_once_and_all_samples_of_held_classes_are_dealt(degree: str, k: int) -> None:
    # Prepare
    dataset = make_dataset()
    # Execute
    clients = partition(dataset, 7, degree, seed=2)
    # Assert
    ids = np.concatenate([all_ids(c, len(dataset)) for c in clients])
    assert len(ids) == len(set(ids.tolist()))
    held = set(np.concatenate([c.classes for c in clients]).tolist())
    assert set(ids.tolist()) == set(np.flatnonzero(np.isin(dataset.y, list(held))).tolist())


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_round_robin_gives_holders_of_a_class_counts_within_one(degree: str, k: int) -> None:
    # Prepare
    dataset = make_dataset()
    # Execute
    clients = partition(dataset, 9, degree, seed=3)
    # Assert
    for c in range(NUM_CLASSES):
        counts = [int(np.sum(dataset.y[all_ids(cl, len(dataset))] == c)) for cl in clients if c in cl.classes]
        if counts:
            assert max(counts) - min(counts) <= 1 and sum(counts) == CLASS_SIZES[c]


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_classes_are_spread_evenly_over_clients(degree: str, k: int) -> None:
    # Execute
    clients = partition(make_dataset(), 20, degree, seed=4)
    # Assert: 20*k holdings over 10 classes, each class held about 2k times
    holders = Counter(int(c) for client in clients for c in client.classes)
    assert sum(holders.values()) == 20 * k
    assert max(holders.values()) - min(holders.get(c, 0) for c in range(NUM_CLASSES)) <= 2


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_local_labels_map_back_to_the_global_classes(degree: str, k: int) -> None:
    # Prepare
    dataset = make_dataset()
    # Execute
    clients = partition(dataset, 5, degree, seed=5)
    # Assert
    for client in clients:
        for x, y in ((client.x_train, client.y_train), (client.x_test, client.y_test)):
            assert y.dtype == np.int64 and set(y.tolist()) <= set(range(k))
            np.testing.assert_array_equal(client.global_labels(y), dataset.y[sample_ids(x, len(dataset))])
        assert set(client.y_train.tolist()) == set(range(k))


@pytest.mark.parametrize("test_fraction", [0.0, 0.25, 0.5])
def test_each_class_is_split_by_the_test_fraction(test_fraction: float) -> None:
    # Execute
    clients = partition(make_dataset(), 4, "high", seed=6, test_fraction=test_fraction)
    # Assert
    for client in clients:
        for k in range(client.num_classes):
            n_train, n_test = int(np.sum(client.y_train == k)), int(np.sum(client.y_test == k))
            assert n_train >= 1
            assert abs(n_test - test_fraction * (n_train + n_test)) <= 0.5


def test_a_single_sample_of_a_class_stays_in_training() -> None:
    # Prepare: 3 clients hold both classes of a set with 3 samples per class
    x = np.zeros((6, 1, 1, 1), np.float32)
    dataset = Dataset("tiny", x, np.array([0, 0, 0, 1, 1, 1]), 2)
    # Execute
    clients = partition(dataset, 3, "none", test_fraction=0.5)
    # Assert
    assert all(c.n_train == 2 and c.n_test == 0 for c in clients)


@pytest.mark.parametrize("degree", ["high", "medium", "none"])
def test_partition_is_deterministic_by_seed(degree: str) -> None:
    # Prepare
    dataset = make_dataset()
    # Execute
    first, again, other = (partition(dataset, 6, degree, seed=s) for s in (7, 7, 8))
    # Assert
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.classes, b.classes)
        np.testing.assert_array_equal(a.x_train, b.x_train)
        np.testing.assert_array_equal(a.y_test, b.y_test)
    assert any(not np.array_equal(a.x_train, b.x_train) for a, b in zip(first, other))


def test_classes_per_client_overrides_the_degree() -> None:
    # Execute
    clients = partition(make_dataset(), 3, "high", classes_per_client=3)
    # Assert
    assert [c.num_classes for c in clients] == [3, 3, 3]


def test_group_partition_gives_each_client_one_whole_group() -> None:
    # Prepare: classes 0-2 in group 0, 3-5 in group 1, 6-9 in group 2
    dataset = make_dataset(groups_of_class=[0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    # Execute
    clients = partition(dataset, 2, "group", seed=0)
    # Assert
    found = []
    for client in clients:
        group_ids = set(dataset.groups[all_ids(client, len(dataset))].tolist())
        assert len(group_ids) == 1
        found.append(group_ids.pop())
        assert len(all_ids(client, len(dataset))) == int(np.sum(dataset.groups == found[-1]))
    assert len(set(found)) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_clients": 100, "degree": "none"}, "too few samples for 100 clients"),
        ({"num_clients": 0}, "at least one client"),
        ({"num_clients": 2, "degree": "extreme"}, "unknown degree"),
        ({"num_clients": 2, "classes_per_client": 11}, "cannot give each client 11 classes"),
        ({"num_clients": 2, "degree": "group"}, "needs a dataset with groups"),
        ({"num_clients": 2, "test_fraction": 1.0}, "test fraction"),
    ],
)
def test_impossible_partitions_are_config_errors(kwargs: dict, message: str) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=message):
        partition(make_dataset(), **kwargs)


def test_more_clients_than_groups_is_a_config_error() -> None:
    # Prepare
    dataset = make_dataset(groups_of_class=[0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    # Execute / Assert
    with pytest.raises(ConfigError, match="only 3 groups for 4 clients"):
        partition(dataset, 4, "group")


@pytest.mark.parametrize(("degree", "num_classes", "k"), [("high", 62, 2), ("medium", 62, 31), ("none", 62, 62),
                                                          ("medium", 5, 2)])
def test_degree_sets_k_as_in_the_paper(degree: str, num_classes: int, k: int) -> None:
    # Execute / Assert
    assert classes_for_degree(degree, num_classes) == k
