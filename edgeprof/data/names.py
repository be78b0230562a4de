"""The names the data layer owns: data sets, degrees of personalization, splits. Torch-free and import-free, so
the run config (:mod:`edgeprof.config`) checks a name against this list without loading any data code."""

from __future__ import annotations

#: every dataset name :func:`edgeprof.data.load_dataset` accepts
DATASETS = ("digits", "synthetic", "mnist", "fashion-mnist", "emnist", "cifar10", "omniglot")
#: the datasets read from files under ``data_dir``
FILE_DATASETS = ("mnist", "fashion-mnist", "emnist", "cifar10", "omniglot")
#: degrees of personalization (:func:`edgeprof.data.partition.partition`)
DEGREES = ("high", "medium", "none", "group")
#: how the data is split and clients sampled: ``balanced`` (classes dealt from a balanced stream, train and test
#: pooled and split 25% per class per client, r = round(pi*I)) or ``paper`` (the PFLEGO authors' reference code:
#: classes drawn per client independently, the official test split dealt to test sets, r = int(I*pi));
#: see :mod:`edgeprof.data.partition` and :func:`edgeprof.algorithms.participants.clients_per_round`
SPLITS = ("balanced", "paper")
