"""The ``edgeprof`` console script and ``python -m edgeprof``: a Ctrl-C at any moment ends in one line.

This module imports nothing heavy, so the script's stop signals are in edgeprof's hands from its first
milliseconds: a Ctrl-C (or SIGTERM, SIGHUP) while the command line interface itself is being imported ends
the process with 128 + the signal number and one line, never a traceback (docs: Measuring, exit codes); from then
on :func:`edgeprof.cli.main` handles them.
"""

from __future__ import annotations

import sys

from edgeprof.host import prefer_passive_openmp
from edgeprof.signals import exit_code, stop_once, stops_unwrapped


def main() -> None:
    """Take over the stop signals (:func:`edgeprof.signals.stop_once`), set OpenMP's passive wait before torch
    loads (:func:`edgeprof.host.prefer_passive_openmp`), import the CLI, run it."""
    stop_once()
    prefer_passive_openmp()
    try:
        with stops_unwrapped():  # a Ctrl-C while a class of the CLI's modules is created comes wrapped (3.11)
            from edgeprof.cli import main as run
    except KeyboardInterrupt as err:
        print(f"edgeprof: {getattr(err, 'reason', 'interrupted (SIGINT)')} while starting; nothing was written",
              file=sys.stderr, flush=True)
        raise SystemExit(exit_code(err)) from None
    run()


if __name__ == "__main__":
    main()
