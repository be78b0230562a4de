"""What a node sends, checked before the server uses it: its roll-call answer, a training reply's numbers, an
evaluation's scores (issue 34: nothing a node sends can crash the server or steer the federation).

Every value is untrusted: it must be a finite number of the right kind (a whole number where a count is meant),
in range for the run (:class:`NodeLimits`), and consistent with what the node said before. A value that fails
is a :class:`RejectedReply` whose message is the one line the server logs and records; the node (or its reply)
is left out, and nothing another client contributed changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from flwr.app import ConfigRecord, Message, MetricRecord

from edgeprof.data.names import DATASET_SIZES, DATASETS

METRICS_KEY = "metrics"
#: Flower's own key for a client's number of training examples (stock strategies and metric aggregation
#: read it); ``n-samples`` is what edgeprof replies used before, still read
NUM_EXAMPLES = "num-examples"
OLD_NUM_EXAMPLES = "n-samples"
#: the longest host name a node may report (it becomes a report cell)
MAX_HOST_CHARS = 200
#: the roll-call record (and its key) in which a node names its machine; ``device``, its old name, is read from a node
#: that sends no ``host`` (an older edgeprof's)
HOST_RECORD, OLD_HOST_RECORD = "host", "device"
#: the roll-call record in which a node says which data it trains on (:func:`data_of`), and the longest folder name
DATA_RECORD = "data"
MAX_FOLDER_CHARS = 1000
#: where a node's data comes from: its partition of the run's data set, or its operator's own folder
DATA_SOURCES = ("partition", "own")


class RejectedReply(ValueError):
    """A reply or roll-call answer that is not used; the message is the logged reason."""


@dataclass
class NodeInfo:
    """What a node said about itself: its partition, data size, classes and host name."""

    partition_id: int
    node_id: int
    n_train: int
    num_classes: int = 0
    host: str = ""
    #: which data the node trains on, as :func:`data_of` read it (empty from a node that does not say)
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class NodeLimits:
    """What a node may claim in a run: a partition id below ``num_partitions``, K_i up to ``max_classes``, N_i
    (and a test set) up to ``max_samples``."""

    num_partitions: int
    max_classes: int
    max_samples: int

    @classmethod
    def of(cls, cfg, total_samples: int = 0) -> "NodeLimits":
        """The run's limits: I partitions; K_i and N_i at most the run's data set's class count and size (a
        partition is part of it), N_i also at most ``total-samples`` when set."""
        classes, samples = ((cfg.synthetic_classes, cfg.synthetic_samples) if cfg.dataset == "synthetic"
                            else DATASET_SIZES[cfg.dataset])
        return cls(cfg.clients, classes, min(samples, total_samples) if total_samples else samples)


def num_examples_key(metrics) -> str:
    """``num-examples``, or the old ``n-samples`` of a reply from an earlier edgeprof (a missing key is
    reported under Flower's name)."""
    return OLD_NUM_EXAMPLES if NUM_EXAMPLES not in metrics and OLD_NUM_EXAMPLES in metrics else NUM_EXAMPLES


def number(metrics: Any, key: str, low: float, high: float, what: str) -> float:
    """``metrics[key]`` if it is a finite real number in [low, high]; RejectedReply saying ``what`` it must be."""
    if key not in metrics:
        raise RejectedReply(f"metric {key!r} missing")
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise RejectedReply(f"{key} must be {what}, got {value!r}")
    return float(value)


def whole_number(metrics: Any, key: str, low: int, high: int, what: str) -> int:
    """``metrics[key]`` as an int if it is a whole number in low..high; RejectedReply saying ``what`` it must be."""
    value = number(metrics, key, low, high, what)
    if value != int(value):
        raise RejectedReply(f"{key} must be {what}, got {metrics[key]!r}")
    return int(value)


def metrics_of(msg: Message) -> MetricRecord:
    """The reply's MetricRecord under ``metrics``; RejectedReply for an error reply or any other content."""
    if msg.has_error():
        raise RejectedReply(f"client error: {msg.error.reason}")
    metrics = msg.content.get(METRICS_KEY) if METRICS_KEY in msg.content else None
    if not isinstance(metrics, MetricRecord):
        raise RejectedReply(f"no MetricRecord under {METRICS_KEY!r}")
    return metrics


def read_node_info(msg: Message, limits: NodeLimits) -> NodeInfo:
    """A roll-call answer as a NodeInfo, every value checked against ``limits``; RejectedReply if one fails.

    ``num-classes`` may be absent (an earlier edgeprof's answer: 0); present, it is 1..max_classes."""
    metrics = metrics_of(msg)
    pid = whole_number(metrics, "partition-id", 0, limits.num_partitions - 1,
                       f"a partition id in 0..{limits.num_partitions - 1}")
    n = whole_number(metrics, num_examples_key(metrics), 1, limits.max_samples,
                     f"a positive integer up to {limits.max_samples}")
    k = 0 if "num-classes" not in metrics else whole_number(
        metrics, "num-classes", 1, limits.max_classes, f"a class count in 1..{limits.max_classes} (the run's data set)")
    return NodeInfo(pid, msg.metadata.src_node_id, n, k, host_of(msg), data_of(msg, limits))


def host_of(msg: Message) -> str:
    """The host name a roll-call answer carries in its :data:`HOST_RECORD` (an older node's
    :data:`OLD_HOST_RECORD`), "" without one; RejectedReply unless it is short printable text."""
    key = next((k for k in (HOST_RECORD, OLD_HOST_RECORD) if k in msg.content), None)
    if key is None:
        return ""
    record = msg.content[key]
    host = record.get(key, "") if isinstance(record, ConfigRecord) else None
    if not isinstance(host, str) or len(host) > MAX_HOST_CHARS or not host.isprintable():
        raise RejectedReply(f"{key} must be printable text of at most {MAX_HOST_CHARS} characters")
    return host


def data_of(msg: Message, limits: NodeLimits) -> dict:
    """Which data a roll-call answer says its node trains on (``{}`` without a ``data`` record, an earlier
    edgeprof's answer): ``dataset`` (a data set edgeprof names), ``source`` (``partition`` or ``own``), ``folder``
    (printable text, '' for a partition), ``n-test`` (a whole number up to the run's limit) and ``sha256`` (64 hex
    digits: the digest of the arrays it loaded); RejectedReply naming the first value that is not so."""
    if DATA_RECORD not in msg.content:
        return {}
    record = msg.content[DATA_RECORD]
    if not isinstance(record, ConfigRecord):
        raise RejectedReply(f"no ConfigRecord under {DATA_RECORD!r}")
    dataset, source, folder, digest = (record.get(k, "") for k in ("dataset", "source", "folder", "sha256"))
    if dataset not in DATASETS:
        raise RejectedReply(f"data: dataset must be one of {', '.join(DATASETS)}")
    if source not in DATA_SOURCES:
        raise RejectedReply(f"data: source must be one of {', '.join(DATA_SOURCES)}")
    if not isinstance(folder, str) or len(folder) > MAX_FOLDER_CHARS or not folder.isprintable():
        raise RejectedReply(f"data: folder must be printable text of at most {MAX_FOLDER_CHARS} characters")
    if not isinstance(digest, str) or re.fullmatch(r"[0-9a-f]{64}", digest) is None:
        raise RejectedReply("data: sha256 must be 64 hexadecimal digits")
    n_test = whole_number(record, "n-test", 0, limits.max_samples, f"a whole number up to {limits.max_samples}")
    return {"dataset": dataset, "source": source, "folder": folder, "n_test": n_test, "sha256": digest}


def read_evaluation(metrics: MetricRecord, n_train: int, limits: NodeLimits) -> tuple[float, float, int, int]:
    """(loss, accuracy, n_train, n_test) of a client's evaluation metrics; RejectedReply unless the loss is
    finite and >= 0, the accuracy in [0, 1], n-train the node's N_i and n-test a positive integer."""
    loss = number(metrics, "eval-train-loss", 0.0, math.inf, "a finite loss >= 0")
    accuracy = number(metrics, "eval-test-accuracy", 0.0, 1.0, "an accuracy in [0, 1]")
    n = whole_number(metrics, "eval-n-train", n_train, n_train, f"this node's num-examples ({n_train})")
    n_test = whole_number(metrics, "eval-n-test", 1, limits.max_samples,
                          f"a positive integer up to {limits.max_samples}")
    return loss, accuracy, n, n_test


#: the cells of a node's profile that are text (its labels and the measured ``device_kind``, ``short_phases``)
PROFILE_TEXT = ("host", "carbon_source", "message_type", "device_kind", "short_phases")
#: the longest text cell of a node's profile other than its host (a report cell: its reader's own limit)
MAX_PROFILE_TEXT = 4096


def checked_profile(profile: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A node's profile (the cells its mod measured, :mod:`edgeprof.flower.energy`) as the server may write it, and
    one phrase for each cell it left out or marked, in the order found (none: the profile as it came).

    - The report's own cells that name a row (``round``, ``client``, ``run_id``, ``algo``, ...) are the server's:
      a node that sends them is not believed (they are left out).
    - A measured number (seconds, CPU seconds, MiB, joules, grams, ``short_window``) must be a finite real number
      >= 0 (``short_window`` 0 or 1): else it is left out.
    - A method (``energy_method``, ``<column>_method``) must be ``invalid`` or methods a meter names
      (:data:`edgeprof.meters.base.METHODS`, joined with ``+``): else it is ``invalid``.
    - Joules must say how they were obtained: ``<column>_j`` whose method is not a meter's is left out, and
      ``energy_j``'s with the row's ``carbon_g`` and its phases' joules (they are parts of that total).
    - Text must be printable, at most :data:`MAX_HOST_CHARS` characters for ``host`` and
      :data:`MAX_PROFILE_TEXT` for the others: else it is left out.
    """
    from edgeprof.meters import registry
    from edgeprof.meters.base import INVALID, METHODS
    from edgeprof.report.schema import CORE_COLUMNS, GENERIC_COLUMNS, MEASURED_COLUMNS

    cells, problems = dict(profile), []

    def leave_out(key: str, why: str) -> None:
        problems.append(f"{key} = {_shown(cells.pop(key))} {why}")

    owned = [k for k in cells if k in CORE_COLUMNS or k in GENERIC_COLUMNS]
    owned = [k for k in owned if k not in MEASURED_COLUMNS and k != "host"]
    if owned:
        problems.append(f"{', '.join(owned)}: the server's own cells, not a node's to say")
        for key in owned:
            del cells[key]
    for key in [k for k in cells if k in PROFILE_TEXT]:
        value, most = cells[key], MAX_HOST_CHARS if key == "host" else MAX_PROFILE_TEXT
        if not isinstance(value, str) or len(value) > most or not value.isprintable():
            leave_out(key, f"is not printable text of at most {most} characters")
    joules = {"energy_j": "energy_method", **{f"{c}_j": f"{c}_method" for c in registry.report_columns()}}
    methods = [m for m in dict.fromkeys(joules.values()) if m in cells]
    for key in methods:
        value = cells[key]
        if value != INVALID and not _methods_of(value, METHODS):
            problems.append(f"{key} = {_shown(value)} is not a method a meter names: {INVALID}")
            cells[key] = INVALID
    numbers = ({k for k in MEASURED_COLUMNS if k not in PROFILE_TEXT and not k.endswith("_method")}
               | {k for k in cells if k.endswith(("_s", "_j"))})  # a phase's seconds, CPU seconds and joules
    for key in [k for k in cells if k in numbers]:
        try:
            value = number(cells, key, 0.0, math.inf, "a finite number >= 0")
        except RejectedReply:
            leave_out(key, "is not a finite number >= 0")
            continue
        if key == "short_window" and value not in (0, 1):
            leave_out(key, "is not 0 or 1")
    phase_joules = [k for k in cells if k.endswith("_j") and k not in joules and k not in MEASURED_COLUMNS]
    for key, method in joules.items():
        parts = [key] + (["carbon_g"] + sorted(phase_joules) if key == "energy_j" else [])
        left = [k for k in parts if k in cells]
        if not left or _methods_of(cells.get(method), METHODS):
            continue
        said = f"is {_shown(cells[method])}" if method in cells else "is missing"
        problems.append(f"{', '.join(left)}: joules that do not say how they were obtained ({method} {said})")
        for k in left:
            del cells[k]
    return cells, problems


def _methods_of(value: Any, methods: tuple[str, ...]) -> bool:
    """Whether ``value`` is one method a meter names, or several joined with ``+`` (a total over domains)."""
    return isinstance(value, str) and bool(value) and all(m in methods for m in value.split("+"))


def _shown(value: Any) -> str:
    """A node's value as a log line shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
