"""The sections drawn from single windows: the windows of a user's own code (reports of ``edgeprof.monitor``) and,
for reports run with ``--trace``, power against time in a chosen client window over its phases' bands, with each
algorithm's mean power per phase."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.errors import ConfigError, ReportError
from edgeprof.report.analysis import variant_of
from edgeprof.report.dashboard.page import (COLORS, METRIC_LABELS, Page, Row, device_of, energy_note, esc, grid,
                                            listing, marked, median, methods_of, num_text, phase_names, table)
from edgeprof.report.trace_view import (OUTSIDE, PHASE_COLORS, choose, estimated, load, phase_bands, phase_bars,
                                        phase_stats, power_lines, report_row)
from edgeprof.report.writer import Report


def _window_table(device: str, groups: Mapping[tuple[str, str], list[Row]], phases: Sequence[str]) -> str:
    body = []
    for (variant, name), members in groups.items():
        med = lambda col: median([x for x in (r.num(col) for r in members) if x is not None])  # noqa: E731
        estimate = "estimate" in methods_of(members)
        parts = "; ".join(f"{p} {med(f'{p}_s'):.3g} s" for p in phases if med(f"{p}_s") is not None)
        body.append((device, variant, name, len(members), num_text(med("wall_s")), num_text(med("cpu_s")),
                     marked(num_text(med("energy_j")), estimate and med("energy_j") is not None),
                     marked(num_text(med("carbon_g")), estimate and med("carbon_g") is not None),
                     "+".join(sorted(methods_of(members))) or "none", parts or "-"))
    return table(("device", "algorithm", "window", "n", "wall s", "CPU s", "energy J", "g CO2e", "energy method",
                   "phases (median s)"), body, "windows")


def _window_plot(page: Page, device: str, groups: Mapping[tuple[str, str], list[Row]]) -> str:
    """Each window's energy (its wall seconds where no energy was measured), in the order the rows were written."""
    metric = "energy_j" if any(r.num("energy_j") is not None for m in groups.values() for r in m) else "wall_s"
    data = []
    for (variant, name), members in groups.items():
        label = f"{variant} {name}" if variant else name
        data.append({"type": "scatter", "mode": "markers+lines", "name": esc(label),
                     "x": list(range(1, len(members) + 1)), "y": [r.num(metric) for r in members],
                     "marker": {"color": page.color(label)}, "line": {"width": 1}})
    estimate = metric == "energy_j" and "estimate" in methods_of(r for m in groups.values() for r in m)
    return page.figure(data, marked(f"{device}: {METRIC_LABELS[metric]} of each window", estimate),
                       {"title": {"text": "occurrence of the window"}}, {"title": {"text": METRIC_LABELS[metric]}},
                       log_toggle=True)


def windows(page: Page, reports: Sequence[Report], devices: Mapping[str, list[Row]]) -> str:
    """Reports of edgeprof.monitor: medians per window name, and every window's cost in order."""
    cells, tables = [], []
    for device, rows in devices.items():
        groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "window":
                groups[(r.variant, r.data.get("window", ""))].append(r)
        if groups:
            tables.append(_window_table(device, groups, phase_names(reports)))
            cells.append(_window_plot(page, device, groups))
    if not tables:
        return ('<p class="note">No window rows (reports written by <code>edgeprof.monitor</code> around your own '
                "code have them).</p>")
    notes: list[str] = []
    for rep in reports:
        section = rep.sidecar.get("monitor")
        if isinstance(section, dict) and isinstance(section.get("notes"), list):
            notes += [str(n) for n in section["notes"]]
    return (energy_note([r for rs in devices.values() for r in rs if r.data.get("kind") == "window"])
            + "".join(f'<p class="note">{esc(n)}</p>' for n in dict.fromkeys(notes))
            + "".join(tables) + grid(cells))


def _traced(reports: Sequence[Report]) -> tuple[list[tuple[Report, list]], list[str]]:
    """The reports with a trace and their windows; the notes of the others (no trace, or a trace that cannot be
    read)."""
    traced, notes, untraced = [], [], []
    for rep in reports:
        if not rep.sidecar.get("trace"):
            untraced.append(rep.path.stem)
            continue
        try:
            traced.append((rep, load(rep)[1]))
        except ReportError as err:
            notes.append(f"{rep.path.stem}: {err}")
    if untraced:
        notes.insert(0, f"No power trace was recorded in {listing(untraced)}: run it with --trace (e.g. "
                        f"edgeprof measure --trace) to record one.")
    return traced, notes


def _trace_groups(traced) -> dict[tuple[str, str], list]:
    """(device, algorithm) -> its traced client windows, in the order of the reports."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for rep, windows in traced:
        for w in windows:
            row = report_row(rep, w)
            if w.kind == "client" and row is not None:
                groups[(device_of(rep, row), variant_of(row.get("algo", ""), row.get("engine", "")))].append(w)
    return groups


def _power_plot(page: Page, device: str, variant: str, window, bands: Mapping[str, str]) -> str:
    """One algorithm's chosen window: power against time per domain over its phases' bands."""
    data, estimate = power_lines(window, COLORS), estimated([window])
    shapes, labels = phase_bands(window, bands)
    return page.figure(data, marked(f"{device}: {variant}, round {window.round} client {window.client}, "
                                     f"tau={window.tau}", estimate),
                       {"title": {"text": "seconds since the window started"}},
                       {"title": {"text": marked("watts", estimate)}, "rangemode": "tozero"},
                       shapes=shapes, annotations=labels, showlegend=True)


def _chosen_windows(groups, round: Optional[int], client: Optional[int]) -> tuple[dict, list[str]]:
    """(device, algorithm) -> the window to draw (its median-energy client window, within ``round`` and of
    ``client`` when given), and a note for each algorithm that has none there. ConfigError (exit 2, naming what
    was traced) when no algorithm has one."""
    chosen, notes, errors = {}, [], []
    for (device, variant), windows in groups.items():
        try:
            chosen[(device, variant)] = choose(windows, round=round, client=client)[0]
        except ConfigError as err:
            errors.append(f"{device}: {variant}: {err}")
    if not chosen:
        raise ConfigError("--trace-round/--trace-client match no traced client window: " + "; ".join(errors))
    notes.extend(f"Not drawn: {e}." for e in errors)
    return chosen, notes


def _phase_power(page: Page, device: str, variant: str, windows: Sequence) -> str:
    data, estimate = phase_bars(phase_stats(windows), COLORS), estimated(windows)
    return page.figure(data, marked(f"{device}: {variant}: mean power per phase over {len(windows)} client windows",
                                     estimate), {"type": "category"},
                       {"title": {"text": marked("mean watts (energy / duration)", estimate)}}, barmode="group",
                       showlegend=True)


def _trace_rule(rates: Iterable[str], scope: str) -> str:
    return (f"<p>The power trace of each algorithm's median-energy client window{esc(scope)}: every meter domain's "
            f"mean power over each interval between samples (taken at {esc(listing(rates))} and at every phase "
            f"edge), drawn as steps over the phases' shaded bands; drag to zoom, double-click to reset. A phase marked "
            f"<i>(short)</i> lasted less than two sample periods. Below, per algorithm: the mean power of each "
            f"phase (its energy over its duration) over all its traced client windows; {esc(OUTSIDE)} is the "
            f"bookkeeping between phases.</p>")


def power_over_time(page: Page, reports: Sequence[Report], round: Optional[int] = None,
                     client: Optional[int] = None) -> str:
    """Reports run with ``--trace``: power against time in a chosen window (by default each algorithm's median
    client window; ``round`` and ``client`` narrow it), mean power per phase."""
    traced, notes = _traced(reports)
    head = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    groups = _trace_groups(traced)
    if not groups:
        return head + ('<p class="note">No traced client windows in these reports (<code>edgeprof trace --kind '
                       'window</code> shows the traced windows of your own code).</p>' if traced else "")
    names = dict.fromkeys(r["phase"] for ws in groups.values() for w in ws for r in w.rows if r["phase"])
    bands = {name: PHASE_COLORS[i % len(PHASE_COLORS)] for i, name in enumerate(names)}
    rates = sorted({f"{float(rep.sidecar['trace'].get('hz') or 0):g} Hz" for rep, _ in traced})
    estimate = ('<p class="estimate"><strong>Power here is an ESTIMATE</strong> wherever its method is estimate '
                "(process CPU time times watts per core; dashed lines, hatched bars), not a measurement.</p>"
                if any(estimated(ws) for ws in groups.values()) else "")
    chosen, missing = _chosen_windows(groups, round, client)
    head += "".join(f'<p class="note">{esc(n)}</p>' for n in missing)
    scope = "".join(part for part, given in ((f" of client {client}", client), (f" in round {round}", round))
                    if given is not None)
    plots = [_power_plot(page, d, v, w, bands) for (d, v), w in chosen.items()]
    bars = [_phase_power(page, d, v, ws) for (d, v), ws in groups.items()]
    return head + estimate + _trace_rule(rates, scope) + grid(plots) + grid(bars)
