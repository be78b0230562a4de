"""The monitor API under random use: a hypothesis state machine opens and ends windows by name and by ``with``,
nests and overlaps them (from two threads too), marks phases, raises inside windows, calls decorated functions
and misuses the API, on a fake machine whose clocks and counters move only when the test runs something.

Invariants: nothing crashes with anything but the API's own one-line MonitorError; every window that ended is one
row, none other; each window's figures are exact (the power meter draws 10 W, every step a power of two, so
energy = 10 x wall seconds holds to the bit); the run ends complete with as many rows as the sidecar counts.
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

from edgeprof.errors import MonitorError  # noqa: E402
from edgeprof.report import read_report  # noqa: E402
from test_monitor import DRAM_W, PKG_W, Machine, profiler, run_monitor  # noqa: E402

NAMES = st.sampled_from(["a", "b", "c"])
STEPS = st.sampled_from([2.0**-k for k in range(0, 6)])
PHASES = st.sampled_from(["load", "train"])


class Boom(Exception):
    pass


class MonitorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        from pathlib import Path

        self.tmp = Path(tempfile.mkdtemp(prefix="edgeprof-fuzz-"))
        self.machine = Machine()
        self.mon = run_monitor(self.tmp, profiler(self.machine)).start()
        self.named: set[str] = set()  # open through begin_window
        self.measurements: list = []

        @self.mon.measure("decorated")
        def work(step: float) -> float:
            self.machine.run(step)
            return step

        self.work = work

    @rule(name=NAMES)
    def begin(self, name):
        if name in self.named:
            with pytest.raises(MonitorError):
                self.mon.begin_window(name)
            return
        self.mon.begin_window(name)
        self.named.add(name)

    @rule(name=NAMES)
    def end(self, name):
        if name not in self.named:
            with pytest.raises(MonitorError):
                self.mon.end_window(name)
            return
        self.measurements.append(self.mon.end_window(name))
        self.named.discard(name)

    @rule(step=STEPS)
    def run(self, step):
        self.machine.run(step)

    @rule(name=NAMES, step=STEPS, phase=PHASES, raises=st.booleans())
    def with_window(self, name, step, phase, raises):
        try:
            with self.mon.window(f"w-{name}") as win:
                with win.phase(phase):
                    self.machine.run(step)
                if raises:
                    raise Boom()
        except Boom:
            pass
        self.measurements.append(win.measurement)

    @rule(step=STEPS, other=STEPS)
    def window_in_another_thread(self, step, other):
        """A window opened in another thread stays open while this thread measures one of its own: they
        overlap, each in its own context (neither is the other's innermost window)."""
        import threading

        opened, release, done = threading.Event(), threading.Event(), []

        def worker():
            with self.mon.window("thread") as win:
                self.machine.run(step)
                opened.set()
                release.wait(10)
            done.append(win.measurement)

        thread = threading.Thread(target=worker)
        thread.start()
        assert opened.wait(10)
        with self.mon.window("main") as mine:
            self.machine.run(other)
        release.set()
        thread.join(10)
        assert done and mine.measurement.overlapped and done[0].overlapped
        self.measurements += [mine.measurement, done[0]]

    @rule(step=STEPS)
    def decorated(self, step):
        assert self.work(step) == step
        self.measurements.append(None)  # its row is counted; its figures are checked from the report

    @rule(phase=PHASES, step=STEPS)
    def phase_of_innermost(self, phase, step):
        if not self.named:
            return
        try:
            with self.mon.phase(phase):
                self.machine.run(step)
        except MonitorError:  # a phase of that window is open already (phases of one window never overlap)
            pass

    @invariant()
    def figures_are_exact(self):
        for m in self.measurements[-3:]:
            if m is not None:
                span = m.result.span
                assert sum(span.energy_j.values()) == (PKG_W + DRAM_W) * span.wall_s

    def teardown(self):
        import json
        import shutil

        try:
            for name in list(self.named):
                self.measurements.append(self.mon.end_window(name))
            self.mon.stop()
            sidecar = json.loads(self.mon.csv_path.with_suffix(".json").read_text())
            assert sidecar["status"] == "complete" and sidecar["rows"] == len(self.measurements)
            if self.measurements:  # a report without rows is refused by the reader (nothing to summarize)
                assert len(read_report(self.mon.csv_path).rows) == len(self.measurements)
        finally:  # each example has its own folder; none is left in the system's temp folder
            shutil.rmtree(self.tmp, ignore_errors=True)


TestMonitorUnderRandomUse = MonitorMachine.TestCase
TestMonitorUnderRandomUse.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                              derandomize=True)
