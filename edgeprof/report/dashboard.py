"""The HTML dashboard: one self-contained page (plotly.js and the data inlined) from one or more reports.

``render(reports) -> str`` is the renderer; :func:`write_dashboard` reads report files and writes the
page. The page needs no network and no server: plotly.js comes from the installed ``plotly`` package
(:func:`plotly.offline.get_plotlyjs`, inlined once) and every figure is a JSON object in one
``application/json`` script, drawn by a few lines of JavaScript.

Sections: runs and devices, the windows of a user's own code (reports of ``edgeprof.monitor``), verdicts
(fits, growth, ratios), cost versus tau with fitted lines and 95% bands, per-phase breakdown, power over time
(reports run with ``--trace``: each algorithm's median-energy client window against time over its phases' bands,
and its mean power per phase), per-round time series, energy and carbon totals, accuracy against cumulative
energy (reports with ``kind=eval`` rows), measurement methods. Reports from several devices
(the ``device`` column, else the sidecar's host name) are drawn side by side, one column per device.

Escaping: every text that comes from a report (run ids, algorithm, engine and device names, sidecar
values) is HTML-escaped in the page and in the plot labels; the JSON inside ``<script>`` has ``<``,
``>``, ``&`` and the line separators written as ``\\uXXXX`` escapes, so no value can close the script.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.report.analysis import (CONFIDENCE, FLAT_MAX_GROWTH, LINEAR_MIN_GROWTH, METRICS, Analysis, Interval,
                                     VariantFit, analyze, is_short, variant_of)
from edgeprof.errors import ConfigError, OutputError, ReportError, require
from edgeprof.report.schema import BESIDE_ROUND
from edgeprof.report.trace_view import (OUTSIDE, PHASE_COLORS, choose, estimated, load, phase_bands,
                                        phase_bars, phase_stats, power_lines, report_row)
from edgeprof.report.writer import Report, read_report

SECTIONS = (("runs", "Runs and devices"), ("windows", "Windows of your own code"), ("verdicts", "Verdicts"),
            ("cost-vs-tau", "Cost per client round vs tau"),
            ("phases", "Per-phase breakdown"), ("trace", "Power over time"), ("timeseries", "Per-round time series"),
            ("energy", "Energy and carbon totals"), ("accuracy", "Accuracy against cumulative energy"),
            ("methods", "How the figures were measured"))
METRIC_LABELS = {"wall_s": "wall seconds", "cpu_s": "CPU seconds", "energy_j": "energy, J"}
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")


def esc(value: object) -> str:
    """HTML-escape any value (quotes too)."""
    return html.escape(str(value), quote=True)


def script_json(value: object) -> str:
    """JSON safe inside ``<script>``: non-finite numbers become null, ``< > &`` and U+2028/9 are escaped."""
    text = json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class Row:
    """One report row with its report and device resolved."""

    report: Report
    device: str
    variant: str
    data: Mapping[str, str]

    def num(self, column: str) -> float | None:
        value = self.data.get(column, "")
        try:
            return float(value) if value != "" else None
        except ValueError:
            return None


def _device_of(report: Report, row: Mapping[str, str]) -> str:
    return row.get("device") or str(report.sidecar.get("device", {}).get("hostname", "")) or "device"


def _rows(reports: Sequence[Report]) -> list[Row]:
    return [Row(rep, _device_of(rep, r), variant_of(r.get("algo", ""), r.get("engine", "")), r)
            for rep in reports for r in rep.rows]


# The top margin of every figure is three rows that never overlap, whatever the title's length: plotly's
# toolbar (the modebar, drawn at the top right), the title below it, then (where there is one) the
# linear/log toggle, which stands on the plot area's top edge. The legend sits at the bottom of the figure,
# below the axis title, and the axes grow the margins to fit their labels.
MODEBAR_PX, TITLE_PX, BUTTONS_PX = 30, 34, 34


def _scale_toggle() -> dict:
    """Buttons switching the y axis between linear and log, on the plot area's top-left edge."""
    return {"type": "buttons", "direction": "right", "x": 0, "xanchor": "left", "y": 1, "yanchor": "bottom",
            "pad": {"b": 4}, "buttons": [
                {"label": "linear y", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
                {"label": "log y", "method": "relayout", "args": [{"yaxis.type": "log"}]}]}


class _Page:
    """Collects figures and colours while the sections are built."""

    def __init__(self) -> None:
        self.figures: list[dict] = []
        self._colors: dict[str, str] = {}

    def color(self, variant: str) -> str:
        return self._colors.setdefault(variant, COLORS[len(self._colors) % len(COLORS)])

    def figure(self, data: list, title: str, xaxis: dict, yaxis: dict, log_toggle: bool = False, **layout) -> str:
        """A figure whose title sits below the toolbar, and whose log toggle (if any) sits below the title."""
        fid = f"fig{len(self.figures)}"
        top = MODEBAR_PX + TITLE_PX + (BUTTONS_PX if log_toggle else 0)
        self.figures.append({"id": fid, "data": data, "layout": {
            "title": {"text": esc(title), "yref": "container", "y": 1, "yanchor": "top", "pad": {"t": MODEBAR_PX}},
            "xaxis": {"automargin": True, **xaxis}, "yaxis": {"automargin": True, **yaxis}, "height": 380,
            "margin": {"l": 60, "r": 20, "t": top, "b": 50},
            "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"},
            **({"updatemenus": [_scale_toggle()]} if log_toggle else {}), **layout}})
        return f'<div class="plot" id="{fid}"></div>'


def _short_labels(names: Iterable[str], limit: int = 24) -> dict[str, str]:
    """Axis labels cut to ``limit`` characters (the full name stays in the hover), unless cutting would
    make two of them equal: a category axis would then draw two algorithms as one."""
    names = list(dict.fromkeys(names))
    short = {n: n if len(n) <= limit else n[: limit - 1] + "\u2026" for n in names}
    return short if len(set(short.values())) == len(names) else {n: n for n in names}


def _by_device(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[r.device].append(r)
    return out


def _grid(cells: Sequence[str]) -> str:
    return f'<div class="grid">{"".join(cells)}</div>'


def _table(header: Sequence[str], body: Iterable[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in body)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _iv(iv: Interval | None, fmt: str = "{:.3g}") -> str:
    if iv is None or iv.value is None or not math.isfinite(iv.value):
        return "-"
    if iv.lo is None or iv.hi is None or not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return fmt.format(iv.value)
    return f"{fmt.format(iv.value)} [{fmt.format(iv.lo)}, {fmt.format(iv.hi)}]"


def _methods(rows: Iterable[Row]) -> set[str]:
    return {m for r in rows for m in r.data.get("energy_method", "").split("+") if m}


def _estimated(rows: Iterable[Row]) -> set[tuple[str, str]]:
    """The (device, variant) pairs whose energy is, at least in part, an estimate."""
    return {(r.device, r.variant) for r in rows if r.num("energy_j") is not None and "estimate" in _methods([r])}


def _marked(text: str, estimate: bool) -> str:
    """``text``, followed by ``(ESTIMATE)`` where the energy it stands for is an estimate."""
    return f"{text} (ESTIMATE)" if estimate else text


def _listing(words: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _energy_note(rows: Sequence[Row]) -> str:
    methods = _methods(rows)
    if not methods:
        return '<p class="note">No energy was measured in these reports.</p>'
    listed = esc(_listing(sorted(methods)))
    used = (f"The energy methods in these reports are {listed}." if len(methods) > 1
            else f"The energy method in these reports is {listed}.")
    short = sum(1 for r in rows if r.data.get("kind") in ("client", "server") and is_short(r.data))
    if short:
        used += (f" {short} client or server window(s) lasted less than the meters' update period: their joules are "
                 "not resolved, drawn hollow and left out of the energy fits and ratios.")
    if "estimate" in methods:
        return ('<p class="estimate"><strong>Energy here is an ESTIMATE</strong> wherever its method is estimate '
                f'(process CPU time times watts per core), not a measurement. {used}</p>')
    return f'<p class="note">{used}</p>'


# --- sections -----------------------------------------------------------------------------------------
def _runs(reports: Sequence[Report], rows: Sequence[Row]) -> str:
    body = []
    for rep in reports:
        side = rep.sidecar
        dev = side.get("device", {})
        devices = sorted({r.device for r in rows if r.report is rep})
        body.append((rep.rows[0].get("run_id", rep.path.stem) if rep.rows else rep.path.stem, ", ".join(devices),
                     dev.get("cpu_model", "-"), dev.get("cpu_cores_logical", "-"), dev.get("memory_gib", "-"),
                     side.get("status", "-"), len(rep.rows),
                     ", ".join(sorted(dict.fromkeys(variant_of(r.get("algo", ""), r.get("engine", ""))
                                                    for r in rep.rows)))))
    runs = _table(("run", "device", "CPU", "logical cores", "memory GiB", "status", "rows", "algorithms"), body)
    devs: dict[str, dict] = {}
    for rep in reports:
        for r in rows:
            if r.report is rep:
                devs.setdefault(r.device, {"sidecar": rep.sidecar})
    keys = ("cpu_model", "cpu_cores_logical", "cpu_cores_physical", "memory_gib", "os", "machine", "python")
    side_by_side = _table(["", *devs], [[k, *[d["sidecar"].get("device", {}).get(k, "-") for d in devs.values()]]
                                        for k in keys]
                          + [[lib, *[d["sidecar"].get("libraries", {}).get(lib, "-") for d in devs.values()]]
                             for lib in ("torch", "onnxruntime", "numpy")])
    return runs + "<h3>Devices side by side</h3>" + side_by_side


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
    taus = _listing(f"tau={t}" for t in sorted({t for f in analysis.fits for t in f.taus}))
    return (f'<p class="note"><b>One tau: no fit.</b> Every algorithm here ran at a single tau ({taus}), and '
            f"a line of cost against tau needs two or more: <code>edgeprof sweep</code> measures several.</p>")


def _metric_cell(metric: str, device: str, variants: Iterable[str], estimated: set[tuple[str, str]]) -> str:
    return _marked(metric, metric == "energy_j" and any((device, v) in estimated for v in variants))


def _fits_table(analysis: Analysis, estimated: set[tuple[str, str]]) -> str:
    return _table(("device", "algorithm", "metric", "n", "a", "b per step", "step/pass", "growth", "verdict"),
                  [(f.device, f.variant, _metric_cell(f.metric, f.device, [f.variant], estimated),
                    f"{f.n} (+{f.short} short)" if f.short else f.n,
                    f"{f.fit.a:.4g}" if f.fit else "-", _iv(Interval(f.fit.b, *f.fit.ci_b) if f.fit else None),
                    _iv(f.step_vs_pass, "{:.3g}"), _iv(f.verdict.growth, "{:+.1%}"), f.verdict.label)
                   for f in analysis.fits], "verdicts")


def _ratios_table(analysis: Analysis, estimated: set[tuple[str, str]]) -> str:
    taus = sorted({r.tau for r in analysis.ratios})
    pivot: dict[tuple, dict[int, str]] = defaultdict(dict)
    for r in analysis.ratios:
        metric = _metric_cell(r.metric, r.device, (r.variant, r.reference), estimated)
        pivot[(r.device, r.variant, r.reference, metric)][r.tau] = _iv(r.ratio, "{:.2f}")
    return _table(("device", "algorithm", "over", "metric", *[f"tau={t}" for t in taus]),
                  [(*key, *[cells.get(t, "-") for t in taus]) for key, cells in pivot.items()], "ratios")


def _verdicts(analysis: Analysis, rows: Sequence[Row]) -> str:
    estimated = _estimated(rows)
    return ((_one_tau(analysis) or RULE + _fits_table(analysis, estimated))
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


def _cost_plot(page: _Page, analysis: Analysis, rows: Sequence[Row], device: str, metric: str) -> str:
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
        data.extend(_fit_traces(analysis.fit_for(device, variant, metric), variant, color))
    if not data:
        return ""
    estimate = metric == "energy_j" and "estimate" in _methods(r for m in groups.values() for r in m)
    return page.figure(data, _marked(f"{device}: {METRIC_LABELS[metric]} per client round", estimate),
                       {"title": {"text": "tau"}}, {"title": {"text": METRIC_LABELS[metric]}, "rangemode": "tozero"},
                       log_toggle=True)


def _cost_vs_tau(page: _Page, analysis: Analysis, devices: Mapping[str, list[Row]]) -> str:
    parts = []
    for metric in METRICS:
        cells = [_cost_plot(page, analysis, rows, device, metric) for device, rows in devices.items()]
        if any(cells):
            parts.append(_grid(cells))
    return "".join(parts) or '<p class="note">No client rows with a tau.</p>'


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _phase_median(members: Sequence[Row], phase: str) -> float | None:
    kind, column = ("server", "wall_s") if phase == "server" else ("client", f"{phase}_s")
    return _median([r.num(column) for r in members if r.data.get("kind") == kind and r.num(column) is not None])


def _phase_plot(page: _Page, rows: Sequence[Row], device: str, phases: Sequence[str]) -> str:
    """Stacked median phase seconds per (algorithm, tau); the x axis is two-level (tau under algorithm),
    so its labels stay short and upright, and a log toggle shows PFLEGO's phases beside FedAvg's."""
    keys: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") in ("client", "server") and r.num("tau") is not None:
            keys[(r.variant, int(r.num("tau")))].append(r)
    order = sorted(keys)
    short = _short_labels(v for v, _ in order)
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
    return page.figure(data, f"{device}: median seconds per phase (server: the server step)",
                       {"type": "multicategory", "tickangle": 0, "title": {"text": "tau, by algorithm"}},
                       {"title": {"text": "seconds"}}, log_toggle=True, barmode="stack")


def _memory(devices: Mapping[str, list[Row]]) -> str:
    body = []
    for device, rows in devices.items():
        peaks: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "client" and r.num("peak_rss_mb") is not None:
                peaks[r.variant].append(r.num("peak_rss_mb"))
        body.extend((device, v, len(p), f"{statistics.median(p):.0f}", f"{max(p):.0f}") for v, p in peaks.items())
    if not body:
        return ""
    return ("<h3>Peak resident memory per client round (MiB; the window's high-water mark)</h3>"
            + _table(("device", "algorithm", "rounds", "median MiB", "max MiB"), body))


def _setup(devices: Mapping[str, list[Row]]) -> str:
    """Flower runs: the set-up measured beside each client round (not part of its time or energy)."""
    body = []
    for device, rows in devices.items():
        by_variant: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "client" and r.num("setup_s") is not None:
                by_variant[r.variant].append(r)
        for v, rs in by_variant.items():
            med = lambda col: _median([x for x in (r.num(col) for r in rs) if x is not None])  # noqa: E731
            body.append((device, v, len(rs), _fmt(med("wall_s")), _fmt(med("setup_s")), _fmt(med("startup_s")),
                         _fmt(med("energy_j")), _fmt(med("setup_j"))))
    if not body:
        return ""
    return ("<h3>Set-up beside the round (Flower: process start, data, model, ONNX session; medians)</h3>"
            + _table(("device", "algorithm", "rounds", "round s", "set-up s", "process start s", "round J",
                      "set-up J"), body, "setup"))


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _phase_names(reports: Sequence[Report]) -> list[str]:
    names: list[str] = []
    for rep in reports:
        for c in rep.columns:
            if c.endswith("_cpu_s") and c != "cpu_s" and c[: -len("_cpu_s")] not in names + list(BESIDE_ROUND):
                names.append(c[: -len("_cpu_s")])
    return names


def _round_traces(page: _Page, rows: Sequence[Row]) -> list[dict]:
    """One line per (run, algorithm, tau), so that a zigzag between taus does not read as drift; one legend
    entry per (run, algorithm) shows and hides all its taus."""
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") == "client" and r.num("wall_s") is not None and r.num("round") is not None:
            groups[(r.data.get("run_id", ""), r.variant, r.data.get("tau", ""))].append(r)
    several_runs = len({k[0] for k in groups}) > 1
    data, shown = [], set()
    for (run, variant, tau), members in groups.items():
        label = f"{run} {variant}" if several_runs else variant
        members = sorted(members, key=lambda r: r.num("round"))
        data.append({"type": "scatter", "mode": "markers+lines", "name": esc(label), "legendgroup": esc(label),
                     "showlegend": label not in shown, "x": [r.num("round") for r in members],
                     "y": [r.num("wall_s") for r in members], "text": [esc(f"{label} tau={tau}")] * len(members),
                     "hovertemplate": "%{text}<br>round %{x}: %{y:.3g} s<extra></extra>",
                     "marker": {"color": page.color(variant)}, "line": {"width": 1}})
        shown.add(label)
    return data


def _timeseries(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells = []
    for device, rows in devices.items():
        data = _round_traces(page, rows)
        if data:
            cells.append(page.figure(data, f"{device}: wall seconds of each client round (one line per tau)",
                                     {"title": {"text": "round (in a sweep: the cell's position in the order)"}},
                                     {"title": {"text": "wall seconds"}, "type": "log"}))
    return _grid(cells) if cells else '<p class="note">No client rows.</p>'


def _totals(rows: Sequence[Row]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        if r.data.get("kind") not in ("client", "server"):
            continue
        t = out.setdefault(r.variant, {"energy_j": 0.0, "carbon_g": 0.0, "wall_s": 0.0, "rounds": set(),
                                       "has_energy": False, "has_carbon": False, "methods": set()})
        t["rounds"].add((r.data.get("run_id"), r.data.get("round")))
        t["methods"] |= _methods([r])
        t["wall_s"] += r.num("wall_s") or 0.0
        if r.num("energy_j") is not None:
            t["energy_j"] += r.num("energy_j")
            t["has_energy"] = True
        if r.num("carbon_g") is not None:
            t["carbon_g"] += r.num("carbon_g")
            t["has_carbon"] = True
    return out


def _totals_table(device: str, totals: Mapping[str, dict]) -> str:
    """One row per algorithm; its energy and carbon say ESTIMATE where any of its energy was estimated."""
    body = []
    for v, t in totals.items():
        estimate = "estimate" in t["methods"]
        body.append((device, v, len(t["rounds"]), f"{t['wall_s']:.4g}",
                     _marked(f"{t['energy_j']:.4g}", estimate) if t["has_energy"] else "-",
                     _marked(f"{t['carbon_g']:.4g}", estimate) if t["has_carbon"] else "-",
                     "+".join(sorted(t["methods"])) or "none"))
    return _table(("device", "algorithm", "rounds", "wall s", "energy J", "g CO2e", "energy method"), body, "totals")


def _total_bars(page: _Page, device: str, totals: Mapping[str, dict], what: str, unit: str,
                estimate: bool) -> str:
    """Bars of one total (``energy`` or ``carbon``) per algorithm; empty when no algorithm has it."""
    key, flag = {"energy": ("energy_j", "has_energy"), "carbon": ("carbon_g", "has_carbon")}[what]
    if not any(t[flag] for t in totals.values()):
        return ""
    short = _short_labels(totals)
    data = [{"type": "bar", "name": esc(_marked(unit, estimate)), "x": [esc(short[v]) for v in totals],
             "hovertext": [esc(v) for v in totals], "y": [t[key] if t[flag] else None for t in totals.values()],
             "marker": {"color": [page.color(v) for v in totals]}}]
    return page.figure(data, _marked(f"{device}: total {what} per algorithm", estimate), {"type": "category"},
                       {"title": {"text": unit}})


def _energy(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells, tables = [], []
    for device, rows in devices.items():
        totals = _totals(rows)
        estimate = "estimate" in _methods(rows)
        cells += [_total_bars(page, device, totals, "energy", "joules", estimate),
                  _total_bars(page, device, totals, "carbon", "grams CO2e", estimate)]
        tables.append(_totals_table(device, totals))
    all_rows = [r for rows in devices.values() for r in rows]
    return _energy_note(all_rows) + _grid([c for c in cells if c]) + "".join(tables)


def _accuracy(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells = []
    for device, rows in devices.items():
        runs: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            runs[(r.data.get("run_id", ""), r.variant)].append(r)
        data, protocols = [], set()
        for (run, variant), members in runs.items():
            evals = [r for r in members if r.data.get("kind") == "eval" and r.num("test_accuracy") is not None]
            if not evals:
                continue
            spent: dict[float, float] = defaultdict(float)
            for r in members:
                if r.data.get("kind") in ("client", "server") and r.num("round") is not None:
                    spent[r.num("round")] += r.num("energy_j") or 0.0
            xs, total = [], 0.0
            cumulative = {}
            for rnd in sorted(spent):
                total += spent[rnd]
                cumulative[rnd] = total
            for r in evals:
                xs.append(cumulative.get(r.num("round"), None))
            protocol = "+".join(sorted({r.data.get("eval_protocol") or "global" for r in evals}))
            data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{run} {variant} ({protocol})"),
                         "x": xs, "y": [r.num("test_accuracy") for r in evals], "marker": {"color": page.color(variant)}})
            protocols.add(protocol)
        if data:
            estimate = " (energy ESTIMATED)" if "estimate" in _methods(rows) else ""
            cells.append(page.figure(data, f"{device}: test accuracy ({'+'.join(sorted(protocols))} protocol) "
                                           f"against cumulative energy{estimate}",
                                     {"title": {"text": "cumulative energy, J"}},
                                     {"title": {"text": "test accuracy"}, "range": [0, 1]}))
    if not cells:
        return ('<p class="note">None of these reports has <code>kind=eval</code> rows (write them with '
                '<code>edgeprof train</code> or <code>edgeprof measure --evaluate</code>).</p>')
    return _grid(cells)


def _window_table(device: str, groups: Mapping[tuple[str, str], list[Row]], phases: Sequence[str]) -> str:
    body = []
    for (variant, name), members in groups.items():
        med = lambda col: _median([x for x in (r.num(col) for r in members) if x is not None])  # noqa: E731
        estimate = "estimate" in _methods(members)
        parts = "; ".join(f"{p} {med(f'{p}_s'):.3g} s" for p in phases if med(f"{p}_s") is not None)
        body.append((device, variant, name, len(members), _fmt(med("wall_s")), _fmt(med("cpu_s")),
                     _marked(_fmt(med("energy_j")), estimate and med("energy_j") is not None),
                     _marked(_fmt(med("carbon_g")), estimate and med("carbon_g") is not None),
                     "+".join(sorted(_methods(members))) or "none", parts or "-"))
    return _table(("device", "algorithm", "window", "n", "wall s", "CPU s", "energy J", "g CO2e", "energy method",
                   "phases (median s)"), body, "windows")


def _window_plot(page: _Page, device: str, groups: Mapping[tuple[str, str], list[Row]]) -> str:
    """Each window's energy (its wall seconds where no energy was measured), in the order the rows were written."""
    metric = "energy_j" if any(r.num("energy_j") is not None for m in groups.values() for r in m) else "wall_s"
    data = []
    for (variant, name), members in groups.items():
        label = f"{variant} {name}" if variant else name
        data.append({"type": "scatter", "mode": "markers+lines", "name": esc(label),
                     "x": list(range(1, len(members) + 1)), "y": [r.num(metric) for r in members],
                     "marker": {"color": page.color(label)}, "line": {"width": 1}})
    estimate = metric == "energy_j" and "estimate" in _methods(r for m in groups.values() for r in m)
    return page.figure(data, _marked(f"{device}: {METRIC_LABELS[metric]} of each window", estimate),
                       {"title": {"text": "occurrence of the window"}}, {"title": {"text": METRIC_LABELS[metric]}},
                       log_toggle=True)


def _windows(page: _Page, reports: Sequence[Report], devices: Mapping[str, list[Row]]) -> str:
    """Reports of edgeprof.monitor: medians per window name, and every window's cost in order."""
    cells, tables = [], []
    for device, rows in devices.items():
        groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "window":
                groups[(r.variant, r.data.get("window", ""))].append(r)
        if groups:
            tables.append(_window_table(device, groups, _phase_names(reports)))
            cells.append(_window_plot(page, device, groups))
    if not tables:
        return ('<p class="note">No window rows (reports written by <code>edgeprof.monitor</code> around your own '
                "code have them).</p>")
    notes: list[str] = []
    for rep in reports:
        section = rep.sidecar.get("monitor")
        if isinstance(section, dict) and isinstance(section.get("notes"), list):
            notes += [str(n) for n in section["notes"]]
    return (_energy_note([r for rs in devices.values() for r in rs if r.data.get("kind") == "window"])
            + "".join(f'<p class="note">{esc(n)}</p>' for n in dict.fromkeys(notes))
            + "".join(tables) + _grid(cells))


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
        notes.insert(0, f"No power trace was recorded in {_listing(untraced)}: run it with --trace (e.g. "
                        f"edgeprof measure --trace) to record one.")
    return traced, notes


def _trace_groups(traced) -> dict[tuple[str, str], list]:
    """(device, algorithm) -> its traced client windows, in the order of the reports."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for rep, windows in traced:
        for w in windows:
            row = report_row(rep, w)
            if w.kind == "client" and row is not None:
                groups[(_device_of(rep, row), variant_of(row.get("algo", ""), row.get("engine", "")))].append(w)
    return groups


def _power_plot(page: _Page, device: str, variant: str, window, bands: Mapping[str, str]) -> str:
    """One algorithm's chosen window: power against time per domain over its phases' bands."""
    data, estimate = power_lines(window, COLORS), estimated([window])
    shapes, labels = phase_bands(window, bands)
    return page.figure(data, _marked(f"{device}: {variant}, round {window.round} client {window.client}, "
                                     f"tau={window.tau}", estimate),
                       {"title": {"text": "seconds since the window started"}},
                       {"title": {"text": _marked("watts", estimate)}, "rangemode": "tozero"},
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


def _phase_power(page: _Page, device: str, variant: str, windows: Sequence) -> str:
    data, estimate = phase_bars(phase_stats(windows), COLORS), estimated(windows)
    return page.figure(data, _marked(f"{device}: {variant}: mean power per phase over {len(windows)} client windows",
                                     estimate), {"type": "category"},
                       {"title": {"text": _marked("mean watts (energy / duration)", estimate)}}, barmode="group",
                       showlegend=True)


def _trace_rule(rates: Iterable[str], scope: str) -> str:
    return (f"<p>The power trace of each algorithm's median-energy client window{esc(scope)}: every meter domain's mean power "
            f"over each interval between samples (taken at {esc(_listing(rates))} and at every phase edge), drawn "
            f"as steps over the phases' shaded bands; drag to zoom, double-click to reset. A phase marked "
            f"<i>(short)</i> lasted less than two sample periods. Below, per algorithm: the mean power of each "
            f"phase (its energy over its duration) over all its traced client windows; {esc(OUTSIDE)} is the "
            f"bookkeeping between phases.</p>")


def _power_over_time(page: _Page, reports: Sequence[Report], round: Optional[int] = None,
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
    return head + estimate + _trace_rule(rates, scope) + _grid(plots) + _grid(bars)


def _method_section(reports: Sequence[Report]) -> str:
    body = []
    for rep in reports:
        methods = sorted({m for r in rep.rows for m in r.get("energy_method", "").split("+") if m}) or ["none"]
        meters = rep.sidecar.get("meters", {})
        found = ", ".join(m.get("name", "?") for m in meters.get("meters", [])) or "-"
        missing = "; ".join(f"{m.get('meter')}: {m.get('reason')}" for m in meters.get("not_found", [])) or "-"
        carbon = rep.sidecar.get("energy", {}).get("carbon", {})
        label = ", ".join(m + (" (an ESTIMATE, not a measurement)" if m == "estimate" else "") for m in methods)
        body.append((rep.path.stem, label, found, missing,
                     f"{carbon.get('g_per_kwh', '-')} g/kWh: {carbon.get('source', '-')}"))
    explain = ("<p>Each row of a report says how its energy was obtained: <b>counter</b> (a hardware energy "
               "counter, e.g. RAPL), <b>integrated_power</b> (power samples integrated over the window, e.g. "
               "Jetson rails, NVML), <b>estimate</b> (process CPU seconds times an assumed watts per core: an "
               "estimate, never shown as a measurement), <b>invalid</b> (a reading inside the window was "
               "implausible, e.g. a counter that jumped back: no number is shown, the sidecar's meters.invalid "
               "says why; totals and medians leave such rows out). Wall seconds come from a monotonic clock, CPU seconds "
               "from the process's CPU time, peak memory from the kernel's per-window high-water mark.</p>")
    return explain + _table(("report", "energy method", "meters used", "meters not found", "carbon intensity"),
                            body)


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1500px;padding:0 16px;
color:#222}h1{margin:16px 0 4px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left}th{background:#f4f4f4}.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));
gap:12px}.plot{min-height:380px}.estimate{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px}
.note{color:#555}nav a{margin-right:12px}
"""

SCRIPT = """
(function () {
  var figures = JSON.parse(document.getElementById("edgeprof-figures").textContent);
  var drawn = 0;
  figures.forEach(function (f) {
    Plotly.newPlot(document.getElementById(f.id), f.data, f.layout, {displaylogo: false, responsive: true});
    drawn += 1;
  });
  document.body.setAttribute("data-plots", String(drawn));
})();
"""


def render(reports: Sequence[Report], title: str = "edgeprof report", *, trace_round: Optional[int] = None,
           trace_client: Optional[int] = None) -> str:
    """The whole page for ``reports`` as one string (plotly.js inlined once); ``trace_round`` and
    ``trace_client`` pick the power trace's window to draw (default: each algorithm's median client window)."""
    get_plotlyjs = require("plotly.offline", "dashboard", "the dashboard").get_plotlyjs

    if not reports:
        raise ConfigError("the dashboard needs at least one report")
    rows = _rows(reports)
    analysis = analyze([r.data | {"device": r.device} for r in rows])
    devices = _by_device(rows)
    page = _Page()
    bodies = {
        "runs": _runs(reports, rows),
        "windows": _windows(page, reports, devices),
        "verdicts": _verdicts(analysis, rows),
        "cost-vs-tau": _one_tau(analysis) or _energy_note(rows) + _cost_vs_tau(page, analysis, devices),
        "phases": _grid([_phase_plot(page, rs, d, _phase_names(reports)) for d, rs in devices.items()])
        + _memory(devices) + _setup(devices),
        "trace": _power_over_time(page, reports, trace_round, trace_client),
        "timeseries": _timeseries(page, devices),
        "energy": _energy(page, devices),
        "accuracy": _accuracy(page, devices),
        "methods": _method_section(reports),
    }
    nav = "".join(f'<a href="#{sid}">{esc(name)}</a>' for sid, name in SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{esc(name)}</h2>{bodies[sid]}</section>' for sid, name in SECTIONS)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style>'
            f'<script>{get_plotlyjs()}</script></head><body><h1>{esc(title)}</h1><nav>{nav}</nav>{sections}'
            f'<script type="application/json" id="edgeprof-figures">{script_json(page.figures)}</script>'
            f"<script>{SCRIPT}</script></body></html>\n")


def write_dashboard(paths: Sequence[str | Path], output: str | Path, title: str = "edgeprof report", *,
                    trace_round: Optional[int] = None, trace_client: Optional[int] = None) -> Path:
    """Read the reports at ``paths`` and write the page to ``output`` (ReportError / OutputError; ConfigError
    for a ``trace_round`` / ``trace_client`` with no traced client window)."""
    reports = [read_report(p) for p in paths]
    text = render(reports, title=title, trace_round=trace_round, trace_client=trace_client)
    output = Path(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        raise OutputError(f"cannot write the dashboard to {output}: {err.strerror or err}") from err
    return output
