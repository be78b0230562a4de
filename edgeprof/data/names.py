"""The names the data layer owns: data sets, degrees of personalization, splits. Torch-free and import-free, so
the run config (:mod:`edgeprof.config`) checks a name against this list without loading any data code."""

from __future__ import annotations

#: every dataset name :func:`edgeprof.data.load_dataset` accepts
DATASETS = ("digits", "synthetic", "mnist", "fashion-mnist", "emnist", "cifar10", "omniglot")
#: (classes, samples) of each file or bundled data set as its loader reads it whole (official train and test
#: parts together; ``synthetic`` takes the run's own settings): the most a Flower node may claim
#: (:mod:`edgeprof.flower.node_checks`)
DATASET_SIZES = {"digits": (10, 1_797), "mnist": (10, 70_000), "fashion-mnist": (10, 70_000),
                 "emnist": (62, 814_255), "cifar10": (10, 60_000), "omniglot": (1_623, 32_460)}
#: the datasets read from files under ``data_dir``
FILE_DATASETS = ("mnist", "fashion-mnist", "emnist", "cifar10", "omniglot")
#: degrees of personalization (:func:`edgeprof.data.partition.partition`)
DEGREES = ("high", "medium", "none", "group")
#: how the data is split and clients sampled: ``balanced`` (classes dealt from a balanced stream, train and test
#: pooled and split 25% per class per client, r = round(pi*I)) or ``paper`` (the PFLEGO authors' reference code:
#: classes drawn per client independently, the official test split dealt to test sets, r = int(I*pi));
#: see :mod:`edgeprof.data.partition` and :func:`edgeprof.algorithms.participants.clients_per_round`
SPLITS = ("balanced", "paper")
