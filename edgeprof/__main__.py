"""The ``edgeprof`` console script and ``python -m edgeprof``: a Ctrl-C at any moment ends in one line.

The module's first statements take over the stop signals (Ctrl-C, SIGTERM, SIGHUP), before anything is imported
but ``_signal`` and ``os`` (built into the interpreter or frozen in it, and loaded by its own start): a stop while
edgeprof and its command line interface are imported ends the process at once (nothing is written before the
command runs) with 128 + the signal number and one line, never a traceback (docs: Measuring, exit codes).
:func:`edgeprof.cli.exits.run` then hands them to :func:`edgeprof.signals.stop_once` inside the ``try`` that
handles them from there (a stop between the two would be a traceback). Only the interpreter's own start, before this module runs, is Python's. Importing this module sets
those handlers: only the entry points import it.
"""

import _signal
import os

#: the stop signals by number, as the one line names them
_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _stopped_while_starting(signum, _frame) -> None:
    """One line and exit 128 + ``signum`` now: the command has not run, so there is nothing to close."""
    os.write(2, f"edgeprof: interrupted ({_NAMES[signum]}) while starting; nothing was written\n".encode())
    os._exit(128 + signum)


for _signum in _NAMES:
    _signal.signal(_signum, _stopped_while_starting)


def main() -> None:
    """Set OpenMP's passive wait before torch loads (:func:`edgeprof.host.prefer_passive_openmp`), import the CLI,
    run it (it hands the stop signals to :func:`edgeprof.signals.stop_once`)."""
    from edgeprof.host import prefer_passive_openmp

    prefer_passive_openmp()
    from edgeprof.cli import main as run

    run()  # it hands the stop signals to stop_once inside its own try (edgeprof.cli.exits.run)


if __name__ == "__main__":
    main()
