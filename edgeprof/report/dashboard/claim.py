"""The claim's sections: verdicts (fits, growth, ratios), cost per client round against tau with fitted lines and
95% bands, and the per-phase breakdown (phase seconds, peak memory, Flower's set-up beside the round)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from edgeprof.report import gpu_energy
from edgeprof.report.analysis import (CONFIDENCE, FLAT_MAX_GROWTH, GPU_METRICS, LINEAR_MIN_GROWTH, METRICS, Analysis,
                                     Interval, Ratio, VariantFit, is_short)
from edgeprof.report.dashboard.page import (METRIC_LABELS, Page, Row, energy_note, esc, estimated_variants, grid,
                                            interval_text, listing, marked, median, methods_of, num_text,
                                            phase_names, short_labels, table)
from edgeprof.report.dashboard.own_code import phase_bars as own_phase_bars
from edgeprof.report.dashboard.runs import gpu_note
from edgeprof.report.writer import Report

#: the axis titles of the round GPU's metrics (their figures' titles say the method: see :func:`_cost_title`)
GPU_LABELS = {"gpu_j": "GPU joules", "gpu_net_j": "GPU joules net of idle"}


RULE = (f"<p>Fit: least squares of every client round's cost on tau, cost = a + b&middot;tau, "
        f"{CONFIDENCE:.0%} intervals from the t distribution. Growth = b&middot;(tau<sub>max</sub> - "
        f"tau<sub>min</sub>) / (mean cost at tau<sub>min</sub>), interval from b's. Verdict <b>flat</b> when the "
        f"growth's whole interval lies within &plusmn;{FLAT_MAX_GROWTH:.0%}; <b>linear</b> when its lower "
        f"end is at least {LINEAR_MIN_GROWTH:.0%}; otherwise <b>inconclusive</b> (moderate growth, or too "
        f"noisy or too few rows to tell). Step/pass: the marginal cost b of one more local step over the cost "
        f"of one full backbone forward-and-backward pass over the local set, measured in the same report as "
        f"FedAvg's slope b (one FedAvg local step is exactly such a pass).</p>")


def _one_tau(analysis: Analysis) -> str:
    """The "one tau: no fit" sentence when every algorithm ran at a single tau, else ``""``."""
    if not analysis.fits or any(len(f.taus) > 1 for f in analysis.fits):
        return ""
    taus = listing(f"tau={t}" for t in sorted({t for f in analysis.fits for t in f.taus}))
    return (f'<p class="note"><b>One tau: no fit.</b> Every algorithm here ran at a single tau ({taus}), and '
            f"a line of cost against tau needs two or more: <code>edgeprof sweep</code> measures several.</p>")


def _metric_cell(item: VariantFit | Ratio, variants: Iterable[str], estimated: set[tuple[str, str]]) -> str:
    """The metric of a fit or ratio: a GPU metric with its own method (``gpu_j (counter)``), ``energy_j`` marked
    ESTIMATE where any of it was estimated."""
    if item.metric in GPU_METRICS:
        return item.label
    return marked(item.metric, item.metric == "energy_j" and any((item.host, v) in estimated for v in variants))


def _fits_table(analysis: Analysis, estimated: set[tuple[str, str]]) -> str:
    return table(("host", "algorithm", "metric", "n", "a", "b per step", "step/pass", "growth", "verdict"),
                  [(f.host, f.variant, _metric_cell(f, [f.variant], estimated),
                    f"{f.n} (+{f.short} short)" if f.short else f.n,
                    f"{f.fit.a:.4g}" if f.fit else "-",
                    interval_text(Interval(f.fit.b, *f.fit.ci_b) if f.fit else None),
                    interval_text(f.step_vs_pass, "{:.3g}"), interval_text(f.verdict.growth, "{:+.1%}"),
                    f.verdict.label)
                   for f in analysis.fits], "verdicts")


#: what the ratios' place says when there is none (a table of headers alone would say nothing)
NO_RATIOS = ("<p>No ratios: a ratio needs PFLEGO and another algorithm measured at the same tau on the same "
             "host.</p>")


def _ratios_table(analysis: Analysis, estimated: set[tuple[str, str]]) -> str:
    if not analysis.ratios:
        return NO_RATIOS
    taus = sorted({r.tau for r in analysis.ratios})
    pivot: dict[tuple, dict[int, str]] = defaultdict(dict)
    for r in analysis.ratios:
        metric = _metric_cell(r, (r.variant, r.reference), estimated)
        pivot[(r.host, r.variant, r.reference, metric)][r.tau] = interval_text(r.ratio, "{:.2f}")
    return table(("host", "algorithm", "over", "metric", *[f"tau={t}" for t in taus]),
                  [(*key, *[cells.get(t, "-") for t in taus]) for key, cells in pivot.items()], "ratios")


def verdicts(analysis: Analysis, rows: Sequence[Row]) -> str:
    """The fitting rule, each algorithm's fit and verdict per metric, and its ratios to PFLEGO at each tau; on a GPU,
    what its own metrics are (``gpu_j``, ``gpu_net_j``: verdicts and ratios of their own)."""
    estimated = estimated_variants(rows)
    return ((_one_tau(analysis) or RULE + gpu_note(rows) + _fits_table(analysis, estimated))
            + "<h3>Ratio to PFLEGO per client round at each tau (geometric means; 95% Welch interval on the log "
            "scale)</h3>" + _ratios_table(analysis, estimated))


def _fit_traces(vf: VariantFit | None, variant: str, color: str) -> list[dict]:
    """The fitted line and its confidence band (lower edge clipped at 0: no cost here can be negative)."""
    if vf is None or vf.fit is None:
        return []
    fit, group = vf.fit, esc(variant)
    xs = [fit.x_min + (fit.x_max - fit.x_min) * i / 40 for i in range(41)]
    ys = [fit.predict(x) for x in xs]
    half = [fit.band(x) for x in xs]
    line = {"type": "scatter", "mode": "lines", "name": esc(f"{variant} fit ({vf.verdict.label})"),
            "legendgroup": group, "x": xs, "y": ys, "line": {"color": color}}
    if not all(math.isfinite(h) for h in half):
        return [line]
    upper = [y + h for y, h in zip(ys, half)]
    lower = [max(0.0, y - h) for y, h in zip(ys, half)]
    return [line, {"type": "scatter", "mode": "lines", "name": esc(f"{variant} {CONFIDENCE:.0%} band"),
                   "legendgroup": group, "showlegend": False, "hoverinfo": "skip", "fill": "toself",
                   "x": xs + xs[::-1], "y": upper + lower[::-1], "line": {"width": 0}, "fillcolor": color,
                   "opacity": 0.2}]


def _cost_plot(page: Page, analysis: Analysis, rows: Sequence[Row], host: str, metric: str) -> str:
    data = []
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") == "client" and r.num(metric) is not None and r.num("tau") is not None:
            groups[r.variant].append(r)
    for variant, members in groups.items():
        color, name = page.color(variant), esc(variant)
        flags = [metric.endswith("_j") and is_short(r.data) for r in members]
        short = [r for r, flag in zip(members, flags) if flag]
        kept = [r for r, flag in zip(members, flags) if not flag]
        data.append({"type": "scatter", "mode": "markers", "name": name, "legendgroup": name,
                     "x": [r.num("tau") for r in kept], "y": [r.num(metric) for r in kept],
                     "marker": {"color": color, "size": 6, "opacity": 0.7}})
        if short:  # joules the meters did not resolve: drawn hollow, left out of the fit
            data.append({"type": "scatter", "mode": "markers", "name": esc(f"{variant}: short window, not fitted"),
                         "legendgroup": name, "x": [r.num("tau") for r in short], "y": [r.num(metric) for r in short],
                         "marker": {"color": color, "size": 6, "symbol": "circle-open"}})
        data.extend(_fit_traces(analysis.fit_for(host, variant, metric), variant, color))
    if not data:
        return ""
    members = [r for m in groups.values() for r in m]
    axis = GPU_LABELS.get(metric) or marked(METRIC_LABELS[metric],
                                            metric == "energy_j" and "estimate" in methods_of(members))
    return page.figure(data, _cost_title(host, metric, members), {"title": {"text": "tau"}},
                       {"title": {"text": axis}, "rangemode": "tozero"}, log_toggle=True)


def _cost_title(host: str, metric: str, rows: Sequence[Row]) -> str:
    """``dev: energy, J per client round (ESTIMATE)`` where any of it was estimated; ``dev: GPU joules per client
    round (counter)``: the GPU's metrics say their own method."""
    title = f"{host}: {GPU_LABELS.get(metric) or METRIC_LABELS[metric]} per client round"
    if metric in GPU_METRICS:
        method = gpu_energy.methods(r.data for r in rows) or "no method recorded"
        return f"{title} ({method}{', net of idle' if metric == gpu_energy.NET_METRIC else ''})"
    return marked(title, metric == "energy_j" and "estimate" in methods_of(rows))


def _cost_plots(page: Page, analysis: Analysis, hosts: Mapping[str, list[Row]]) -> str:
    parts = []
    for metric in METRICS + GPU_METRICS:
        cells = [_cost_plot(page, analysis, rows, host, metric) for host, rows in hosts.items()]
        if any(cells):
            parts.append(grid(cells))
    return "".join(parts) or '<p class="note">No client rows with a tau.</p>'


def cost_vs_tau(page: Page, analysis: Analysis, rows: Sequence[Row], hosts: Mapping[str, list[Row]]) -> str:
    """Every client round's cost against tau, per metric and host, with the fits; a note when there is one tau."""
    return _one_tau(analysis) or energy_note(rows) + _cost_plots(page, analysis, hosts)


def _phase_median(members: Sequence[Row], phase: str) -> float | None:
    kind, column = ("server", "wall_s") if phase == "server" else ("client", f"{phase}_s")
    return median([r.num(column) for r in members if r.data.get("kind") == kind and r.num(column) is not None])


def _phase_plot(page: Page, rows: Sequence[Row], host: str, phases: Sequence[str]) -> str:
    """Stacked median phase seconds per (algorithm, tau); the x axis is two-level (tau under algorithm),
    so its labels stay short and upright, and a log toggle shows PFLEGO's phases beside FedAvg's."""
    keys: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") in ("client", "server") and r.num("tau") is not None:
            keys[(r.variant, int(r.num("tau")))].append(r)
    order = sorted(keys)
    short = short_labels(v for v, _ in order)
    x = [[esc(short[v]) for v, _ in order], [str(t) for _, t in order]]
    full = [esc(f"{v} tau={t}") for v, t in order]
    data = []
    for phase in [*phases, "server"]:
        ys = [_phase_median(keys[key], phase) for key in order]
        if any(y is not None for y in ys):
            data.append({"type": "bar", "name": esc(phase), "x": x, "y": ys, "hovertext": full,
                         "hovertemplate": "%{hovertext}: %{y:.3g} s"})
    if not data:
        return ""
    return page.figure(data, f"{host}: median seconds per phase (server: the server step)",
                       {"type": "multicategory", "tickangle": 0, "title": {"text": "tau, by algorithm"}},
                       {"title": {"text": "seconds"}}, log_toggle=True, barmode="stack")


def _memory(hosts: Mapping[str, list[Row]]) -> str:
    body = []
    for host, rows in hosts.items():
        peaks: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "client" and r.num("peak_rss_mb") is not None:
                peaks[r.variant].append(r.num("peak_rss_mb"))
        body.extend((host, v, len(p), f"{statistics.median(p):.0f}", f"{max(p):.0f}") for v, p in peaks.items())
    if not body:
        return ""
    return ("<h3>Peak resident memory per client round (MiB; the window's high-water mark)</h3>"
            + table(("host", "algorithm", "rounds", "median MiB", "max MiB"), body))


def _setup(hosts: Mapping[str, list[Row]]) -> str:
    """Flower runs: the set-up measured beside each client round (not part of its time or energy)."""
    body = []
    for host, rows in hosts.items():
        by_variant: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "client" and r.num("setup_s") is not None:
                by_variant[r.variant].append(r)
        for v, rs in by_variant.items():
            med = lambda col: median([x for x in (r.num(col) for r in rs) if x is not None])  # noqa: E731
            body.append((host, v, len(rs), *(num_text(med(column)) for column in
                                                ("wall_s", "setup_s", "startup_s", "energy_j", "setup_j"))))
    if not body:
        return ""
    return ("<h3>Set-up beside the round (Flower: process start, data, model, ONNX session; medians)</h3>"
            + table(("host", "algorithm", "rounds", "round s", "set-up s", "process start s", "round J",
                      "set-up J"), body, "setup"))


def phases(page: Page, reports: Sequence[Report], hosts: Mapping[str, list[Row]]) -> str:
    """Median seconds per phase for each host, then peak memory and (Flower runs) the set-up beside the round; for
    your own code's windows, the median seconds and joules of each phase per window name
    (:func:`edgeprof.report.dashboard.own_code.phase_bars`)."""
    names = phase_names(reports)
    plots = [p for p in (_phase_plot(page, rows, host, names) for host, rows in hosts.items()) if p]
    body = (grid(plots) if plots else "") + _memory(hosts) + _setup(hosts) + own_phase_bars(page, hosts, names)
    return body or '<p class="note">No phases in these reports.</p>'
