"""How an ``edgeprof`` command ends: one line and a documented exit code, never a traceback.

Every :class:`~edgeprof.errors.EdgeprofError` becomes one line on stderr and its exit code in exactly one place,
:func:`guard`; click's own usage errors (``--tau abc``, an unknown option) become the same one line with exit 2 in
:class:`OneLineErrors`; a stop signal becomes one line naming what it left and 128 + the signal. :func:`run` is the
console script's entry: it ends the process early once the command's files are closed.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import threading
from typing import Iterator

import typer
from typer.core import TyperGroup

try:  # typer 0.26 and later run on their own copy of click and raise its exceptions
    from typer._click import exceptions as click_errors
except ImportError:  # typer 0.16 to 0.25 run on click itself
    from click import exceptions as click_errors

from edgeprof.cli import options as o
from edgeprof.errors import EdgeprofError
from edgeprof.signals import STOP_EXCEPTIONS


INTERRUPTED_EXIT = 130
USAGE_EXIT = 2
OUTPUT_EXIT = 4


def error_line(message: str) -> None:
    typer.echo(f"edgeprof: error: {' '.join(message.split())}", err=True)


def _dedupe(message: str) -> str:
    """Drop a repeated "Did you mean ...?" (typer and click both add one to an unknown command)."""
    return re.sub(r"( Did you mean [^?]*\?)\1+", r"\1", message)


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null so the interpreter's last flush of stdout cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class _Stopped(Exception):
    """A stop signal outside a command's guard (while typer parses the command line): typer would turn it into a
    silent exit 130; carried out as this instead, it gets its one line."""

    def __init__(self, err: BaseException) -> None:
        super().__init__(str(err))
        self.err = err


class OneLineErrors(TyperGroup):
    """The command group; click's usage errors print one ``edgeprof: error:`` line instead of a box."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except STOP_EXCEPTIONS as err:
            raise _Stopped(err) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except STOP_EXCEPTIONS as err:  # outside the command's own guard (parsing its options)
            raise _Stopped(err) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        o.refresh_metavars(self)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _Stopped as stop:
            from edgeprof.signals import exit_code

            typer.echo(before_command_line(stop.err), err=True)
            sys.exit(exit_code(stop.err))
        except click_errors.ClickException as err:
            if not standalone_mode:
                raise
            sub = getattr(err, "ctx", None) is not None and err.ctx.parent is not None  # a command's, not the group's
            command = f" (see 'edgeprof {err.ctx.info_name} --help')" if sub else " (see 'edgeprof --help')"
            message = _dedupe(err.format_message())
            if not message and isinstance(err, getattr(click_errors, "NoArgsIsHelpError", ())):  # help shown above
                message = "no arguments given" if sub else "no command given"
            error_line(message + command)
            sys.exit(USAGE_EXIT if isinstance(err, click_errors.UsageError) else err.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo("edgeprof: aborted", err=True)
            sys.exit(1)
        except OSError as err:  # the terminal or file our own output goes to: a full disk, /dev/full, a closed pipe
            if not standalone_mode:
                raise
            _silence_stdout()
            error_line(f"cannot write the output: {err.strerror or err}")
            sys.exit(OUTPUT_EXIT)
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


class _NoteHandler(logging.Handler):
    """Print the package's notes (``edgeprof`` logger, warnings and up) as ``edgeprof: note: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"edgeprof: note: {record.getMessage()}", err=True)


def show_notes() -> None:
    logger = logging.getLogger("edgeprof")
    if not any(isinstance(h, _NoteHandler) for h in logger.handlers):
        logger.addHandler(_NoteHandler(logging.WARNING))
        logger.propagate = False


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Turn the project's errors into one line and an exit code; Ctrl-C, SIGTERM and SIGHUP into one line and
    128 + the signal number (130, 143, 129)."""
    from edgeprof.signals import exit_code, forget_closed_report, handle_termination, name_closed_report, \
        stops_unwrapped

    forget_closed_report()  # a stop names only a report this command closed
    try:
        with handle_termination(), stops_unwrapped():
            yield
    except EdgeprofError as err:
        report = getattr(err, "report", None)  # a run that failed after its report opened (edgeprof.session.run)
        error_line(str(err) + ("" if report is None else f"; the report keeps every round that finished ({report})"))
        raise typer.Exit(err.exit_code) from None
    except STOP_EXCEPTIONS as err:
        typer.echo(f"edgeprof: {stopped_line(name_closed_report(err))}", err=True)
        raise typer.Exit(exit_code(err)) from None


def stop_reason(err: BaseException) -> str:
    """How a stop is named (``interrupted (SIGTERM)``): its ``reason``, a plain Ctrl-C's where it has none."""
    return getattr(err, "reason", "interrupted (SIGINT)")


def before_command_line(err: BaseException) -> str:
    """The line of a stop that came before the command ran (or after it let go): nothing was written."""
    return f"edgeprof: {stop_reason(err)} before the command ran; nothing was written"


def stopped_line(err: BaseException) -> str:
    """What a stop signal left: the report it names (``err.report``: set where a report was open, see
    :func:`edgeprof.session.run.open_run`, or once it closed, :func:`edgeprof.signals.name_closed_report`), whole or
    with the finished rounds; or that no report was written (a stop in a run's set-up, before its report was
    opened, or in a command that writes none); and ``err.earlier_whole``, how many more reports the command's earlier
    runs left whole (``train``)."""
    what, report, earlier = stop_reason(err), getattr(err, "report", None), getattr(err, "earlier_whole", 0)
    also = "" if not earlier else ("; the earlier run's report is whole" if earlier == 1 else
                                   f"; the {earlier} earlier runs' reports are whole")
    if report is None:
        return f"{what}; no report was written"
    if getattr(err, "report_complete", False):
        return f"{what} after the run completed; the report is whole ({report}){also}"
    return f"{what}; the report keeps every round that finished ({report}){also}"


def run(app: typer.Typer) -> None:
    """Run ``app`` as the ``edgeprof`` console script (through :mod:`edgeprof.__main__`), then end the process with
    the command's exit code without waiting for the interpreter's teardown.

    Once a process has loaded torch and ONNX Runtime, tearing it down (every module, then their C++ libraries)
    takes about half a second after the last line is printed, and frees nothing a next process needs. When the
    command has returned, its report files are closed (a run closes its CSV and final sidecar before it
    returns), so once stdout and stderr are flushed and the exit handlers have run (:mod:`atexit`: logging's
    flush, multiprocessing's clean-up, temporary folders) the process ends with :func:`os._exit`. The normal exit
    is taken instead when anything could still be pending: a thread other than daemons still running, a flush
    that fails, an exit status that is not a number, or an exception that is not an exit (a bug's traceback);
    but a command that a stop signal ended exits early even while such a thread runs (the user's own code, say a
    backbone factory, can leave one): the stop asked for the end, and its line is printed. The normal exit waits
    for those threads; a stop signal during that wait ends the process at once with one line and 128 + the
    signal (:func:`edgeprof.signals.end_on_stop`). The exit codes are the command's own (docs: Measuring, exit
    codes). Only this entry point exits early: the tests' CliRunner and a program that calls ``app`` get their
    SystemExit as before.
    """
    from edgeprof.signals import end_on_stop, exit_code, ignore_stop_signals, stop_once, stop_raised, stops_unwrapped

    code: object = None
    ended = False  # the command has returned or raised: a stop after it comes after its end
    try:
        try:
            stop_once()  # here, inside the try: until now a stop ended the start in one line (edgeprof.__main__)
            try:
                with stops_unwrapped():
                    app()
            finally:
                ended = True
            code = 0  # pragma: no cover - click always ends a standalone command with SystemExit
        except SystemExit as done:
            code = 0 if done.code is None else done.code
        except STOP_EXCEPTIONS as err:  # before the command's own guard took over, or after it let go
            typer.echo(_outside_the_guard_line(err), err=True)
            code = exit_code(err)
        run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
        if isinstance(code, int) and run_exit_handlers is not None and (_alone() or stop_raised()) and _flushed():
            ignore_stop_signals()  # the command is over: a late Ctrl-C must not break the exit handlers into a traceback
            run_exit_handlers()  # what the interpreter would run next; it clears them, so they never run twice
            if _flushed():
                os._exit(code)
        end_on_stop(_after_the_end)
    except STOP_EXCEPTIONS as err:  # the first stop, landing between the hand-offs above (seen on Python 3.10)
        _say(_after_the_end(stop_reason(err)) if ended else _outside_the_guard_line(err))
        os._exit(exit_code(err))
    sys.exit(code)


def _outside_the_guard_line(err: BaseException) -> str:
    """The line of a stop outside the command's guard: after it let go, once the command's run closed its report
    (the report, whole), else before the command ran."""
    from edgeprof.signals import name_closed_report

    if getattr(name_closed_report(err), "report", None) is not None:
        return f"edgeprof: {stopped_line(err)}"
    return before_command_line(err)


def _say(line: str) -> None:
    """``line`` on stderr, as the process ends (a failing stream is no reason for a traceback)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())


def _alone() -> bool:
    """No thread but this one and daemons is alive (the normal exit would wait for such a thread)."""
    me = threading.current_thread()
    return all(t is me or t.daemon or not t.is_alive() for t in threading.enumerate())


def _after_the_end(reason: str) -> str:
    """The line of a stop during the normal exit, naming the threads it waited for (alive, not daemons)."""
    me = threading.current_thread()
    names = ", ".join(t.name for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive())
    waiting = f", while waiting for the threads its code left running ({names})" if names else ""
    return f"edgeprof: {reason} after the command ended{waiting}"


def _flushed() -> bool:
    """Flush stdout and stderr, and C's stdio buffers (what a native library printed); False if a flush fails."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a full disk, a closed pipe, a closed stream: leave it to the normal exit
            return False
    try:
        import ctypes

        return ctypes.CDLL(None).fflush(None) == 0
    except (OSError, AttributeError, TypeError):  # no C library to ask (not a POSIX system): nothing of it to flush
        return True
