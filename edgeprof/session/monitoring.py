"""Profile your own code: :func:`monitor` runs windows with phases inside and writes an edgeprof report.

The shapes are those people know: Zeus's ``begin_window`` / ``end_window``, codecarbon's tracker (``start`` /
``stop`` or a ``with`` block) and its decorator; edgeprof adds phases, one report row per window, labels, and
the method of every figure::

    import edgeprof

    with edgeprof.monitor(out="profiles", name="mlp", labels={"model": "mlp"}) as mon:
        for epoch in range(1, 4):
            with mon.window("epoch", round=epoch):
                for x, y in batches:
                    with mon.phase("forward"):
                        loss = loss_fn(model(x), y)
                    with mon.phase("backward"):
                        loss.backward()
    # profiles/mlp-<time>-<random>.csv and .json, read by `edgeprof summary` and `edgeprof dashboard`

Meters are this machine's, opened as ``edgeprof measure`` opens them
(:func:`edgeprof.meters.discovery.discover`): every figure is ``counter``, ``integrated_power`` or
``estimate`` exactly as there, an estimate always labelled ``estimate``. The report goes through the
machinery of every run (:func:`edgeprof.session.run.open_run`): the same CSV schema plus the ``window``
and ``labels`` columns, rows flushed as their windows end, a sidecar that says ``running`` and finally
``complete``, ``interrupted`` or ``failed``. Phase columns join the header when a phase is first entered
(:meth:`~edgeprof.report.writer.ReportWriter.add_columns`); ``phases=`` declares them up front.

Rows and labels. Every window ends as one row of kind ``window`` (or the ``kind`` given: ``client``,
``server`` and ``eval`` rows are read as federated client rounds, server steps and evaluations), with its
name in ``window``. Labels (the monitor's, then the window's) are :mod:`edgeprof.session.row_labels`: one that names a
report column fills it, every other goes into ``labels`` as compact JSON, one named after a column the monitor
fills itself (``wall_s``, ``kind``, ...) is refused.

Nesting and overlap (:mod:`edgeprof.measure.windows`): windows may nest and overlap freely, each with its own start
sample of the shared meters; but each sees all the machine's energy, so overlapping windows double count
(the sidecar's ``monitor`` section says how many overlapped); a window opened while another is open has no
peak RSS of its own (its ``peak_rss_mb`` is empty); the phases of one window never overlap.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import re
import signal
import threading
import time
from pathlib import Path
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from edgeprof.errors import MonitorError
from edgeprof.measure import windows as engine
from edgeprof.measure.profiler import Profiler
from edgeprof.measure.windows import OpenWindow, Windows, current_window
from edgeprof.report.schema import MEASURED_COLUMNS, check_phase_name
from edgeprof.results import WindowResult
from edgeprof.session.measurement import Measurement, MonitorConfig
from edgeprof.session.row_labels import labels_cell, split_labels
from edgeprof.session.wrapping import in_window

if TYPE_CHECKING:
    from edgeprof.config import EnergySettings

__all__ = ["monitor", "Monitor", "MonitorWindow", "WindowLabels", "phase"]


def _split(labels: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """:func:`split_labels`, and MonitorError for labels whose report cell would be longer than the report's reader
    takes (:data:`~edgeprof.report.writer.MAX_CELL_CHARS`): the report is never written with a row it rejects."""
    from edgeprof.report.writer import MAX_CELL_CHARS

    cells, other = split_labels(labels)
    for column, cell in {**cells, "labels": labels_cell(other)}.items():
        if len(cell) > MAX_CELL_CHARS:
            key = column if column != "labels" else max(other, key=lambda k: len(labels_cell({k: other[k]})))
            raise MonitorError(f"label {key!r} makes the report's {column} cell {len(cell)} characters, more than "
                               f"the {MAX_CELL_CHARS} a report's reader takes; shorten it")
    return cells, other


OVERLAP_NOTE = ("{n} window(s) overlapped another window: each window's energy and CPU seconds are everything the "
                "machine (the process) spent while it was open, so the rows of overlapping windows double count; "
                "never add them up")
PEAK_NOTE = ("{n} window(s) opened while another was open have no peak RSS of their own (peak_rss_mb empty): the "
             "kernel's high-water mark is reset for the whole process, only when no window is open")


class _NotStopped(KeyboardInterrupt):
    """How a monitor that was never stopped ends: as interrupted, with this reason (see :meth:`Monitor.start`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WindowLabels(MutableMapping):
    """The labels of one window (the monitor's, then the window's own), settable while the window is open.

    ``w.labels["train_loss"] = loss`` or ``w.labels.update(test_accuracy=acc)`` before the window ends label its
    row; each label is checked as it is set (:mod:`edgeprof.session.row_labels`: MonitorError, one line), and
    setting or removing one once the window has ended (its row written) is a MonitorError."""

    def __init__(self, window: "MonitorWindow", labels: Mapping[str, Any]) -> None:
        self._window = window
        self._data = dict(labels)

    def _open(self, key: str) -> None:
        if not self._window.is_open:
            raise MonitorError(f"window {self._window.name!r} has ended and its row is written: label {key!r} "
                               "must be set while the window is open")

    def __setitem__(self, key: str, value: Any) -> None:
        self._open(key)
        _split({**self._data, key: value})
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        self._open(key)
        del self._data[key]

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)


class MonitorWindow:
    """An open window of a :class:`Monitor`; ``phase(name)`` marks a part of it, ``labels`` label its row while
    it is open (:class:`WindowLabels`), ``measurement`` holds its figures once ended."""

    def __init__(self, win: OpenWindow, kind: str, labels: Mapping[str, Any]) -> None:
        self._win = win
        self.kind = kind
        self.labels = WindowLabels(self, labels)
        self._error: Optional[str] = None  # the type of the exception the window's body raised
        self.measurement: Optional[Measurement] = None

    @property
    def name(self) -> str:
        return self._win.name

    @property
    def is_open(self) -> bool:
        return self._win.is_open

    def phase(self, name: str):
        """A context manager: the body is phase ``name`` of this window."""
        return self._win.phase(name)

    def __repr__(self) -> str:
        return f"<MonitorWindow {self.name!r} {'open' if self.is_open else 'ended'}>"


class Monitor:
    """A run of windows written as one report; start it with ``with`` or :meth:`start` / :meth:`stop`.

    Construct it with :func:`monitor`; constructing opens nothing (meters and files open at :meth:`start`),
    so functions can be decorated with :meth:`measure` before the run starts. A monitor runs once.
    """

    def __init__(self, config: MonitorConfig, *, profiler: Optional[Profiler] = None) -> None:
        self.config = config
        self._profiler = profiler
        self._stack: Optional[contextlib.ExitStack] = None
        self._session = None
        self._windows: Optional[Windows] = None
        self._named: dict[str, MonitorWindow] = {}
        self._lock = threading.RLock()
        self._state = "new"
        self._counts: dict[str, int] = {}
        self._overlapped = 0
        self._no_peak = 0
        self._unclosed: list[str] = []
        self._signals: list[int] = []  # the stop signals that came while the monitor ran (SIGTERM, SIGHUP)
        self._rounds: set[str] = set()  # the ``round`` cells of the rows written: the sidecar's rounds_completed
        #: extra sidecar sections (name -> JSON-able data), written with the final sidecar
        self.sidecar_sections: dict[str, Any] = {}

    # --- the run --------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def run_id(self) -> Optional[str]:
        return self._session.ctx.run_id if self._session else None

    @property
    def csv_path(self) -> Optional[Path]:
        return self._session.csv_path if self._session else None

    @property
    def sidecar_path(self) -> Optional[Path]:
        return self._session.sidecar_path if self._session else None

    def start(self) -> "Monitor":
        """Open the meters, the CSV and a ``running`` sidecar (ConfigError for a bad country, OutputError ...)."""
        from edgeprof.report.schema import columns_for
        from edgeprof.session.run import make_run_id, open_run

        if self._state != "new":
            raise MonitorError("a monitor runs once; open a new one with edgeprof.monitor(...)")
        cfg = self.config
        stack = contextlib.ExitStack()
        self._session = stack.enter_context(open_run(
            cfg, run_id=make_run_id(cfg, prefix=cfg.name), phases=cfg.phases, finish=self._finish,
            profiler=self._profiler, columns=columns_for(cfg.phases, generic=True)))
        self._windows = self._session.ctx.profiler.windows
        from edgeprof.signals import handle_termination

        # SIGTERM and SIGHUP (main thread): recorded, then the program's own handler runs; left at their default,
        # they end the run as in measure, and one the program does not catch ends it with one line and 143 / 129
        stack.enter_context(handle_termination(program=True, heard=self._signals.append,
                                               report=self._session.csv_path))
        atexit.register(self._at_exit)
        stack.callback(atexit.unregister, self._at_exit)
        self._stack, self._state = stack, "running"
        return self

    def _at_exit(self) -> None:
        """A monitor the program never stopped: closed as the interpreter exits, its sidecar saying so: ended by
        the uncaught exception the program died of (a SIGTERM: interrupted), else interrupted, not stopped."""
        import sys

        died_of = getattr(sys, "last_value", None)  # set by the interpreter for an uncaught exception
        self.stop(died_of if isinstance(died_of, BaseException) else
                  _NotStopped("interrupted (the program exited without stopping the monitor)"))

    def stop(self, error: Optional[BaseException] = None) -> None:
        """Close the report: the final sidecar says ``complete`` (or, given the ``error`` that ended the run,
        ``interrupted`` or ``failed``). Windows still open are not recorded; the sidecar names them.

        A stop signal that came while the monitor ran and that the program's own handler took (SIGTERM, SIGHUP)
        makes the run ``interrupted (SIGTERM)`` when it then ends normally or by the program's own exit
        (``sys.exit``); its ``monitor`` section lists the signals that came."""
        from edgeprof.signals import Terminated

        if self._state != "running":
            return
        if self._signals and (error is None or isinstance(error, SystemExit)):
            error = Terminated(self._signals[0])  # how the sidecar tells the run's end; the caller's error goes on
        with self._lock:
            for win in self._windows.open_windows:
                self._unclosed.append(win.name)
                self._windows.discard(win)
            self._named.clear()
            self._state = "stopped"
        if error is None:
            self._stack.close()
        else:
            self._stack.__exit__(type(error), error, error.__traceback__)

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop(exc)
        return False

    def _finish(self, data: dict) -> dict:
        """The sidecar's ``phases`` (as in the header now) and ``monitor`` sections, and the callers' own."""
        from edgeprof.report.schema import BESIDE_ROUND

        columns = self._session.ctx.writer.columns if self._session else ()
        phases = [c[: -len("_cpu_s")] for c in columns
                  if c.endswith("_cpu_s") and c[: -len("_cpu_s")] not in BESIDE_ROUND] or list(self.config.phases)
        notes = ([OVERLAP_NOTE.format(n=self._overlapped)] if self._overlapped else []) + (
            [PEAK_NOTE.format(n=self._no_peak)] if self._no_peak else [])
        section = {"name": self.config.name, "labels": dict(self.config.labels), "windows": dict(self._counts),
                   "overlapping_windows": self._overlapped, "windows_without_peak_rss": self._no_peak,
                   "unclosed_windows": list(self._unclosed), "notes": notes,
                   "signals": [signal.Signals(s).name for s in self._signals]}
        return {**data, "phases": phases, "monitor": section, **self.sidecar_sections}

    # --- windows --------------------------------------------------------------------------------------------
    def _check(self, name: str, kind: str) -> None:
        from edgeprof.report.schema import ROW_KINDS

        if self._state != "running":
            raise MonitorError("the monitor is not running: use `with edgeprof.monitor(...) as mon:` or mon.start()")
        if not isinstance(name, str) or not name.strip() or len(name) > 200 or not name.isprintable():
            got = f"{len(name):,} characters" if isinstance(name, str) and len(name) > 200 else repr(name)
            raise MonitorError(f"a window name is printable text of 1 to 200 characters, got {got}")
        if kind not in ROW_KINDS:
            raise MonitorError(f"kind {kind!r} is not one of {', '.join(ROW_KINDS)}")

    def _begin(self, name: str, kind: str, labels: Mapping[str, Any]) -> MonitorWindow:
        self._check(name, kind)
        merged = {**self.config.labels, **labels}
        _split(merged)
        return MonitorWindow(self._windows.begin(name), kind, merged)

    def _end(self, mw: MonitorWindow, close_phase: bool = False) -> Measurement:
        self._windows.end(mw._win, close_phase=close_phase)
        result = mw._win.result  # its row is written now: a slow meter's series is waited for
        with self._lock:
            row = self._row(mw, result)
            self._write(row, result.trace, mw.name)
            self._counts[mw.name] = self._counts.get(mw.name, 0) + 1
            self._overlapped += mw._win.overlapped
            self._no_peak += not mw._win.peak_rss_exact
        mw.measurement = Measurement(mw.name, mw.kind, dict(mw.labels), result, row, mw._win.overlapped)
        return mw.measurement

    def _base(self, name: str, kind: str, cells: Mapping[str, str], other: Mapping[str, Any]) -> dict:
        ctx = self._session.ctx
        return {"run_id": ctx.run_id, "host": ctx.host, **cells, "kind": kind, "window": name,
                "labels": labels_cell(other), "timestamp_s": f"{time.time():.3f}"}

    def _row(self, mw: MonitorWindow, result: WindowResult) -> dict[str, str]:
        from edgeprof.report.schema import row_from_window

        energy = self._session.ctx.energy
        cells, other = _split(mw.labels)  # as they are now: set while the window was open
        if mw._error is not None:  # the row says how the window ended: its labels carry the exception's type
            other["error"] = mw._error
        row = row_from_window(result, self._base(mw.name, mw.kind, cells, other),
                              idle_power_w=energy.idle_power_w, carbon_g_per_kwh=energy.carbon_g_per_kwh)
        if not mw._win.peak_rss_exact:
            row["peak_rss_mb"] = ""
        return row

    def _write(self, row: Mapping[str, str], trace: Optional[Sequence] = None, window: str = "") -> None:
        """The row (new label and phase columns join the header first) and, when traced, its window's trace."""
        writer = self._session.ctx.writer
        missing = [c for c in row if c not in writer.columns]
        if missing:
            writer.add_columns(missing)
        self._session.ctx.write(row, trace, window)
        if row.get("round"):  # the sidecar's rounds_completed: the rounds the rows name (Flower: its rounds)
            self._rounds.add(row["round"])
            self._session.done = len(self._rounds)

    @contextlib.contextmanager
    def window(self, name: str, /, *, kind: str = "window", **labels: Any) -> Iterator[MonitorWindow]:
        """Measure the body as one window (one report row); ``labels`` as described in the module docstring.

        The window ends, and its row is written, also when the body raises; that row's labels then say
        ``"error": "<the exception's type>"``.
        """
        mw = self._begin(name, kind, labels)
        try:
            yield mw
        except BaseException as err:
            if mw.is_open:  # the row says how the window ended: its labels carry the exception's type
                mw._error = type(err).__name__
                self._end(mw, close_phase=True)  # a phase the exception left before its exit ran ends here
            raise
        if mw.is_open:
            self._end(mw)

    def begin_window(self, name: str, /, *, kind: str = "window", **labels: Any) -> MonitorWindow:
        """Open window ``name`` for callback-style code; :meth:`end_window` with the same name closes it.

        A name can be open only once through ``begin_window`` at a time (``end_window`` finds it by name).
        """
        with self._lock:
            if name in self._named:
                raise MonitorError(f"window {name!r} is already open; end it with end_window({name!r}) first, "
                                   "or begin another name")
            mw = self._begin(name, kind, labels)
            self._named[name] = mw
        return mw

    def end_window(self, name: "str | MonitorWindow", /) -> Measurement:
        """Close the window that :meth:`begin_window` opened as ``name`` (or the window it returned); write its row;
        return its figures."""
        with self._lock:
            if isinstance(name, MonitorWindow):
                if self._named.get(name.name) is not name:  # begin_window keeps each window under its name
                    raise MonitorError("end_window: that window is not open through this monitor's begin_window "
                                       "(ended already, or a with-block's window, which ends with its block)")
                name = name.name
            elif not isinstance(name, str):
                raise MonitorError(f"end_window takes the window's name or the window begin_window returned, got "
                                   f"{name!r}")
            mw = self._named.pop(name, None)
        if mw is None:
            raise MonitorError(f"no window {name!r} is open: begin it with begin_window({name!r}) first")
        return self._end(mw)

    def phase(self, name: str):
        """A context manager: the body is phase ``name`` of this monitor's innermost window open here."""
        win = current_window(self._windows) if self._windows is not None else None
        if win is None:
            raise MonitorError(f"phase {name!r} outside any window of this monitor: a phase is a part of a "
                               "window; open one with mon.window(...) or mon.begin_window(...)")
        return win.phase(name)

    def measure(self, fn: Optional[Callable] = None, /, *, name: Optional[str] = None, kind: str = "window",
                returns: "str | Callable[[Any], Mapping[str, Any]] | None" = None, **labels: Any):
        """Decorator: every call of the function is a window, named after it (its qualified name without an
        enclosing function's ``<locals>``) unless a name is given.

        ``@mon.measure``, ``@mon.measure("step")`` or ``@mon.measure(name="step", model="mlp")``; coroutine
        functions are awaited inside their window; a generator (or async generator) function's window spans its
        whole iteration, from the first item asked for to its end (what the consumer does between items
        included; one it never finishes ends when it is closed or collected). A call that recurses opens a
        window inside the caller's (and double counts, as nested windows do). Calling the function while the
        monitor is not running is a MonitorError.

        ``returns`` labels each call's row with what the call returns, set before its window ends:
        ``returns="test_accuracy"`` makes the return value that label; a function, ``returns=lambda r: {"test_loss":
        r[0], "test_accuracy": r[1]}``, makes labels of it. A call that returns None adds no label; a label that is
        refused (``test_accuracy`` not a finite number) is a MonitorError raised by the call, whose row then says
        ``"error": "MonitorError"``. An async generator returns nothing: ``returns`` is refused for one.
        """
        if isinstance(fn, str):  # @mon.measure("step"): the name, as codecarbon's and Zeus's decorators take it
            fn, name = None, fn
        if fn is not None and not callable(fn):
            raise MonitorError(f"mon.measure takes a function or a window name, got {fn!r}")
        if returns is not None and not (callable(returns) or isinstance(returns, str) and returns):
            raise MonitorError(f"returns= takes a label name or a function of the return value, got {returns!r}")
        _split({**self.config.labels, **labels})  # a bad label fails here, not at the first call

        def label(mw: MonitorWindow, value: Any) -> None:
            if value is None:
                return
            found = returns(value) if callable(returns) else {returns: value}
            if not isinstance(found, Mapping):
                raise MonitorError(f"returns= gave {found!r} for the value {value!r}: it must give a mapping of labels")
            mw.labels.update(found)

        def wrap(func: Callable) -> Callable:
            if returns is not None and inspect.isasyncgenfunction(func):
                raise MonitorError(f"{func.__qualname__} is an async generator function: it returns nothing for "
                                   "returns= to label a row with")
            window_name = name or re.sub(r".*<locals>\.", "", func.__qualname__)
            return in_window(func, lambda: self.window(window_name, kind=kind, **labels),
                             label if returns is not None else None)

        return wrap if fn is None else wrap(fn)

    # --- rows measured elsewhere ----------------------------------------------------------------------------
    def record(self, name: str, cells: Mapping[str, Any], /, *, kind: str = "window", trace: Optional[Sequence] = None,
               **labels: Any) -> dict:
        """Write a row measured elsewhere (a Flower client's profile), as window ``name``: ``cells`` are report
        cells (numbers or strings) of the measured columns, the meter columns and ``<phase>_*`` columns;
        others are left out. ``trace``: that window's power trace (:class:`~edgeprof.results.TraceRow`
        rows, a traced Flower client's), written to this run's trace file when it is traced. Returns the row
        written."""
        from edgeprof.report.schema import domain_columns, format_cells, phase_columns_of

        self._check(name, kind)
        label_cells, other = _split({**self.config.labels, **labels})
        allowed = set(MEASURED_COLUMNS) | set(domain_columns()) | phase_columns_of(cells)
        row = self._base(name, kind, label_cells, other)
        row.update(format_cells(cells, allowed))
        with self._lock:
            self._write(row, trace, name)
            self._counts[name] = self._counts.get(name, 0) + 1
        return row


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark the body as phase ``name`` of the innermost window open here; outside any window, do nothing.

    The windows are those of :func:`edgeprof.monitor` and of the Flower mod
    (:func:`edgeprof.flower.energy.energy_mod`), so code that runs inside a profiled ClientApp, or that may or may
    not be profiled, marks its phases with ``with edgeprof.phase("forward"): ...``. A name that cannot head a
    report's phase columns, or would write into one of its own columns, is a MonitorError, in a window or not
    (:func:`edgeprof.report.schema.check_phase_name`; in a window, its engine checks it:
    :func:`edgeprof.measure.windows.phase`).
    """
    if current_window() is None:
        check_phase_name(name)
    with engine.phase(name):
        yield


def monitor(out: str | Path = "profiles", name: Optional[str] = None, labels: Optional[Mapping[str, Any]] = None,
            *, run_id: Optional[str] = None, phases: Sequence[str] = (), idle_seconds: float = 0.0,
            country: Optional[str] = None, region: Optional[str] = None, carbon_intensity: Optional[float] = None,
            meter_settings: Optional[Mapping[str, Any]] = None, energy: Optional["EnergySettings"] = None,
            profiler: Optional[Profiler] = None, trace_hz: float = 0.0, **meter_options: Any) -> Monitor:
    """A :class:`Monitor` writing ``<out>/<run id>.csv`` and ``.json``; use it in ``with`` or start it.

    ``name`` prefixes the run id (default ``monitor``: ``monitor-<time>-<random>``); ``run_id`` gives the id
    whole. ``labels`` go on every row (module docstring). ``phases`` declares phase columns up front (others
    join the header when first entered). ``idle_seconds``, ``country``, ``region``, ``carbon_intensity`` and each
    meter option of the registered back-ends by its name (``meter_options``, :func:`edgeprof.meters.registry.options`:
    the CPU estimate's watts per busy core, the Jetson rails' sampling rate): as the options of ``edgeprof measure``;
    ``meter_settings``: any setting a meter back-end declares, by name; or all of them whole as ``energy`` (an
    :class:`~edgeprof.config.EnergySettings`). ``trace_hz``: write the power trace of every window
    (``<run id>.trace.parquet``, or CSV without pyarrow) at that many samples a second, e.g. 50 (0: none). ``profiler``: a ready :class:`~edgeprof.measure.profiler.Profiler` over its
    own meters and clocks (tests: fake ones).
    """
    from edgeprof.config import EnergySettings

    if energy is None:
        energy = EnergySettings.of(meter_settings=meter_settings, idle_seconds=idle_seconds, country=country,
                                   region=region, carbon_intensity=carbon_intensity, trace_hz=trace_hz,
                                   **meter_options)
    config = MonitorConfig(out=Path(out), name=name or "monitor", run_id=run_id, labels=dict(labels or {}),
                           phases=tuple(phases), energy=energy)
    return Monitor(config, profiler=profiler)
