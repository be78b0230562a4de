"""Opening a run's report: meters, energy conversion, the CSV and its sidecar; rows as windows close.

:func:`open_run` is the one way ``measure``, ``train``, ``sweep`` and the Flower server open a run: it
opens this machine's meters, measures the idle baseline when asked, finds the carbon intensity (or notes
why there is none), creates the CSV and a ``running`` sidecar, and always leaves a final sidecar
(``complete`` when the body finished, ``interrupted`` after a signal, ``failed`` with the reason after an
error) with the number of rounds on disk. What
differs between callers is only the sidecar's extra sections (``finish``).

Order of work for callers: validate, check the output folder and load the data *before* calling
:func:`open_run`, so that bad input never leaves a report behind.

This is the drivers' set-up, so it sits with them: it makes the sampler (:mod:`edgeprof.measure.profiler`),
gives its window engine the report's phase-name check and starts its tracer, and turns each window's plain result
into a row through the report's schema and writer (:mod:`edgeprof.report`); neither of those imports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

from edgeprof.errors import EdgeprofError, OutputError
from edgeprof.meters.discovery import MeterSet
from edgeprof.measure.profiler import Profiler
from edgeprof.report.schema import check_phase_name, columns_for, row_from_window
from edgeprof.report.trace_file import TraceWriter, trace_csv_path
from edgeprof.report.writer import ReportWriter, check_writable, write_sidecar
from edgeprof.signals import STOP_EXCEPTIONS, HeldSignals, report_closed, stops_unwrapped

#: notes on what a run does without (no carbon data, ...); the CLI prints them as ``edgeprof: note: ...``
log = logging.getLogger("edgeprof")


@dataclass
class Energy:
    """How the run turns joules into net joules and grams: idle power and carbon intensity."""

    idle_power_w: Optional[float] = None
    carbon_g_per_kwh: Optional[float] = None
    sidecar: dict = field(default_factory=dict)
    #: one line each for what the run does without (printed by the CLI, kept in the sidecar)
    notes: list[str] = field(default_factory=list)


@dataclass
class RunContext:
    """What every window of a run shares: its id, the host's name in its rows, writer, profiler and energy
    conversion."""

    run_id: str
    host: str
    writer: ReportWriter
    profiler: Profiler
    energy: Energy
    #: the power trace beside the report (``--trace``), None when the run is not traced
    trace: Optional[TraceWriter] = None
    #: the sidecar's ``trace`` section once :func:`finish_trace` closed the trace
    trace_section: Optional[dict] = None

    #: rows in order, not written yet: (an ended window or None, its base cells or a ready row's arguments, held)
    _queue: deque = field(default_factory=deque, init=False, repr=False)

    def record(self, window, base: dict, *, held_rounds: Optional[int] = None) -> None:
        """The row of a window measured here (``base``: its identifying cells; ``held_rounds``: the repeats of the
        client's round it held, see :func:`~edgeprof.report.schema.row_from_window`), and its trace.

        Written as soon as its figures are made without waiting: at once, or, where a slow meter is read off the
        measured thread (:mod:`edgeprof.measure.series`), once its series has passed the window's end (at the next
        row, or at the run's end: :meth:`flush`); rows keep their order."""
        self._queue.append((window, base, held_rounds))
        self.flush(wait=False)

    def write(self, row: Mapping[str, object], trace: Optional[Sequence] = None, window: str = "") -> None:
        """Append one report row and, when the run is traced and the window it measured has a trace (a
        :class:`~edgeprof.results.TraceRow` sequence, here or a Flower client's), that trace labelled as it
        (after the rows still waiting for their figures, :meth:`record`)."""
        self._queue.append((None, (row, trace, window), None))
        self.flush(wait=False)

    def flush(self, wait: bool = True) -> None:
        """Write the rows waiting in order; with ``wait``, all of them (waiting for a slow meter's series), else those
        whose figures are ready now."""
        while self._queue:
            window, base, held = self._queue[0]
            if window is not None and not wait and not window.ready():
                return
            self._queue.popleft()
            if window is None:
                self._write(*base)
                continue
            result = window.result
            self._write(row_from_window(result, base, idle_power_w=self.energy.idle_power_w,
                                        carbon_g_per_kwh=self.energy.carbon_g_per_kwh, held_rounds=held),
                        result.trace, result.name)

    def _write(self, row: Mapping[str, object], trace: Optional[Sequence], window: str) -> None:
        index = self.writer.rows_written
        self.writer.write(row)
        if self.trace is not None and trace is not None:
            self.trace.write_window(trace, row, index, window=window)


def base_row(ctx: RunContext, cfg, round_index: int, kind: str, **extra) -> dict:
    """The identifying cells of a report row (run, host, algorithm, tau, seed, round, kind) plus ``extra``."""
    row = dict(run_id=ctx.run_id, host=ctx.host, algo=cfg.algo, engine=cfg.engine, dataset=cfg.dataset,
               backbone=cfg.backbone, tau=cfg.tau, seed=cfg.seed, round=round_index, kind=kind,
               timestamp_s=f"{time.time():.3f}")
    row.update(extra)
    return row


def make_run_id(cfg, prefix: Optional[str] = None) -> str:
    """``--run-name`` when given, else ``<algo>-tau<tau>-<time>-<random>`` (or ``<prefix>-<time>-<random>``)."""
    if cfg.run_name:
        return cfg.run_name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{prefix or f'{cfg.algo}-tau{cfg.tau}'}-{stamp}-{secrets.token_hex(2)}"


def open_meters(cfg, device: Optional[str] = None) -> MeterSet:
    """This machine's meters for ``cfg``; ``device`` (``cpu``, ``cuda:1``: where the round runs) tells NVML which
    GPU's energy is the round's (``gpu_j``); the others are measured beside it (``gpu_other_j``)."""
    from edgeprof.meters.discovery import discover
    from edgeprof.nn.compute import kind_of

    gpu = None if device is None else kind_of(device).nvml_device(device)  # the device kind says which GPU
    return discover(**{**cfg.energy.meter_settings, "gpu": gpu})


def open_energy(cfg, meters: MeterSet) -> Energy:
    """Idle baseline (when asked for) and carbon intensity (when known; else a note and no carbon)."""
    from edgeprof.meters import carbon, idle

    energy = Energy()
    if cfg.energy.idle_seconds > 0:
        baseline = idle.measure_idle(meters, cfg.energy.idle_seconds)
        energy.idle_power_w = baseline.total_power_w
        energy.sidecar["idle"] = baseline.describe()
    intensity, note = carbon.carbon_or_note(cfg.energy.country, region=cfg.energy.region,
                                            override_g_per_kwh=cfg.energy.carbon_intensity)
    if intensity is None:
        log.warning(note)
        energy.notes.append(note)
        energy.sidecar["carbon"] = {"g_per_kwh": None, "source": note}
    else:
        energy.carbon_g_per_kwh = intensity.g_per_kwh
        energy.sidecar["carbon"] = dataclasses.asdict(intensity)
    return energy


def sidecar_data(cfg, run_id: str, meters: MeterSet, energy: Energy, phases: Sequence[str], runtime=None,
                 **status) -> dict:
    """The sidecar every run shares: config, host, libraries, meters, energy, phases, notes, status."""
    from edgeprof.host import host_info, library_versions

    return {"run_id": run_id, "config": cfg.to_dict(), "host": host_info(),
            "libraries": library_versions(), "numerics": numerics(runtime),
            "meters": meters.describe(marks=runtime is not None and runtime.compute.can_mark()),
            "profiler_overhead": "wall",
            "energy": energy.sidecar, "phases": list(phases), "notes": list(energy.notes), **status}


def numerics(runtime=None) -> dict:
    """What a run's float results and speed depend on besides its seed: torch's threads, its CPU kernel family
    and the run's :class:`~edgeprof.nn.compute.Compute` (device, execution plan: memory format and chunks, and
    how it was chosen; ``execution`` repeats the plan as the list earlier sidecars had), and what ran the cached
    forward (``cached_forward``: ONNX Runtime and its providers, or torch on the device)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    out = {"torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "numpy_blas_threads_in_head_steps": 1}
    if runtime is not None:
        out.update(compute=runtime.compute.describe(), execution=[runtime.compute.plan.describe()],
                   cached_forward=runtime.forward_engine)
    return out


@dataclass
class ReportSession:
    """An open report: the context its windows write through, and how many rounds are on disk."""

    ctx: RunContext
    csv_path: Path
    sidecar_path: Path
    meters: MeterSet
    done: int = 0
    status: str = "interrupted"
    reason: str = ""

    def advance(self, progress: Optional[Callable[[int, int], None]], total: int) -> None:
        """Count one more finished round (or sweep cell) and report progress."""
        self.done += 1
        if progress:
            progress(self.done, total)


#: how a run ended, as its final sidecar says
STATUSES = ("complete", "interrupted", "failed")


def ending(err: BaseException | None) -> tuple[str, str]:
    """(status, reason) of a run that ended with ``err``: a signal interrupts, and so does the process's own exit
    with code 0 (a stop its host asked for: Flower's runtime turns ``flwr stop`` and a stop signal into
    ``sys.exit(0)`` under the ServerApp); anything else fails it."""
    if err is None:
        return "complete", ""
    if isinstance(err, STOP_EXCEPTIONS):  # Ctrl-C, and SIGTERM / SIGHUP through edgeprof.signals
        return "interrupted", str(getattr(err, "reason", "") or "interrupted (SIGINT)")
    if isinstance(err, SystemExit):
        if err.code in (None, 0):
            return "interrupted", "interrupted (the process was asked to exit: SystemExit 0)"
        return "failed", f"the process exited during the run (SystemExit {err.code!r})"
    return "failed", " ".join(str(err).split()) or type(err).__name__


def _finish_sidecar(session: ReportSession, write: Callable[[], None]) -> None:
    """Write the final sidecar with signals held back, so a second Ctrl-C cannot leave ``running``."""
    from edgeprof.signals import signals_held

    with signals_held():
        try:
            write()
        except OutputError as err:
            if session.status == "complete":
                raise
            log.warning(f"could not record how the run ended: {err}")


def finish_trace(ctx: RunContext) -> dict:
    """Stop the run's tracer and close its trace file (Parquet where pyarrow is installed): the sidecar's
    ``trace`` section. Called once, however the run ended; a file that cannot be converted stays CSV."""
    if ctx.trace_section is None:
        windows = ctx.profiler.windows
        ticks = windows.stop_trace()
        section = {**ctx.trace.finish(), "ticks": ticks}
        if windows.trace_error is not None:  # a meter failed in a tick: the trace has the windows' edges after it
            section["notes"].append(f"the tracer stopped after {ticks} ticks: {windows.trace_error}")
        ctx.trace_section = section
    return ctx.trace_section


@contextlib.contextmanager
def open_run(cfg, *, run_id: str, phases: Sequence[str],
             finish: Callable[[dict], dict] = lambda data: data, profiler: Optional[Profiler] = None,
             columns: Optional[Sequence[str]] = None, runtime=None) -> Iterator[ReportSession]:
    """Open meters, energy, the CSV and a ``running`` sidecar; yield the session; always close them.

    ``finish(data)`` adds the caller's sections to the sidecar (written at the start and at the end). The
    final sidecar says ``complete``, ``interrupted`` (a signal) or ``failed`` with the ``reason``.
    ``profiler``: a ready one over the caller's meters (tests: fake clocks and meters), closed with the run
    like meters opened here; ``columns``: the header, when not :func:`columns_for` ``(phases)``; ``runtime``: the
    run's :class:`~edgeprof.algorithms.contract.Runtime`, whose Compute (device, plan, threads) and cached-forward
    engine the sidecar records (``numerics``).
    """
    out = check_writable(cfg.out)
    meters = (open_meters(cfg, None if runtime is None else runtime.compute.device) if profiler is None
              else profiler.meters)
    try:
        energy = open_energy(cfg, meters)

        def sidecar(**status) -> dict:
            return finish(sidecar_data(cfg, run_id, meters, energy, phases, runtime, **status))

        hold = HeldSignals()  # a Ctrl-C while the report is created waits until it can say "interrupted"
        try:
            session = _create(cfg, out, run_id, columns or columns_for(phases), sidecar, meters=meters,
                              energy=energy, profiler=profiler, runtime=runtime)
        except BaseException:
            hold.release(deliver=False)
            raise
        with session.ctx.writer:
            error: BaseException | None = None
            try:
                hold.release()  # raised here, a held Ctrl-C ends the run as interrupted with its report whole
                with stops_unwrapped():  # a Ctrl-C that Python wrapped still interrupts, never fails, the run
                    yield session
                    session.ctx.flush()  # the rows still waiting for a slow meter's series
            except BaseException as err:
                error = err
                if isinstance(err, (*STOP_EXCEPTIONS, EdgeprofError)) and not isinstance(err, OutputError):
                    err.report = session.csv_path  # the CLI's line names the report that keeps the finished rounds
                    # (a report that could not be written names itself and what it kept)
                raise
            finally:
                _close(session, sidecar, error)
    finally:
        meters.close()


def _create(cfg, out: Path, run_id: str, columns: Sequence[str], sidecar: Callable[..., dict], *, meters: MeterSet,
            energy: Energy, profiler: Optional[Profiler], runtime) -> ReportSession:
    """The CSV, the ``running`` sidecar, the run's context and (``--trace``) its trace file; on any error, a
    Ctrl-C included, whatever it wrote is removed: a run that recorded nothing leaves no report at all."""
    from edgeprof.host import host_label

    csv_path, sidecar_path = out / f"{run_id}.csv", out / f"{run_id}.json"
    writer = ReportWriter(csv_path, columns)
    sidecar_written, ctx = False, None
    try:
        write_sidecar(sidecar_path, sidecar(status="running"), reserve=True)
        sidecar_written = True
        device = None if runtime is None else runtime.compute  # synchronised at every window and phase edge
        ctx = RunContext(run_id, host_label(), writer, profiler or Profiler(meters, device=device), energy)
        ctx.profiler.windows.check_phase = check_phase_name  # a phase's columns must be none of the report's own
        hz = cfg.energy.trace_hz
        if hz:
            ctx.trace = TraceWriter(trace_csv_path(csv_path), hz)
            ctx.profiler.windows.start_trace(hz)
        return ReportSession(ctx, csv_path, sidecar_path, meters)
    except BaseException:
        writer.close()
        csv_path.unlink(missing_ok=True)
        if sidecar_written:
            sidecar_path.unlink(missing_ok=True)
        if ctx is not None and ctx.trace is not None:
            ctx.profiler.windows.stop_trace()
            ctx.trace.close()
            ctx.trace.path.unlink(missing_ok=True)
        raise


def _close(session: ReportSession, sidecar: Callable[..., dict], error: BaseException | None) -> None:
    """The final sidecar: how the run ended (``error``), its rounds and rows, its trace and any divergence.

    It is written with signals held back. A stop that landed just before (held, then raised at the write) ends
    the run itself, written as such; one held during the write is raised after it. Either way the stop names
    the report, and whether the run had completed."""
    ctx, writer, written = session.ctx, session.ctx.writer, []
    if error is not None:  # keep every window that ended: its row, once its slow meter's series has passed it
        try:
            ctx.flush()
        except Exception as err:  # the run has failed or stopped already: say it, keep what is written
            log.warning(f"rows of windows that ended could not be written: {err}")

    def final(err: BaseException | None) -> None:
        session.status, session.reason = ending(err)
        extra = {"reason": session.reason} if session.reason else {}
        ctx.profiler.close()  # the slow meters' series: every window that will be measured has been
        extra["profiler"] = ctx.profiler.describe()
        if ctx.trace is not None:
            extra["trace"] = finish_trace(ctx)
        if writer.diverged is not None:
            extra["diverged"] = writer.diverged

        def write() -> None:
            write_sidecar(session.sidecar_path, sidecar(status=session.status, rounds_completed=session.done,
                                                        rows=writer.rows_written, **extra))
            written.append(session.status)
            report_closed(session.csv_path, complete=session.status == "complete")  # a later stop names it

        _finish_sidecar(session, write)

    try:
        final(error)
    except STOP_EXCEPTIONS as late:  # a stop that landed before the write held the signals back,
        if not written:                # or one held during it and raised after
            final(late)
        late.report, late.report_complete = session.csv_path, written[-1:] == ["complete"]
        raise
