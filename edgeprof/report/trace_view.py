"""One window of a power trace, per phase: the ``edgeprof trace`` table and the dashboard's power plots.

A trace (:mod:`edgeprof.report.trace`) has one row per interval between samples of a window and per meter
domain. Here its rows are grouped into :class:`Window` values (one per report row that was traced), a window is
chosen (by default the median-energy client window), and each phase of it is summed up per domain:

* mean W = the phase's energy over its duration, ``sum(w * dt_s) / sum(dt_s)`` over its valid intervals;
* peak W = the highest interval mean ``w`` of the phase (an interval is at most one sample period long, so a
  phase shorter than two periods, flagged ``short_phase``, has too few intervals for its peak to show a shape).

Where a domain's method is ``estimate`` (process CPU seconds times watts per core) every figure is labelled as
an estimate: ``(estimate)`` beside the domain in the table, a dashed line and ``(estimate)`` in the plots.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.errors import ConfigError, ReportError
from edgeprof.report.trace import LABELS, read_trace, trace_file
from edgeprof.report.writer import Report, read_report

#: the label of the intervals outside any phase (the window's own bookkeeping between phases)
OUTSIDE = "(no phase)"
WHOLE = "whole window"
ESTIMATE = "estimate"
KINDS = ("client", "server", "window")
#: the columns read here (a trace written before the ``window`` column was added reads too)
USED = (*LABELS, "row", "phase", "t_s", "dt_s", "domain", "in_total", "w", "method", "short_phase")
NO_TRACE = "was run without --trace: no power trace to show (run it again with --trace, e.g. edgeprof measure --trace)"


@dataclass(frozen=True)
class Window:
    """The trace rows of one traced window (one report row), in the order they were written."""

    row: int
    rows: tuple[dict, ...]

    def label(self, name: str):
        """One of the report row's cells the trace repeats (:data:`edgeprof.report.trace.LABELS`)."""
        return self.rows[0][name]

    run_id = property(lambda self: self.label("run_id"))
    algo = property(lambda self: self.label("algo"))
    tau = property(lambda self: self.label("tau"))
    round = property(lambda self: self.label("round"))
    kind = property(lambda self: self.label("kind"))
    client = property(lambda self: self.label("client"))
    name = property(lambda self: self.rows[0].get("window") or self.label("kind"))

    @property
    def domains(self) -> list[str]:
        return list(dict.fromkeys(r["domain"] for r in self.rows))

    @property
    def duration_s(self) -> float:
        return sum({r["t_s"]: r["dt_s"] for r in self.rows}.values())

    @property
    def energy_j(self) -> Optional[float]:
        """Joules of the domains that count towards ``energy_j`` (valid intervals); None when there are none."""
        valid = [r for r in self.rows if r["in_total"] and math.isfinite(r["w"])]
        return sum(r["w"] * r["dt_s"] for r in valid) if valid else None

    def describe(self) -> str:
        """``round 2, client 4 (pflego tau=50)``, ``round 2, server step (...)``; a monitor's ``window NAME``."""
        if self.kind == "window":
            return f"window {self.name}" + (f" ({self.algo})" if self.algo else "")
        who = f"client {self.client}" if self.kind == "client" else f"{self.kind} step"
        return f"round {self.round}, {who} ({self.algo} tau={self.tau})"


def windows(rows: Iterable[Mapping]) -> list[Window]:
    """The windows of a trace's rows, in the order they were written."""
    grouped: dict[int, list[dict]] = {}
    for r in rows:
        grouped.setdefault(int(r["row"]), []).append(dict(r))
    return [Window(row, tuple(members)) for row, members in grouped.items()]


def load(report: Report) -> tuple[Path, list[Window]]:
    """The trace file a report's sidecar names and the trace's windows (ReportError, exit 7: the report was run
    without ``--trace``, or its trace is missing, damaged or empty)."""
    path = trace_file(report.path, report.sidecar)
    if path is None:
        raise ReportError(f"{report.path} {NO_TRACE}")
    rows = read_trace(path)
    if not rows:
        raise ReportError(f"trace {path} has no rows")
    missing = [c for c in USED if c not in rows[0]]
    if missing:
        raise ReportError(f"{path} is not an edgeprof trace (no {', '.join(missing)} column)")
    return path, windows(rows)


def report_row(report: Report, window: Window) -> Optional[dict]:
    """The report row a window wrote: its index where the labels agree, else the first row with its labels."""
    def same(row: Mapping) -> bool:
        return all(str(row.get(k, "")) == ("" if window.rows[0][k] is None else str(window.rows[0][k]))
                   for k in LABELS)

    if window.row < len(report.rows) and same(report.rows[window.row]):
        return report.rows[window.row]
    return next((r for r in report.rows if same(r)), None)


# --- choosing a window ---------------------------------------------------------------------------------
def _listing(values: Iterable) -> str:
    """``1-3, 5`` for whole numbers, else the values joined by commas; ``none`` for none."""
    values = sorted(set(values), key=lambda v: (not isinstance(v, int), v))
    if not values:
        return "none"
    if not all(isinstance(v, int) for v in values):
        return ", ".join(str(v) for v in values)
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def median_window(candidates: Sequence[Window]) -> Window:
    """The window of median energy (the lower one of an even count), by duration where none has energy."""
    by_energy = all(w.energy_j is not None for w in candidates)
    ordered = sorted(candidates, key=lambda w: ((w.energy_j if by_energy else w.duration_s), w.row))
    return ordered[(len(ordered) - 1) // 2]


def _noun(kind: str) -> str:
    return "own-code window" if kind == "window" else f"{kind} window"


def choose(found: Sequence[Window], round: Optional[int] = None, kind: str = "client",
           client: Optional[int] = None) -> tuple[Window, str]:
    """The window to show and why it was picked; ConfigError (exit 2) naming what exists when none matches."""
    pool = [w for w in found if w.kind == kind]
    if not pool:
        raise ConfigError(f"no traced {_noun(kind)} in this report; traced kinds: {_listing(w.kind for w in found)} "
                          f"(--kind picks one)")
    scope = ""
    if round is not None:
        rounds = _listing(w.round for w in pool if w.round is not None)
        pool = [w for w in pool if w.round == round]
        if not pool:
            raise ConfigError(f"no traced {_noun(kind)} in round {round}; rounds traced: {rounds}")
        scope = f" in round {round}"
    if client is not None:
        clients = _listing(int(w.client) for w in pool if str(w.client).isdigit())
        pool = [w for w in pool if str(w.client) == str(client)]
        if not pool:
            raise ConfigError(f"no traced {_noun(kind)} of client {client}{scope}; clients traced"
                              f"{scope and ' there'}: {clients}")
        scope = f" of client {client}{scope}"
    chosen = median_window(pool)
    if len(pool) == 1:
        return chosen, f"the only traced {_noun(kind)}{scope}"
    what = "energy" if all(w.energy_j is not None for w in pool) else "duration"
    return chosen, f"the median-{what} {_noun(kind)} of the {len(pool)} traced{scope}"


# --- per phase -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DomainStat:
    """One domain over one phase: joules and seconds of its valid intervals, the peak, how it was obtained."""

    energy_j: float
    valid_s: float
    peak_w: Optional[float]
    methods: tuple[str, ...]

    @property
    def mean_w(self) -> Optional[float]:
        return self.energy_j / self.valid_s if self.valid_s > 0 else None

    @property
    def estimate(self) -> bool:
        return ESTIMATE in self.methods


@dataclass(frozen=True)
class PhaseStat:
    """One phase (or :data:`OUTSIDE`, or :data:`WHOLE`) over one or more windows."""

    phase: str
    duration_s: float
    short: bool
    domains: dict[str, DomainStat]


def _stat(phase: str, rows: Sequence[Mapping], domains: Sequence[str]) -> PhaseStat:
    duration = sum({(r["row"], r["t_s"]): r["dt_s"] for r in rows}.values())
    stats = {}
    for domain in domains:
        mine = [r for r in rows if r["domain"] == domain]
        valid = [r for r in mine if math.isfinite(r["w"])]
        stats[domain] = DomainStat(sum(r["w"] * r["dt_s"] for r in valid), sum(r["dt_s"] for r in valid),
                                   max((r["w"] for r in valid), default=None),
                                   tuple(sorted({r["method"] for r in mine})))
    return PhaseStat(phase, duration, any(r["short_phase"] for r in rows), stats)


def phase_stats(found: Sequence[Window], whole: bool = True) -> list[PhaseStat]:
    """Each phase over ``found`` in the order first entered, then the intervals outside any phase, then (with
    ``whole``) the whole windows."""
    rows = [r for w in found for r in w.rows]
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    names = list(dict.fromkeys(r["phase"] for r in rows if r["phase"]))
    stats = [_stat(p, [r for r in rows if r["phase"] == p], domains) for p in names]
    if any(not r["phase"] for r in rows):
        stats.append(_stat(OUTSIDE, [r for r in rows if not r["phase"]], domains))
    if whole:
        stats.append(_stat(WHOLE, rows, domains))
    return stats


def segments(window: Window) -> list[tuple[str, float, float, bool]]:
    """The window's phases as (phase, start s, end s, short) spans of consecutive intervals, in time order."""
    first = window.domains[0]
    spans: list[list] = []
    for r in sorted((r for r in window.rows if r["domain"] == first), key=lambda r: r["t_s"]):
        if spans and spans[-1][0] == r["phase"]:
            spans[-1][2] = r["t_s"]
        else:
            spans.append([r["phase"], r["t_s"] - r["dt_s"], r["t_s"], bool(r["short_phase"])])
    return [tuple(s) for s in spans if s[0]]


# --- the terminal table --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceView:
    """What ``edgeprof trace`` prints: the window, why it was chosen, and its phases."""

    trace_path: Path
    hz: float
    window: Window
    why: str
    phases: list[PhaseStat]
    #: the rounds the window held (``--hold-seconds``), from its report row; None when not held
    held_rounds: Optional[int] = None


def view(report_path: Path, round: Optional[int] = None, kind: str = "client",
         client: Optional[int] = None) -> TraceView:
    """The view of one window of a report's trace (ReportError exit 7, ConfigError exit 2)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown window kind {kind!r}; choose one of: {', '.join(KINDS)}")
    report = read_report(report_path)
    path, found = load(report)
    window, why = choose(found, round=round, kind=kind, client=client)
    row = report.rows[window.row] if window.row < len(report.rows) else {}
    held = int(float(row["held_rounds"])) if row.get("held_rounds") else None
    return TraceView(path, float(report.sidecar["trace"].get("hz", math.nan)), window, why, phase_stats([window]),
                     held)


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def table(v: TraceView):
    """The rich Table: one block of rows per phase in time order, one row per domain."""
    from rich.table import Table

    out = Table(title=f"power per phase, in time order: {v.window.describe()}")
    for name in ("phase", "duration s", "domain", "mean W", "peak W", "method"):
        out.add_column(name, justify="right" if name.endswith(("s", "W")) and name != "phase" else "left",
                       no_wrap=name in ("phase", "domain"))
    for stat in v.phases:
        label = f"{stat.phase} (short)" if stat.short and stat.phase not in (OUTSIDE, WHOLE) else stat.phase
        for i, (domain, d) in enumerate(stat.domains.items()):
            out.add_row(label if i == 0 else "", _num(stat.duration_s) if i == 0 else "",
                        f"{domain} (estimate)" if d.estimate else domain, _num(d.mean_w), _num(d.peak_w),
                        "+".join(d.methods), end_section=i == len(stat.domains) - 1)
    return out


def notes(v: TraceView) -> list[str]:
    """The lines under the table: what was picked and how to pick another, what the marks mean, the file."""
    lines = [f"window: {v.window.describe()}, run {v.window.run_id}: {v.why} (--round, --kind, --client pick "
             f"another)",
             "mean W: the phase's energy over its duration; peak W: the highest mean over one interval between "
             "samples"]
    if v.held_rounds:
        lines.append(f"held: the window repeated the client's round {v.held_rounds} times (--hold-seconds): the "
                     "durations and joules here are all of them; its report row is one round's mean")
    if any(s.short for s in v.phases):
        lines.append(f"(short): the phase lasted less than two sample periods (2/{v.hz:g} Hz = {2 / v.hz:.3g} s): "
                     "too few intervals for its peak to show a shape")
    methods = {m for s in v.phases for d in s.domains.values() for m in d.methods}
    if ESTIMATE in methods:
        lines.append("(estimate): process CPU seconds times watts per core, an ESTIMATE, not a measurement")
    if "invalid" in methods:
        lines.append("invalid: an implausible reading in an interval (no watts); means and peaks leave it out")
    lines.append(f"trace: {v.trace_path} ({v.hz:g} Hz)")
    return lines


# --- the dashboard's figures (labels HTML-escaped: the page draws them as HTML) ------------------------
PHASE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def estimated(found: Iterable[Window]) -> bool:
    """Whether any figure of these windows is an estimate."""
    return any(r["method"] == ESTIMATE for w in found for r in w.rows)


def domain_label(domain: str, estimate: bool) -> str:
    return f"{domain} (estimate)" if estimate else domain


def power_lines(window: Window, colors: Sequence[str]) -> list[dict]:
    """One step line per domain: each interval's mean watts held over the interval; estimates dashed."""
    data = []
    for i, domain in enumerate(window.domains):
        mine = sorted((r for r in window.rows if r["domain"] == domain), key=lambda r: r["t_s"])
        estimate = any(r["method"] == ESTIMATE for r in mine)
        xs = [mine[0]["t_s"] - mine[0]["dt_s"]] + [r["t_s"] for r in mine]
        ys = [r["w"] if math.isfinite(r["w"]) else None for r in mine]
        data.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": colors[i % len(colors)],
                                                                  "width": 1.5,
                                                                  "dash": "dash" if estimate else "solid"},
                     "name": _esc(domain_label(domain, estimate)), "x": xs, "y": ys + ys[-1:],
                     "hovertemplate": "%{x:.3f} s: %{y:.3g} W<extra>" + _esc(domain) + "</extra>"})
    return data


def phase_bands(window: Window, colors: Mapping[str, str]) -> tuple[list[dict], list[dict]]:
    """Shaded bands (plotly shapes) and their labels (annotations, staggered so neighbours do not overlap)."""
    shapes, labels = [], []
    for i, (phase, start, end, short) in enumerate(segments(window)):
        color = colors.get(phase, PHASE_COLORS[0])
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": end, "y0": 0, "y1": 1,
                       "fillcolor": color, "opacity": 0.16, "layer": "below", "line": {"width": 0}})
        labels.append({"x": (start + end) / 2, "xref": "x", "y": 0.99 - 0.08 * (i % 3), "yref": "paper",
                       "yanchor": "top", "showarrow": False, "font": {"size": 11, "color": color},
                       "bgcolor": "rgba(255,255,255,0.7)", "text": _esc(f"{phase} (short)" if short else phase)})
    return shapes, labels


def phase_bars(stats: Sequence[PhaseStat], colors: Sequence[str]) -> list[dict]:
    """Grouped bars of mean watts per phase, one series per domain; estimates hatched and labelled."""
    if not stats:
        return []
    data = []
    for i, domain in enumerate(stats[0].domains):
        estimate = any(s.domains[domain].estimate for s in stats)
        data.append({"type": "bar", "name": _esc(domain_label(domain, estimate)), "x": [_esc(s.phase) for s in stats],
                     "y": [s.domains[domain].mean_w for s in stats],
                     "customdata": [[s.duration_s, s.domains[domain].energy_j] for s in stats],
                     "hovertemplate": "%{x}: %{y:.3g} W over %{customdata[0]:.3g} s (%{customdata[1]:.3g} J)"
                                      "<extra></extra>",
                     "marker": {"color": colors[i % len(colors)], **({"pattern": {"shape": "/"}} if estimate else {})}})
    return data
