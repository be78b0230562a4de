"""Append-and-flush CSV writer, atomic JSON sidecar, and the reader that loads both back.

The CSV is created only once a run has passed validation and loaded its data, its header is written at
once, and every row is written to the file as its window ends: a run killed midway leaves a valid CSV
holding every finished round. Rows are whole or absent: each row is one ``os.write`` loop on an unbuffered
file, and when the disk fills mid-row the file is truncated back to the last complete row before the
:class:`OutputError` is raised; a report whose header cannot even be written is removed.

The sidecar is replaced atomically (:mod:`edgeprof.atomic`: a temporary file, fsync, ``os.replace``), first
with ``"status": "running"`` and finally with ``"complete"``, ``"interrupted"`` (a signal) or ``"failed"`` (an
error, with its reason). The ``running`` sidecar is padded with spaces (valid JSON) so that, when the disk is
full and no temporary file fits, the final sidecar can still be written in place over the space already held; a
temporary file is never left behind.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from edgeprof.atomic import make_folder, write_all as _write_all, write_bytes
from edgeprof.errors import OutputError, ReportError
from edgeprof.report.schema import ROW_KINDS
from edgeprof.signals import signals_held

_log = logging.getLogger("edgeprof")

#: spaces appended to a sidecar written with ``reserve=True``, for the final version to fit in place
SIDECAR_RESERVE_BYTES = 16384
#: the longest cell :func:`read_report` reads (the ``csv`` module's field size limit it reads with): the writer
#: refuses a longer one, so it never writes a row its reader rejects
MAX_CELL_CHARS = 131072
#: a sidecar larger than this, or nested deeper, is ignored by the readers (edgeprof's own are a few kB, 5 deep)
MAX_SIDECAR_BYTES = 8 * 1024 * 1024
MAX_SIDECAR_DEPTH = 32
#: the most digits of a whole number a sidecar may hold (Python's own limit on converting one is 4300)
MAX_SIDECAR_DIGITS = 64


class ReportWriter:
    """Writes the rows of one report, whole rows only; a context manager that closes the file."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self.rows_written = 0
        #: the first row whose training loss is not finite (round, kind, client, train_loss), None while none is
        self.diverged: dict | None = None
        try:
            self._file = open(self.path, "xb", buffering=0)
        except FileExistsError as err:
            raise OutputError(f"report {self.path} already exists; choose another --run-name") from err
        except OSError as err:
            raise OutputError(f"cannot create report {self.path}: {err.strerror}") from err
        self._good = 0  # bytes of the file that hold whole lines
        try:
            self._append(self._line(dict(zip(self.columns, self.columns))))
        except OutputError:
            self.close()
            self.path.unlink(missing_ok=True)  # no header, no report
            raise

    def _line(self, row: Mapping[str, object]) -> bytes:
        """One row as CSV bytes; OutputError for a cell longer than :data:`MAX_CELL_CHARS` (its reader's limit)."""
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"dict contains fields not in fieldnames: {', '.join(map(repr, sorted(unknown)))}")
        cells = ["" if row.get(c) is None else str(row.get(c, "")) for c in self.columns]
        for column, cell in zip(self.columns, cells):
            if len(cell) > MAX_CELL_CHARS:
                raise OutputError(f"the {column} cell of a row of {self.path.name} is {len(cell)} characters, more "
                                  f"than the {MAX_CELL_CHARS} a report's reader takes; the row is not written")
        buffer = io.StringIO()
        csv.writer(buffer).writerow(cells)
        return buffer.getvalue().encode("utf-8")

    def _append(self, data: bytes) -> None:
        fd = self._file.fileno()
        try:
            _write_all(fd, data)
        except OSError as err:
            try:
                os.ftruncate(fd, self._good)  # drop the torn part: the file ends with a whole row
                os.lseek(fd, self._good, os.SEEK_SET)
            except OSError:
                pass
            kept = "every complete row is kept" if self.rows_written else "no row was written"  # the header, first
            raise OutputError(f"cannot write report {self.path}: {err.strerror or err} ({kept})") from err
        self._good += len(data)

    def write(self, row: Mapping[str, object]) -> None:
        """Append one whole row to the file (or nothing, and OutputError, when it does not fit).

        The stop signals wait for the row (:func:`~edgeprof.signals.signals_held`): a Ctrl-C can neither tear it
        nor land between the bytes and the count the final sidecar reports (``rows``)."""
        line = self._line(row)
        with signals_held():
            self._append(line)
            self.rows_written += 1
        if self.diverged is None:
            self._watch_loss(row)

    def write_rows(self, rows: Sequence[Mapping[str, object]]) -> None:
        """Append several whole rows as one block (all or, with OutputError, none of them)."""
        if not rows:
            return
        data = b"".join(self._line(row) for row in rows)
        with signals_held():
            self._append(data)
            self.rows_written += len(rows)

    def _watch_loss(self, row: Mapping[str, object]) -> None:
        """Note the first round whose training loss is not finite: a diverged run is a result, not damage."""
        loss = row.get("train_loss")
        if row.get("kind") not in ("client", "eval") or loss in (None, ""):
            return
        try:
            finite = math.isfinite(float(loss))
        except (TypeError, ValueError):
            return
        if not finite:
            number = row.get("round")
            self.diverged = {"round": int(number) if str(number).isdecimal() else number, "kind": row.get("kind"),
                             "client": row.get("client"), "train_loss": str(loss)}
            _log.warning(f"the training loss stopped being finite at round {row.get('round')} ({loss}): the run "
                         "diverged; its rows and their energy are kept (sidecar: diverged)")

    def add_columns(self, names: Sequence[str]) -> None:
        """Extend the header with those of ``names`` it lacks, keeping every row written so far.

        For a monitor's report, whose phases are known only once the code enters them. The file is rewritten
        beside itself (the rows get empty cells in the new columns) and put in place atomically with
        ``os.replace``: an interrupted extension leaves the report as it was. OutputError when it fails.
        """
        new = tuple(dict.fromkeys(n for n in names if n not in self.columns))
        if not new:
            return
        columns = self.columns + new
        try:
            with open(self.path, "rb") as f:
                old = f.read(self._good).decode("utf-8")
            buffer = io.StringIO()
            out = csv.writer(buffer)
            out.writerow(columns)
            out.writerows(r + [""] * len(new) for r in list(csv.reader(io.StringIO(old, newline="")))[1:])
            data = buffer.getvalue().encode("utf-8")
            write_bytes(self.path, data)
        except OSError as err:
            raise OutputError(f"cannot add columns to report {self.path}: {err.strerror or err} (every complete "
                              f"row is kept)") from err
        self.close()
        try:
            self._file = open(self.path, "ab", buffering=0)
        except OSError as err:
            raise OutputError(f"cannot reopen report {self.path}: {err.strerror or err}") from err
        self.columns, self._good = columns, len(data)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "ReportWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rewrite_in_place(path: Path, data: bytes) -> bool:
    """Overwrite ``path`` with ``data`` inside the bytes it already holds; False if it does not fit."""
    try:
        if not path.is_file() or path.stat().st_size < len(data):
            return False
        with open(path, "r+b", buffering=0) as f:
            _write_all(f.fileno(), data)
            f.truncate(len(data))
        return True
    except OSError:
        return False


def write_sidecar(path: Path, data: Mapping, *, reserve: bool = False) -> None:
    """Write the JSON sidecar atomically; ``reserve`` pads it so a later version can replace it in place.

    When no temporary file fits (a full disk), the new content is written over the old file if it fits in
    the space that file holds; otherwise OutputError. The temporary file never stays behind.
    """
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    payload = (text + " " * (SIDECAR_RESERVE_BYTES if reserve else 0)).encode("utf-8")
    try:
        write_bytes(path, payload)
    except OSError as err:
        if not _rewrite_in_place(path, text.encode("utf-8")):
            raise OutputError(f"cannot write sidecar {path}: {err.strerror or err}") from err


def check_writable(folder: Path, *, keep: bool = True) -> Path:
    """Create the output folder if needed and prove a file can be written there; OutputError if not.

    ``keep=False`` (a check before a run's set-up, which may still fail: bad data, a bad backbone): the folders it
    had to create are removed again, so a run refused before its report leaves no empty folder behind; the run's
    own check (``keep=True``, as its report is opened) creates them for good."""
    folder = Path(folder)
    missing: list[Path] = []
    try:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
        make_folder(folder)
        probe = folder / f".edgeprof-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise OutputError(f"output folder {folder} is not writable: {reason}") from err
    finally:
        for created in missing if not keep else ():
            with contextlib.suppress(OSError):  # one another process filled meanwhile stays
                created.rmdir()
    return folder


@dataclass
class Report:
    """A report read back: rows as dicts of strings, the sidecar, and typed accessors."""

    path: Path
    columns: tuple[str, ...]
    rows: list[dict[str, str]]
    sidecar: dict = field(default_factory=dict)
    #: what was wrong with the sidecar, in one line ('' when it was read whole): missing, ignored (and why), or
    #: sections of the wrong shape left out
    sidecar_problem: str = ""

    def where(self, **equal: str) -> list[dict[str, str]]:
        """Rows whose columns equal the given values (compared as strings)."""
        return [r for r in self.rows if all(r.get(k) == str(v) for k, v in equal.items())]

    def host_of(self, row: Mapping[str, str]) -> str:
        """The machine that measured ``row``: its ``host`` column, else the sidecar's host name ('' if neither)."""
        host = self.sidecar.get("host") if isinstance(self.sidecar, dict) else None
        return row.get("host") or (str(host.get("hostname") or "") if isinstance(host, dict) else "")

    def values(self, column: str, rows: Iterable[Mapping[str, str]] | None = None) -> list[float]:
        """The non-empty cells of a numeric column as floats."""
        rows = self.rows if rows is None else rows
        return [float(r[column]) for r in rows if r.get(column, "") != ""]


#: columns every usable row has (a damaged report may lack others: they read as empty)
REQUIRED_COLUMNS = ("run_id", "algo", "kind")
#: result columns where NaN or infinity is a result (a diverged run), not damage
RESULT_COLUMNS = ("train_loss",)
#: columns that hold whole numbers when not empty
INTEGER_COLUMNS = ("tau", "seed", "round", "client", "n_samples", "n_participants", "short_window", "held_rounds")
#: report columns an older edgeprof wrote under another name -> today's name (:func:`read_report` renames them)
OLD_COLUMNS = {"device": "host"}
_TEXT_COLUMNS = ("run_id", "host", "algo", "engine", "dataset", "backbone", "kind", "eval_protocol", "window",
                 "labels", "device_kind", "short_phases")


def _is_numeric_column(name: str) -> bool:
    return name not in _TEXT_COLUMNS and not name.endswith("_method")


def _joule_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The columns of joules and carbon no meter reads below zero (``*_net_j``, net of idle power, can be)."""
    return tuple(c for c in columns if c == "carbon_g" or c.endswith("_j") and not c.endswith("_net_j"))


def _invalidate_negative(row: dict[str, str], columns: Sequence[str]) -> list[str]:
    """Empty the joules and grams below zero in a row and mark them ``invalid``, as the writer marks an implausible
    reading: ``<column>_method`` where the column has one (``energy_j``: ``energy_method``, and its
    ``energy_net_j`` and ``carbon_g`` emptied too). The cells changed, as ``energy_j = '-5'``."""
    from edgeprof.meters.base import INVALID

    changed = []
    for name in _joule_columns(columns):
        if row.get(name, "") == "" or float(row[name]) >= 0:
            continue
        changed.append(f"{name} = {row[name]!r}")
        row[name] = ""
        if name == "energy_j":
            row.update(energy_net_j="", carbon_g="")
        method = name[:-2] + "_method" if name != "energy_j" else "energy_method"
        if method in row:
            row[method] = INVALID
    return changed


def _row_problem(row: Mapping[str, object], columns: Sequence[str]) -> str | None:
    """Why a row read back is unusable (None when it is fine)."""
    if None in row or any(v is None for v in row.values()):
        return "wrong number of cells (a torn or extended line)"
    if any("\udc80" <= ch <= "\udcff" for v in row.values() for ch in v):  # undecodable bytes
        return "not UTF-8"
    if row.get("kind") not in ROW_KINDS:
        return f"kind {row.get('kind')!r} is not one of {', '.join(ROW_KINDS)}"
    for name in columns:
        value = row.get(name, "")
        if value == "" or not _is_numeric_column(name):
            continue
        try:
            number = float(value)
        except ValueError:
            return f"{name} = {value!r} is not a number"
        if (not math.isfinite(number) and name not in RESULT_COLUMNS) or (
                name in INTEGER_COLUMNS and number != int(number)):
            return f"{name} = {value!r} is not a {'whole' if name in INTEGER_COLUMNS else 'finite'} number"
        if number < 0 and name.endswith("_s"):  # seconds: a duration, or a time since the epoch
            return f"{name} = {value!r} is below zero, which no clock measures"
    return None


def _current_columns(fieldnames: tuple[str, ...], raw: list[dict]) -> tuple[tuple[str, ...], list[dict]]:
    """The header and rows with each of :data:`OLD_COLUMNS` renamed to today's name, where the report has no column
    of today's name (a report with both keeps both as written)."""
    renames = {old: new for old, new in OLD_COLUMNS.items() if old in fieldnames and new not in fieldnames}
    if not renames:
        return fieldnames, raw
    return (tuple(renames.get(c, c) for c in fieldnames),
            [{renames.get(k, k) if isinstance(k, str) else k: v for k, v in row.items()} for row in raw])


class _TooLong(ValueError):
    """A whole number in a sidecar with more digits than :data:`MAX_SIDECAR_DIGITS`."""


def _whole_number(text: str) -> int:
    if len(text.lstrip("-")) > MAX_SIDECAR_DIGITS:
        raise _TooLong(f"a whole number of {len(text.lstrip('-'))} digits (at most {MAX_SIDECAR_DIGITS})")
    return int(text)


def _depth(data: object) -> int:
    """How deep lists and objects nest in ``data`` (a scalar: 0), without recursion."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_SIDECAR_DEPTH:
                todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _parse_sidecar(path: Path) -> object:
    """The JSON of a sidecar; ValueError (or OSError) saying in a few words why it cannot be used."""
    with open(path, "rb") as f:
        data = f.read(MAX_SIDECAR_BYTES + 1)
    if len(data) > MAX_SIDECAR_BYTES:
        raise ValueError(f"larger than {MAX_SIDECAR_BYTES // 2**20} MiB")
    too_deep = ValueError(f"nested more than {MAX_SIDECAR_DEPTH} deep")
    try:
        parsed = json.loads(data.decode("utf-8"), parse_int=_whole_number)
    except RecursionError:
        raise too_deep from None
    except json.JSONDecodeError as err:
        raise ValueError(err.msg) from err
    if _depth(parsed) > MAX_SIDECAR_DEPTH:
        raise too_deep
    return parsed


def read_sidecar(path: Path) -> tuple[dict, str]:
    """The sidecar as a dict and what was wrong with it ('' when nothing was); a missing one is empty, a damaged
    one (not JSON, not an object, too large, nested too deep, a number too long to convert) is ignored, an older
    edgeprof's names are read as today's (:func:`edgeprof.report.sidecar.current_names`: ``device`` as ``host``), and
    sections of the wrong shape are left out (:func:`edgeprof.report.sidecar.usable_sidecar`), each with a note."""
    if not path.is_file():
        return {}, f"there is no sidecar {path.name}"
    try:
        data = _parse_sidecar(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        why = f"ignoring sidecar {path}: {(err.strerror if isinstance(err, OSError) else None) or err}"
        _log.warning(why)
        return {}, why
    if not isinstance(data, dict):
        why = f"ignoring sidecar {path}: a JSON {type(data).__name__}, not an object"
        _log.warning(why)
        return {}, why
    from edgeprof.report.sidecar import current_names, usable_sidecar

    data, why = usable_sidecar(current_names(data))
    if why:
        _log.warning(f"{path.name}: {why}")
    return data, why


def read_report(path: str | Path) -> Report:
    """Load a report CSV and, if present, its sidecar (same name, ``.json``).

    Damaged rows (a torn last line, cells that are not numbers where numbers belong, bytes that are not
    UTF-8, an unknown kind) are skipped and counted in one note; ReportError when no usable row is left, when
    the file is not an edgeprof report at all, or when there is no file (for a folder, the line names its CSVs).
    Joules (and grams CO2e) below zero, which no meter reads, are read as invalid (:func:`_invalidate_negative`)
    and counted in one note. A UTF-8 byte-order mark (a CSV saved by a spreadsheet) is skipped. A column an older
    edgeprof wrote under another name is read under today's (:data:`OLD_COLUMNS`: ``device`` as ``host``). The
    sidecar is read as :func:`read_sidecar` says.
    """
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".csv")
    try:
        if path.is_dir():
            raise ReportError(f"{path} is a folder, not a report: name its report CSVs ({path / '*.csv'})")
        if not path.is_file():
            raise ReportError(f"no report at {path}")
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    except OSError as err:
        raise ReportError(f"cannot read {path}: {err.strerror or err}") from err
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise ReportError(f"{path} is not an edgeprof report (binary data)")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fieldnames = tuple(reader.fieldnames or ())
        raw = list(reader)
    except csv.Error as err:
        if "field larger than field limit" in str(err):
            raise ReportError(f"{path} is not an edgeprof report (a cell longer than {MAX_CELL_CHARS} characters)"
                              ) from err
        raise ReportError(f"{path} is not an edgeprof report (not a CSV: {err})") from err
    fieldnames, raw = _current_columns(fieldnames, raw)
    missing = [c for c in REQUIRED_COLUMNS if c not in fieldnames]
    if missing:
        raise ReportError(f"{path} is not an edgeprof report (no {', '.join(missing)} column)")
    from edgeprof.report.schema import CORE_COLUMNS

    blank = {c: "" for c in CORE_COLUMNS if c not in fieldnames}  # a report with only some columns
    rows, bad, negative = [], [], []
    for line, row in enumerate(raw, start=2):
        problem = _row_problem(row, fieldnames)
        if problem is None:
            whole = {c: str(int(float(row[c]))) for c in INTEGER_COLUMNS if row.get(c, "") != ""}
            rows.append({**row, **blank, **whole})
            negative += [f"line {line}: {cell}" for cell in _invalidate_negative(rows[-1], fieldnames)]
        else:
            bad.append(f"line {line}: {problem}")
    if not rows:  # one line for one failure: the error names the first damage itself
        raise ReportError(f"{path} has no usable row ({len(raw)} rows, {len(bad)} damaged"
                          + (f"; {bad[0]}" if bad else "") + ")")
    if bad:
        _log.warning(f"{path.name}: skipped {len(bad)} damaged row(s) of {len(raw)} ({bad[0]}"
                     f"{'; ...' if len(bad) > 1 else ''})")
    if negative:
        _log.warning(f"{path.name}: read {len(negative)} negative figure(s) as invalid, no meter reads below zero: "
                     f"their method says invalid, medians and totals leave them out ({negative[0]}"
                     f"{'; ...' if len(negative) > 1 else ''})")
    sidecar, problem = read_sidecar(path.with_suffix(".json"))
    _note_missing_rows(path, sidecar, len(raw))
    return Report(path, fieldnames, rows, sidecar, problem)


def _note_missing_rows(path: Path, sidecar: Mapping, read: int) -> None:
    """A note where the file holds fewer rows than its sidecar says the run wrote (a row deleted, a file cut short
    and copied): the report is not whole."""
    written = sidecar.get("rows") if sidecar.get("status") != "running" else None
    if isinstance(written, int) and not isinstance(written, bool) and read < written:
        _log.warning(f"{path.name}: holds {read} row(s), and its sidecar says the run wrote {written}: "
                     f"{written - read} are missing (the file was cut short or edited)")


#: the columns that together name one measured row: the run, where, what and when (``timestamp_s``, wall clock)
_MEASUREMENT = ("run_id", "host", "algo", "tau", "seed", "kind", "round", "client", "window", "timestamp_s")


def _measurements(report: Report) -> set[tuple]:
    """What names the measurements ``report`` holds: each timed row's :data:`_MEASUREMENT` cells, and for the rows
    without a ``timestamp_s`` (a report written before the column) all of them at once, as they are."""
    timed = {tuple(row.get(c, "") for c in _MEASUREMENT) for row in report.rows if row.get("timestamp_s", "")}
    untimed = tuple(tuple(sorted(row.items())) for row in report.rows if not row.get("timestamp_s", ""))
    return timed | ({("untimed", untimed)} if untimed else set())


class Distinct:
    """Reports taken one at a time, each refused (ReportError) when it holds measured rows an earlier one holds (one
    report named twice, its CSV and its sidecar both named, or a copy of it): counted twice, its rounds would pass
    for more measurements than were made (a fit's n doubled and its intervals narrowed, a seed counted twice)."""

    def __init__(self) -> None:
        self._seen: dict[tuple, Report] = {}

    def add(self, report: Report) -> Report:
        """``report``, once it is known to repeat no earlier report's rows."""
        keys = _measurements(report)
        for key in keys:
            first = self._seen.get(key)
            if first is not None:
                how = "the report named twice" if first.path.resolve() == report.path.resolve() else "a copy"
                raise ReportError(f"{first.path} and {report.path} hold the same measured rows ({how}): name each "
                                  f"report once")
        self._seen.update(dict.fromkeys(keys, report))
        return report


def distinct(reports: Sequence[Report]) -> list[Report]:
    """``reports`` as a list, each taken by one :class:`Distinct` (ReportError for one that repeats another)."""
    once = Distinct()
    return [once.add(report) for report in reports]
