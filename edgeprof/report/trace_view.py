"""One window of a power trace, per phase: the ``edgeprof trace`` table, and the figures the dashboard's power
plots draw (:mod:`edgeprof.report.dashboard.window_charts`).

A trace (:mod:`edgeprof.report.trace_file`) has one row per interval between samples of a window and per meter
domain. Here its rows are grouped into :class:`Window` values (one per report row that was traced), a window is
chosen (by default the median-energy client window), and each phase of it is summed up per domain:

* mean W = the phase's energy over its duration, ``sum(w * dt_s) / sum(dt_s)`` over its valid intervals;
* peak W = the highest interval mean ``w`` of the phase among its resolved, unflagged intervals (an interval is at
  most one sample period long, so a phase shorter than two periods, flagged ``short_phase``, has too few
  intervals for its peak to show a shape).

What the meter resolves: a row with ``resolved`` 0 holds the mean power of the span of intervals around it that
spans two of its meter's update periods, not the interval's own. A phase's mean is not its own where a stretch of
it (consecutive intervals of the phase; for the whole window, all of it) holds such rows and lasts less than two
update periods (the sidecar's ``update_period_s``): :data:`UNRESOLVED` marks it in the table, and the plots draw it
hollow (a dotted, lighter step; an unfilled bar). A longer stretch's energy is off by at most one counter update
at each end, as a resolved interval's is. Such a row never gives a peak. A row with a ``flag`` (a power the domain
cannot have drawn) never gives a peak either; :data:`FLAGGED` marks the means it is part of, a note names the
flag, and the plot marks the interval with a red x.

Where a domain's method is ``estimate`` (process CPU seconds times watts per core) every figure is labelled as
an estimate: ``(estimate)`` beside the domain in the table, a dashed line and ``(estimate)`` in the plots.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.errors import ConfigError, ReportError
from edgeprof.meters.base import RESOLVED_PERIODS
from edgeprof.report.schema import ROW_KINDS
from edgeprof.report.summary import printable, shown
from edgeprof.report.trace_file import LABELS, locate, read_trace, trace_hz
from edgeprof.report.writer import Report, read_report

_log = logging.getLogger("edgeprof")

#: the label of the intervals outside any phase (the window's own bookkeeping between phases)
OUTSIDE = "(no phase)"
WHOLE = "whole window"
ESTIMATE = "estimate"
#: the kinds of window a trace may hold: every kind of row (``edgeprof measure --evaluate`` writes its evaluations
#: outside any window, so only a monitor's ``kind="eval"`` windows are traced as eval)
TRACED_KINDS = ROW_KINDS
#: the columns read here (a trace written before the ``window`` column was added reads too)
USED = (*LABELS, "row", "phase", "t_s", "dt_s", "domain", "in_total", "w", "method", "short_phase")
#: the mark of a mean the meter cannot resolve (the mean power of the spans around the phase, not its own)
UNRESOLVED = "~"
#: the mark of a mean that holds intervals whose power the domain cannot have drawn (their ``flag``)
FLAGGED = "!"


@dataclass(frozen=True)
class Window:
    """The trace rows of one traced window (one report row), in the order they were written."""

    row: int
    rows: tuple[dict, ...]
    #: each domain's meter update period, seconds, from the report's sidecar (missing where it does not say)
    periods_s: Mapping[str, float] = field(default_factory=dict, compare=False)

    def label(self, name: str):
        """One of the report row's cells the trace repeats (:data:`edgeprof.report.trace_file.LABELS`)."""
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
    def resolvable(self) -> bool:
        """Whether the window lasts at least :data:`~edgeprof.meters.base.RESOLVED_PERIODS` update periods of each
        of its meters (where the sidecar gives them): a shorter one holds no span its meter resolves, and its
        drawn power is the mean of the whole window, itself not resolved."""
        periods = [self.periods_s.get(d, 0.0) for d in self.domains]
        return self.duration_s >= RESOLVED_PERIODS * max(periods, default=0.0)

    @property
    def energy_j(self) -> Optional[float]:
        """Joules of the domains that count towards ``energy_j`` (valid intervals); None when there are none."""
        valid = [r for r in self.rows if r["in_total"] and math.isfinite(r["w"])]
        return sum(r["w"] * r["dt_s"] for r in valid) if valid else None

    def describe(self) -> str:
        """``round 2, client 4 (pflego tau=50)``, ``round 2, server step (...)``; a monitor's ``window NAME`` and
        ``eval window NAME`` (with its round where it has one)."""
        if self.kind == "window" or (self.kind == "eval" and self.rows[0].get("window")):
            what = "eval window" if self.kind == "eval" else "window"
            return (f"{what} {self.name}" + (f", round {self.round}" if self.round is not None else "")
                    + (f" ({self.algo})" if self.algo else ""))
        who = f"client {self.client}" if self.kind == "client" else f"{self.kind} step"
        return f"round {self.round}, {who} ({self.algo} tau={self.tau})"


def windows(rows: Iterable[Mapping], periods_s: Optional[Mapping[str, float]] = None) -> list[Window]:
    """The windows of a trace's rows, in the order they were written (``periods_s``: see :func:`update_periods`)."""
    grouped: dict[int, list[dict]] = {}
    for r in rows:
        grouped.setdefault(int(r["row"]), []).append(dict(r))
    return [Window(row, tuple(members), dict(periods_s or {})) for row, members in grouped.items()]


def update_periods(sidecar: Mapping) -> dict[str, float]:
    """Each domain's meter update period in seconds, from a sidecar's ``meters`` section (values of the wrong type
    are left out)."""
    section = sidecar.get("meters")
    meters = section.get("meters") if isinstance(section, dict) else None
    out: dict[str, float] = {}
    for meter in meters if isinstance(meters, list) else []:
        period = meter.get("update_period_s") if isinstance(meter, dict) else None
        if isinstance(period, (int, float)) and not isinstance(period, bool) and math.isfinite(period):
            out.update({str(d["name"]): float(period) for d in meter.get("domains") or []
                        if isinstance(d, dict) and d.get("name")})
    return out


def load(report: Report) -> tuple[Path, list[Window]]:
    """The report's trace file (:func:`locate`; a note says why where its sidecar does not name it) and the
    trace's windows (ReportError, exit 7: no trace, or a trace that is missing, damaged or empty)."""
    path, why = locate(report)
    if path is None:
        raise ReportError(f"{report.path} {why}")
    if why:
        _log.warning(f"{report.path.name}: {why}")
    rows = read_trace(path)
    if not rows:
        raise ReportError(f"trace {path} has no rows")
    missing = [c for c in USED if c not in rows[0]]
    if missing:
        raise ReportError(f"{path} is not an edgeprof trace (no {', '.join(missing)} column)")
    return path, windows(rows, update_periods(report.sidecar))


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


def _default_kind(found: Sequence[Window]) -> str:
    """The kind shown when none is asked for: client rounds where the trace has them (a run of the CLI), else a
    monitor's own windows, else the first kind traced."""
    kinds = [w.kind for w in found]
    return next((k for k in ("client", "window") if k in kinds), kinds[0] if kinds else "client")


def choose(found: Sequence[Window], round: Optional[int] = None, kind: Optional[str] = None,
           client: Optional[int] = None, name: Optional[str] = None) -> tuple[Window, str]:
    """The window to show and why it was picked; ConfigError (exit 2) naming what exists when none matches.

    ``name``: windows of that name (a monitor's ``window`` column; a CLI run's windows are named by their kind),
    of any kind unless ``kind`` is given. ``kind`` None: :func:`_default_kind`. Without ``name``, where the kind's
    windows have several names (a monitor's ``load``, ``epoch``, ...), the name with the most traced windows is
    taken (the first written among equals) and the reason says which others there are: a median over windows of
    different work would be none of them."""
    pool = list(found)
    if name is not None:
        names = _listing(w.name for w in pool)
        pool = [w for w in pool if w.name == name]
        if not pool:
            raise ConfigError(f"no traced window named {name!r} in this report; names traced: {names}")
    kind = kind if kind is not None else _default_kind(pool)
    kinds = _listing(w.kind for w in pool)
    pool = [w for w in pool if w.kind == kind]
    called = f" named {name!r}" if name is not None else ""
    if not pool:
        raise ConfigError(f"no traced {_noun(kind)}{called} in this report; traced kinds{called and ' there'}: "
                          f"{kinds} (--kind picks one)")
    others = ""
    if name is None:
        counts = Counter(w.name for w in pool)
        if len(counts) > 1:
            name = max(counts, key=lambda n: (counts[n], -next(i for i, w in enumerate(pool) if w.name == n)))
            others = f"; other names traced: {_listing(n for n in counts if n != name)}"
            pool = [w for w in pool if w.name == name]
            called = f" named {name!r}"
    scope = ""
    if round is not None:
        rounds = _listing(w.round for w in pool if w.round is not None)
        pool = [w for w in pool if w.round == round]
        if not pool:
            raise ConfigError(f"no traced {_noun(kind)}{called} in round {round}; rounds traced: {rounds}")
        scope = f" in round {round}"
    if client is not None:
        clients = _listing(int(w.client) for w in pool if str(w.client).isdigit())
        pool = [w for w in pool if str(w.client) == str(client)]
        if not pool:
            raise ConfigError(f"no traced {_noun(kind)}{called} of client {client}{scope}; clients traced"
                              f"{scope and ' there'}: {clients}")
        scope = f" of client {client}{scope}"
    resolved = [w for w in pool if w.resolvable]
    short = "" if len(resolved) in (0, len(pool)) else (
        f", of the {len(resolved)} long enough for the meters to resolve ({len(pool) - len(resolved)} shorter than "
        "two update periods left out)")
    candidates = resolved or pool
    chosen = median_window(candidates)
    if len(pool) == 1:
        return chosen, f"the only traced {_noun(kind)}{called}{scope}{others}"
    what = "energy" if all(w.energy_j is not None for w in candidates) else "duration"
    return chosen, f"the median-{what} {_noun(kind)}{called} of the {len(pool)} traced{scope}{short}{others}"


# --- per phase -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DomainStat:
    """One domain over one phase: joules and seconds of its valid intervals, the peak, how it was obtained.

    ``unresolved``: the mean is not the phase's own (some of its intervals hold the mean power of a span around
    them); ``unresolved_s``: the seconds of such intervals, which ``peak_w`` leaves out, as it leaves out the
    intervals with a ``flag`` (``flags``: the distinct ones)."""

    energy_j: float
    valid_s: float
    peak_w: Optional[float]
    methods: tuple[str, ...]
    unresolved: bool = False
    unresolved_s: float = 0.0
    flags: tuple[str, ...] = ()

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


def _valid(r: Mapping) -> bool:
    return math.isfinite(r["w"])


def _own(r: Mapping) -> bool:
    """Whether the row's watts are its interval's own power, one the domain could draw."""
    return _valid(r) and bool(r.get("resolved", 1)) and not r.get("flag")


def _stat(phase: str, rows: Sequence[Mapping], domains: Sequence[str],
          unresolved: Optional[Mapping[str, bool]] = None) -> PhaseStat:
    """``unresolved``: per domain, whether the mean is not resolved (:func:`_unresolved`)."""
    duration = sum({(r["row"], r["t_s"]): r["dt_s"] for r in rows}.values())
    stats = {}
    for domain in domains:
        mine = [r for r in rows if r["domain"] == domain]
        valid = [r for r in mine if _valid(r)]
        spans_s = sum(r["dt_s"] for r in valid if not r.get("resolved", 1))
        stats[domain] = DomainStat(sum(r["w"] * r["dt_s"] for r in valid), sum(r["dt_s"] for r in valid),
                                   max((r["w"] for r in valid if _own(r)), default=None),
                                   tuple(sorted({r["method"] for r in mine})),
                                   bool((unresolved or {}).get(domain)), spans_s,
                                   tuple(dict.fromkeys(r["flag"] for r in valid if r.get("flag"))))
    return PhaseStat(phase, duration, any(r["short_phase"] for r in rows), stats)


def _stretches(window: Window, domain: str, phase: Optional[str]) -> list[list[Mapping]]:
    """The domain's rows of ``window`` in runs of consecutive intervals of ``phase`` ("": outside any phase; None:
    the whole window, one run)."""
    mine = sorted((r for r in window.rows if r["domain"] == domain), key=lambda r: r["t_s"])
    if phase is None:
        return [mine]
    runs: list[list[Mapping]] = []
    previous = None
    for r in mine:
        if r["phase"] == phase:
            if previous != phase:
                runs.append([])
            runs[-1].append(r)
        previous = r["phase"]
    return runs


def _unresolved(found: Sequence[Window], domain: str, phase: Optional[str]) -> bool:
    """Whether the mean power of ``domain`` over ``phase`` (see :func:`_stretches`) is not resolved: some stretch of
    it holds unresolved intervals and is shorter than two update periods of its meter (or the period is not known).
    A longer stretch's energy is off by at most one counter update at each end, as a resolved interval's is."""
    for window in found:
        period = window.periods_s.get(domain)
        for run in _stretches(window, domain, phase):
            spans = [r for r in run if _valid(r) and not r.get("resolved", 1)]
            if spans and (period is None or sum(r["dt_s"] for r in run) < RESOLVED_PERIODS * period):
                return True
    return False


def phase_stats(found: Sequence[Window], whole: bool = True) -> list[PhaseStat]:
    """Each phase over ``found`` in the order first entered, then the intervals outside any phase, then (with
    ``whole``) the whole windows."""
    rows = [r for w in found for r in w.rows]
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    names = list(dict.fromkeys(r["phase"] for r in rows if r["phase"]))

    def stat(label: str, phase: Optional[str], members: Sequence[Mapping]) -> PhaseStat:
        return _stat(label, members, domains, {d: _unresolved(found, d, phase) for d in domains})

    stats = [stat(p, p, [r for r in rows if r["phase"] == p]) for p in names]
    if any(not r["phase"] for r in rows):
        stats.append(stat(OUTSIDE, "", [r for r in rows if not r["phase"]]))
    if whole:
        stats.append(stat(WHOLE, None, rows))
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
    #: the sample rate, None where the sidecar does not say it (:func:`trace_hz`)
    hz: Optional[float]
    window: Window
    why: str
    phases: list[PhaseStat]
    #: the rounds the window held (``--hold-seconds``), from its report row; None when not held
    held_rounds: Optional[int] = None


def view(report_path: Path, round: Optional[int] = None, kind: Optional[str] = None,
         client: Optional[int] = None, name: Optional[str] = None) -> TraceView:
    """The view of one window of a report's trace, picked by :func:`choose` (ReportError exit 7, ConfigError exit
    2)."""
    if kind is not None and kind not in TRACED_KINDS:
        raise ConfigError(f"unknown window kind {kind!r}; choose one of: {', '.join(TRACED_KINDS)}")
    report = read_report(report_path)
    path, found = load(report)
    window, why = choose(found, round=round, kind=kind, client=client, name=name)
    row = report.rows[window.row] if window.row < len(report.rows) else {}
    held = int(float(row["held_rounds"])) if row.get("held_rounds") else None
    return TraceView(path, trace_hz(report), window, why, phase_stats([window]), held)


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def _marked(value: Optional[float], unresolved: bool, flagged: bool = False) -> str:
    """``~83.2`` for a figure the meter does not resolve, ``83.2 !`` for one that holds flagged intervals."""
    if value is None:
        return "-"
    return f"{UNRESOLVED if unresolved else ''}{value:.4g}{' ' + FLAGGED if flagged else ''}"


def table(v: TraceView):
    """The rich Table: one block of rows per phase in time order, one row per domain."""
    from rich.table import Table

    out = Table(title=f"power per phase, in time order: {shown(v.window.describe())}")
    for name in ("phase", "duration s", "domain", "mean W", "peak W", "method"):
        out.add_column(name, justify="right" if name.endswith(("s", "W")) and name != "phase" else "left",
                       no_wrap=name in ("phase", "domain"))
    for stat in v.phases:
        label = f"{stat.phase} (short)" if stat.short and stat.phase not in (OUTSIDE, WHOLE) else stat.phase
        for i, (domain, d) in enumerate(stat.domains.items()):
            out.add_row(shown(label) if i == 0 else "", _num(stat.duration_s) if i == 0 else "",
                        shown(f"{domain} (estimate)" if d.estimate else domain),
                        _marked(d.mean_w, d.unresolved, bool(d.flags)), _marked(d.peak_w, d.unresolved_s > 0),
                        shown("+".join(d.methods)), end_section=i == len(stat.domains) - 1)
    return out


def _unresolved_note(v: TraceView) -> list[str]:
    domains = [name for s in v.phases for name, d in s.domains.items() if d.unresolved or d.unresolved_s > 0]
    if not domains:
        return []
    periods = ", ".join(f"{name} updates every {v.window.periods_s[name]:.3g} s" for name in dict.fromkeys(domains)
                        if v.window.periods_s.get(name, 0) > 0)
    around = ("the span of at least two update periods around it" if v.window.resolvable else
              "the whole window, itself shorter than two update periods and so not resolved either")
    return [f"{UNRESOLVED}: not resolved: its meter cannot resolve the phase{f' ({periods})' if periods else ''}: "
            f"the figure is the mean power over {around}, not the phase's own; peak W leaves those intervals out "
            f"('-': none left)"]


def _flag_notes(v: TraceView) -> list[str]:
    """One line per flag: how many intervals, where, the highest watts; what the table does with them."""
    flagged = [r for r in v.window.rows if r.get("flag") and _valid(r)]
    lines = []
    for flag, count in Counter(r["flag"] for r in flagged).items():
        mine = [r for r in flagged if r["flag"] == flag]
        where = "; ".join(f"{domain} in " + ", ".join(dict.fromkeys(r["phase"] or OUTSIDE for r in mine
                                                                    if r["domain"] == domain))
                          for domain in dict.fromkeys(r["domain"] for r in mine))
        extreme = max(mine, key=lambda r: abs(r["w"]))["w"]
        lines.append(f"{FLAGGED}: {count} interval{'s' if count > 1 else ''} {flag} ({where}; {extreme:.4g} W at "
                     f"most): not a power the domain drew; left out of peak W, kept in mean W (the meter's energy)")
    return lines


def notes(v: TraceView) -> list[str]:
    """The lines under the table: what was picked and how to pick another, what the marks mean, the file (every
    text from the files :func:`~edgeprof.report.summary.printable`)."""
    lines = [f"window: {v.window.describe()}, run {v.window.run_id}: {v.why} (--window, --round, --kind, --client "
             f"pick another)",
             "mean W: the phase's energy over its duration; peak W: the highest mean over one resolved interval "
             "between samples"]
    if v.held_rounds:
        lines.append(f"held: the window repeated the client's round {v.held_rounds} times (--hold-seconds): the "
                     "durations and joules here are all of them; its report row is one round's mean")
    if any(s.short for s in v.phases):
        periods = f" (2/{v.hz:g} Hz = {2 / v.hz:.3g} s)" if v.hz else ""
        lines.append(f"(short): the phase lasted less than two sample periods{periods}: too few intervals for its "
                     "peak to show a shape")
    lines += _unresolved_note(v) + _flag_notes(v)
    methods = {m for s in v.phases for d in s.domains.values() for m in d.methods}
    if ESTIMATE in methods:
        lines.append("(estimate): process CPU seconds times watts per core, an ESTIMATE, not a measurement")
    if "invalid" in methods:
        lines.append("invalid: an implausible reading in an interval, or watts in the file that are not a number or "
                     "are below zero with no flag (no watts); means and peaks leave it out")
    lines.append(f"trace: {v.trace_path} ({f'{v.hz:g} Hz' if v.hz else 'sample rate not recorded'})")
    return [printable(line) for line in lines]
