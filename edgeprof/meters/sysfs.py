"""Reading sysfs trees: label files (a RAPL zone's ``name``, a Jetson rail's label) without crashing, and
integer files kept open for cheap repeated reads (:class:`IntFile`).

A label that is missing, a directory, a dangling link, unreadable or not UTF-8 text is not an error of the
run: the back-end leaves that zone or rail out and records why (``ProbeResult.skipped``, printed by
``edgeprof doctor``), so discovery never ends in a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeprof.errors import MeterError, MeterPermissionError


def read_label(path: Path) -> tuple[str | None, str]:
    """``(text, "")`` for a readable UTF-8 label (stripped), else ``(None, why)`` naming the file."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        return None, f"{path} is a directory, not a label file"
    except FileNotFoundError:
        return None, f"{path} is missing or a dangling link"
    except PermissionError:
        return None, f"{path} is not readable by this user (permission denied)"
    except OSError as err:
        return None, f"cannot read {path}: {err.strerror or err}"
    try:
        return raw.decode("utf-8").strip(), ""
    except UnicodeDecodeError:
        return None, f"{path} is not UTF-8 text ({raw[:16]!r})"


def read_positive_int(path: Path) -> int | None:
    """A positive integer attribute read once (a RAPL zone's power limit, a Jetson shunt's micro-ohms, the INA3221's
    update interval), or None where it is missing, unreadable, not an integer or not positive: the bound or period
    it gives is then unknown, never made up."""
    try:
        value = int(Path(path).read_text().strip())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return value if value > 0 else None


class IntFile:
    """An integer sysfs file (a RAPL ``energy_uj``, a Jetson rail's ``in_power0_input``) kept open and re-read
    with ``os.pread`` from offset 0: one system call a reading instead of open, read and close (sysfs
    attributes are regenerated on every read from offset 0, so an open file gives fresh values).

    ``what`` names the file in errors (``"RAPL counter"``); ``permission_fix`` is the fix a permission error
    names. Errors: :class:`~edgeprof.errors.MeterPermissionError` for a file this user may not read,
    :class:`~edgeprof.errors.MeterError` for anything else (missing, not an integer). ``close()`` is idempotent.
    """

    #: bytes read a time: a 64-bit counter in decimal with its newline fits with room to spare
    SIZE = 64

    def __init__(self, path: Path, what: str, permission_fix: str) -> None:
        self.path, self._what, self._fix = Path(path), what, permission_fix
        self._fd: int | None = None

    def read(self) -> int:
        """The file's integer now."""
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY)
            return int(os.pread(self._fd, self.SIZE, 0))
        except PermissionError as err:
            raise MeterPermissionError(f"cannot read {self.path}: permission denied. Fix: {self._fix}") from err
        except (OSError, ValueError) as err:
            raise MeterError(f"cannot read {self._what} {self.path}: {err}") from err

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:  # a meter that was never closed still gives its descriptor back
        try:
            self.close()
        except OSError:
            pass
