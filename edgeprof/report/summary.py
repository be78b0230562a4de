"""The short table that ends a run: medians per client round, per phase, and per server step."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from edgeprof.report.writer import Report


@dataclass(frozen=True)
class SummaryLine:
    """Medians of one part (a whole client round, a phase, or the server step)."""

    algo: str
    part: str
    count: int
    wall_s: float | None
    cpu_s: float | None
    energy_j: float | None
    method: str
    carbon_g: float | None = None


def _median(report: Report, column: str, rows) -> float | None:
    values = report.values(column, rows)
    return statistics.median(values) if values else None


def _phase_names(report: Report) -> list[str]:
    from edgeprof.report.schema import BESIDE_ROUND

    return [c[:-len("_cpu_s")] for c in report.columns
            if c.endswith("_cpu_s") and c != "cpu_s" and c[:-len("_cpu_s")] not in BESIDE_ROUND]


def _method(rows) -> str:
    return "+".join(sorted({r["energy_method"] for r in rows if r.get("energy_method")})) or "none"


def _part(report: Report, algo: str, part: str, rows, phases: Sequence[str], method: str) -> list[SummaryLine]:
    """The line of one part (a client round, a window) and the lines of its phases."""
    lines = [SummaryLine(algo, part, len(rows), _median(report, "wall_s", rows), _median(report, "cpu_s", rows),
                         _median(report, "energy_j", rows), method, _median(report, "carbon_g", rows))]
    for phase in phases:
        if report.values(f"{phase}_s", rows):
            lines.append(SummaryLine(algo, f"  {phase}", len(rows), _median(report, f"{phase}_s", rows),
                                     _median(report, f"{phase}_cpu_s", rows), _median(report, f"{phase}_j", rows),
                                     method))
    return lines


def _windows(report: Report, algo: str, phases: Sequence[str]) -> list[SummaryLine]:
    """One part per window name of the ``window`` rows (edgeprof.monitor), with its phases."""
    rows = report.where(algo=algo, kind="window")
    lines: list[SummaryLine] = []
    for name in dict.fromkeys(r.get("window", "") for r in rows):
        members = [r for r in rows if r.get("window", "") == name]
        lines += _part(report, algo, f"window {name}", members, phases, _method(members))
    return lines


def summarize(report: Report) -> list[SummaryLine]:
    """Median seconds, CPU seconds and joules per client round and per phase, for each algorithm; per window
    name for the windows of a monitor's report."""
    lines: list[SummaryLine] = []
    phases = _phase_names(report)
    for algo in dict.fromkeys(r["algo"] for r in report.rows):
        clients = report.where(algo=algo, kind="client")
        method = _method(clients)
        if clients:
            lines += _part(report, algo, "client round", clients, phases, method)
        if report.values("setup_s", clients):  # Flower: set-up measured beside the round, not in it
            lines.append(SummaryLine(algo, "set-up, beside the round", len(clients), _median(report, "setup_s", clients),
                                     _median(report, "setup_cpu_s", clients), _median(report, "setup_j", clients),
                                     method))
        if report.values("startup_s", clients):
            lines.append(SummaryLine(algo, "process start, beside", len(clients), _median(report, "startup_s", clients),
                                     _median(report, "startup_cpu_s", clients), None, "not measured"))
        servers = report.where(algo=algo, kind="server")
        if servers:
            lines.append(SummaryLine(algo, "server step", len(servers), _median(report, "wall_s", servers),
                                     _median(report, "cpu_s", servers), _median(report, "energy_j", servers),
                                     method, _median(report, "carbon_g", servers)))
        measured_evals = [r for r in report.where(algo=algo, kind="eval") if r.get("wall_s")]
        if measured_evals:  # a Flower app's evaluate messages, profiled on the clients
            lines += _part(report, algo, "evaluate message", measured_evals, phases, _method(measured_evals))
        lines += _windows(report, algo, phases)
    return lines


def title(lines: Sequence[SummaryLine]) -> str:
    """``median per client round``, ``median per window``, or both, after what the lines hold."""
    windows = any(ln.part.startswith("window ") for ln in lines)
    others = any(not ln.part.startswith(("window ", "  ")) for ln in lines)
    return ("median per client round and per window" if windows and others else
            "median per window" if windows else "median per client round")


def _cell(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def render(lines: Sequence[SummaryLine]):
    """A rich Table of the summary lines."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title(lines))
    for name in ("algo", "part", "n", "wall s", "CPU s", "energy J", "g CO2e", "energy method"):
        table.add_column(name, justify="left" if name in ("algo", "part", "energy method") else "right",
                         no_wrap=name in ("algo", "part"))
    for ln in lines:
        table.add_row(escape(ln.algo), escape(ln.part), str(ln.count), _cell(ln.wall_s), _cell(ln.cpu_s), _cell(ln.energy_j),
                      _cell(ln.carbon_g, 3), escape(ln.method))
    return table


def invalid_rows(report: Report) -> tuple[int, int]:
    """(client and server rows whose energy is invalid, all client and server rows)."""
    rows = [r for r in report.rows if r.get("kind") in ("client", "server")]
    return sum("invalid" in (r.get("energy_method") or "") for r in rows), len(rows)


def short_rows(report: Report) -> tuple[int, int, float | None]:
    """(client and server rows whose window was shorter than its meters' update period, all client and server
    rows, the slowest meter's update period in seconds where the sidecar names it)."""
    from edgeprof.report.analysis import is_short

    rows = [r for r in report.rows if r.get("kind") in ("client", "server")]
    meters = report.sidecar.get("meters", {}) if isinstance(report.sidecar, dict) else {}
    periods = [m.get("update_period_s") for m in (meters.get("meters") or []) if isinstance(m, dict)]
    periods = [float(p) for p in periods if isinstance(p, (int, float))]
    return sum(is_short(r) for r in rows), len(rows), max(periods) if periods else None


def held_rounds(report: Report) -> tuple[int, float] | None:
    """(client rows whose window was held, ``--hold-seconds``; the median rounds such a window held), or None
    when none was."""
    held = [int(v) for v in report.values("held_rounds", report.where(kind="client"))]
    return (len(held), statistics.median(held)) if held else None


def carbon_total(report: Report) -> tuple[float, int] | None:
    """Grams CO2e of every client round and server step with a carbon figure, and how many rows that is."""
    rows = [r for r in report.rows if r.get("kind") in ("client", "server")]
    grams = report.values("carbon_g", rows)
    return (float(sum(grams)), len(grams)) if grams else None


def overhead_fraction(report: Report) -> float | None:
    """Profiler overhead as a fraction of the client rounds' total wall time.

    The overhead is the profiler's thread CPU seconds (``profiler_overhead_s``), which preemption by other
    processes does not inflate: about the wall time the bookkeeping adds to a round on a quiet machine.
    """
    clients = report.where(kind="client")
    wall = sum(report.values("wall_s", clients))
    over = sum(report.values("profiler_overhead_s", clients))
    return over / wall if wall > 0 else None
