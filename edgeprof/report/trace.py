"""The power trace file beside a report: one row per interval between samples and per domain.

``--trace`` (:attr:`edgeprof.config.EnergySettings.trace_hz`) makes a run write ``<run>.trace.csv`` while it runs
(whole rows, one block per window, so an interrupted run keeps the trace of every window it finished), and at
its end turn it into ``<run>.trace.parquet`` where pyarrow is installed (the ``trace`` extra); the sidecar's
``trace`` section names the file, its format, rate, intervals and rows. Columns (:data:`TRACE_COLUMNS`):

``run_id, algo, tau, round, kind, client, window``
    the report row the window wrote (``row``: its index among the report's data rows, from 0) and the window's
    name (``client``, ``server``, or the monitor API's own names)
``phase``
    the window's phase during the interval ("" outside any phase)
``t_s, dt_s``
    the interval's end, seconds since the window started, and its length
``domain, column, in_total``
    the meter domain, the report column it adds into, and whether it counts towards ``energy_j``
``w, method``
    mean watts over the interval and how they were obtained (``counter``, ``integrated_power``, ``estimate``;
    ``invalid`` with no watts for an implausible reading)
``short_phase``
    1 when the phase lasted less than two sample periods in its window
``resolved``
    1 when the interval alone spans what its meter resolves (two of its update periods); 0 when ``w`` is the mean
    power of the span of intervals around it that does (:mod:`edgeprof.measure.trace`): drawn hollow, never as the
    interval's own measurement
``flag``
    why ``w`` cannot be a power the domain drew ("" when it can): ``negative power``, ``above the N W power limit``

Summing ``w * dt_s`` over a window's rows of one domain gives the window's ``<domain>`` energy from its edges.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable, Mapping, Optional

from edgeprof.errors import ReportError
from edgeprof.report.writer import ReportWriter

TRACE_COLUMNS = ("run_id", "algo", "tau", "round", "kind", "client", "window", "row", "phase", "t_s", "dt_s", "domain",
                 "column", "in_total", "w", "method", "short_phase", "resolved", "flag")
#: the columns of a trace written before ``resolved`` and ``flag`` were added (read as resolved, unflagged)
EARLIER_COLUMNS = TRACE_COLUMNS[:-2]
#: what an earlier trace's rows read as in the columns it lacks
DEFAULTS = {"resolved": 1, "flag": ""}
#: the report row's cells a trace row repeats
LABELS = ("run_id", "algo", "tau", "round", "kind", "client")
_FLOATS = ("t_s", "dt_s", "w")
_INTS = ("tau", "round", "row", "in_total", "short_phase", "resolved")


def trace_csv_path(report_csv: Path) -> Path:
    return Path(report_csv).with_suffix(".trace.csv")


def _g(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.9g}"


class TraceWriter:
    """Appends the trace of each window as one block of whole rows (:class:`ReportWriter` underneath)."""

    def __init__(self, path: Path, hz: float) -> None:
        self.hz = float(hz)
        self.intervals = 0
        self._writer = ReportWriter(path, TRACE_COLUMNS)

    @property
    def path(self) -> Path:
        return self._writer.path

    @property
    def rows_written(self) -> int:
        return self._writer.rows_written

    def write_window(self, trace: Iterable, base: Mapping[str, object], row_index: int, *, window: str) -> None:
        """The rows of one window's trace (:class:`edgeprof.measure.trace.TraceRow`), labelled as its report row."""
        labels = {k: base.get(k, "") for k in LABELS}
        rows = [{**labels, "window": window, "row": row_index, "phase": r.phase, "t_s": _g(r.t_s), "dt_s": _g(r.dt_s),
                 "domain": r.domain, "column": r.column, "in_total": int(r.in_total), "w": _g(r.w),
                 "method": r.method, "short_phase": int(r.short_phase), "resolved": int(r.resolved),
                 "flag": r.flag} for r in trace]
        self.intervals += len({r["t_s"] for r in rows})
        self._writer.write_rows(rows)

    def close(self) -> None:
        self._writer.close()

    def finish(self) -> dict:
        """Close the CSV and, where pyarrow is installed, turn it into Parquet; the sidecar's ``trace`` section.
        A CSV that cannot be converted stays (it is whole), and ``notes`` say why."""
        self.close()
        path, fmt, notes = self.path, "csv", []
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            pass
        else:
            try:
                path, fmt = to_parquet(self.path), "parquet"
            except Exception as err:  # pyarrow's own error types vary by version
                notes.append(f"not converted to Parquet: {err}")
        return {"file": path.name, "format": fmt, "hz": self.hz, "intervals": self.intervals,
                "rows": self.rows_written, "columns": list(TRACE_COLUMNS), "notes": notes}


def _arrow_types():
    import pyarrow as pa

    types = {c: pa.string() for c in TRACE_COLUMNS}
    types.update({c: pa.float64() for c in _FLOATS})
    types.update({c: pa.int64() for c in _INTS})
    return types


def to_parquet(csv_path: Path) -> Path:
    """Write ``<run>.trace.parquet`` from the CSV (typed columns) and remove the CSV; the Parquet file's path."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    target = Path(str(csv_path).removesuffix(".csv") + ".parquet")
    table = pacsv.read_csv(csv_path, convert_options=pacsv.ConvertOptions(
        column_types=_arrow_types(), strings_can_be_null=False, quoted_strings_can_be_null=False))
    tmp = target.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(target)
    csv_path.unlink()
    return target


def trace_file(report_csv: Path, sidecar: Mapping) -> Optional[Path]:
    """The trace file a report's sidecar names (None: the run was not traced)."""
    section = sidecar.get("trace")
    if not section:
        return None
    return Path(report_csv).parent / section["file"]


def read_trace(path: Path) -> list[dict]:
    """The rows of a trace file (Parquet or CSV), typed: floats (NaN for an invalid interval's watts), ints."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"trace file {path} is missing")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ReportError(f"reading {path.name} needs pyarrow: pip install 'edgeprof[trace]'") from err
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as err:  # a damaged file: pyarrow's own error types vary by version
            raise ReportError(f"cannot read trace {path}: {err}") from err
        for r in rows:
            if r["w"] is None:
                r["w"] = math.nan
            for column, value in DEFAULTS.items():
                r.setdefault(column, value)
        return rows
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) not in (TRACE_COLUMNS, EARLIER_COLUMNS):
                raise ReportError(f"{path} is not an edgeprof trace (its header is not {', '.join(TRACE_COLUMNS)})")
            rows = list(reader)
        for r in rows:
            for column, value in DEFAULTS.items():
                r.setdefault(column, str(value))
            for c in _FLOATS:
                r[c] = math.nan if r[c] == "" else float(r[c])
            for c in _INTS:
                r[c] = int(r[c]) if r[c] != "" else None  # tau and round are empty in a monitor's own windows
    except (OSError, ValueError, KeyError) as err:
        raise ReportError(f"cannot read trace {path}: {err}") from err
    return rows
