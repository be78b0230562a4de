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
import logging
import math
from pathlib import Path
from typing import Iterable, Mapping, Optional

from edgeprof.errors import ReportError
from edgeprof.report.writer import Report, ReportWriter

_log = logging.getLogger("edgeprof")

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
    """Write ``<run>.trace.parquet`` from the CSV (typed columns) and remove the CSV; the Parquet file's path.

    The Parquet file is written whole or not at all (:mod:`edgeprof.atomic`); the CSV goes only once it is."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from edgeprof.atomic import write_bytes

    target = Path(str(csv_path).removesuffix(".csv") + ".parquet")
    table = pacsv.read_csv(csv_path, convert_options=pacsv.ConvertOptions(
        column_types=_arrow_types(), strings_can_be_null=False, quoted_strings_can_be_null=False))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_bytes(target, sink.getvalue().to_pybytes())
    csv_path.unlink()
    return target


def trace_file(report_csv: Path, sidecar: Mapping) -> Optional[Path]:
    """The trace file a report's sidecar names (None: the sidecar names none). The sidecar's reader
    (:func:`edgeprof.report.sidecar.usable_sidecar`) keeps a ``trace`` section only where ``file`` is a file name."""
    section = sidecar.get("trace")
    if not isinstance(section, Mapping) or not isinstance(section.get("file"), str):
        return None
    return Path(report_csv).parent / Path(section["file"]).name


def trace_files_beside(report_csv: Path) -> list[Path]:
    """The trace files a run of this report writes that are on disk (``<run>.trace.parquet``, ``<run>.trace.csv``)."""
    csv_path = trace_csv_path(report_csv)
    return [p for p in (csv_path.with_suffix(".parquet"), csv_path) if p.is_file()]


#: what a reader says of a report whose whole sidecar names no trace: a run of the CLI's, and one of your own code
#: (:func:`edgeprof.monitor`, whose sidecar has a ``monitor`` section)
NO_TRACE = "was run without --trace: no power trace to show (run it again with --trace, e.g. edgeprof measure --trace)"
NO_TRACE_MONITOR = ("was run without a power trace: no power trace to show (record one with "
                    "edgeprof.monitor(..., trace_hz=50))")


def of_own_code(report: Report) -> bool:
    """Whether the report is one of your own code (written by :func:`edgeprof.monitor`: its sidecar has a
    ``monitor`` section), not of a run of the CLI."""
    return isinstance(report.sidecar.get("monitor"), Mapping)


def _traced_by_config(sidecar: Mapping) -> bool:
    config = sidecar.get("config")
    energy = config.get("energy") if isinstance(config, dict) else None
    return isinstance(energy, dict) and bool(energy.get("trace_hz"))


def _sidecar_state(report: Report) -> str:
    """'' for a whole sidecar, else what is wrong with it, as ``its sidecar is damaged (...)``."""
    if not report.path.with_suffix(".json").is_file():
        return f"there is no sidecar {report.path.with_suffix('.json').name}"
    return "its sidecar is damaged (a note above says how)" if report.sidecar_problem else ""


def locate(report: Report) -> tuple[Optional[Path], str]:
    """The report's trace file and, where its sidecar does not name it, why the one beside the report is read
    (the run did not finish: its sidecar still says ``running``; the sidecar is damaged or missing). (None, why)
    where there is none: "run without --trace" only where a whole sidecar says so."""
    named = trace_file(report.path, report.sidecar)
    if named is not None:
        return named, ""
    beside, state = trace_files_beside(report.path), _sidecar_state(report)
    running = report.sidecar.get("status") == "running"
    if beside:
        why = state or ("the run did not finish (its sidecar still says running: it was stopped before its end)"
                        if running else "its sidecar names no trace")
        return beside[0], f"{why}: reading the trace file beside the report, {beside[0].name}"
    if state:
        return None, f"has no trace file beside it, and {state}: whether it was run with --trace is unknown"
    if running:
        return None, "did not finish (its sidecar still says running) and left no trace file beside it"
    if _traced_by_config(report.sidecar):
        return None, f"was run with --trace, but its trace file is missing (no {report.path.stem}.trace.* beside it)"
    return None, NO_TRACE_MONITOR if of_own_code(report) else NO_TRACE


def trace_hz(report: Report) -> Optional[float]:
    """The trace's sample rate: the sidecar's ``trace.hz``, else the run's ``--trace-hz`` setting; None when neither
    is a number above zero."""
    section, config = report.sidecar.get("trace"), report.sidecar.get("config")
    energy = config.get("energy") if isinstance(config, dict) else None
    for value in (section.get("hz") if isinstance(section, dict) else None,
                  energy.get("trace_hz") if isinstance(energy, dict) else None):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return float(value)
    return None


#: the columns a trace must have (``window``, ``column``, ``resolved`` and ``flag`` are younger: see :data:`DEFAULTS`)
REQUIRED = (*LABELS, "row", "phase", "t_s", "dt_s", "domain", "in_total", "w", "method", "short_phase")
_TEXTS = ("run_id", "algo", "kind", "client", "window", "phase", "domain", "column", "method", "flag")
_FLAGS = ("in_total", "short_phase", "resolved")


def _whole(value, name: str, *, empty: bool = False) -> Optional[int]:
    """A whole-number cell (``empty``: '' or null reads as None); ValueError naming the cell otherwise."""
    if value is None or value == "":
        if empty:
            return None
        raise ValueError(f"{name} is empty")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r} is not a number") from None
    if not math.isfinite(number) or number != int(number) or number < 0 or (name in _FLAGS and number > 1):
        raise ValueError(f"{name} = {value!r} is not {'0 or 1' if name in _FLAGS else 'a whole number >= 0'}")
    return int(number)


def _typed(raw: Mapping, text: bool) -> dict:
    """One trace row, typed and checked (ValueError naming the first bad cell): whole numbers, finite times, an
    interval length >= 0, text in the text columns; watts NaN where empty (``text``: a CSV row, whose cells are
    all strings unless its line was torn or extended)."""
    if None in raw or (text and any(v is None for v in raw.values())):
        raise ValueError("wrong number of cells (a torn or extended line)")
    row = {c: raw.get(c, DEFAULTS.get(c, "")) for c in (*TRACE_COLUMNS, *(k for k in raw if k not in TRACE_COLUMNS))}
    for c in _TEXTS:
        row[c] = "" if row[c] is None else row[c] if isinstance(row[c], str) else str(row[c])
    for c in ("tau", "round"):  # empty in a monitor's own windows
        row[c] = _whole(row[c], c, empty=True)
    for c in ("row", *_FLAGS):
        row[c] = _whole(row[c], c)
    for c in ("t_s", "dt_s", "w"):
        try:
            row[c] = math.nan if row[c] in (None, "") else float(row[c])
        except (TypeError, ValueError):
            raise ValueError(f"{c} = {raw.get(c)!r} is not a number") from None
        if c != "w" and not (math.isfinite(row[c]) and row[c] >= 0):
            raise ValueError(f"{c} = {raw.get(c)!r} is not a finite number >= 0")
    return row


def _invalid(row: dict) -> bool:
    """Read as invalid (no watts, method ``invalid``) watts that are not a number, or below zero with no ``flag``
    (the writer flags every negative power it writes); True when the row was changed."""
    w = row["w"]
    if (math.isfinite(w) and (w >= 0 or row["flag"])) or (math.isnan(w) and row["method"] == "invalid"):
        return False
    row["w"], row["method"] = math.nan, "invalid"
    return True


def _raw_rows(path: Path) -> list[dict]:
    """The rows of a trace file as stored (ReportError: not readable, or not an edgeprof trace)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ReportError(f"reading {path.name} needs pyarrow: pip install 'edgeprof[trace]'") from err
        try:
            table = pq.read_table(path)
        except Exception as err:  # a damaged file: pyarrow's own error types vary by version
            raise ReportError(f"cannot read trace {path}: {' '.join(str(err).split())[:200]!r}") from err
        _check_columns(path, table.column_names)
        return table.to_pylist()
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            _check_columns(path, reader.fieldnames or ())
            return list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ReportError(f"cannot read trace {path}: {getattr(err, 'strerror', None) or err}") from err


def _check_columns(path: Path, columns) -> None:
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise ReportError(f"{path} is not an edgeprof trace (no {', '.join(missing)} column"
                          f"{'s' if len(missing) > 1 else ''})")


def read_trace(path: Path) -> list[dict]:
    """The rows of a trace file (Parquet or CSV), typed: floats (NaN for an invalid interval's watts), ints.

    Damaged rows (a torn last line, a cell of the wrong type, a time that is not finite or is below zero) are
    skipped and counted in one note; watts that are not a number, or below zero with no ``flag``, are read as
    ``invalid`` (no watts: never summed, never a peak) and counted in one note. ReportError (exit 7) for a file
    that is missing, unreadable, not an edgeprof trace, or left with no usable row.
    """
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"trace file {path} is missing")
    raw = _raw_rows(path)
    rows, bad, invalid = [], [], []
    for number, r in enumerate(raw):
        try:
            rows.append(_typed(r, path.suffix != ".parquet"))
        except (TypeError, ValueError) as err:
            bad.append(f"row {number}: {err}")
            continue
        if _invalid(rows[-1]):
            invalid.append(f"row {number}: w = {r.get('w')!r}")
    if raw and not rows:
        raise ReportError(f"trace {path} has no usable row ({len(raw)} rows, all damaged; {bad[0]})")
    if bad:
        _log.warning(f"{path.name}: skipped {len(bad)} damaged row(s) of {len(raw)} ({bad[0]}"
                     f"{'; ...' if len(bad) > 1 else ''})")
    if invalid:
        _log.warning(f"{path.name}: read {len(invalid)} interval(s) as invalid, their watts not a number or below "
                     f"zero with no flag: no watts, left out of means and peaks ({invalid[0]}"
                     f"{'; ...' if len(invalid) > 1 else ''})")
    return rows
