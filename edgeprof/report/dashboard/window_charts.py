"""The sections drawn from single windows: the windows of a user's own code (reports of ``edgeprof.monitor``) and,
for reports run with ``--trace``, power against time in a chosen client window over its phases' bands, with each
algorithm's mean power per phase (:mod:`edgeprof.report.trace_view` sums the phases).

What the meter does not resolve is drawn hollow: a domain's intervals whose ``resolved`` is 0 (their watts are the
mean power of a span of intervals around them) are a dotted, lighter step line beside the solid one of its resolved
intervals, and a phase whose mean holds such intervals is an unfilled bar. An interval with a ``flag`` is a red x
(the flag in its hover text), and a bar that holds one carries ``!``."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.errors import ConfigError, ReportError
from edgeprof.report.analysis import variant_of
from edgeprof.report.dashboard.own_code import labels_and_errors, own_label
from edgeprof.report.dashboard.page import (COLORS, METRIC_LABELS, Page, Row, energy_note, esc, grid, host_of,
                                            listing, marked, median, methods_of, num_text, phase_names, rows_of, table,
                                            whole_ticks)
from edgeprof.report.trace_file import NO_TRACE, NO_TRACE_MONITOR, locate, trace_hz
from edgeprof.report.trace_view import (ESTIMATE, FLAGGED, OUTSIDE, DomainStat, PhaseStat, Window, choose, load,
                                        phase_stats, report_row, segments)
from edgeprof.report.writer import Report


def _window_table(host: str, groups: Mapping[tuple[str, str], list[Row]], phases: Sequence[str]) -> str:
    """Per (algorithm, window name): the medians; no algorithm column where no row names one."""
    algos = any(variant for variant, _ in groups)
    body = []
    for (variant, name), members in groups.items():
        med = lambda col: median([x for x in (r.num(col) for r in members) if x is not None])  # noqa: E731
        estimate = "estimate" in methods_of(members)
        parts = "; ".join(f"{p} {med(f'{p}_s'):.3g} s" for p in phases if med(f"{p}_s") is not None)
        body.append((host, variant, name, len(members), num_text(med("wall_s")), num_text(med("cpu_s")),
                     marked(num_text(med("energy_j")), estimate and med("energy_j") is not None),
                     marked(num_text(med("carbon_g")), estimate and med("carbon_g") is not None),
                     "+".join(sorted(methods_of(members))) or "none", parts or "-"))
    header = ("host", "algorithm", "window", "n", "wall s", "CPU s", "energy J", "g CO2e", "energy method",
              "phases (median s)")
    keep = [i for i in range(len(header)) if algos or header[i] != "algorithm"]
    return table([header[i] for i in keep], [[row[i] for i in keep] for row in body], "windows")


def _window_plot(page: Page, host: str, groups: Mapping[tuple[str, str], list[Row]]) -> str:
    """Each window's energy (its wall seconds where no energy was measured) against its round where every window
    of its name has one, else in the order the rows were written."""
    metric = "energy_j" if any(r.num("energy_j") is not None for m in groups.values() for r in m) else "wall_s"
    by_round = all(r.num("round") is not None for m in groups.values() for r in m)
    data, xs = [], []
    for (variant, name), members in groups.items():
        label = f"{variant} {name}" if variant else name
        x = [r.num("round") for r in members] if by_round else list(range(1, len(members) + 1))
        xs += x
        data.append({"type": "scatter", "mode": "markers+lines", "name": esc(label), "x": x,
                     "y": [r.num(metric) for r in members], "marker": {"color": page.color(label)},
                     "line": {"width": 1}})
    estimate = metric == "energy_j" and "estimate" in methods_of(r for m in groups.values() for r in m)
    return page.figure(data, marked(f"{host}: {METRIC_LABELS[metric]} of each window", estimate),
                       {"title": {"text": "round" if by_round else "occurrence of the window"}, **whole_ticks(xs)},
                       {"title": {"text": marked(METRIC_LABELS[metric], estimate)}}, log_toggle=True)


def windows(page: Page, reports: Sequence[Report], hosts: Mapping[str, list[Row]]) -> str:
    """Reports of edgeprof.monitor: medians per window name (eval windows as ``eval NAME``), every window's cost
    in order, the runs' labels and the windows that raised."""
    cells, tables = [], []
    for host, rows in hosts.items():
        groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            label = own_label(r.data)
            if label is not None:
                groups[(r.variant, label)].append(r)
        if groups:
            tables.append(_window_table(host, groups, phase_names(reports)))
            cells.append(_window_plot(page, host, groups))
    if not tables:
        return ('<p class="note">No window rows (reports written by <code>edgeprof.monitor</code> around your own '
                "code have them).</p>")
    notes: list[str] = []
    for rep in reports:
        section = rep.sidecar.get("monitor")
        if isinstance(section, dict) and isinstance(section.get("notes"), list):
            notes += [str(n) for n in section["notes"]]
    return (energy_note([r for rs in hosts.values() for r in rs if own_label(r.data) is not None])
            + "".join(f'<p class="note">{esc(n)}</p>' for n in dict.fromkeys(notes))
            + "".join(tables) + grid(cells) + labels_and_errors(reports, hosts))


# --- the power trace's figures (labels HTML-escaped: the page draws them as HTML) ----------------------
PHASE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
#: the fill of a bar drawn hollow, and the colour of the marks of flagged intervals
HOLLOW, FLAG_COLOR = "rgba(0,0,0,0)", "#d62728"


def estimated(found: Iterable[Window]) -> bool:
    """Whether any figure of these windows is an estimate."""
    return any(r["method"] == ESTIMATE for w in found for r in w.rows)


def domain_label(domain: str, estimate: bool) -> str:
    return f"{domain} (estimate)" if estimate else domain


def _steps(ws: Sequence[Optional[float]], edges: Sequence[float], members: Sequence[bool],
           joined: bool) -> tuple[list, list]:
    """The points of a step line (plotly ``hv``) through the intervals ``i`` where ``members[i]``: each run of
    them from its first edge to its last, runs apart (a None between). ``joined``: each run also draws the steps
    from the interval before it and to the interval after it, so that two lines meet at their boundaries."""
    points: list[tuple[float, Optional[float]]] = []
    for i, w in enumerate(ws):
        if not members[i]:
            continue
        if joined and i > 0 and not members[i - 1] and ws[i - 1] is not None:
            points.append((edges[i], ws[i - 1]))
        points.append((edges[i], w))
        if i + 1 == len(ws) or not members[i + 1]:
            points.append((edges[i + 1], w))
            if joined and i + 1 < len(ws) and ws[i + 1] is not None:
                points.append((edges[i + 1], ws[i + 1]))
            points.append((edges[i + 1], None))
    return [x for x, _ in points[:-1]], [y for _, y in points[:-1]]


def _domain_lines(domain: str, mine: Sequence[Mapping], color: str) -> list[dict]:
    """A domain's solid step line of its resolved intervals, a dotted lighter one of its unresolved intervals
    (their spans' mean power) joined to it, and red x marks on its flagged intervals."""
    estimate = any(r["method"] == ESTIMATE for r in mine)
    edges = [mine[0]["t_s"] - mine[0]["dt_s"]] + [r["t_s"] for r in mine]
    ws = [r["w"] if math.isfinite(r["w"]) else None for r in mine]
    resolved = [w is not None and bool(r.get("resolved", 1)) for w, r in zip(ws, mine)]
    hover = "%{x:.3f} s: %{y:.3g} W"
    lines = []
    spans = _steps(ws, edges, [w is not None and not ok for w, ok in zip(ws, resolved)], joined=True)
    if any(resolved) or not spans[0]:
        xs, ys = _steps(ws, edges, resolved, joined=False)
        lines.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": color, "width": 1.5,
                                                                   "dash": "dash" if estimate else "solid"},
                      "name": esc(domain_label(domain, estimate)), "legendgroup": esc(domain), "x": xs, "y": ys,
                      "hovertemplate": f"{hover}<extra>{esc(domain)}</extra>"})
    if spans[0]:
        lines.append({"type": "scatter", "mode": "lines", "opacity": 0.55,
                      "line": {"shape": "hv", "color": color, "width": 1.5, "dash": "dot"},
                      "name": esc(f"{domain} ({'estimate, ' if estimate else ''}unresolved: span mean)"),
                      "legendgroup": esc(domain), "x": spans[0], "y": spans[1],
                      "hovertemplate": f"{hover}, the mean power of its span (not resolved)<extra>{esc(domain)}"
                                       "</extra>"})
    flagged = [r for r in mine if r.get("flag") and math.isfinite(r["w"])]
    if flagged:
        lines.append({"type": "scatter", "mode": "markers", "name": esc(f"{domain}: flagged"),
                      "legendgroup": esc(domain), "marker": {"symbol": "x", "size": 9, "color": FLAG_COLOR},
                      "x": [r["t_s"] - r["dt_s"] / 2 for r in flagged], "y": [r["w"] for r in flagged],
                      "text": [esc(r["flag"]) for r in flagged],
                      "hovertemplate": f"{hover}: %{{text}}, not a power it drew<extra>{esc(domain)}</extra>"})
    return lines


def power_lines(window: Window, colors: Sequence[str]) -> list[dict]:
    """Per domain, each interval's mean watts held over the interval (:func:`_domain_lines`); estimates dashed."""
    data = []
    for i, domain in enumerate(window.domains):
        mine = sorted((r for r in window.rows if r["domain"] == domain), key=lambda r: r["t_s"])
        data += _domain_lines(domain, mine, colors[i % len(colors)])
    return data


def unresolved(found: Iterable[Window]) -> bool:
    """Whether any interval of these windows holds the mean power of a span instead of its own."""
    return any(math.isfinite(r["w"]) and not r.get("resolved", 1) for w in found for r in w.rows)


def flagged(found: Iterable[Window]) -> bool:
    """Whether any interval of these windows has a power its domain cannot have drawn."""
    return any(r.get("flag") for w in found for r in w.rows)


def phase_bands(window: Window, colors: Mapping[str, str]) -> tuple[list[dict], list[dict]]:
    """Shaded bands (plotly shapes) and their labels (annotations, staggered so neighbours do not overlap)."""
    shapes, labels = [], []
    for i, (phase, start, end, short) in enumerate(segments(window)):
        color = colors.get(phase, PHASE_COLORS[0])
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": end, "y0": 0, "y1": 1,
                       "fillcolor": color, "opacity": 0.16, "layer": "below", "line": {"width": 0}})
        labels.append({"x": (start + end) / 2, "xref": "x", "y": 0.99 - 0.08 * (i % 3), "yref": "paper",
                       "yanchor": "top", "showarrow": False, "font": {"size": 11, "color": color},
                       "bgcolor": "rgba(255,255,255,0.7)", "text": esc(f"{phase} (short)" if short else phase)})
    return shapes, labels


def _bar_note(d: DomainStat) -> str:
    """What a bar's hover adds to its watts: not resolved, flagged."""
    return (" (not resolved: the mean power of the spans of two meter updates around it)" if d.unresolved else "") \
        + "".join(f"; {FLAGGED} {flag}" for flag in d.flags)


def phase_bars(stats: Sequence[PhaseStat], colors: Sequence[str]) -> list[dict]:
    """Grouped bars of mean watts per phase, one series per domain; estimates hatched and labelled; a mean the
    meter does not resolve hollow (no fill, its colour as the outline), a flagged one marked ``!``."""
    if not stats:
        return []
    data = []
    for i, domain in enumerate(stats[0].domains):
        color = colors[i % len(colors)]
        mine = [s.domains[domain] for s in stats]
        estimate = any(d.estimate for d in mine)
        data.append({"type": "bar", "name": esc(domain_label(domain, estimate)), "x": [esc(s.phase) for s in stats],
                     "y": [d.mean_w for d in mine],
                     "customdata": [[s.duration_s, d.energy_j, esc(_bar_note(d))] for s, d in zip(stats, mine)],
                     "hovertemplate": "%{x}: %{y:.3g} W" + (" (ESTIMATE)" if estimate else "")
                                      + "%{customdata[2]} over %{customdata[0]:.3g} s "
                                        "(%{customdata[1]:.3g} J)<extra></extra>",
                     "text": [FLAGGED if d.flags else "" for d in mine], "textposition": "outside",
                     "marker": {"color": [HOLLOW if d.unresolved else color for d in mine],
                                "line": {"color": [color] * len(mine), "width": [2 if d.unresolved else 0 for d in mine]},
                                **({"pattern": {"shape": "/", "fgcolor": [_faint(color) if d.unresolved else color
                                                                          for d in mine]}} if estimate else {})}})
    return data


def _faint(color: str) -> str:
    """``#rrggbb`` at less than half its opacity (the hatching of a hollow estimate bar); other colours as given."""
    if len(color) != 7 or not color.startswith("#"):
        return color
    return f"rgba({int(color[1:3], 16)},{int(color[3:5], 16)},{int(color[5:], 16)},0.45)"


def _traced(reports: Sequence[Report]) -> tuple[list[tuple[Report, list]], list[str]]:
    """The reports with a trace and their windows; the notes of the others (no trace, or a trace that cannot be
    read)."""
    traced, notes, untraced = [], [], {NO_TRACE: [], NO_TRACE_MONITOR: []}
    for rep in reports:
        path, why = locate(rep)
        if path is None and why in untraced:
            untraced[why].append(rep.path.stem)
            continue
        if why:  # read from beside the report (a run that did not finish, a damaged sidecar), or none to read
            notes.append(f"{rep.path.stem}: {why}")
        if path is None:
            continue
        try:
            traced.append((rep, load(rep)[1]))
        except ReportError as err:
            notes.append(f"{rep.path.stem}: {err}")
    for why, how in ((NO_TRACE_MONITOR, "record one with edgeprof.monitor(..., trace_hz=50)"),
                     (NO_TRACE, "run it with --trace (e.g. edgeprof measure --trace) to record one")):
        if untraced[why]:
            notes.insert(0, f"No power trace was recorded in {listing(untraced[why])}: {how}.")
    return traced, notes


def _trace_groups(traced, reports: Sequence[Report]) -> dict[tuple[str, str], list]:
    """(host, algorithm) -> its traced client windows, and (host, window name) -> the traced windows of your own
    code of that name (``eval NAME`` for eval windows), in the order of the reports; the host as the other sections
    name it (a host's workloads apart: :func:`edgeprof.report.dashboard.page.rows_of`)."""
    hosts = {id(r.data): r.host for r in rows_of(reports)}
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for rep, windows in traced:
        for w in windows:
            row = report_row(rep, w)
            if row is None:
                continue
            host = hosts.get(id(row)) or host_of(rep, row)
            variant, own = variant_of(row.get("algo", ""), row.get("engine", "")), own_label(row)
            if w.kind == "client":
                groups[(host, variant)].append(w)
            elif own is not None:
                groups[(host, f"{variant} {own}" if variant else own)].append(w)
    return groups


def _own(windows: Sequence[Window]) -> bool:
    """Whether a group of :func:`_trace_groups` holds windows of your own code (not client rounds)."""
    return windows[0].kind != "client"


def _power_plot(page: Page, host: str, variant: str, window, bands: Mapping[str, str]) -> str:
    """One algorithm's (or window name's) chosen window: power against time per domain over its phases' bands."""
    data, estimate = power_lines(window, COLORS), estimated([window])
    shapes, labels = phase_bands(window, bands)
    which = (window.describe() if _own([window]) else
             f"{variant}, round {window.round} client {window.client}, tau={window.tau}")
    if not window.resolvable:
        which += " (shorter than two meter updates: not resolved)"
    return page.figure(data, marked(f"{host}: {which}", estimate),
                       {"title": {"text": "seconds since the window started"}},
                       {"title": {"text": marked("watts", estimate)}, "rangemode": "tozero"},
                       shapes=shapes, annotations=labels, showlegend=True)


def _chosen_windows(groups, round: Optional[int], client: Optional[int]) -> tuple[dict, list[str]]:
    """(host, algorithm) -> the window to draw (its median-energy client window, within ``round`` and of
    ``client`` when given), and a note for each algorithm that has none there. ConfigError (exit 2, naming what
    was traced) when no algorithm has one."""
    chosen, notes, errors = {}, [], []
    for (host, variant), windows in groups.items():
        try:
            chosen[(host, variant)] = choose(windows, round=round, client=client)[0]
        except ConfigError as err:
            errors.append(f"{host}: {variant}: {err}")
    if not chosen:
        raise ConfigError("--trace-round/--trace-client match no traced window: " + "; ".join(errors))
    notes.extend(f"Not drawn: {e}." for e in errors)
    return chosen, notes


def _phase_power(page: Page, host: str, variant: str, windows: Sequence) -> str:
    data, estimate = phase_bars(phase_stats(windows), COLORS), estimated(windows)
    noun = ("window" if _own(windows) else "client window") + ("s" if len(windows) > 1 else "")
    return page.figure(data, marked(f"{host}: {variant}: mean power per phase over {len(windows)} {noun}",
                                     estimate), {"type": "category"},
                       {"title": {"text": marked("mean watts (energy / duration)", estimate)}}, barmode="group",
                       showlegend=True)


def _trace_rule(rates: Iterable[str], scope: str, own: bool = False) -> str:
    """The caption of the power plots; ``own``: they are of windows of your own code (per window name)."""
    whose, each, windows = (("each window name's", "window name", "windows") if own else
                            ("each algorithm's", "algorithm", "client windows"))
    return (f"<p>The power trace of {whose} median-energy {windows[:-1]}{esc(scope)}: every meter domain's "
            f"mean power over each interval between samples (taken at {esc(listing(rates))} and at every phase "
            f"edge), drawn as steps over the phases' shaded bands; drag to zoom, double-click to reset. A phase marked "
            f"<i>(short)</i> lasted less than two sample periods. Below, per {each}: the mean power of each "
            f"phase (its energy over its duration) over all its traced {windows}; {esc(OUTSIDE)} is the "
            f"{'time outside the phases' if own else 'bookkeeping between phases'}.</p>")


def _honesty_rule(windows: Sequence, drawn: Sequence = ()) -> str:
    """The caption of what is drawn hollow (not resolved by the meter) and marked (flagged), where there is any;
    ``drawn``: the windows plotted against time (one shorter than two updates is said to be)."""
    parts = []
    if unresolved(windows):
        parts.append("<strong>Hollow = not resolved by the meter.</strong> An interval shorter than two of its "
                     "meter's update periods has no power of its own there: its dotted, lighter step (named "
                     "<i>(unresolved: span mean)</i>) is the mean power of the span of at least two update periods "
                     "around it, and a hollow bar is a phase whose mean holds such spans, not the phase's own.")
    if any(not w.resolvable for w in drawn):
        parts.append("A plotted window marked <i>(shorter than two meter updates: not resolved)</i> holds no such "
                     "span: its dotted step is the mean power of the whole window, which its meter does not resolve "
                     "either (its row is <i>short_window</i> where it is shorter than one update). Without "
                     "<i>--trace-round</i>, a window the meters resolve is plotted wherever one was traced.")
    if flagged(windows):
        parts.append("A red &times; marks an interval whose power the device cannot have drawn (negative, or above "
                     "its power limit; the reason is in its hover text), and <i>!</i> a bar that holds one.")
    return f'<p class="note">{" ".join(parts)}</p>' if parts else ""


def power_over_time(page: Page, reports: Sequence[Report], round: Optional[int] = None,
                     client: Optional[int] = None) -> str:
    """Reports run with ``--trace``: power against time in a chosen window (by default each algorithm's median
    client window; ``round`` and ``client`` narrow it), mean power per phase."""
    traced, notes = _traced(reports)
    head = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    groups = _trace_groups(traced, reports)
    if not groups:
        if round is not None or client is not None:  # asked for a window no report traced: refused, not ignored
            raise ConfigError("--trace-round/--trace-client pick a traced window, and none of these reports has a "
                              "traced client window or window of your own code (measure with --trace)")
        return head + ('<p class="note">No traced client windows or windows of your own code in these reports.</p>'
                       if traced else "")
    names = dict.fromkeys(r["phase"] for ws in groups.values() for w in ws for r in w.rows if r["phase"])
    bands = {name: PHASE_COLORS[i % len(PHASE_COLORS)] for i, name in enumerate(names)}
    rates = sorted({f"{trace_hz(rep):g} Hz" if trace_hz(rep) else "an unrecorded rate" for rep, _ in traced})
    estimate = ('<p class="estimate"><strong>Power here is an ESTIMATE</strong> wherever its method is estimate '
                "(process CPU time times watts per core; dashed lines, dotted where not resolved, hatched bars), not a "
                "measurement.</p>"
                if any(estimated(ws) for ws in groups.values()) else "")
    chosen, missing = _chosen_windows(groups, round, client)
    head += "".join(f'<p class="note">{esc(n)}</p>' for n in missing)
    scope = "".join(part for part, given in ((f" of client {client}", client), (f" in round {round}", round))
                    if given is not None)
    plots = [_power_plot(page, d, v, w, bands) for (d, v), w in chosen.items()]
    bars = [_phase_power(page, d, v, ws) for (d, v), ws in groups.items()]
    shown = [w for ws in groups.values() for w in ws]
    own = all(_own(ws) for ws in groups.values())
    return (head + estimate + _trace_rule(rates, scope, own) + _honesty_rule(shown, list(chosen.values()))
            + grid(plots) + grid(bars))
