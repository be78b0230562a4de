"""Signals a run may receive: SIGTERM and SIGHUP end it like Ctrl-C, and none can tear its last write.

Under ``timeout``, ``docker stop`` or systemd a run gets SIGTERM, and a closed terminal sends SIGHUP.
:func:`handle_termination` turns both into :class:`Terminated`, a :class:`KeyboardInterrupt`, so every
place that already finishes or drops the current window on Ctrl-C does the same for them; the CLI then
exits with 128 + the signal number (130, 143, 129). :func:`signals_held` defers these signals around the
final sidecar write, so a second Ctrl-C takes effect after it, never in the middle. :func:`stops_unwrapped`
gives back a stop that Python wrapped in another exception on its way up.
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


#: the stop signals raised in this process so far (by any handler here): :func:`stop_once` raises only the first
_raised: list[int] = []


def stop_exception(signum: int) -> KeyboardInterrupt:
    """The exception stop signal ``signum`` ends a run with (KeyboardInterrupt for SIGINT, else
    :class:`Terminated`), counted as raised; also where the signal did not arrive: in another thread (a Flower
    simulation's ServerApp), or later."""
    _raised.append(signum)
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def stop_behind(err: BaseException | None) -> KeyboardInterrupt | None:
    """The stop signal (KeyboardInterrupt, or :class:`Terminated`) that ``err`` is or that caused it, if any.

    Python wraps some exceptions on their way up: 3.11 raises an exception from a descriptor's ``__set_name__``
    while a class is created (a dataclass's fields, as a module is imported) as a RuntimeError caused by it, so
    a Ctrl-C that lands there arrives as that RuntimeError."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return err
        seen.add(id(err))
        err = err.__cause__
    return None


@contextlib.contextmanager
def stops_unwrapped() -> Iterator[None]:
    """Within the block, an exception caused by a stop signal is raised as that stop signal
    (:func:`stop_behind`), so that it ends the run like any Ctrl-C, SIGTERM or SIGHUP; any other one as is."""
    try:
        yield
    except Exception as err:
        stop = stop_behind(err)
        if stop is None:
            raise
        raise stop from None


def exit_code(err: KeyboardInterrupt) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(err, "signum", signal.SIGINT)


def _raise_terminated(signum, _frame) -> None:
    raise stop_exception(signum)


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


def stop_once() -> None:
    """The process's own handling from its start (the console script): the first stop signal raises
    (KeyboardInterrupt for Ctrl-C, :class:`Terminated` for SIGTERM and SIGHUP); later ones are ignored, because
    the run is already ending: a burst of Ctrl-C cannot break its clean-up into a traceback or a second line.
    Blocks that install their own handlers (:func:`handle_termination`, :func:`signals_held`) restore this one,
    and a stop they raised counts as the first: one held during a write and raised after it is not followed by
    another.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def first_stop(signum, _frame) -> None:
        if _raised:
            return
        raise stop_exception(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, first_stop)


def ignore_stop_signals() -> None:
    """From now on the stop signals do nothing (the command is over; only the process's exit is left)."""
    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


class HeldSignals:
    """Stop signals held back from construction until :meth:`release`, which raises the first one that came.

    For a span that does not fit one ``with`` block: a report is created with signals held, and the held
    Ctrl-C is raised inside the block that records how the run ended. Python runs signal handlers in the
    main thread whichever thread the kernel picked, so holding is done with a recording handler (a thread
    signal mask would not stop delivery to torch's worker threads). Outside the main thread: a no-op.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._previous: dict | None = None
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, lambda signum, _frame: self.pending.append(signum))
                              for s in STOP_SIGNALS}

    def release(self, *, deliver: bool = True) -> None:
        """Restore the handlers; with ``deliver``, raise the first held signal (KeyboardInterrupt or Terminated)."""
        if self._previous is None:
            return
        previous, self._previous = self._previous, None
        for s, handler in previous.items():
            signal.signal(s, handler)
        if deliver and self.pending:
            raise stop_exception(self.pending[0])


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals back for the block: one that arrives meanwhile is raised at its end (when the
    block ends with an exception of its own, that one goes on and the held signal is dropped)."""
    hold = HeldSignals()
    try:
        yield
    except BaseException:
        hold.release(deliver=False)
        raise
    hold.release()
