"""The partitioner: balanced class assignment, the round-robin deal of Appendix A.2, per-class train/test split;
the paper split: the reference code's class draw, the official test split dealt apart."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_data_files import write_idx

from edgeprof.data import ClientData, Dataset, classes_for_degree, draw_classes, load_dataset, partition
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


# --- the paper split: the reference code's class draw and official test split, dealt apart -------------------

#: official train and test sizes per class of the IDX set below; some test classes are shorter than their holders
TRAIN_SIZES = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29]
TEST_SIZES = [3, 4, 5, 6, 7, 3, 4, 5, 6, 7]


def write_traced_mnist(folder: Path) -> None:
    """MNIST train and t10k IDX files whose pixels (0, 0) and (0, 1) spell the sample's index in load order."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    start = 0
    for stem, sizes in (("train", TRAIN_SIZES), ("t10k", TEST_SIZES)):
        y = rng.permutation(np.concatenate([np.full(n, c) for c, n in enumerate(sizes)])).astype(np.uint8)
        x = np.zeros((len(y), 28, 28), dtype=np.uint8)
        index = start + np.arange(len(y))
        x[:, 0, 0], x[:, 0, 1] = index // 256, index % 256
        write_idx(folder / f"{stem}-images-idx3-ubyte", x)
        write_idx(folder / f"{stem}-labels-idx1-ubyte", y)
        start += len(y)


def traced_ids(x: np.ndarray) -> np.ndarray:
    pixels = np.rint(x[:, 0, 0, :2] * 255).astype(np.int64)
    return pixels[:, 0] * 256 + pixels[:, 1]


def round_robin_counts(n: int, holders: int) -> list[int]:
    """Appendix A.2's deal computed directly: n samples to holders in turn, the first n % holders get one more."""
    return [n // holders + (j < n % holders) for j in range(holders)]


@pytest.mark.parametrize(("degree", "k"), DEGREE_K)
def test_paper_split_deals_official_train_and_test_apart_round_robin(tmp_path: Path, degree: str, k: int) -> None:
    # Prepare
    write_traced_mnist(tmp_path)
    dataset = load_dataset("mnist", data_dir=tmp_path)
    # Execute
    clients = partition(dataset, 9, degree, seed=12, split="paper")
    # Assert: K distinct classes each, every class held
    assert all(c.num_classes == k and len(set(c.classes.tolist())) == k for c in clients)
    assert set(np.concatenate([c.classes for c in clients]).tolist()) == set(range(NUM_CLASSES))
    # Assert: official train samples only in train sets, official test samples only in test sets, each once
    train = np.concatenate([traced_ids(c.x_train) for c in clients])
    test = np.concatenate([traced_ids(c.x_test) for c in clients])
    assert sorted(train.tolist()) == np.flatnonzero(~dataset.is_test).tolist()
    assert sorted(test.tolist()) == np.flatnonzero(dataset.is_test).tolist()
    # Assert: each part of each class dealt round-robin over its holders in client order, labels local
    for c in range(NUM_CLASSES):
        holders = [cl for cl in clients if c in cl.classes]
        for part, sizes in (("train", TRAIN_SIZES), ("test", TEST_SIZES)):
            counts = [int(np.sum(cl.global_labels(getattr(cl, f"y_{part}")) == c)) for cl in holders]
            assert counts == round_robin_counts(sizes[c], len(holders))
    for client in clients:
        np.testing.assert_array_equal(client.global_labels(client.y_train), dataset.y[traced_ids(client.x_train)])
        np.testing.assert_array_equal(client.global_labels(client.y_test), dataset.y[traced_ids(client.x_test)])


def test_paper_split_draws_each_clients_classes_independently_without_replacement() -> None:
    # Prepare: the reference code's draw replayed; 40 clients x 5 of 10 classes hold every class with no patch
    replay = np.random.default_rng(5)
    raw = [replay.choice(NUM_CLASSES, 5, replace=False) for _ in range(40)]
    assert set(np.concatenate(raw).tolist()) == set(range(NUM_CLASSES))
    # Execute
    held = draw_classes(NUM_CLASSES, 40, 5, np.random.default_rng(5))
    # Assert
    assert [h.tolist() for h in held] == [sorted(r.tolist()) for r in raw]


def test_paper_split_patches_in_every_missing_class_from_a_class_held_twice() -> None:
    patched_any = False
    for seed in range(20):
        # Prepare: 5 clients x 2 of 10 classes must hold every class once; the raw draw rarely does
        replay = np.random.default_rng(seed)
        raw = [set(replay.choice(NUM_CLASSES, 2, replace=False).tolist()) for _ in range(5)]
        raw_holders = Counter(c for classes in raw for c in classes)
        missing = set(range(NUM_CLASSES)) - set(raw_holders)
        # Execute
        held = [set(h.tolist()) for h in draw_classes(NUM_CLASSES, 5, 2, np.random.default_rng(seed))]
        # Assert
        assert all(len(h) == 2 for h in held)
        assert set().union(*held) == set(range(NUM_CLASSES))
        added = [h - r for h, r in zip(held, raw)]
        removed = [r - h for h, r in zip(held, raw)]
        assert sum(len(a) for a in added) == len(missing) and set().union(*added) == missing
        assert all(raw_holders[c] >= 2 for r in removed for c in r)
        patched_any |= bool(missing)
    assert patched_any


def test_paper_split_with_too_few_holdings_holds_as_many_classes_as_it_can() -> None:
    # Execute: 3 clients x 2 classes cannot hold 10 classes
    held = draw_classes(NUM_CLASSES, 3, 2, np.random.default_rng(0))
    # Assert
    assert all(len(set(h.tolist())) == 2 for h in held)
    assert len(set(np.concatenate(held).tolist())) == 6


def test_paper_split_without_an_official_test_split_holds_out_a_seeded_stratified_quarter() -> None:
    # Prepare: the traced set has no is_test
    dataset = make_dataset()
    # Execute
    first, again = (partition(dataset, 4, "none", seed=13, split="paper") for _ in range(2))
    # Assert: the same hold-out for every client, test_fraction of each class rounded, disjoint from train
    test = np.concatenate([sample_ids(c.x_test, len(dataset)) for c in first])
    train = np.concatenate([sample_ids(c.x_train, len(dataset)) for c in first])
    assert not set(test.tolist()) & set(train.tolist()) and len(test) + len(train) == len(dataset)
    for c, n in enumerate(CLASS_SIZES):
        assert int(np.sum(dataset.y[test] == c)) == int(np.floor(n * 0.25 + 0.5))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.x_test, b.x_test)


def test_balanced_split_pools_the_official_test_split(tmp_path: Path) -> None:
    # Prepare: the same samples with and without their official split marked
    write_traced_mnist(tmp_path)
    marked = load_dataset("mnist", data_dir=tmp_path)
    unmarked = Dataset(marked.name, marked.x, marked.y, marked.num_classes)
    # Execute
    pairs = zip(partition(marked, 6, "high", seed=3), partition(unmarked, 6, "high", seed=3, split="balanced"))
    # Assert
    for a, b in pairs:
        np.testing.assert_array_equal(a.x_train, b.x_train)
        np.testing.assert_array_equal(a.x_test, b.x_test)


def test_paper_split_leaves_the_group_degree_unchanged() -> None:
    # Prepare
    dataset = make_dataset(groups_of_class=[0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    # Execute
    pairs = zip(partition(dataset, 2, "group", seed=4), partition(dataset, 2, "group", seed=4, split="paper"))
    # Assert
    for a, b in pairs:
        np.testing.assert_array_equal(a.classes, b.classes)
        np.testing.assert_array_equal(a.x_train, b.x_train)
        np.testing.assert_array_equal(a.x_test, b.x_test)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_clients": 2, "split": "reference"}, "unknown split 'reference'"),
        ({"num_clients": 100, "degree": "none", "split": "paper"}, "too few training samples for 100 clients"),
    ],
)
def test_impossible_paper_splits_are_config_errors(kwargs: dict, message: str) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match=message):
        partition(make_dataset(), **kwargs)
