"""Signals a run may receive: SIGTERM and SIGHUP end it like Ctrl-C, and none can tear its last write.

Under ``timeout``, ``docker stop`` or systemd a run gets SIGTERM, and a closed terminal sends SIGHUP.
:func:`handle_termination` turns both into :class:`Terminated`, a :class:`KeyboardInterrupt`, so every
place that already finishes or drops the current window on Ctrl-C does the same for them; the CLI then
exits with 128 + the signal number (130, 143, 129). :func:`signals_held` defers these signals around the
final sidecar write, so a second Ctrl-C takes effect after it, never in the middle. :func:`stops_unwrapped`
gives back a stop that Python wrapped in another exception on its way up. In a program of the user's own (the
monitor), :func:`handle_termination` takes only the signals the program left at their default, and a
:class:`Terminated` that the program does not catch ends it with one line and 128 + the signal, as a command
ends; :func:`end_on_stop` ends a process at once where nothing is left to close (the wait for threads that a
command's own code left running).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

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


def stop_raised() -> bool:
    """Whether a stop signal was raised in this process (:func:`stop_exception`): the run is ending on request."""
    return bool(_raised)


def _raise_terminated(signum, _frame) -> None:
    raise stop_exception(signum)


def _raise_in_program(signum, _frame) -> None:
    """:func:`_raise_terminated` in a program of the user's own: uncaught, the stop ends it in one line."""
    if not isinstance(sys.excepthook, _UncaughtStop):
        sys.excepthook = _UncaughtStop(sys.excepthook)
    raise stop_exception(signum)


class _UncaughtStop:
    """``sys.excepthook`` for a program whose SIGTERM or SIGHUP the monitor turned into :class:`Terminated`: left
    uncaught, it ends the program with one line and 128 + the signal (143, 129), as the signal itself or an
    ``edgeprof`` command would, instead of a traceback and exit 1; every other exception goes to the hook before.

    The interpreter exits with the code of a SystemExit that its hook raises, after the exit handlers (a monitor
    the program never stopped closes its report in one of them, interrupted by this signal)."""

    def __init__(self, previous: Callable) -> None:
        self.previous = previous

    def __call__(self, kind, err, tb) -> None:
        if not isinstance(err, Terminated):
            self.previous(kind, err, tb)
            return
        report = getattr(err, "report", None)
        kept = f"; the report keeps every window that finished ({report})" if report is not None else ""
        print(f"edgeprof: {err.reason}{kept}", file=sys.stderr, flush=True)
        raise SystemExit(exit_code(err))


@contextlib.contextmanager
def handle_termination(*, program: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; else a no-op).

    ``program``: the block is a program of the user's own (:func:`edgeprof.monitor`): a signal whose handler the
    program set (or ignores) is left to it, and a Terminated that the program does not catch ends it with one
    line and 128 + the signal (:class:`_UncaughtStop`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [s for s in (signal.SIGTERM, signal.SIGHUP) if not program or signal.getsignal(s) == signal.SIG_DFL]
    handler = _raise_in_program if program else _raise_terminated
    previous = {s: signal.signal(s, handler) for s in taken}
    try:
        yield
    finally:
        for s, was in previous.items():
            signal.signal(s, was)


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


def end_on_stop(say: Callable[[str], str]) -> None:
    """From now on a stop signal ends the process at once: the line ``say(reason)`` on stderr (``reason``:
    ``interrupted (SIGTERM)``), then exit 128 + the signal without the interpreter's exit (main thread only).

    For a process with nothing left to close but a wait it cannot end itself (threads that a command's own code
    left running), where a raised stop would break the wait into a traceback and the exit code of the command."""
    if threading.current_thread() is not threading.main_thread():
        return

    def end(signum, _frame) -> None:
        try:
            sys.stderr.write(say(f"interrupted ({signal.Signals(signum).name})") + "\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    for s in STOP_SIGNALS:
        signal.signal(s, end)


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
def signals_held(*, deliver: bool = True) -> Iterator[None]:
    """Hold the stop signals back for the block: one that arrives meanwhile is raised at its end (when the
    block ends with an exception of its own, that one goes on and the held signal is dropped); with ``deliver``
    false it is dropped in any case (the caller is already ending the run)."""
    hold = HeldSignals()
    try:
        yield
    except BaseException:
        hold.release(deliver=False)
        raise
    hold.release(deliver=deliver)
