"""Append-and-flush CSV writer, atomic JSON sidecar, and the reader that loads both back.

The CSV is created only once a run has passed validation and loaded its data, its header is written at
once, and every row is written to the file as its window ends: a run killed midway leaves a valid CSV
holding every finished round. Rows are whole or absent: each row is one ``os.write`` loop on an unbuffered
file, and when the disk fills mid-row the file is truncated back to the last complete row before the
:class:`OutputError` is raised; a report whose header cannot even be written is removed.

The sidecar is replaced atomically (write a temporary file, then ``os.replace``), first with ``"status":
"running"`` and finally with ``"complete"``, ``"interrupted"`` (a signal) or ``"failed"`` (an error, with its
reason). The ``running`` sidecar is padded with spaces (valid JSON) so that, when the disk is full and no
temporary file fits, the final sidecar can still be written in place over the space already held; a
temporary file is never left behind.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from edgeprof.errors import OutputError, ReportError
from edgeprof.signals import signals_held

_log = logging.getLogger("edgeprof")

#: spaces appended to a sidecar written with ``reserve=True``, for the final version to fit in place
SIDECAR_RESERVE_BYTES = 16384


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


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
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"dict contains fields not in fieldnames: {', '.join(map(repr, sorted(unknown)))}")
        buffer = io.StringIO()
        csv.writer(buffer).writerow(["" if row.get(c) is None else row.get(c, "") for c in self.columns])
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
            raise OutputError(f"cannot write report {self.path}: {err.strerror or err} (every complete row is "
                              f"kept)") from err
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
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(self.path, "rb") as f:
                old = f.read(self._good).decode("utf-8")
            buffer = io.StringIO()
            out = csv.writer(buffer)
            out.writerow(columns)
            out.writerows(r + [""] * len(new) for r in list(csv.reader(io.StringIO(old, newline="")))[1:])
            data = buffer.getvalue().encode("utf-8")
            with open(tmp, "wb", buffering=0) as f:
                _write_all(f.fileno(), data)
            os.replace(tmp, self.path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
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
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb", buffering=0) as f:
            _write_all(f.fileno(), payload)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if not _rewrite_in_place(path, text.encode("utf-8")):
            raise OutputError(f"cannot write sidecar {path}: {err.strerror or err}") from err


def check_writable(folder: Path) -> Path:
    """Create the output folder if needed and prove a file can be written there; OutputError if not."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".edgeprof-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise OutputError(f"output folder {folder} is not writable: {reason}") from err
    return folder


@dataclass
class Report:
    """A report read back: rows as dicts of strings, the sidecar, and typed accessors."""

    path: Path
    columns: tuple[str, ...]
    rows: list[dict[str, str]]
    sidecar: dict = field(default_factory=dict)

    def where(self, **equal: str) -> list[dict[str, str]]:
        """Rows whose columns equal the given values (compared as strings)."""
        return [r for r in self.rows if all(r.get(k) == str(v) for k, v in equal.items())]

    def values(self, column: str, rows: Iterable[Mapping[str, str]] | None = None) -> list[float]:
        """The non-empty cells of a numeric column as floats."""
        rows = self.rows if rows is None else rows
        return [float(r[column]) for r in rows if r.get(column, "") != ""]


#: columns every usable row has (a damaged report may lack others: they read as empty)
REQUIRED_COLUMNS = ("run_id", "algo", "kind")
#: result columns where NaN or infinity is a result (a diverged run), not damage
RESULT_COLUMNS = ("train_loss",)
#: columns that hold whole numbers when not empty
INTEGER_COLUMNS = ("tau", "round", "client", "n_samples", "n_participants", "short_window", "held_rounds")
_TEXT_COLUMNS = ("run_id", "device", "algo", "engine", "dataset", "backbone", "kind", "eval_protocol", "window",
                 "labels", "device_kind", "short_phases")
KINDS = ("client", "server", "eval", "window")


def _is_numeric_column(name: str) -> bool:
    return name not in _TEXT_COLUMNS and not name.endswith("_method")


def _row_problem(row: Mapping[str, object], columns: Sequence[str]) -> str | None:
    """Why a row read back is unusable (None when it is fine)."""
    if None in row or any(v is None for v in row.values()):
        return "wrong number of cells (a torn or extended line)"
    if any("\udc80" <= ch <= "\udcff" for v in row.values() for ch in v):  # undecodable bytes
        return "not UTF-8"
    if row.get("kind") not in KINDS:
        return f"kind {row.get('kind')!r} is not one of {', '.join(KINDS)}"
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
    return None


def _read_sidecar(path: Path) -> dict:
    """The sidecar as a dict; a missing one is empty, a damaged one is ignored with a note."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        _log.warning(f"ignoring sidecar {path}: {getattr(err, 'msg', None) or err}")
        return {}
    if not isinstance(data, dict):
        _log.warning(f"ignoring sidecar {path}: a JSON {type(data).__name__}, not an object")
        return {}
    from edgeprof.report.sidecar import usable_sidecar

    data, why = usable_sidecar(data)
    if why:
        _log.warning(f"{path.name}: {why}")
    return data


def read_report(path: str | Path) -> Report:
    """Load a report CSV and, if present, its sidecar (same name, ``.json``).

    Damaged rows (a torn last line, cells that are not numbers where numbers belong, bytes that are not
    UTF-8, an unknown kind) are skipped and counted in one note; ReportError when no usable row is left,
    or when the file is not an edgeprof report at all.
    """
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".csv")
    if not path.is_file():
        raise ReportError(f"no report at {path}")
    try:
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    except OSError as err:
        raise ReportError(f"cannot read {path}: {err.strerror or err}") from err
    if "\x00" in text:
        raise ReportError(f"{path} is not an edgeprof report (binary data)")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fieldnames = tuple(reader.fieldnames or ())
        raw = list(reader)
    except csv.Error as err:
        raise ReportError(f"{path} is not an edgeprof report (not a CSV: {err})") from err
    missing = [c for c in REQUIRED_COLUMNS if c not in fieldnames]
    if missing:
        raise ReportError(f"{path} is not an edgeprof report (no {', '.join(missing)} column)")
    from edgeprof.report.schema import CORE_COLUMNS

    blank = {c: "" for c in CORE_COLUMNS if c not in fieldnames}  # a report with only some columns
    rows, bad = [], []
    for line, row in enumerate(raw, start=2):
        problem = _row_problem(row, fieldnames)
        if problem is None:
            whole = {c: str(int(float(row[c]))) for c in INTEGER_COLUMNS if row.get(c, "") != ""}
            rows.append({**row, **blank, **whole})
        else:
            bad.append(f"line {line}: {problem}")
    if not rows:  # one line for one failure: the error names the first damage itself
        raise ReportError(f"{path} has no usable row ({len(raw)} rows, {len(bad)} damaged"
                          + (f"; {bad[0]}" if bad else "") + ")")
    if bad:
        _log.warning(f"{path.name}: skipped {len(bad)} damaged row(s) of {len(raw)} ({bad[0]}"
                     f"{'; ...' if len(bad) > 1 else ''})")
    return Report(path, fieldnames, rows, _read_sidecar(path.with_suffix(".json")))
