"""The short table that ends a run: medians per client round, per phase, and per server step; on a GPU, the GPU's
own joules beside it (:func:`gpu_summary`: by its meter's method, net of its idle power, verdicts over tau)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from edgeprof.meters.base import INVALID
from edgeprof.report.writer import Report

if TYPE_CHECKING:
    from edgeprof.report.gpu_energy import Totals


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
    #: how many of the ``count`` rows the energy median is over (an invalid or empty energy cell is left out)
    energy_count: int | None = None


def _median(report: Report, column: str, rows) -> float | None:
    values = report.values(column, rows)
    return statistics.median(values) if values else None


def _line(report: Report, algo: str, part: str, rows, prefix: str, method: str, carbon: bool = True) -> SummaryLine:
    """The medians of ``rows`` in the columns ``{prefix}s``, ``{prefix}cpu_s`` and ``{prefix}j`` (``prefix`` ""
    for the whole row, ``"<phase>_"`` for a phase), with how many rows the energy median is over."""
    wall = "wall_s" if not prefix else f"{prefix}s"
    return SummaryLine(algo, part, len(rows), _median(report, wall, rows), _median(report, f"{prefix}cpu_s", rows),
                       _median(report, f"{prefix}j" if prefix else "energy_j", rows), method,
                       _median(report, "carbon_g", rows) if carbon else None,
                       len(report.values(f"{prefix}j" if prefix else "energy_j", rows)))


def _phase_names(report: Report) -> list[str]:
    from edgeprof.report.schema import BESIDE_ROUND

    return [c[:-len("_cpu_s")] for c in report.columns
            if c.endswith("_cpu_s") and c != "cpu_s" and c[:-len("_cpu_s")] not in BESIDE_ROUND]


def _method(rows, column: str = "energy_j") -> str:
    """How the ``column`` cells of ``rows`` were obtained: each row's ``energy_method`` where the cell holds a number,
    ``invalid`` where it is empty because a reading inside was implausible. A phase of a row whose total is invalid
    can still hold a number (the implausible reading fell outside it): it was obtained as the valid rows' totals
    were, or, with none, as the row's own valid columns were."""
    valid = {r["energy_method"] for r in rows if r.get("energy_method") not in (None, "", INVALID)}
    methods: set[str] = set()
    for row in rows:
        method = row.get("energy_method")
        if not method:
            continue
        if row.get(column) and method == INVALID:
            methods |= valid or {v for c, v in row.items() if c.endswith("_method") and v not in ("", INVALID)}
        elif row.get(column) or method == INVALID:
            methods.add(method)
    return "+".join(sorted(methods)) or "none"


def _part(report: Report, algo: str, part: str, rows, phases: Sequence[str]) -> list[SummaryLine]:
    """The line of one part (a client round, a window) and the lines of its phases."""
    lines = [_line(report, algo, part, rows, "", _method(rows))]
    for phase in phases:
        if report.values(f"{phase}_s", rows):
            lines.append(_line(report, algo, f"  {phase}", rows, f"{phase}_", _method(rows, f"{phase}_j"),
                               carbon=False))
    return lines


def _windows(report: Report, algo: str, group: Sequence[Mapping[str, str]], phases: Sequence[str],
             kind: str = "window") -> list[SummaryLine]:
    """One part per window name of the ``window`` rows (edgeprof.monitor) of ``group``, with its phases;
    ``kind="eval"``: of a monitor's eval windows (``eval window NAME``)."""
    rows = [r for r in group if r.get("kind") == kind and (kind == "window" or r.get("window"))]
    lines: list[SummaryLine] = []
    for name in dict.fromkeys(r.get("window", "") for r in rows):
        members = [r for r in rows if r.get("window", "") == name]
        lines += _part(report, algo, f"{WINDOW_PARTS[kind]}{name}", members, phases)
    return lines


#: how the summary names the windows of your own code, per kind (a part's name, then the window's)
WINDOW_PARTS = {"window": "window ", "eval": "eval window "}


def groups(rows: Sequence[Mapping[str, str]]) -> list[tuple[str, list[Mapping[str, str]]]]:
    """The rows per algorithm, each group named by it; per engine too (``pflego[torch]``) where an algorithm's
    rows ran on several, and per tau (``fedavg, tau=5``) where the client rows hold several taus (a sweep): a
    median over rounds of different work would describe none of them. Algorithms (variants) in order of
    appearance, each one's taus rising."""
    from edgeprof.report.analysis import variant_of

    engines: dict[str, set[str]] = {}
    for r in rows:
        engines.setdefault(r.get("algo", ""), set()).add(r.get("engine", ""))
    several_taus = len({r.get("tau", "") for r in rows if r.get("kind") == "client"} - {""}) > 1
    names: dict[str, int] = {}  # algorithm (or variant) -> its place, in order of appearance
    out: dict[tuple[int, int], tuple[str, list]] = {}
    for r in rows:
        algo, tau = r.get("algo", ""), r.get("tau", "") if several_taus else ""
        name = variant_of(algo, r.get("engine", "")) if len(engines[algo] - {""}) > 1 else algo
        place = names.setdefault(name, len(names))
        out.setdefault((place, int(tau) if tau else -1), (f"{name}, tau={tau}" if tau else name, []))[1].append(r)
    return [out[key] for key in sorted(out)]


def summarize(report: Report) -> list[SummaryLine]:
    """Median seconds, CPU seconds and joules per client round and per phase, for each algorithm (and engine, and
    tau, where the report holds several: :func:`groups`); per window name for the windows of a monitor's report."""
    lines: list[SummaryLine] = []
    phases = _phase_names(report)
    for algo, group in groups(report.rows):
        clients = [r for r in group if r.get("kind") == "client"]
        if clients:
            lines += _part(report, algo, "client round", clients, phases)
        if report.values("setup_s", clients):  # Flower: set-up measured beside the round, not in it
            lines.append(_line(report, algo, "set-up, beside the round", clients, "setup_",
                               _method(clients, "setup_j"), carbon=False))
        if report.values("startup_s", clients):
            lines.append(SummaryLine(algo, "process start, beside", len(clients), _median(report, "startup_s", clients),
                                     _median(report, "startup_cpu_s", clients), None, "not measured"))
        servers = [r for r in group if r.get("kind") == "server"]
        if servers:
            lines.append(_line(report, algo, "server step", servers, "", _method(servers)))
        # a Flower app's evaluate messages, profiled on the clients (a monitor's eval windows have a name)
        measured_evals = [r for r in group if r.get("kind") == "eval" and r.get("wall_s") and not r.get("window")]
        if measured_evals:
            lines += _part(report, algo, "evaluate message", measured_evals, phases)
        lines += _windows(report, algo, group, phases) + _windows(report, algo, group, phases, kind="eval")
    return lines


def title(lines: Sequence[SummaryLine]) -> str:
    """``median per client round``, ``median per window``, or both, after what the lines hold."""
    own = tuple(WINDOW_PARTS.values())
    windows = any(ln.part.startswith(own) for ln in lines)
    others = any(not ln.part.startswith((*own, "  ")) for ln in lines)
    return ("median per client round and per window" if windows and others else
            "median per window" if windows else "median per client round")


def run_lines(report: Report) -> list[str]:
    """What the rows ran on and with: the data sets and backbones their rows name, and a monitor's run labels (its
    sidecar's ``monitor.labels``); none for a report whose rows name neither and that has no labels."""
    lines = []
    for column, what in (("dataset", "data"), ("backbone", "backbone")):
        values = list(dict.fromkeys(r[column] for r in report.rows if r.get(column)))
        if values:
            lines.append(f"{what}: {', '.join(values)}")
    monitor = report.sidecar.get("monitor")
    labels = monitor.get("labels") if isinstance(monitor, dict) else None
    if isinstance(labels, dict) and labels:
        lines.append("labels: " + ", ".join(f"{k}={v}" for k, v in labels.items()))
    raised = [(r.get("window") or r.get("kind", ""), error) for r in report.rows
              if (error := row_labels(r).get("error"))]
    if raised:
        counts = Counter(raised)
        lines.append(f"raised: {len(raised)} window{'s' if len(raised) > 1 else ''} ended by an exception ("
                     + ", ".join(f"{name}: {error}" + (f" x{n}" if n > 1 else "") for (name, error), n in counts.items())
                     + "); their rows are kept, labelled error")
    return lines


def row_labels(row: Mapping) -> dict:
    """A row's ``labels`` cell (compact JSON, written by the monitor) as a dict; {} where it is empty or not an
    object."""
    try:
        value = json.loads(row.get("labels") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def printable(text: object) -> str:
    """``text`` with every character a terminal would act on (control codes such as ESC, BEL, CR; bidirectional
    overrides) written as its Python escape (``\\x1b``): what a report or trace file holds is shown, never run."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def shown(text: object) -> str:
    """``text`` as a rich table or title shows it literally: :func:`printable`, and rich markup escaped."""
    from rich.markup import escape

    return escape(printable(text))


def _cell(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _energy_cell(line: SummaryLine) -> str:
    """The energy median, with how many rows it is over where that is fewer than the line's (``12.3 (9 of 10)``)."""
    short = line.energy_j is not None and line.energy_count is not None and line.energy_count < line.count
    return _cell(line.energy_j) + (f" ({line.energy_count} of {line.count})" if short else "")


def render(lines: Sequence[SummaryLine]):
    """A rich Table of the summary lines."""
    from rich.table import Table

    table = Table(title=title(lines))
    algos = any(ln.algo for ln in lines)  # a report of your own code names no algorithm: no column for it
    for name in ("algo", "part", "n", "wall s", "CPU s", "energy J", "g CO2e", "energy method")[0 if algos else 1:]:
        table.add_column(name, justify="left" if name in ("algo", "part", "energy method") else "right",
                         no_wrap=name in ("algo", "part"))
    for ln in lines:
        table.add_row(*(shown(ln.algo),)[:int(algos)], shown(ln.part), str(ln.count), _cell(ln.wall_s),
                      _cell(ln.cpu_s), _energy_cell(ln), _cell(ln.carbon_g, 3), shown(ln.method))
    return table


@dataclass(frozen=True)
class GpuLine:
    """The round GPU's joules of one part (client round, server step) by its own meter: medians per row and totals,
    net of its idle power where the sidecar has it, and the rest of ``energy_j`` beside them with its own method."""

    algo: str
    part: str
    gpu_j: float
    net_j: float | None
    rest_j: float | None
    totals: "Totals"


def _gpu_line(algo: str, part: str, rows: Sequence[dict], rest: Sequence[str]) -> GpuLine:
    from edgeprof.report import gpu_energy

    sums = gpu_energy.totals([(r, rest) for r in rows])
    rests = [gpu_energy.rest_j(r, rest)[0] for r in rows]
    return GpuLine(algo, part, statistics.median(float(r["gpu_j"]) for r in rows),
                   None if sums.net_j is None else statistics.median(float(r["gpu_net_j"]) for r in rows),
                   None if sums.rest_j is None else statistics.median(rests), sums)


def gpu_lines(report: Report) -> list[GpuLine]:
    """Per algorithm (and engine and tau where the report holds several: :func:`groups`), the client rounds' and
    server steps' GPU joules (``gpu_j``) where a GPU meter measured the round's GPU; none for a run without one."""
    from edgeprof.report import gpu_energy

    if not gpu_energy.measured(report.rows):
        return []
    rows = gpu_energy.with_net(report.rows, report.sidecar)
    rest = gpu_energy.rest_columns(report.sidecar)
    lines = []
    for algo, group in groups(rows):  # per algorithm, and engine and tau where there are several
        for kind, part in (("client", "client round"), ("server", "server step")):
            measured = [r for r in group if r["kind"] == kind and r.get("gpu_j", "") != ""]
            if measured:
                lines.append(_gpu_line(algo, part, measured, rest))
    return lines


def render_gpu(lines: Sequence[GpuLine]):
    """A rich Table of the GPU lines: its own meter's joules, net of idle, and the rest of energy_j beside them."""
    from rich.table import Table

    table = Table(title="the round's GPU by its own meter: median per row, and totals",
                  caption="GPU J: gpu_j, the joules of the GPU that ran the round; net J: net of its idle power; "
                          "idle: the share of its joules the idle power accounts for; rest J: the rest of energy_j "
                          "(the other domains in the total), by its own method")
    for name in ("algo", "part", "n", "GPU J", "net J", "total J", "total net J", "idle", "method", "rest J",
                 "rest method"):
        table.add_column(name, justify="left" if name in ("algo", "part") or "method" in name else "right",
                         no_wrap=name in ("algo", "part"))
    for ln in lines:
        sums = ln.totals
        share = "-" if sums.idle_share is None else f"{sums.idle_share:.0%}"
        count = f"{sums.rows} ({sums.short} short)" if sums.short else str(sums.rows)
        table.add_row(shown(ln.algo), shown(ln.part), count, _cell(ln.gpu_j), _cell(ln.net_j), _cell(sums.gpu_j),
                      _cell(sums.net_j), share, shown(sums.method or "-"), _cell(ln.rest_j),
                      shown(sums.rest_method or "-"))
    return table


def tau_fits(report: Report) -> list:
    """Where the report's client rows hold several taus (a sweep) or algorithms to compare at one tau: the fits,
    verdicts and ratios to PFLEGO of seconds and joules (rich Tables, as the sweep printed them:
    :func:`edgeprof.report.analysis.render`); the GPU's own joules get theirs in :func:`gpu_summary`."""
    from edgeprof.report import analysis

    result = analysis.analyze(report.rows, analysis.METRICS)
    if any(len(f.taus) > 1 for f in result.fits) or result.ratios:
        return list(analysis.render(result, analysis.METRICS))
    return []


def gpu_summary(report: Report) -> list:
    """What a summary prints about the round's GPU (rich renderables): its table, and where the report has several
    taus the verdicts and ratios of ``gpu_j`` and ``gpu_net_j``, then what they are and the idle power; nothing
    for a run whose GPU no meter measured."""
    from rich.text import Text

    from edgeprof.report import analysis, gpu_energy

    lines = gpu_lines(report)
    if not lines:
        return []
    parts: list = [render_gpu(lines)]
    result = analysis.analyze(gpu_energy.with_net(report.rows, report.sidecar), analysis.GPU_METRICS)
    if any(len(f.taus) > 1 for f in result.fits) or result.ratios:
        parts += list(analysis.render(result, analysis.GPU_METRICS))
    return parts + [Text(printable(note)) for note in gpu_energy.notes(report.rows, report.sidecar)]


def invalid_rows(report: Report) -> tuple[int, int]:
    """(client and server rows whose energy is invalid, all client and server rows)."""
    rows = [r for r in report.rows if r.get("kind") in ("client", "server")]
    return sum("invalid" in (r.get("energy_method") or "") for r in rows), len(rows)


def _meter_figures(report: Report, key: str) -> list[float]:
    """The numbers the sidecar's meters give under ``key`` (``update_period_s``, ``energy_quantum_j``)."""
    meters = report.sidecar.get("meters", {}) if isinstance(report.sidecar, dict) else {}
    meters = meters.get("meters") if isinstance(meters, dict) else None
    values = [m.get(key) for m in (meters if isinstance(meters, list) else []) if isinstance(m, dict)]
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def measured_rows(report: Report) -> list[Mapping[str, str]]:
    """The rows of measured windows: client rounds and server steps, windows of your own code, and evaluate
    messages or eval windows that were profiled (an eval row of the in-process loop measures nothing)."""
    return [r for r in report.rows if r.get("kind") in ("client", "server", "window")
            or (r.get("kind") == "eval" and r.get("wall_s", "") != "")]


def measured_noun(report: Report) -> str:
    """What :func:`measured_rows` are, as the summary's lines name them."""
    own = any(r.get("kind") == "window" or (r.get("kind") == "eval" and r.get("window")) for r in report.rows)
    evaluated = any(r.get("kind") == "eval" and r.get("wall_s", "") != "" for r in report.rows)
    return ("measured windows" if own else
            "client rounds, server steps and evaluate messages" if evaluated else "client rounds and server steps")


def short_rows(report: Report) -> tuple[int, int, float | None]:
    """(measured rows whose window was shorter than its meters' update period, all measured rows
    (:func:`measured_rows`), the slowest meter's update period in seconds where the sidecar names it)."""
    from edgeprof.report.analysis import is_short

    rows = measured_rows(report)
    periods = _meter_figures(report, "update_period_s")
    return sum(is_short(r) for r in rows), len(rows), max(periods) if periods else None


def unresolved_words(report: Report, period_s: float | None = None) -> str:
    """What a short window or phase of ``report`` did: it lasted less than the meters' update period (``period_s``,
    where known), or, where a meter counts in coarse steps (a 1 J psys), it counted less than one of them."""
    words = "lasted less than the meters' update period" + (f" ({period_s:g} s)" if period_s else "")
    quanta = _meter_figures(report, "energy_quantum_j")
    coarse = max(quanta, default=0.0)
    return words + (f" or counted less than one {coarse:g} J step of their coarsest counter" if coarse >= 1e-3
                    else "")


def short_phases(report: Report) -> tuple[dict[str, int], int]:
    """(per phase, the client rows in which an entry of it was shorter than the slowest meter's update period: its
    joules are not resolved, ``short_phases``; all client rows)."""
    rows = report.where(kind="client")
    counts = Counter(phase for r in rows for phase in dict.fromkeys((r.get("short_phases") or "").split(";")) if phase)
    return dict(counts), len(rows)


def held_rounds(report: Report) -> tuple[int, float] | None:
    """(client rows whose window was held, ``--hold-seconds``; the median rounds such a window held), or None
    when none was."""
    held = [int(v) for v in report.values("held_rounds", report.where(kind="client"))]
    return (len(held), statistics.median(held)) if held else None


def carbon_total(report: Report) -> tuple[float, int] | None:
    """Grams CO2e of every measured window (:func:`measured_rows`) with a carbon figure, and how many rows that is."""
    rows = measured_rows(report)
    grams = report.values("carbon_g", rows)
    return (float(sum(grams)), len(grams)) if grams else None


def overhead_fraction(report: Report) -> tuple[float, str] | None:
    """Profiler overhead as a fraction of the client rounds' total wall time, and what was counted.

    Since the sidecar says ``profiler_overhead: wall``, ``profiler_overhead_s`` is the wall time the profiler adds
    to the measured thread inside a window (its edges: reads of the cheap meters, bookkeeping, waits for the
    engine's lock and for the slow meters' series); an earlier report's column is the profiler's thread CPU time.
    """
    clients = report.where(kind="client")
    wall = sum(report.values("wall_s", clients))
    over = sum(report.values("profiler_overhead_s", clients))
    sidecar = report.sidecar if isinstance(report.sidecar, dict) else {}
    what = ("the wall time it adds to the measured thread" if sidecar.get("profiler_overhead") == "wall"
            else "as its column records it: no sidecar says whether wall or CPU time" if not sidecar
            else "its own thread CPU time, as reports before edgeprof counted wall time")
    return (over / wall, what) if wall > 0 else None


#: what a sidecar that still says ``running`` means when the run is read back
RUNNING_NOTE = ("the sidecar still says running: the run is going on, or its process was killed before it could "
                "record how it ended")


def ending_line(report: Report) -> str | None:
    """How the run ended, as its sidecar says, in one line (``run: complete``, ``run: failed: <reason>``, ...); a
    Flower run's adds the sampled replies not used (:meth:`~edgeprof.report.federation.Federation.ending`). None for
    a report without a sidecar status (a sweep's)."""
    from edgeprof.report.federation import of_report, status_with_reason

    sidecar = report.sidecar if isinstance(report.sidecar, dict) else {}
    status = sidecar.get("status")
    if not sidecar and report.sidecar_problem:  # none beside it, or one that could not be read
        return (f"run: how it ended is not known: {report.sidecar_problem} (its meters and settings are not known "
                "either)")
    if not isinstance(status, str) or not status:
        return None
    if status == "running":
        return f"run: running ({RUNNING_NOTE})"
    federation = of_report(report)
    if federation is not None:
        return f"run: {federation.ending()}"
    reason = sidecar.get("reason")
    return f"run: {status_with_reason(status, ' '.join(reason.split()) if isinstance(reason, str) else '')}"


#: the most rejections a summary lists one by one (the sidecar has them all)
MAX_LISTED = 5


def flower_lines(report: Report) -> list[str]:
    """A Flower run's rejections, nodes left out, partitions no node served and profiles flagged, and its notes
    (simulation, clients sharing a machine), one line each; nothing for a report that is not a Flower run's."""
    from edgeprof.report.federation import of_report

    federation = of_report(report)
    if federation is None:
        return []
    lines = []
    if federation.refused:
        listed = "; ".join(f"node {who}: {why}" for who, why in federation.refused[:MAX_LISTED])
        lines.append(f"left out at the roll call: {len(federation.refused)} node(s) ({listed}"
                     f"{'; ...' if len(federation.refused) > MAX_LISTED else ''})")
    if federation.missing_partitions:
        lines.append(f"no node served partition(s) {', '.join(map(str, federation.missing_partitions))}")
    rejected = [(r, who, why) for r, who, why in federation.rejected if r > 0]
    if rejected:
        listed = "; ".join(f"round {r}, {who}: {why}" for r, who, why in rejected[:MAX_LISTED])
        lines.append(f"rejected: {len(rejected)} repl{'y' if len(rejected) == 1 else 'ies'} ({listed}"
                     f"{'; ...' if len(rejected) > MAX_LISTED else ''})")
    flagged = federation.flagged
    if flagged:
        listed = "; ".join(f"round {r}, node {who}: {why}" for r, who, why in flagged[:MAX_LISTED])
        lines.append(f"profiles flagged: {len(flagged)} row(s) written without cells the server could not believe "
                     f"({listed}{'; ...' if len(flagged) > MAX_LISTED else ''})")
    return lines + [f"note: {note}" for note in federation.notes]


def host_table(report: Report):
    """A Flower run's rich Table, one line per host: its partitions, the data it trained on, its client rounds'
    median wall seconds and joules (and their method), and the sampled replies of its partitions not used; None for a
    report that is not a Flower run's."""
    from rich.table import Table

    from edgeprof.report.federation import of_report

    federation = of_report(report)
    if federation is None:
        return None
    by_host: dict[str, list[dict]] = {}
    for row in report.where(kind="client"):
        by_host.setdefault(row.get("host", ""), []).append(row)
    nodes = {n.partition: n for n in federation.nodes}
    for node in federation.nodes:
        by_host.setdefault(node.host, [])
    table = Table(title="Flower: per host (client rounds: medians)")
    for name in ("host", "partitions", "data", "rounds", "wall s", "energy J", "energy method", "not used"):
        table.add_column(name, justify="right" if name in ("rounds", "wall s", "energy J", "not used") else "left")
    for host, rows in by_host.items():
        partitions = sorted({n.partition for n in federation.nodes if n.host == host}
                            | {int(r["client"]) for r in rows if r.get("client", "").isdecimal()})
        data = "; ".join(dict.fromkeys(nodes[p].data_text for p in partitions if p in nodes)) or "-"
        unused = sum(r.missing.count(p) for r in federation.rounds for p in partitions)
        table.add_row(shown(host or "-"), shown(", ".join(map(str, partitions)) or "-"), shown(data),
                      str(len(rows)), _cell(_median(report, "wall_s", rows)),
                      _cell(_median(report, "energy_j", rows)), shown(_method(rows)), str(unused))
    return table


def rowless_ending(csv_path) -> str | None:
    """:func:`ending_line` of a report that has no usable row, from its sidecar alone (a Flower run that no node
    served ends ``failed`` before round 1, its CSV a header); None where the sidecar has no status."""
    from pathlib import Path

    from edgeprof.report.writer import read_sidecar

    path = Path(csv_path)
    try:
        if not path.is_file() or not path.with_suffix(".json").is_file():  # no report at all (a folder, '/', a
            return None  # missing file), or no sidecar: nothing to say why
    except OSError:  # a path the system cannot even look up (a name too long): read_report said so
        return None
    sidecar, _ = read_sidecar(path.with_suffix(".json"))
    return ending_line(Report(path, (), [], sidecar))
