"""Whole-or-absent file writes: a file edgeprof writes is all there, or (after a failure) as it was before.

A low-level module with no edgeprof imports, so that every layer (``nn/``, ``report/``, ``flower/``) may use it.
:func:`write_bytes` writes to a temporary file beside the target (the same folder, so the same file system and an
atomic rename), flushes it to the disk with ``fsync``, and renames it over the target with :func:`os.replace`: a
reader sees the old file or the new one, never a part of either. On any failure (a full disk, a folder that cannot
be written) the temporary file is removed and the :class:`OSError` raised for the caller to turn into its own
error; the target, new or previous, is left as it was. The file gets the permissions a plain ``open`` would give
it (0o666 less the umask).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from pathlib import Path

__all__ = ["make_folder", "temporary_name", "write_all", "write_bytes", "write_text"]


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the file descriptor ``fd`` (``os.write`` may write only a part)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def make_folder(folder: str | Path) -> Path:
    """Create ``folder`` and its parents where missing; OSError where it cannot be, one that says so in its
    ``strerror`` where the folder or a parent is a file (``mkdir`` says only "File exists" or "Not a directory")."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        for part in (folder, *folder.parents):
            if part.exists() and not part.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{part} is a file, not a folder", str(part)) from err
        raise
    return folder


def temporary_name(path: Path) -> Path:
    """The temporary file :func:`write_bytes` uses for ``path``: beside it, named for this process and thread, so
    two writers of one target never share one."""
    return path.with_name(f"{path.name}.{os.getpid()}-{threading.get_native_id()}.tmp")


def write_bytes(path: str | Path, data: bytes, *, mode: int = 0o666, replace: bool = True) -> Path:
    """Put ``data`` at ``path`` whole or not at all (module docstring); OSError on failure, nothing left behind.

    ``mode``: the new file's permissions (less the umask). ``replace=False``: never replace a file, even one that
    appeared meanwhile: the written file is hard-linked into place, which fails with FileExistsError where ``path``
    exists (where the file system has no hard links, a rename after a last look for the file)."""
    path = Path(path)
    _check_replaceable(path)
    tmp = temporary_name(path)
    try:
        tmp.unlink(missing_ok=True)  # a leftover at the temporary name, whatever it is (a FIFO), removed unopened
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    except BaseException:  # an OSError, or a stop signal between the write and the rename
        with contextlib.suppress(OSError):  # the original error is the one to report
            tmp.unlink(missing_ok=True)
        raise
    return path


def _check_replaceable(path: Path) -> None:
    """OSError where ``path`` is something a file must not take the place of: a device (``/dev/full``), a FIFO, a
    socket or a folder. A regular file, a link (itself replaced, never what it points to) or nothing is fine."""
    try:
        kind = os.lstat(path).st_mode
    except OSError:  # nothing there, or it cannot be looked at: the write says why
        return
    if not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        what = "a folder" if stat.S_ISDIR(kind) else "not a regular file (a device, FIFO or socket)"
        raise OSError(errno.EEXIST, f"{what} is there, and a file is never written in its place", str(path))


def _place_new(tmp: Path, path: Path) -> None:
    """Put the written file ``tmp`` at ``path`` where no file is: a hard link (then ``tmp`` removed), or where the
    file system has none, a rename after a last look for ``path``."""
    try:
        os.link(tmp, path)
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS) or os.path.lexists(path):
            raise
        os.rename(tmp, path)
    else:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """:func:`write_bytes` of ``text`` encoded in ``encoding``."""
    return write_bytes(path, text.encode(encoding))
