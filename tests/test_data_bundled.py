"""The offline datasets (sklearn digits, synthetic) and the shape conversion every loader uses."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from edgeprof.data import Dataset, load_dataset, to_shape
from edgeprof.errors import ConfigError


@pytest.mark.parametrize(("shape", "expected"), [(None, (1, 8, 8)), ((1, 28, 28), (1, 28, 28)), ((3, 32, 32), (3, 32, 32))])
def test_digits_loads_all_samples_in_the_requested_shape(shape, expected) -> None:
    # Execute
    dataset = load_dataset("digits", shape=shape)
    # Assert
    assert dataset.x.shape == (1797, *expected) and dataset.x.dtype == np.float32
    assert dataset.y.dtype == np.int64 and set(np.unique(dataset.y)) == set(range(10))
    assert dataset.x.min() == 0.0 and dataset.x.max() <= 1.0 and dataset.x.max() > 0.99


def test_digits_native_values_are_sklearn_values_over_16() -> None:
    # Prepare
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # Execute
    dataset = load_dataset("digits")
    # Assert
    np.testing.assert_array_equal(dataset.x[:, 0] * 16, bunch.images)
    np.testing.assert_array_equal(dataset.y, bunch.target)


def test_synthetic_is_seeded() -> None:
    # Execute
    first = load_dataset("synthetic", seed=3, synthetic_samples=200)
    again = load_dataset("synthetic", seed=3, synthetic_samples=200)
    other = load_dataset("synthetic", seed=4, synthetic_samples=200)
    # Assert
    np.testing.assert_array_equal(first.x, again.x)
    np.testing.assert_array_equal(first.y, again.y)
    assert not np.array_equal(first.x, other.x)


@pytest.mark.parametrize(("classes", "samples", "shape"), [(10, 2000, None), (4, 203, (3, 16, 20))])
def test_synthetic_is_balanced_bounded_and_shaped(classes: int, samples: int, shape) -> None:
    # Execute
    dataset = load_dataset("synthetic", synthetic_classes=classes, synthetic_samples=samples, shape=shape)
    # Assert
    counts = np.bincount(dataset.y, minlength=classes)
    assert counts.sum() == samples and counts.max() - counts.min() <= 1
    assert dataset.x.shape[1:] == (shape or (1, 28, 28)) and dataset.num_classes == classes
    assert dataset.x.min() >= 0.0 and dataset.x.max() <= 1.0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_synthetic_is_learnable_but_not_trivial() -> None:
    # Prepare
    dataset = load_dataset("synthetic", seed=0, synthetic_classes=10, synthetic_samples=2000)
    pixels = dataset.x.reshape(len(dataset), -1)
    # Execute
    model = LogisticRegression(C=0.05, max_iter=100).fit(pixels[:1500], dataset.y[:1500])
    accuracy = model.score(pixels[1500:], dataset.y[1500:])
    # Assert: well above the 10% chance level, below a perfect score
    assert 0.2 < accuracy < 0.99


@pytest.mark.parametrize(("classes", "samples"), [(1, 100), (10, 5)])
def test_synthetic_refuses_impossible_sizes(classes: int, samples: int) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError):
        load_dataset("synthetic", synthetic_classes=classes, synthetic_samples=samples)


def test_to_shape_repeats_grey_into_three_channels() -> None:
    # Prepare
    x = np.random.default_rng(0).random((3, 1, 6, 6), dtype=np.float32)
    # Execute
    out = to_shape(x, (3, 6, 6))
    # Assert
    for channel in range(3):
        np.testing.assert_array_equal(out[:, channel], x[:, 0])


def test_to_shape_takes_luminance_of_rgb() -> None:
    # Prepare
    x = np.random.default_rng(1).random((2, 3, 4, 4), dtype=np.float32)
    expected = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    # Execute
    out = to_shape(x, (1, 4, 4))
    # Assert
    np.testing.assert_allclose(out[:, 0], expected, rtol=1e-6)


def test_to_shape_shrinks_with_antialiasing() -> None:
    # Prepare: a one-pixel checkerboard averages to grey only when the filter covers the dropped pixels
    board = (np.indices((32, 32)).sum(axis=0) % 2).astype(np.float32)[None, None]
    # Execute
    out = to_shape(board, (1, 8, 8))
    # Assert
    np.testing.assert_allclose(out, 0.5, atol=0.05)


def test_to_shape_upsamples_bilinearly_like_torch() -> None:
    # Prepare
    import torch

    x = np.random.default_rng(2).random((2, 1, 8, 8), dtype=np.float32)
    expected = torch.nn.functional.interpolate(torch.from_numpy(x), size=(28, 28), mode="bilinear").numpy()
    # Execute
    out = to_shape(x, (1, 28, 28))
    # Assert
    np.testing.assert_allclose(out, np.clip(expected, 0, 1), atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 8, 8), (1, 0, 8), (1, 8)])
def test_to_shape_refuses_impossible_shapes(shape) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError):
        to_shape(np.zeros((1, 1, 8, 8), np.float32), shape)


def test_dataset_refuses_labels_outside_its_classes() -> None:
    # Execute / Assert
    with pytest.raises(ValueError, match="labels must lie in 0..2"):
        Dataset("bad", np.zeros((2, 1, 2, 2), np.float32), np.array([0, 3]), num_classes=3)


@pytest.mark.parametrize("name", ["digits", "synthetic"])
def test_bundled_sets_have_no_official_test_split(name: str) -> None:
    # Execute / Assert: the paper split holds out a stand-in for them
    assert load_dataset(name, synthetic_samples=100).is_test is None


def test_dataset_refuses_an_is_test_that_is_not_one_bool_per_sample() -> None:
    # Prepare
    x, y = np.zeros((2, 1, 2, 2), np.float32), np.array([0, 1])
    # Execute / Assert
    with pytest.raises(ValueError, match="is_test must be bool of shape"):
        Dataset("bad", x, y, num_classes=2, is_test=np.array([0, 1]))


def test_the_declared_size_of_the_bundled_digits_is_what_its_loader_reads() -> None:
    """data.names.DATASET_SIZES (what a Flower node may claim) agrees with the loader where the data is at hand."""
    from edgeprof.data.names import DATASET_SIZES

    dataset = load_dataset("digits")

    assert DATASET_SIZES["digits"] == (len(np.unique(dataset.y)), len(dataset.y))
