"""Signals a run may receive: SIGTERM and SIGHUP end it like Ctrl-C, and none can tear its last write.

Under ``timeout``, ``docker stop`` or systemd a run gets SIGTERM, and a closed terminal sends SIGHUP.
:func:`handle_termination` turns both into :class:`Terminated`, which edgeprof handles as it handles Ctrl-C's
KeyboardInterrupt (:data:`STOP_EXCEPTIONS`: every place that finishes or drops the current window on Ctrl-C catches
both); the CLI then exits with 128 + the signal number (130, 143, 129). Terminated is no KeyboardInterrupt, so a
program's own ``except KeyboardInterrupt`` (its Ctrl-C) does not catch a SIGTERM. :func:`signals_held` defers these
signals around a write (a row, the final sidecar), so a second Ctrl-C takes effect after it, never in the middle,
and then goes to the handler it would have met.
:func:`stops_unwrapped` gives back a stop that Python wrapped in another exception on its way up. In a program of
the user's own (the monitor), :func:`handle_termination` chains to the program's own handlers: it tells the monitor
the signal came, then runs the handler the program had set (the program decides how it ends), leaves alone a signal
the program ignores, and raises :class:`Terminated` for a signal left at its default, which, if the program does not
catch it, ends the program with one line and 128 + the signal, as a command ends; :func:`end_on_stop` ends a process
at once where nothing is left to close (the wait for threads that a command's own code left running).

A signal whose handler was not set from Python (an application that embeds Python, such as uWSGI, or a library
preloaded into the process, installed it in C before the interpreter started: :func:`signal.getsignal` gives
``None``) is left to that handler by :func:`handle_termination` and :class:`HeldSignals` alike: once replaced, Python
could not put it back (``signal.signal`` takes no ``None``), so the host would lose it for good.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

#: the signals a run treats as "stop now, keep what is finished"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """A run stopped by SIGTERM or SIGHUP; ``signum`` the signal, ``reason`` its words (``interrupted (SIGTERM)``).

    A BaseException, as KeyboardInterrupt is, but not one: a program's ``except KeyboardInterrupt`` (its Ctrl-C)
    lets it pass, and ``except Exception`` does not catch it either. edgeprof catches both
    (:data:`STOP_EXCEPTIONS`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.reason = f"interrupted ({signal.Signals(signum).name})"


#: the exceptions a stop signal ends a run with: Ctrl-C's KeyboardInterrupt, and Terminated for SIGTERM and SIGHUP
STOP_EXCEPTIONS = (KeyboardInterrupt, Terminated)

#: the stop signals raised in this process so far (by any handler here): :func:`stop_once` raises only the first
_raised: list[int] = []


def stop_exception(signum: int) -> BaseException:
    """The exception stop signal ``signum`` ends a run with (KeyboardInterrupt for SIGINT, else
    :class:`Terminated`), counted as raised; also where the signal did not arrive: in another thread (a Flower
    simulation's ServerApp), or later."""
    _raised.append(signum)
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def stop_behind(err: BaseException | None) -> BaseException | None:
    """The stop (KeyboardInterrupt, or :class:`Terminated`: :data:`STOP_EXCEPTIONS`) that ``err`` is or that
    caused it, if any.

    Python wraps some exceptions on their way up: 3.11 raises an exception from a descriptor's ``__set_name__``
    while a class is created (a dataclass's fields, as a module is imported) as a RuntimeError caused by it, so
    a Ctrl-C that lands there arrives as that RuntimeError."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, STOP_EXCEPTIONS):
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


def exit_code(err: BaseException) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(err, "signum", signal.SIGINT)


def stop_raised() -> bool:
    """Whether a stop signal was raised in this process (:func:`stop_exception`): the run is ending on request."""
    return bool(_raised)


#: the report the current command's runs closed last, whether it completed, and how many complete ones came before
#: it (:func:`report_closed`; two numbers and a path however many runs a long-lived program closes)
_closed: dict = {"last": None, "complete_before": 0}


def report_closed(report, *, complete: bool) -> None:
    """Record that ``report``'s final sidecar is written (``complete``: it says so). A stop signal that comes later
    in the same command (its teardown, its summary, between two of its statements, the next run's set-up) carries
    no report of its own; :func:`name_closed_report` gives it this one, so that its line names the report and
    never says that none was written."""
    last = _closed["last"]
    _closed["complete_before"] += last is not None and last[1]
    _closed["last"] = (report, complete)


def forget_closed_report() -> None:
    """A command starts: no run of it has closed a report yet (:func:`report_closed`)."""
    _closed.update(last=None, complete_before=0)


def name_closed_report(err: BaseException) -> BaseException:
    """``err``, a stop, naming the report closed last (:func:`report_closed`) where it names none (``report`` and
    ``report_complete``, which the CLI's line reads), and in ``earlier_whole`` how many other reports the command
    closed complete (``train``'s earlier runs)."""
    last = _closed["last"]
    if last is None:
        return err
    if getattr(err, "report", None) is None:
        err.report, err.report_complete = last
    err.earlier_whole = _closed["complete_before"] + (last[1] and err.report != last[0])
    return err


def _raised_by_handler(signum: int) -> BaseException:
    """:func:`stop_exception` for a signal handler to raise, with :class:`_SwallowedStop` in place: a handler can
    run inside a ``__del__`` or a weakref callback, whose exceptions Python prints and drops."""
    if not isinstance(sys.unraisablehook, _SwallowedStop):
        sys.unraisablehook = _SwallowedStop(sys.unraisablehook)
    return stop_exception(signum)


class _SwallowedStop:
    """``sys.unraisablehook`` once a handler here has raised a stop: a stop that Python could not raise (the handler
    ran inside a ``__del__``, a weakref callback, a garbage collection) was a traceback on stderr ("Exception
    ignored in ...") and a lost stop, the run going on and its next Ctrl-C ignored as a second one (seen in a
    burst of Ctrl-C: a profiler's ``__del__``). Now it is no longer counted as raised, and the signal is sent
    again from a thread of its own, so that it lands once the main thread has left the place that swallowed it and
    its handler raises it where it can go up (sent from here, its handler would run inside this hook, in the same
    place). Every other unraisable exception goes to the hook before."""

    def __init__(self, previous: Callable) -> None:
        self.previous = previous

    def __call__(self, unraisable) -> None:
        err = unraisable.exc_value
        if not isinstance(err, STOP_EXCEPTIONS) or threading.current_thread() is not threading.main_thread():
            self.previous(unraisable)
            return
        signum = getattr(err, "signum", signal.SIGINT)
        with contextlib.suppress(ValueError):
            _raised.remove(signum)
        try:  # not threading.Thread: its start() waits for the thread, and the handler would run in that wait
            _thread.start_new_thread(os.kill, (os.getpid(), signum))
        except RuntimeError:  # the interpreter is shutting down: no thread can start, and the exit is under way
            pass


def _raise_terminated(signum, _frame) -> None:
    raise _raised_by_handler(signum)


def _raise_in_program(signum, _frame, report=None) -> None:
    """:func:`_raise_terminated` in a program of the user's own: uncaught, the stop ends it in one line, naming
    ``report`` (the monitor's) however the program closes it (``with``, ``stop()`` in a ``finally``, or never)."""
    if not isinstance(sys.excepthook, _UncaughtStop):
        sys.excepthook = _UncaughtStop(sys.excepthook)
    err = _raised_by_handler(signum)
    if report is not None:
        err.report = report
    raise err


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
def handle_termination(*, program: bool = False, heard: Callable[[int], None] = lambda signum: None,
                       report=None) -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; else a no-op).

    ``program``: the block is a program of the user's own (:func:`edgeprof.monitor`), whose own handling comes
    first. Each signal the program handles goes to ``heard(signum)`` (the monitor records it), then to the
    handler the program had set, which decides what happens next (it may return, or raise, or exit); a signal
    left at its default raises Terminated, which, if the program does not catch it, ends it with one line and
    128 + the signal (:class:`_UncaughtStop`); a signal the program ignores is left alone. At the block's end
    each handler is put back, unless the program set another one meanwhile (that one stays). A signal whose handler
    was not set from Python (``None``: see the module's docstring) is left to it, in both cases."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        was = signal.getsignal(s)
        if was is None or (program and was == signal.SIG_IGN):
            continue
        handler = _raise_terminated if not program else _chained(was, heard, report)
        signal.signal(s, handler)
        installed[s] = (was, handler)
    try:
        yield
    finally:
        for s, (was, handler) in installed.items():
            if signal.getsignal(s) is handler:
                signal.signal(s, was)


def _chained(was, heard: Callable[[int], None], report=None) -> Callable:
    """The monitor's handler of a signal whose handler in the program was ``was`` (see :func:`handle_termination`;
    ``report``: the monitor's, which the line of an uncaught stop names)."""

    def chained(signum, frame) -> None:
        heard(signum)
        if callable(was):
            was(signum, frame)
        else:  # SIG_DFL: the signal's default is to end the program
            _raise_in_program(signum, frame, report)

    return chained


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
        raise _raised_by_handler(signum)

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
    """Stop signals held back from construction until :meth:`release`, which gives each one that came to the
    handler it would have met (:func:`_deliver`): edgeprof's raise it (the first one raised ends the delivery),
    a program's own handler (through the monitor's chain) decides, an outer hold holds it on.

    For a span that does not fit one ``with`` block: a report is created with signals held, and the held
    Ctrl-C is raised inside the block that records how the run ended. Python runs signal handlers in the
    main thread whichever thread the kernel picked, so holding is done with a recording handler (a thread
    signal mask would not stop delivery to torch's worker threads). Outside the main thread: a no-op. A signal
    whose handler was not set from Python is not held (see the module's docstring): it goes to that handler.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._previous: dict | None = None
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, lambda signum, _frame: self.pending.append(signum))
                              for s in STOP_SIGNALS if signal.getsignal(s) is not None}

    def release(self, *, deliver: bool = True) -> None:
        """Restore the handlers; with ``deliver``, give each held signal, in the order they came, to its handler
        (:func:`_deliver`): the first that raises (KeyboardInterrupt or Terminated) ends the delivery."""
        if self._previous is None:
            return
        previous, self._previous = self._previous, None
        for s, handler in previous.items():
            signal.signal(s, handler)
        if deliver:
            for signum in self.pending:
                _deliver(signum, previous[signum])


def _deliver(signum: int, handler) -> None:
    """What signal ``signum`` would have done under ``handler`` had it not been held: a handler set from Python
    runs (edgeprof's raise the stop; a program's own, chained by the monitor, decides; an outer hold's records it
    for its own release); an ignored one is dropped; Python's Ctrl-C handler or the default action raise the stop
    (:func:`stop_exception`), as edgeprof does for a signal left at its default. (A signal whose handler was not set
    from Python is never held: :class:`HeldSignals`.)"""
    if handler == signal.SIG_IGN:
        return
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signum, None)
        return
    raise _raised_by_handler(signum)


@contextlib.contextmanager
def signals_held(*, deliver: bool = True) -> Iterator[None]:
    """Hold the stop signals back for the block: one that arrives meanwhile goes to its handler at the block's end
    (:meth:`HeldSignals.release`: edgeprof's raise it, a program's own decides); when the block ends with an
    exception of its own, that one goes on and the held signal is dropped; with ``deliver`` false it is dropped in
    any case (the caller is already ending the run)."""
    hold = HeldSignals()
    try:
        yield
    except BaseException:
        hold.release(deliver=False)
        raise
    hold.release(deliver=deliver)
