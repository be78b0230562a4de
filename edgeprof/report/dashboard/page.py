"""The dashboard page's parts: rows resolved to their host, figures and colours, tables, escaping, style.

Every text that comes from a report goes through :func:`esc` (HTML) or :func:`script_json` (the figures' JSON
inside ``<script>``), so no value can close a tag or the script.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from edgeprof.report.analysis import Interval, is_short, variant_of
from edgeprof.report.schema import BESIDE_ROUND, WORKLOAD_COLUMNS
from edgeprof.report.writer import Report


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
    """One report row with its report and host resolved."""

    report: Report
    host: str
    variant: str
    data: Mapping[str, str]

    def num(self, column: str) -> float | None:
        value = self.data.get(column, "")
        try:
            return float(value) if value != "" else None
        except ValueError:
            return None


def host_of(report: Report, row: Mapping[str, str]) -> str:
    """The row's host (:meth:`Report.host_of`), ``host`` where neither the row nor the sidecar names one."""
    return report.host_of(row) or "host"


def _workloads(report: Report) -> list[tuple[str, ...]]:
    """Each row's :data:`WORKLOAD_COLUMNS` cells; an empty one (an eval row names no device) is the report's
    value where its rows name one."""
    only = {}
    for column in WORKLOAD_COLUMNS:
        values = {r.get(column, "") for r in report.rows} - {""}
        only[column] = values.pop() if len(values) == 1 else ""
    return [tuple(r.get(c, "") or only[c] for c in WORKLOAD_COLUMNS) for r in report.rows]


def rows_of(reports: Sequence[Report]) -> list[Row]:
    """Every row of ``reports``, with its report, host and algorithm variant resolved. Where a host's rows ran
    several workloads (data sets, backbones, devices: :data:`WORKLOAD_COLUMNS`), their host is named with the
    workload's cells that differ there (``laptop · mlp``, ``laptop · cnn-cifar``), so that each is fitted, drawn
    and compared apart, never pooled into one fit."""
    rows = [(Row(rep, host_of(rep, r), variant_of(r.get("algo", ""), r.get("engine", "")), r), work)
            for rep in reports for r, work in zip(rep.rows, _workloads(rep))]
    seen: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for row, work in rows:
        seen[row.host].add(work)
    differ = {host: [i for i in range(len(WORKLOAD_COLUMNS)) if len({w[i] for w in works}) > 1]
              for host, works in seen.items()}
    return [replace(row, host=f"{row.host} · {'/'.join(work[i] or '-' for i in differ[row.host])}")
            if differ[row.host] else row for row, work in rows]


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


class Page:
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


def short_labels(names: Iterable[str], limit: int = 24) -> dict[str, str]:
    """Axis labels cut to ``limit`` characters (the full name stays in the hover), unless cutting would
    make two of them equal: a category axis would then draw two algorithms as one."""
    names = list(dict.fromkeys(names))
    short = {n: n if len(n) <= limit else n[: limit - 1] + "\u2026" for n in names}
    return short if len(set(short.values())) == len(names) else {n: n for n in names}


def by_host(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """The rows grouped by host, in the order the hosts first appear."""
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[r.host].append(r)
    return out


def grid(cells: Sequence[str]) -> str:
    """Figures side by side, as many columns as the page's width holds."""
    return f'<div class="grid">{"".join(cells)}</div>'


def table(header: Sequence[str], body: Iterable[Sequence[object]], cls: str = "") -> str:
    """An HTML table; every header and cell is escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in body)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def interval_text(iv: Interval | None, fmt: str = "{:.3g}") -> str:
    """``value [lo, hi]``, the value alone where the interval is not finite, ``-`` where there is no value."""
    if iv is None or iv.value is None or not math.isfinite(iv.value):
        return "-"
    if iv.lo is None or iv.hi is None or not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return fmt.format(iv.value)
    return f"{fmt.format(iv.value)} [{fmt.format(iv.lo)}, {fmt.format(iv.hi)}]"


def methods_of(rows: Iterable[Row]) -> set[str]:
    """The energy methods of ``rows`` (a row of several meters names each, joined by ``+``)."""
    return {m for r in rows for m in r.data.get("energy_method", "").split("+") if m}


def estimated_variants(rows: Iterable[Row]) -> set[tuple[str, str]]:
    """The (host, variant) pairs whose energy is, at least in part, an estimate."""
    return {(r.host, r.variant) for r in rows if r.num("energy_j") is not None and "estimate" in methods_of([r])}


def whole_ticks(values: Sequence[float]) -> dict:
    """An x axis of whole numbers (rounds, occurrences) that never shows a fractional tick."""
    span = max(values, default=1) - min(values, default=1)
    return {"tickformat": "d", **({"dtick": 1} if span <= 20 else {})}


def marked(text: str, estimate: bool) -> str:
    """``text``, followed by ``(ESTIMATE)`` where the energy it stands for is an estimate."""
    return f"{text} (ESTIMATE)" if estimate else text


def listing(words: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def energy_note(rows: Sequence[Row]) -> str:
    """The sentence above energy figures: their methods, short windows, and ESTIMATE where any is estimated."""
    methods = methods_of(rows)
    if not methods:
        return '<p class="note">No energy was measured in these reports.</p>'
    listed = esc(listing(sorted(methods)))
    used = (f"The energy methods in these reports are {listed}." if len(methods) > 1
            else f"The energy method in these reports is {listed}.")
    short = sum(1 for r in rows if r.data.get("kind") in ("client", "server") and is_short(r.data))
    if short:
        from edgeprof.report.summary import unresolved_words

        words = max((unresolved_words(r) for r in {id(row.report): row.report for row in rows}.values()), key=len)
        used += (f" {short} client or server window(s) {html.escape(words, quote=False)}: their joules are "
                 "not resolved, drawn hollow and left out of the energy fits and ratios.")
    if "estimate" in methods:
        return ('<p class="estimate"><strong>Energy here is an ESTIMATE</strong> wherever its method is estimate '
                f'(process CPU time times watts per core), not a measurement. {used}</p>')
    return f'<p class="note">{used}</p>'


def num_text(value) -> str:
    """A number to four significant digits; ``-`` for none."""
    return "-" if value is None else f"{value:.4g}"


def median(values: list[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def phase_names(reports: Sequence[Report]) -> list[str]:
    """The phases the reports' columns name (``<phase>_cpu_s``), in their order, without the set-up beside a round."""
    names: list[str] = []
    for rep in reports:
        for c in rep.columns:
            if c.endswith("_cpu_s") and c != "cpu_s" and c[: -len("_cpu_s")] not in names + list(BESIDE_ROUND):
                names.append(c[: -len("_cpu_s")])
    return names


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
