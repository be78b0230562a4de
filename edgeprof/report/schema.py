"""The CSV schema of an edgeprof report; docs/report.md documents every column.

Core columns come first and are the same in every report; then one ``<column>_j`` / ``<column>_method``
pair per energy report column that a registered meter back-end declares (in the order of
:mod:`edgeprof.meters.registry`, so a new back-end's columns join the header with no change here); then,
for every phase of the run's algorithms, ``<phase>_s``, ``<phase>_cpu_s`` and ``<phase>_j``. Empty cells
mean "not measured here" (never zero), or, beside a ``_method`` of ``invalid``, "a reading was implausible".

Reports of :func:`edgeprof.monitor` (a user's own code, a user's own Flower app) also have the
:data:`GENERIC_COLUMNS` right after the core ones: ``window`` (the window's name) and ``labels`` (the labels
that name no report column, as compact JSON); their rows are of kind ``window`` unless the code says
``client``, ``server`` or ``eval``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from edgeprof.errors import MonitorError
from edgeprof.meters import registry
from edgeprof.meters.base import INVALID
from edgeprof.results import check_phase_syntax

if TYPE_CHECKING:  # the schema reads windows' plain results; it never imports the engine that makes them
    from edgeprof.results import Span, WindowResult

#: the row columns that name what a round ran (its workload): rounds of different workloads are never pooled into one
#: figure (the dashboard's settings, :func:`edgeprof.report.dashboard.page.rows_of`; the energy to target)
WORKLOAD_COLUMNS = ("dataset", "backbone", "device_kind")

CORE_COLUMNS = (
    "run_id", "host", "algo", "engine", "dataset", "backbone", "tau", "seed", "round", "kind", "client",
    "n_samples", "n_participants", "train_loss", "test_accuracy", "eval_protocol",
    "wall_s", "cpu_s", "peak_rss_mb", "energy_j", "energy_method", "energy_net_j", "carbon_g",
    "short_window", "held_rounds", "profiler_overhead_s", "timestamp_s",
    "setup_s", "setup_cpu_s", "setup_j", "startup_s", "startup_cpu_s",
    "device_kind", "gpu_peak_mem_mb", "short_phases",
)

#: measured beside a Flower round, not phases of it (their ``*_cpu_s`` columns are no phase columns)
BESIDE_ROUND = ("setup", "startup")

#: the cells a row measured elsewhere brings (a Flower client's profile: the ServerApp's rows,
#: :meth:`edgeprof.session.monitoring.Monitor.record`), besides its meter and phase columns; the row's other core
#: cells name it, and are the writer's
MEASURED_COLUMNS = ("wall_s", "cpu_s", "peak_rss_mb", "energy_j", "energy_method", "carbon_g", "short_window",
                    "profiler_overhead_s", "setup_s", "setup_cpu_s", "setup_j", "startup_s", "startup_cpu_s",
                    "device_kind", "gpu_peak_mem_mb", "short_phases")

#: the ``kind`` of a report row, the one list (the writer reads rows back by it, ``edgeprof trace`` and the monitor
#: choose from it); ``window``: a window of a user's own code (:mod:`edgeprof.session.monitoring`)
ROW_KINDS = ("client", "server", "eval", "window")

#: columns of the reports that :func:`edgeprof.monitor` writes, after the core ones
GENERIC_COLUMNS = ("window", "labels")


def domain_columns() -> tuple[str, ...]:
    """``<column>_j`` and ``<column>_method`` for every report column of the registered meter back-ends."""
    return tuple(c for col in registry.report_columns() for c in (f"{col}_j", f"{col}_method"))


def check_phase_name(name: str) -> None:
    """MonitorError unless ``name`` can name a phase's columns (:func:`~edgeprof.results.check_phase_syntax`) and
    they, or the name itself, are none of the report's own (a core, generic or meter column; ``setup``,
    ``startup``). The window engine is given this check by whoever writes its windows into a report
    (``check_phase`` of :class:`edgeprof.measure.windows.Windows`)."""
    check_phase_syntax(name)
    taken = set(CORE_COLUMNS) | set(GENERIC_COLUMNS) | set(domain_columns())
    clash = [c for c in (f"{name}_s", f"{name}_cpu_s", f"{name}_j") if c in taken]
    if clash or name in BESIDE_ROUND:
        raise MonitorError(f"phase name {name!r} would write into the report's own column {(clash or [name])[0]!r}")


def phase_columns(phases: Sequence[str]) -> tuple[str, ...]:
    return tuple(c for p in phases for c in (f"{p}_s", f"{p}_cpu_s", f"{p}_j"))


def phase_columns_of(cells: Mapping[str, object]) -> set[str]:
    """The ``<phase>_s``, ``_cpu_s``, ``_j`` columns of the phases whose ``<phase>_cpu_s`` is a key of ``cells`` (a
    row measured elsewhere) and whose name is a valid, unclashing phase name (:func:`check_phase_name`)."""
    out: set[str] = set()
    for key in cells:
        if key.endswith("_cpu_s"):
            p = key[: -len("_cpu_s")]
            try:
                check_phase_name(p)
            except MonitorError:
                continue
            out |= {f"{p}_s", f"{p}_cpu_s", f"{p}_j"}
    return out


def columns_for(phases: Sequence[str], *, generic: bool = False) -> tuple[str, ...]:
    """The full header of a report whose algorithms have these client phases (``generic``: with the
    :data:`GENERIC_COLUMNS` of a monitor's report)."""
    return CORE_COLUMNS + (GENERIC_COLUMNS if generic else ()) + domain_columns() + phase_columns(phases)


def _fmt(value: float) -> str:
    return f"{value:.6g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.6e}"


#: measured cells written as whole numbers, and with one decimal (MiB)
INTEGER_CELLS = ("short_window", "held_rounds")
ONE_DECIMAL_CELLS = ("peak_rss_mb", "gpu_peak_mem_mb")


def format_cells(cells: Mapping[str, object], allowed: Sequence[str] | set[str]) -> dict[str, str]:
    """Cells measured elsewhere (a Flower client's profile: numbers and labels) as report cells, as
    :func:`row_from_window` writes them; only the ``allowed`` columns, nothing empty."""
    allowed = set(allowed)
    out: dict[str, str] = {}
    for key, value in cells.items():
        if key not in allowed or value is None or value == "" or isinstance(value, (list, bool)):
            continue
        out[key] = (value if isinstance(value, str) else str(int(value)) if key in INTEGER_CELLS
                    else f"{float(value):.1f}" if key in ONE_DECIMAL_CELLS else _fmt(float(value)))
    return out


def _methods(methods: Sequence[str]) -> str:
    return "+".join(sorted(set(methods)))


def _span_total_j(span: Span, win: WindowResult) -> float:
    return float(sum(span.energy_j[d.name] for d in win.domains if d.in_total))


def _total_is_valid(span: Span, win: WindowResult) -> bool:
    return not any(d.in_total and d.name in span.invalid for d in win.domains)


def row_from_window(win: WindowResult, base: Mapping[str, object], *, idle_power_w: float | None = None,
                    carbon_g_per_kwh: float | None = None, held_rounds: int | None = None) -> dict[str, str]:
    """A report row for one finished window; ``base`` holds run id, algo, round, client, loss...

    ``held_rounds``: the window held that many repeats of the client's round (``--hold-seconds``); its seconds,
    CPU seconds, joules, carbon and overhead, and its phases', are then the mean of one round (the window's
    totals divided by it), ``held_rounds`` says so, and ``short_window`` still compares the whole window with
    the meters' update period (which is what resolving its joules takes).

    A domain with an implausible reading inside the window (``win.invalid``) is never written as a number:
    its column's ``<column>_j`` is empty and ``<column>_method`` is ``invalid`` (a column summed over several
    domains is invalid when any of them is). When a domain that counts towards the total is invalid,
    ``energy_j``, ``energy_net_j``, ``carbon_g`` and the phases' ``<phase>_j`` spanning it are empty too and
    ``energy_method`` is ``invalid``: a total without one of its parts is an undercount that summaries and
    the dashboard would average as if it were whole. A nested domain (not in the total) being invalid leaves
    the total as it is. The reasons are in the sidecar (``meters.invalid``).
    """
    per = 1.0 / held_rounds if held_rounds else 1.0  # a held window's figures are those of one round
    total = win.energy_total_j * per
    row: dict[str, str] = {k: "" if v is None else str(v) for k, v in base.items()}
    row.update(wall_s=_fmt(win.wall_s * per), cpu_s=_fmt(win.cpu_s * per), peak_rss_mb=f"{win.peak_rss_mb:.1f}",
               profiler_overhead_s=_fmt(win.overhead_wall_s * per), short_window=str(int(win.short_window)),
               held_rounds="" if not held_rounds else str(held_rounds),
               device_kind=win.device_kind, short_phases=";".join(win.short_phases),
               gpu_peak_mem_mb="" if win.device_peak_mem_mb is None else f"{win.device_peak_mem_mb:.1f}")
    if win.domains and not _total_is_valid(win.span, win):
        row.update(energy_j="", energy_method=INVALID, energy_net_j="", carbon_g="")
    elif win.domains:
        row["energy_j"] = _fmt(total)
        row["energy_method"] = _methods([d.method for d in win.domains if d.in_total])
        if idle_power_w is not None:
            row["energy_net_j"] = _fmt(total - idle_power_w * win.wall_s * per)
        if carbon_g_per_kwh is not None:
            row["carbon_g"] = _fmt(total / 3.6e6 * carbon_g_per_kwh)
    for col in dict.fromkeys(d.column for d in win.domains):  # each one registered: MeterSet checks it
        members = [d for d in win.domains if d.column == col]
        if any(d.name in win.span.invalid for d in members):
            row[f"{col}_j"], row[f"{col}_method"] = "", INVALID
            continue
        row[f"{col}_j"] = _fmt(sum(win.span.energy_j[d.name] for d in members) * per)
        row[f"{col}_method"] = _methods([d.method for d in members])
    for name, span in win.phases.items():
        row[f"{name}_s"] = _fmt(span.wall_s * per)
        row[f"{name}_cpu_s"] = _fmt(span.cpu_s * per)
        if win.domains:
            row[f"{name}_j"] = _fmt(_span_total_j(span, win) * per) if _total_is_valid(span, win) else ""
    return row
