"""Reading the label files of sysfs trees (a RAPL zone's ``name``, a Jetson rail's label) without crashing.

A label that is missing, a directory, a dangling link, unreadable or not UTF-8 text is not an error of the
run: the back-end leaves that zone or rail out and records why (``ProbeResult.skipped``, printed by
``edgeprof doctor``), so discovery never ends in a traceback.
"""

from __future__ import annotations

from pathlib import Path


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
