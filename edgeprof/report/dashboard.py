"""The HTML dashboard: one self-contained page (plotly.js and the data inlined) from one or more reports.

``render(reports) -> str`` is the renderer; :func:`write_dashboard` reads report files and writes the
page. The page needs no network and no server: plotly.js comes from the installed ``plotly`` package
(:func:`plotly.offline.get_plotlyjs`, inlined once) and every figure is a JSON object in one
``application/json`` script, drawn by a few lines of JavaScript.

Sections: runs and devices, verdicts (fits, growth, ratios), cost versus tau with fitted lines and
95% bands, per-phase breakdown, per-round time series, energy and carbon totals, accuracy against
cumulative energy (reports with ``kind=eval`` rows), measurement methods. Reports from several devices
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
from typing import Iterable, Mapping, Sequence

from edgeprof.analysis import (CONFIDENCE, FLAT_MAX_GROWTH, LINEAR_MIN_GROWTH, METRICS, Analysis, Interval,
                               analyze, variant_of)
from edgeprof.errors import ConfigError, OutputError
from edgeprof.report.writer import Report, read_report

SECTIONS = (("runs", "Runs and devices"), ("verdicts", "Verdicts"), ("cost-vs-tau", "Cost per client round vs tau"),
            ("phases", "Per-phase breakdown"), ("timeseries", "Per-round time series"),
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


class _Page:
    """Collects figures and colours while the sections are built."""

    def __init__(self) -> None:
        self.figures: list[dict] = []
        self._colors: dict[str, str] = {}

    def color(self, variant: str) -> str:
        return self._colors.setdefault(variant, COLORS[len(self._colors) % len(COLORS)])

    def figure(self, data: list, title: str, xaxis: dict, yaxis: dict, **layout) -> str:
        fid = f"fig{len(self.figures)}"
        self.figures.append({"id": fid, "data": data, "layout": {
            "title": {"text": esc(title)}, "xaxis": xaxis, "yaxis": yaxis, "height": 380,
            "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "legend": {"orientation": "h", "y": -0.2}, **layout}})
        return f'<div class="plot" id="{fid}"></div>'


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


def _energy_note(rows: Sequence[Row]) -> str:
    methods = _methods(rows)
    if not methods:
        return '<p class="note">No energy was measured in these reports.</p>'
    if "estimate" in methods:
        return ('<p class="estimate"><strong>Energy here is an ESTIMATE</strong> (process CPU time times watts '
                f'per core), not a measurement: methods {esc(", ".join(sorted(methods)))}.</p>')
    return f'<p class="note">Energy methods: {esc(", ".join(sorted(methods)))}.</p>'


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


def _verdicts(analysis: Analysis) -> str:
    rule = (f"<p>Fit: least squares of every client round's cost on tau, cost = a + b&middot;tau, "
            f"{CONFIDENCE:.0%} intervals from the t distribution. Growth = b&middot;(tau<sub>max</sub> - "
            f"tau<sub>min</sub>) / (mean cost at tau<sub>min</sub>), interval from b's. Verdict <b>flat</b> when the "
            f"growth's whole interval lies within &plusmn;{FLAT_MAX_GROWTH:.0%}; <b>linear</b> when its lower "
            f"end is at least {LINEAR_MIN_GROWTH:.0%}; otherwise <b>inconclusive</b> (moderate growth, or too "
            f"noisy or too few rows to tell). Step/pass: the marginal cost b of one more local step over the cost "
            f"of one full backbone forward-and-backward pass over the local set, measured in the same report as "
            f"FedAvg's slope b (one FedAvg local step is exactly such a pass).</p>")
    fits = _table(("device", "algorithm", "metric", "n", "a", "b per step", "step/pass", "growth", "verdict"),
                  [(f.device, f.variant, f.metric, f.n, f"{f.fit.a:.4g}" if f.fit else "-",
                    _iv(Interval(f.fit.b, *f.fit.ci_b) if f.fit else None), _iv(f.step_vs_pass, "{:.3g}"),
                    _iv(f.verdict.growth, "{:+.1%}"), f.verdict.label) for f in analysis.fits], "verdicts")
    taus = sorted({r.tau for r in analysis.ratios})
    pivot: dict[tuple, dict[int, str]] = defaultdict(dict)
    for r in analysis.ratios:
        pivot[(r.device, r.variant, r.reference, r.metric)][r.tau] = _iv(r.ratio, "{:.2f}")
    ratios = _table(("device", "algorithm", "over", "metric", *[f"tau={t}" for t in taus]),
                    [(*key, *[cells.get(t, "-") for t in taus]) for key, cells in pivot.items()])
    return (rule + fits + "<h3>Ratio to PFLEGO per client round at each tau (geometric means; 95% Welch "
            "interval on the log scale)</h3>" + ratios)


def _cost_plot(page: _Page, analysis: Analysis, rows: Sequence[Row], device: str, metric: str) -> str:
    data = []
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") == "client" and r.num(metric) is not None and r.num("tau") is not None:
            groups[r.variant].append(r)
    for variant, members in groups.items():
        color, name = page.color(variant), esc(variant)
        data.append({"type": "scatter", "mode": "markers", "name": name, "legendgroup": name,
                     "x": [r.num("tau") for r in members], "y": [r.num(metric) for r in members],
                     "marker": {"color": color, "size": 6, "opacity": 0.7}})
        vf = analysis.fit_for(device, variant, metric)
        if vf is None or vf.fit is None:
            continue
        fit = vf.fit
        xs = [fit.x_min + (fit.x_max - fit.x_min) * i / 40 for i in range(41)]
        ys = [fit.predict(x) for x in xs]
        half = [fit.band(x) for x in xs]
        data.append({"type": "scatter", "mode": "lines", "name": esc(f"{variant} fit ({vf.verdict.label})"),
                     "legendgroup": name, "x": xs, "y": ys, "line": {"color": color}})
        if all(math.isfinite(h) for h in half):
            data.append({"type": "scatter", "mode": "lines", "name": esc(f"{variant} {CONFIDENCE:.0%} band"),
                         "legendgroup": name, "showlegend": False, "hoverinfo": "skip", "fill": "toself",
                         "x": xs + xs[::-1], "y": [y + h for y, h in zip(ys, half)]
                         + [y - h for y, h in zip(ys[::-1], half[::-1])],
                         "line": {"width": 0}, "fillcolor": color, "opacity": 0.2})
    if not data:
        return ""
    scale = {"type": "buttons", "direction": "right", "x": 0, "xanchor": "left", "y": 1.12, "yanchor": "bottom",
             "buttons": [{"label": "linear y", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
                         {"label": "log y", "method": "relayout", "args": [{"yaxis.type": "log"}]}]}
    return page.figure(data, f"{device}: {METRIC_LABELS[metric]} per client round", {"title": {"text": "tau"}},
                       {"title": {"text": METRIC_LABELS[metric]}, "rangemode": "tozero"}, updatemenus=[scale])


def _cost_vs_tau(page: _Page, analysis: Analysis, devices: Mapping[str, list[Row]]) -> str:
    parts = []
    for metric in METRICS:
        cells = [_cost_plot(page, analysis, rows, device, metric) for device, rows in devices.items()]
        if any(cells):
            parts.append(_grid(cells))
    return "".join(parts) or '<p class="note">No client rows with a tau.</p>'


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _phase_plot(page: _Page, rows: Sequence[Row], device: str, phases: Sequence[str]) -> str:
    keys: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") in ("client", "server") and r.num("tau") is not None:
            keys[(r.variant, int(r.num("tau")))].append(r)
    order = sorted(keys, key=lambda k: (k[0], k[1]))
    labels = [esc(f"{v} tau={t}") for v, t in order]
    data = []
    for phase in [*phases, "server"]:
        ys = []
        for key in order:
            members = keys[key]
            if phase == "server":
                ys.append(_median([r.num("wall_s") for r in members if r.data.get("kind") == "server"
                                   and r.num("wall_s") is not None]))
            else:
                ys.append(_median([r.num(f"{phase}_s") for r in members if r.data.get("kind") == "client"
                                   and r.num(f"{phase}_s") is not None]))
        if any(y is not None for y in ys):
            data.append({"type": "bar", "name": esc(phase), "x": labels, "y": ys})
    if not data:
        return ""
    return page.figure(data, f"{device}: median seconds per phase (server: the server step)", {"type": "category"},
                       {"title": {"text": "seconds"}}, barmode="stack")


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


def _phase_names(reports: Sequence[Report]) -> list[str]:
    names: list[str] = []
    for rep in reports:
        for c in rep.columns:
            if c.endswith("_cpu_s") and c != "cpu_s" and c[: -len("_cpu_s")] not in names:
                names.append(c[: -len("_cpu_s")])
    return names


def _timeseries(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells = []
    for device, rows in devices.items():
        groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            if r.data.get("kind") == "client" and r.num("wall_s") is not None and r.num("round") is not None:
                groups[(r.data.get("run_id", ""), r.variant)].append(r)
        several_runs = len({k[0] for k in groups}) > 1
        data = [{"type": "scatter", "mode": "markers+lines", "name": esc(f"{run} {v}" if several_runs else v),
                 "x": [r.num("round") for r in members], "y": [r.num("wall_s") for r in members],
                 "text": [esc(f"tau={r.data.get('tau', '')}") for r in members],
                 "marker": {"color": page.color(v)}, "line": {"width": 1}} for (run, v), members in groups.items()]
        if data:
            cells.append(page.figure(data, f"{device}: wall seconds of each client round, in the order run",
                                     {"title": {"text": "round (in a sweep: the cell's position in the order)"}},
                                     {"title": {"text": "wall seconds"}, "type": "log"}))
    return _grid(cells) if cells else '<p class="note">No client rows.</p>'


def _totals(rows: Sequence[Row]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        if r.data.get("kind") not in ("client", "server"):
            continue
        t = out.setdefault(r.variant, {"energy_j": 0.0, "carbon_g": 0.0, "wall_s": 0.0, "rounds": set(),
                                       "has_energy": False, "has_carbon": False})
        t["rounds"].add((r.data.get("run_id"), r.data.get("round")))
        t["wall_s"] += r.num("wall_s") or 0.0
        if r.num("energy_j") is not None:
            t["energy_j"] += r.num("energy_j")
            t["has_energy"] = True
        if r.num("carbon_g") is not None:
            t["carbon_g"] += r.num("carbon_g")
            t["has_carbon"] = True
    return out


def _energy(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells, tables = [], []
    for device, rows in devices.items():
        totals = _totals(rows)
        estimate = "estimate" in _methods(rows)
        suffix = " (ESTIMATE)" if estimate else ""
        names = [esc(v) for v in totals]
        data = [{"type": "bar", "name": esc("energy, J" + suffix), "x": names,
                 "y": [t["energy_j"] if t["has_energy"] else None for t in totals.values()],
                 "marker": {"color": [page.color(v) for v in totals]}}]
        if any(t["has_energy"] for t in totals.values()):
            cells.append(page.figure(data, f"{device}: total energy per algorithm{suffix}", {"type": "category"},
                                     {"title": {"text": "joules"}}))
        if any(t["has_carbon"] for t in totals.values()):
            carbon = [{"type": "bar", "name": esc("g CO2e" + suffix), "x": names,
                       "y": [t["carbon_g"] if t["has_carbon"] else None for t in totals.values()],
                       "marker": {"color": [page.color(v) for v in totals]}}]
            cells.append(page.figure(carbon, f"{device}: total carbon per algorithm{suffix}", {"type": "category"},
                                     {"title": {"text": "grams CO2e"}}))
        method = "+".join(sorted(_methods(rows))) or "none"
        tables.append(_table(("device", "algorithm", "rounds", "wall s", "energy J", "g CO2e", "energy method"),
                             [(device, v, len(t["rounds"]), f"{t['wall_s']:.4g}",
                               f"{t['energy_j']:.4g}" if t["has_energy"] else "-",
                               f"{t['carbon_g']:.4g}" if t["has_carbon"] else "-", method)
                              for v, t in totals.items()]))
    all_rows = [r for rows in devices.values() for r in rows]
    return _energy_note(all_rows) + _grid(cells) + "".join(tables)


def _accuracy(page: _Page, devices: Mapping[str, list[Row]]) -> str:
    cells = []
    for device, rows in devices.items():
        runs: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            runs[(r.data.get("run_id", ""), r.variant)].append(r)
        data = []
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
            data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{run} {variant}"), "x": xs,
                         "y": [r.num("test_accuracy") for r in evals], "marker": {"color": page.color(variant)}})
        if data:
            estimate = " (energy ESTIMATED)" if "estimate" in _methods(rows) else ""
            cells.append(page.figure(data, f"{device}: test accuracy against cumulative energy{estimate}",
                                     {"title": {"text": "cumulative energy, J"}},
                                     {"title": {"text": "test accuracy"}, "range": [0, 1]}))
    if not cells:
        return ('<p class="note">None of these reports has <code>kind=eval</code> rows (write them with '
                '<code>edgeprof train</code> or <code>edgeprof measure --evaluate</code>).</p>')
    return _grid(cells)


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
               "estimate, never shown as a measurement). Wall seconds come from a monotonic clock, CPU seconds "
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


def render(reports: Sequence[Report], title: str = "edgeprof report") -> str:
    """The whole page for ``reports`` as one string (plotly.js inlined once)."""
    from plotly.offline import get_plotlyjs

    if not reports:
        raise ConfigError("the dashboard needs at least one report")
    rows = _rows(reports)
    analysis = analyze([r.data | {"device": r.device} for r in rows])
    devices = _by_device(rows)
    page = _Page()
    bodies = {
        "runs": _runs(reports, rows),
        "verdicts": _verdicts(analysis),
        "cost-vs-tau": _energy_note(rows) + _cost_vs_tau(page, analysis, devices),
        "phases": _grid([_phase_plot(page, rs, d, _phase_names(reports)) for d, rs in devices.items()])
        + _memory(devices),
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


def write_dashboard(paths: Sequence[str | Path], output: str | Path, title: str = "edgeprof report") -> Path:
    """Read the reports at ``paths`` and write the page to ``output`` (ReportError / OutputError)."""
    reports = [read_report(p) for p in paths]
    text = render(reports, title=title)
    output = Path(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        raise OutputError(f"cannot write the dashboard to {output}: {err.strerror or err}") from err
    return output
