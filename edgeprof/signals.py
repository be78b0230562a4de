"""Signals a run may receive: SIGTERM and SIGHUP end it like Ctrl-C, and none can tear its last write.

Under ``timeout``, ``docker stop`` or systemd a run gets SIGTERM, and a closed terminal sends SIGHUP.
:func:`handle_termination` turns both into :class:`Terminated`, a :class:`KeyboardInterrupt`, so every
place that already finishes or drops the current window on Ctrl-C does the same for them; the CLI then
exits with 128 + the signal number (130, 143, 129). :func:`signals_held` defers these signals around the
final sidecar write, so a second Ctrl-C takes effect after it, never in the middle.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

#: the signals a run treats as "stop now, keep what is finished"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A run stopped by SIGTERM or SIGHUP (a KeyboardInterrupt, so it is handled like Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.reason = f"interrupted ({signal.Signals(signum).name})"


def exit_code(err: KeyboardInterrupt) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(err, "signum", signal.SIGINT)


def _raise_terminated(signum, _frame) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def handle_termination() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; else a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals back for the block: one that arrives meanwhile is raised at its end.

    Python runs signal handlers in the main thread whichever thread the kernel picked, so deferring is done
    with a recording handler (a thread signal mask would not stop delivery to torch's worker threads).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if pending:
        raise KeyboardInterrupt() if pending[0] == signal.SIGINT else Terminated(pending[0])
