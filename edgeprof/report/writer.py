"""Append-and-flush CSV writer, atomic JSON sidecar, and the reader that loads both back.

The CSV is created only once a run has passed validation and loaded its data, its header is written
and flushed at once, and every row is flushed as its window ends: a run killed midway leaves a valid
CSV holding every finished round. The sidecar is replaced atomically (write to a temporary file, then
``os.replace``), first with ``"status": "running"`` and finally with ``"complete"`` or ``"interrupted"``.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from edgeprof.errors import OutputError, ReportError


class ReportWriter:
    """Writes the rows of one report; a context manager that closes the file."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        try:
            self._file = open(self.path, "x", newline="", encoding="utf-8")
        except FileExistsError as err:
            raise OutputError(f"report {self.path} already exists; choose another --run-name") from err
        except OSError as err:
            raise OutputError(f"cannot create report {self.path}: {err.strerror}") from err
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, restval="", extrasaction="raise")
        self._csv.writeheader()
        self._file.flush()
        self.rows_written = 0

    def write(self, row: Mapping[str, str]) -> None:
        """Append one row and flush it to the operating system."""
        self._csv.writerow(row)
        self._file.flush()
        self.rows_written += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "ReportWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_sidecar(path: Path, data: Mapping) -> None:
    """Write the JSON sidecar atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        raise OutputError(f"cannot write sidecar {path}: {err.strerror}") from err


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


def read_report(path: str | Path) -> Report:
    """Load a report CSV and, if present, its sidecar (same name, ``.json``)."""
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".csv")
    if not path.is_file():
        raise ReportError(f"no report at {path}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "run_id" not in reader.fieldnames:
            raise ReportError(f"{path} is not an edgeprof report (no run_id column)")
        rows = list(reader)
    sidecar_path = path.with_suffix(".json")
    sidecar = {}
    if sidecar_path.is_file():
        try:
            sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ReportError(f"sidecar {sidecar_path} is not valid JSON: {err.msg}") from err
    return Report(path, tuple(reader.fieldnames), rows, sidecar)
