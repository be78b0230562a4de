"""Datasets that need no files: scikit-learn's bundled digits and a seeded synthetic image generator.

Both exist so that every command, test and CI job runs offline; nothing here ever downloads.
"""

from __future__ import annotations

import numpy as np

from edgeprof.data.base import Dataset, check_shape, to_shape
from edgeprof.errors import ConfigError

#: native shape of the synthetic images when no shape is requested (MNIST-sized)
SYNTHETIC_SHAPE = (1, 28, 28)
#: side of the low-resolution random grid a class prototype is upsampled from
PROTOTYPE_GRID = 5
#: standard deviation of the per-pixel noise added to every synthetic sample
NOISE_STD = 0.5
#: largest shift of a synthetic sample, as a fraction of the image side
MAX_SHIFT_FRACTION = 0.15


def load_digits(shape: tuple[int, int, int] | None = None) -> Dataset:
    """scikit-learn's 1,797 8x8 handwritten digits, 10 classes, native shape ``(1, 8, 8)``.

    Pixel values 0..16 are scaled to ``[0, 1]``; ``shape=(1, 28, 28)`` upsamples them for conv backbones.
    """
    images, target = _digits_arrays()
    x = (images.astype(np.float32) / np.float32(16.0))[:, None]
    if shape is not None:
        x = to_shape(x, shape)
    return Dataset(name="digits", x=x, y=target.astype(np.int64), num_classes=10)


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8), labels) read straight from scikit-learn's bundled ``digits.csv.gz``.

    Importing ``sklearn.datasets`` costs seconds (it loads scipy and more); a Flower ClientApp process that
    serves one message pays that on every round, so the file is read directly, and the import is only the
    fall-back when the file is not where scikit-learn keeps it.
    """
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            data = np.loadtxt(path, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return bunch.images, bunch.target


def make_synthetic(
    num_classes: int = 10,
    num_samples: int = 2000,
    shape: tuple[int, int, int] | None = None,
    *,
    seed: int = 0,
) -> Dataset:
    """A seeded class-conditional image set: smooth per-class prototype + shift + noise, in ``[0, 1]``.

    Every class gets a low-frequency random pattern (a :data:`PROTOTYPE_GRID` grid upsampled to the
    image); a sample is its prototype randomly shifted by up to :data:`MAX_SHIFT_FRACTION` of a side,
    rescaled in contrast and covered with Gaussian noise. Classes are balanced (sizes differ by at
    most one) and generated directly at ``shape`` (default :data:`SYNTHETIC_SHAPE`). Linear models
    separate the classes well above chance but not perfectly.
    """
    if num_classes < 2:
        raise ConfigError(f"synthetic data needs at least 2 classes, got {num_classes}")
    if num_samples < num_classes:
        raise ConfigError(
            f"synthetic data needs at least one sample per class: {num_samples} samples < {num_classes} classes"
        )
    channels, height, width = check_shape(shape or SYNTHETIC_SHAPE)
    rng = np.random.default_rng(seed)
    prototypes = _prototypes(rng, num_classes, (channels, height, width))
    y = rng.permutation(np.arange(num_samples) % num_classes).astype(np.int64)
    x = _samples(rng, prototypes[y])
    return Dataset(name="synthetic", x=x, y=y, num_classes=num_classes)


def _prototypes(rng: np.random.Generator, num_classes: int, shape: tuple[int, int, int]) -> np.ndarray:
    """One smooth pattern per class, each stretched to span ``[0, 1]``."""
    grid = rng.random((num_classes, shape[0], PROTOTYPE_GRID, PROTOTYPE_GRID), dtype=np.float32)
    smooth = to_shape(grid, shape)
    low = smooth.min(axis=(1, 2, 3), keepdims=True)
    high = smooth.max(axis=(1, 2, 3), keepdims=True)
    return (smooth - low) / np.maximum(high - low, np.float32(1e-6))


def _samples(rng: np.random.Generator, prototypes: np.ndarray) -> np.ndarray:
    """Shift, rescale and add noise to one prototype per sample (``(N, C, H, W)``), clipped to ``[0, 1]``."""
    n, _, height, width = prototypes.shape
    max_dy = max(1, round(MAX_SHIFT_FRACTION * height))
    max_dx = max(1, round(MAX_SHIFT_FRACTION * width))
    shifts_y = rng.integers(-max_dy, max_dy + 1, size=n)
    shifts_x = rng.integers(-max_dx, max_dx + 1, size=n)
    x = np.empty_like(prototypes)
    for i in range(n):
        x[i] = np.roll(prototypes[i], (shifts_y[i], shifts_x[i]), axis=(1, 2))
    contrast = rng.uniform(0.6, 1.0, size=(n, 1, 1, 1)).astype(np.float32)
    noise = rng.normal(0.0, NOISE_STD, size=x.shape).astype(np.float32)
    return np.clip(contrast * x + noise, 0.0, 1.0).astype(np.float32)
