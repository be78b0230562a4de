"""What the dashboard shows of reports of your own code (:func:`edgeprof.monitor`), beside the windows section
(:mod:`edgeprof.report.dashboard.window_charts`): which rows are your own code's windows and how they are named, the
run's labels, the windows that raised, the median seconds and joules per phase of each window name, and the points
of accuracy against the energy spent up to them.

A page of such reports alone leaves out the sections made for federated runs (:data:`FEDERATED_SECTIONS`): a note
at the top of the page names them instead of drawing them empty.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Optional, Sequence

from edgeprof.report.dashboard.page import (Page, Row, esc, grid, marked, median, methods_of, num_text,
                                            short_labels, table)
from edgeprof.report.summary import row_labels
from edgeprof.report.trace_file import of_own_code
from edgeprof.report.writer import Report

#: the sections drawn from client rounds, server steps and Flower runs, left out of a page of your own code alone
FEDERATED_SECTIONS = ("flower", "verdicts", "cost-vs-tau", "timeseries", "to-target")
#: the kinds of row that are windows of your own code (an ``eval`` row of a monitor has a window name)
OWN_KINDS = ("window", "eval")


def own_label(data: Mapping[str, str]) -> Optional[str]:
    """How the page names a row's window of your own code: its name (``epoch``), ``eval NAME`` for an eval window;
    None for a row that is none (a client round, a server step, an evaluation of ``edgeprof measure``)."""
    kind, name = data.get("kind"), data.get("window") or ""
    if kind == "window":
        return name
    if kind == "eval" and name:
        return f"eval {name}"
    return None


def own_title(data: Mapping[str, str]) -> Optional[str]:
    """:func:`own_label` as a part of a page's totals names it: ``window NAME``, ``eval window NAME``."""
    label = own_label(data)
    return None if label is None else f"eval window {label[len('eval '):]}" if data.get("kind") == "eval" \
        else f"window {label}"


def own_only(reports: Sequence[Report]) -> bool:
    """Whether every report is one of your own code and none has a client round or server step."""
    return bool(reports) and all(of_own_code(rep) for rep in reports) \
        and not any(r.get("kind") in ("client", "server") for rep in reports for r in rep.rows)


def left_out_note() -> str:
    return ('<p class="note">These reports are of your own code (<code>edgeprof.monitor</code>): the sections made '
            "for federated runs (verdicts, cost against tau, per-round time series, Flower, energy to a target "
            "accuracy) are left out.</p>")


def labels_and_errors(reports: Sequence[Report], hosts: Mapping[str, list[Row]]) -> str:
    """The run's labels per report (its sidecar's ``monitor.labels``, and the labels its rows carry beyond them),
    then every window that ended by an exception (its row labelled ``error``)."""
    body = []
    for rep in reports:
        section = rep.sidecar.get("monitor")
        if not isinstance(section, dict):
            continue
        run = rep.rows[0].get("run_id", rep.path.stem) if rep.rows else rep.path.stem
        labels = section.get("labels") if isinstance(section.get("labels"), dict) else {}
        filled = {c: ", ".join(values) for c in ("algo", "dataset", "backbone")
                  if (values := [v for v in dict.fromkeys(r.get(c) for r in rep.rows) if v])}
        per_row = sorted({k for r in rep.rows for k in row_labels(r) if k != "error" and k not in labels})
        body.append((run, ", ".join(f"{k}={v}" for k, v in labels.items()) or "-",
                     ", ".join(f"{k}={v}" for k, v in filled.items()) or "-", ", ".join(per_row) or "-"))
    parts = []
    if body:
        parts.append("<h3>The runs' labels</h3>" + table(("run", "labels of every row", "columns they fill",
                                                           "labels of some windows"), body, "labels"))
    raised = [(host, r.data.get("run_id", ""), own_label(r.data) or r.data.get("kind", ""), r.data.get("round") or "-",
               row_labels(r.data)["error"], num_text(r.num("wall_s")),
               marked(num_text(r.num("energy_j")), "estimate" in methods_of([r]) and r.num("energy_j") is not None))
              for host, rows in hosts.items() for r in rows if row_labels(r.data).get("error")]
    if raised:
        parts.append("<h3>Windows that raised</h3><p>Each ended by an exception in its body; its row is kept with "
                     "what it measured up to then, labelled <code>error</code> (the exception's type).</p>"
                     + table(("host", "run", "window", "round", "error", "wall s", "energy J"), raised, "raised"))
    return "".join(parts)


def _phase_columns(phases: Sequence[str], members: Sequence[Row], unit: str) -> list[Optional[float]]:
    column = "_s" if unit == "s" else "_j"
    return [median([x for x in (r.num(f"{p}{column}") for r in members) if x is not None]) for p in phases]


def phase_bars(page: Page, hosts: Mapping[str, list[Row]], phases: Sequence[str]) -> str:
    """Per host, the median seconds and (where measured) joules of each phase of each window name, stacked, with
    what the window spent outside its phases on top; ``""`` where no window of your own code has a phase."""
    cells = []
    for host, rows in hosts.items():
        groups: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            label = own_label(r.data)
            if label is not None:
                groups[f"{r.variant} {label}" if r.variant else label].append(r)
        mine = [p for p in phases if any(r.num(f"{p}_s") is not None for m in groups.values() for r in m)]
        if not mine:
            continue
        names = [n for n, m in groups.items() if any(r.num(f"{p}_s") is not None for p in mine for r in m)]
        short = short_labels(names)
        for unit, total, title in (("s", "wall_s", "median seconds"), ("J", "energy_j", "median joules")):
            per_phase = {n: _phase_columns(mine, groups[n], unit) for n in names}
            if not any(v is not None for vs in per_phase.values() for v in vs):
                continue
            data = [{"type": "bar", "name": esc(p), "x": [esc(short[n]) for n in names],
                     "y": [per_phase[n][i] for n in names], "hovertext": [esc(n) for n in names],
                     "hovertemplate": f"%{{hovertext}}: {esc(p)} %{{y:.3g}} {unit}<extra></extra>"}
                    for i, p in enumerate(mine)]
            rest = []
            for n in names:
                whole = median([x for x in (r.num(total) for r in groups[n]) if x is not None])
                parts = [v for v in per_phase[n] if v is not None]
                rest.append(None if whole is None else max(whole - sum(parts), 0.0))
            data.append({"type": "bar", "name": "outside the phases", "x": [esc(short[n]) for n in names], "y": rest,
                         "marker": {"color": "#bbbbbb"}, "hovertext": [esc(n) for n in names],
                         "hovertemplate": f"%{{hovertext}}: outside the phases %{{y:.3g}} {unit}<extra></extra>"})
            estimate = unit == "J" and "estimate" in methods_of(r for n in names for r in groups[n])
            cells.append(page.figure(data, marked(f"{host}: {title} per phase of each window", estimate),
                                     {"type": "category", "title": {"text": "window"}},
                                     {"title": {"text": marked({'s': 'seconds', 'J': 'joules'}[unit], estimate)}},
                                     barmode="stack"))
    if not cells:
        return ""
    return ("<h3>Phases of your own code's windows</h3><p>The median of each phase over the windows of one name, "
            "stacked; on top, the median window's time or energy outside its phases (the median window less the "
            "phases' medians, none below zero).</p>" + grid(cells))


def accuracy_points(members: Sequence[Row]) -> tuple[list[Optional[float]], list[Row]]:
    """The rows of one run of your own code that carry ``test_accuracy``, each with the joules of every window of
    the run written up to it (itself included; a window with no energy adds none), in the order written."""
    xs, points, spent = [], [], 0.0
    for r in members:
        if own_label(r.data) is None:
            continue
        spent += r.num("energy_j") or 0.0
        if r.num("test_accuracy") is not None:
            xs.append(spent if r.num("energy_j") is not None or spent else None)
            points.append(r)
    return xs, points
