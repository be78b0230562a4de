"""The data stage: load a labelled image set, convert it to the backbone's shape, split it into clients.

``digits`` (scikit-learn's bundled 8x8 digits) and ``synthetic`` need no files; ``mnist``,
``fashion-mnist``, ``emnist``, ``cifar10`` and ``omniglot`` are read from their official files under
``data_dir`` (see :mod:`edgeprof.data.files` for the layouts). Nothing is ever downloaded. torch and
scikit-learn are imported only when a loader needs them.
"""

from __future__ import annotations

from pathlib import Path

from edgeprof.data.base import ClientData, Dataset, to_shape
from edgeprof.data.bundled import load_digits, make_synthetic
from edgeprof.data.names import DATASETS, FILE_DATASETS
from edgeprof.data.files import load_cifar10, load_idx_dataset, load_omniglot, read_idx
from edgeprof.data.partition import (DEGREES, SPLITS, assign_classes, classes_for_degree, draw_classes, official_test,
                                     partition, round_robin)
from edgeprof.errors import ConfigError, DataError


__all__ = [
    "DATASETS",
    "DEGREES",
    "FILE_DATASETS",
    "SPLITS",
    "ClientData",
    "Dataset",
    "assign_classes",
    "classes_for_degree",
    "draw_classes",
    "load_cifar10",
    "load_dataset",
    "load_digits",
    "load_idx_dataset",
    "load_omniglot",
    "make_synthetic",
    "official_test",
    "partition",
    "read_idx",
    "round_robin",
    "to_shape",
]


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    shape: tuple[int, int, int] | None = None,
    seed: int = 0,
    synthetic_classes: int = 10,
    synthetic_samples: int = 2000,
) -> Dataset:
    """Load one of :data:`DATASETS`, converted to ``shape`` = ``(C, H, W)`` (None keeps the native shape).

    ``data_dir`` is required by the :data:`FILE_DATASETS` and ignored by the others; ``seed`` and the
    ``synthetic_*`` arguments only affect ``synthetic``. Unknown names raise ConfigError, a missing
    ``data_dir`` or file DataError.
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name == "digits":
        return load_digits(shape)
    if name == "synthetic":
        return make_synthetic(synthetic_classes, synthetic_samples, shape, seed=seed)
    folder = _data_folder(name, data_dir)
    if name == "cifar10":
        return load_cifar10(folder, shape)
    if name == "omniglot":
        return load_omniglot(folder, shape)
    return load_idx_dataset(name, folder, shape)


def _data_folder(name: str, data_dir: str | Path | None) -> Path:
    if data_dir is None:
        raise DataError(f"dataset {name} needs --data-dir pointing at the folder with its files")
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise DataError(f"dataset {name} needs --data-dir: {folder} is not a folder")
    return folder
