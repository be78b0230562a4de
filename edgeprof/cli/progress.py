"""What a person sees while edgeprof works: a set-up line, then bars whose clocks start after set-up.

``measure``, ``train`` and ``sweep`` hand :meth:`Display.stage` to the run as its set-up reporter, so
the screen says what is happening ("loading the embedded digits ...", "building the cnn-omniglot backbone
... exporting to ONNX") instead of sitting at ``0/N``. Each run then gets its own bar, added only when
its set-up is over, so its elapsed time and ETA cover rounds alone; in ``train`` one algorithm's bar
never absorbs the next one's set-up. A sweep's bar advances by each cell's expected cost
(:func:`edgeprof.rounds.sweep.cell_weights`), not by cell count, so its ETA is not fooled by a FedAvg cell at
tau=100 costing a hundred PFLEGO cells.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TaskProgressColumn,
                           TextColumn, TimeElapsedColumn, TimeRemainingColumn)

ProgressFn = Callable[[int, int], None]


class Display:
    """A rich live display, or nothing at all when ``enabled`` is False (``--no-progress``)."""

    def __init__(self, enabled: bool, console: Optional[Console] = None) -> None:
        self.enabled = enabled
        self._console = console
        self._progress: Optional[Progress] = None
        self._setup: Optional[TaskID] = None

    def __enter__(self) -> "Display":
        if self.enabled:
            self._progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                                      TextColumn("eta"), TimeRemainingColumn(), console=self._console,
                                      transient=False)
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            if self._setup is not None:
                self._progress.remove_task(self._setup)
                self._setup = None
            if not self._progress.tasks:  # nothing left to show (set-up failed or was stopped): no blank line, which
                self._progress.live.stop()  # Progress.stop adds on a console that is not a terminal
            else:
                self._progress.stop()

    def stage(self, text: str) -> None:
        """Show ``set-up: text`` on its own line (the line goes away when the next bar starts)."""
        if self._progress is None:
            return
        if self._setup is None:
            self._setup = self._progress.add_task(f"set-up: {text}", total=None)
        else:
            self._progress.update(self._setup, description=f"set-up: {text}")

    def _end_setup(self) -> None:
        if self._progress is not None and self._setup is not None:
            self._progress.remove_task(self._setup)
            self._setup = None

    def bar(self, label: str, total: int) -> Optional[ProgressFn]:
        """A bar of ``total`` rounds that starts now; returns the run's ``progress(done, total)``."""
        if self._progress is None:
            return None
        self._end_setup()
        task = self._progress.add_task(label, total=total)
        progress = self._progress
        return lambda done, _total: progress.update(task, completed=done)

    def weighted_bar(self, label: str, weights: Sequence[float]) -> Optional[ProgressFn]:
        """A bar over items of unequal expected cost: item i advances it by ``weights[i]`` (they sum to 1).

        The bar counts in thousandths of the whole; the label shows items done out of all.
        """
        if self._progress is None:
            return None
        self._end_setup()
        cumulative = [0.0]
        for w in weights:
            cumulative.append(cumulative[-1] + w)
        n = len(weights)
        task = self._progress.add_task(f"{label} 0/{n}", total=1000)
        progress = self._progress

        def advance(done: int, _total: int) -> None:
            progress.update(task, completed=round(1000 * cumulative[done] / cumulative[-1]),
                            description=f"{label} {done}/{n}")

        return advance

    def stage_fn(self) -> Callable[[str], None]:
        return self.stage
