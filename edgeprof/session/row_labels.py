"""Labels on the rows of a monitor's report: those that name a report column fill it, the others are JSON.

``edgeprof.monitor(labels={...})`` and ``mon.window(name, **labels)`` take any labels. One named after a report
column in :data:`LABEL_COLUMNS` fills that column (checked against the column's type: ``round=3`` is a whole
number), so ``summary`` and the dashboard read it as they read ``edgeprof measure``'s rows; every other label
goes into the ``labels`` column as compact JSON; a label named after a column the monitor fills itself
(``wall_s``, ``kind``, ``window``, a meter's ``<column>_j``) is refused, since it would overwrite a measurement.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any, Mapping

from edgeprof.errors import MonitorError

#: labels that fill the report column of their name, and the type of its cells
LABEL_COLUMNS: Mapping[str, type] = {
    "algo": str, "engine": str, "dataset": str, "backbone": str, "host": str,
    "tau": int, "seed": int, "round": int, "client": int, "n_samples": int, "n_participants": int,
    "train_loss": float, "test_accuracy": float,
}


def _plain(value: Any) -> Any:
    """A numpy number (``np.float32(0.9)``, a 0-d array such as ``loss.numpy()``) as the Python number it holds; any
    other value as it is. A float narrower than Python's is its shortest decimal (``np.float32(0.1)`` is 0.1, not
    the 0.10000000149011612 its bits widen to)."""
    import numpy as np

    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.floating) and value.dtype.itemsize < 8:
        return float(str(value))
    if isinstance(value, np.generic):
        plain = value.item()
        return plain if isinstance(plain, (str, int, float, bool)) else value
    return value


def _label_cell(key: str, value: Any) -> str:
    from edgeprof.report.writer import RESULT_COLUMNS

    kind = LABEL_COLUMNS[key]
    try:
        if kind is str:
            if not isinstance(value, str) or not value:
                raise TypeError
            return value
        if isinstance(value, bool):
            raise TypeError
        if kind is int:
            return str(operator.index(value))
        number = float(value)
        if not math.isfinite(number) and key not in RESULT_COLUMNS:  # a diverged run's loss is a result
            raise ValueError
        return f"{number:.6g}"
    except (TypeError, ValueError):
        what = {str: "a non-empty string", int: "a whole number",
                float: "a number" if key in RESULT_COLUMNS else "a finite number"}[kind]
        raise MonitorError(f"label {key}={value!r} fills the report column {key!r}: it must be {what}") from None


def split_labels(labels: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(cells of the report columns the labels name, the other labels); MonitorError for a bad label."""
    from edgeprof.report.schema import CORE_COLUMNS, GENERIC_COLUMNS, domain_columns

    reserved = (set(CORE_COLUMNS) | set(GENERIC_COLUMNS) | set(domain_columns())) - set(LABEL_COLUMNS)
    cells, other = {}, {}
    for key, value in labels.items():
        value = _plain(value)
        if not isinstance(key, str) or not key:
            raise MonitorError(f"label names are non-empty strings, got {key!r}")
        if key in LABEL_COLUMNS:
            cells[key] = _label_cell(key, value)
        elif key in reserved:
            raise MonitorError(f"label {key!r} names a column the monitor fills itself; choose another name")
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            raise MonitorError(f"label {key}={value!r}: label values are strings, numbers, booleans or None"
                               + (" (a tensor's or array's number: its .item())" if hasattr(value, "item") else ""))
        else:
            other[key] = value
    return cells, other


def labels_cell(other: Mapping[str, Any]) -> str:
    """The ``labels`` cell: the labels that name no column, as compact JSON with sorted keys ('' for none); a number
    that is not finite (a diverged loss) as the string ``"nan"``, ``"inf"`` or ``"-inf"``, which JSON can hold."""
    def finite(value: Any) -> Any:
        return str(value) if isinstance(value, float) and not math.isfinite(value) else value

    return json.dumps({k: finite(v) for k, v in other.items()}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False) if other else ""
