"""The runs' sections: runs and hosts, per-round time series, energy and carbon totals, accuracy against
cumulative energy, and how the figures were measured."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Mapping, Sequence

from edgeprof.report import gpu_energy
from edgeprof.report.analysis import is_short, variant_of
from edgeprof.report.dashboard.flower import status_text
from edgeprof.report.dashboard.own_code import accuracy_points, own_label, own_title
from edgeprof.report.dashboard.page import (Page, Row, energy_note, esc, grid, marked, methods_of, num_text,
                                            short_labels, table, whole_ticks)
from edgeprof.report.writer import Report


def _reports(rows: Sequence[Row]) -> list[Report]:
    return list({id(r.report): r.report for r in rows}.values())


def with_gpu_net(rows: Sequence[Row]) -> list[Row]:
    """The rows, each of a report whose sidecar has the round GPU's idle power given ``gpu_net_j`` (gpu_j net of
    that power times wall_s, :mod:`edgeprof.report.gpu_energy`); the others as they are."""
    idle = {id(rep): gpu_energy.gpu_idle(rep.sidecar) for rep in _reports(rows)}
    out = []
    for r in rows:
        value = gpu_energy.net_j(r.data, idle[id(r.report)])
        out.append(r if value is None else dataclasses.replace(r, data={**r.data, gpu_energy.NET_METRIC: repr(value)}))
    return out


def gpu_note(rows: Sequence[Row]) -> str:
    """The sentence above the GPU's figures: what gpu_j is, and each report's GPU idle power or why there is none;
    ``""`` where no report measured the round's GPU."""
    reports = [rep for rep in _reports(rows) if gpu_energy.measured(rep.rows)]
    if not reports:
        return ""
    gpu_rows = [row for rep in reports for row in rep.rows]
    rest = gpu_energy.rest_text(gpu_rows, sorted({c for rep in reports for c in gpu_energy.rest_columns(rep.sidecar)}))
    added = f", which adds {esc(rest)} to it" if rest else ""
    idle = "; ".join(f"{esc(rep.path.stem)}: {esc(_idle_text(gpu_energy.gpu_idle(rep.sidecar)))}" for rep in reports)
    return (f'<p class="note"><b>The round\'s GPU by its own meter.</b> <code>gpu_j</code> is the joules of the GPU '
            f"that ran the round, by its meter ({esc(gpu_energy.methods(gpu_rows) or 'no method recorded')}): its "
            f"verdicts, ratios and totals stand apart from those of <code>energy_j</code>{added}. "
            f"<code>gpu_net_j</code> is <code>gpu_j</code> net of the GPU's idle power measured before the run "
            f"(idle W &times; wall s), shown only where a report has that baseline. {idle}.</p>")


def runs_and_hosts(reports: Sequence[Report], rows: Sequence[Row]) -> str:
    """One row per report (its hosts, status (a Flower run's with its sampled replies not used), rows,
    algorithms), then the hosts side by side."""
    body = []
    for rep in reports:
        side = rep.sidecar
        facts = side.get("host", {})
        hosts = sorted({r.host for r in rows if r.report is rep})
        def named(column: str, rows: Sequence[dict] = rep.rows) -> str:
            return ", ".join(v for v in dict.fromkeys(r.get(column) for r in rows) if v) or "-"

        body.append((rep.rows[0].get("run_id", rep.path.stem) if rep.rows else rep.path.stem, ", ".join(hosts),
                     facts.get("cpu_model", "-"), facts.get("cpu_cores_logical", "-"), facts.get("memory_gib", "-"),
                     status_text(rep), len(rep.rows),
                     ", ".join(sorted(v for v in dict.fromkeys(variant_of(r.get("algo", ""), r.get("engine", ""))
                                                               for r in rep.rows) if v)) or "-",
                     named("dataset"), named("backbone")))
    runs = table(("run", "host", "CPU", "logical cores", "memory GiB", "status", "rows", "algorithms", "data",
                  "backbone"), body, "runs")
    sides: dict[str, dict] = {}
    for rep in reports:
        for r in rows:
            if r.report is rep:
                sides.setdefault(r.host, {"sidecar": rep.sidecar})
    keys = ("cpu_model", "cpu_cores_logical", "cpu_cores_physical", "memory_gib", "os", "machine", "python")
    side_by_side = table(["", *sides], [[k, *[d["sidecar"].get("host", {}).get(k, "-") for d in sides.values()]]
                                        for k in keys]
                          + [[lib, *[d["sidecar"].get("libraries", {}).get(lib, "-") for d in sides.values()]]
                             for lib in ("torch", "onnxruntime", "numpy")])
    return runs + "<h3>Hosts side by side</h3>" + side_by_side


def _round_traces(page: Page, rows: Sequence[Row]) -> list[dict]:
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


def timeseries(page: Page, hosts: Mapping[str, list[Row]]) -> str:
    """Each client round's wall seconds against its round, per host."""
    cells = []
    for host, rows in hosts.items():
        data = _round_traces(page, rows)
        if data:
            rounds = [x for trace in data for x in trace["x"] if x is not None]
            cells.append(page.figure(data, f"{host}: wall seconds of each client round (one line per tau)",
                                     {"title": {"text": "round (in a sweep: the cell's position in the order)"},
                                      **whole_ticks(rounds)},
                                     {"title": {"text": "wall seconds"}, "type": "log"}))
    return grid(cells) if cells else '<p class="note">No client rows.</p>'


def _totals(rows: Sequence[Row]) -> dict[str, dict]:
    """Per algorithm its client rounds' and server steps' sums (``rounds``: the distinct rounds), and per window name
    of your own code its windows' (``window NAME``, ``eval NAME``; ``rounds``: the windows)."""
    out: dict[str, dict] = {}
    for r in rows:
        own = own_title(r.data)
        if r.data.get("kind") not in ("client", "server") and own is None:
            continue
        key = r.variant if own is None else f"{r.variant} {own}".strip()
        t = out.setdefault(key, {"energy_j": 0.0, "carbon_g": 0.0, "wall_s": 0.0, "rounds": set(),
                                 "has_energy": False, "has_carbon": False, "methods": set()})
        t["rounds"].add((r.data.get("run_id"), r.data.get("round")) if own is None else id(r))
        t["methods"] |= methods_of([r])
        t["wall_s"] += r.num("wall_s") or 0.0
        if r.num("energy_j") is not None:
            t["energy_j"] += r.num("energy_j")
            t["has_energy"] = True
        if r.num("carbon_g") is not None:
            t["carbon_g"] += r.num("carbon_g")
            t["has_carbon"] = True
    return out


def _totals_table(host: str, totals: Mapping[str, dict]) -> str:
    """One row per algorithm; its energy and carbon say ESTIMATE where any of its energy was estimated."""
    body = []
    for v, t in totals.items():
        estimate = "estimate" in t["methods"]
        body.append((host, v, len(t["rounds"]), f"{t['wall_s']:.4g}",
                     marked(f"{t['energy_j']:.4g}", estimate) if t["has_energy"] else "-",
                     marked(f"{t['carbon_g']:.4g}", estimate) if t["has_carbon"] else "-",
                     "+".join(sorted(t["methods"])) or "none"))
    return table(("host", "algorithm or window", "rounds or windows", "wall s", "energy J", "g CO2e",
                  "energy method"), body, "totals")


def _total_bars(page: Page, host: str, totals: Mapping[str, dict], what: str, unit: str,
                estimate: bool) -> str:
    """Bars of one total (``energy`` or ``carbon``) per algorithm; empty when no algorithm has it."""
    key, flag = {"energy": ("energy_j", "has_energy"), "carbon": ("carbon_g", "has_carbon")}[what]
    if not any(t[flag] for t in totals.values()):
        return ""
    short = short_labels(totals)
    data = [{"type": "bar", "name": esc(marked(unit, estimate)), "x": [esc(short[v]) for v in totals],
             "hovertext": [esc(v) for v in totals], "y": [t[key] if t[flag] else None for t in totals.values()],
             "marker": {"color": [page.color(v) for v in totals]}}]
    per = "algorithm or window" if any(v.startswith(("window ", "eval window ")) or " window " in v for v in totals) \
        else "algorithm"
    return page.figure(data, marked(f"{host}: total {what} per {per}", estimate), {"type": "category"},
                       {"title": {"text": marked(unit, estimate)}})


def energy(page: Page, hosts: Mapping[str, list[Row]]) -> str:
    """Total energy and carbon per algorithm and host, as bars and a table, ESTIMATE where estimated; then, where
    a GPU meter measured the rounds' GPU, that GPU's own totals (gross and net of idle) with their own method."""
    cells, tables = [], []
    for host, rows in hosts.items():
        totals = _totals(rows)
        estimate = "estimate" in methods_of(rows)
        cells += [_total_bars(page, host, totals, "energy", "joules", estimate),
                  _total_bars(page, host, totals, "carbon", "grams CO2e", estimate)]
        tables.append(_totals_table(host, totals))
    all_rows = [r for rows in hosts.values() for r in rows]
    return energy_note(all_rows) + grid([c for c in cells if c]) + "".join(tables) + _gpu_energy(page, hosts)


def _gpu_totals(rows: Sequence[Row]) -> dict[str, "gpu_energy.Totals"]:
    """Per algorithm, the sums of its client rounds' and server steps' GPU joules (those with ``gpu_j``)."""
    rest = {id(rep): gpu_energy.rest_columns(rep.sidecar) for rep in _reports(rows)}
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        if r.data.get("kind") in ("client", "server") and r.num("gpu_j") is not None:
            groups[r.variant].append((r.data, rest[id(r.report)]))
    return {v: gpu_energy.totals(members) for v, members in groups.items()}


def _gpu_bars(page: Page, host: str, totals: Mapping[str, "gpu_energy.Totals"]) -> str:
    """Bars of the GPU's total joules per algorithm, gross and (where every row has it) net of idle."""
    short = short_labels(totals)
    method = "+".join(sorted({m for t in totals.values() for m in t.method.split("+") if m})) or "no method"
    data = [{"type": "bar", "name": esc(f"gpu_j ({method})"), "x": [esc(short[v]) for v in totals],
             "hovertext": [esc(v) for v in totals], "y": [t.gpu_j for t in totals.values()]}]
    if any(t.net_j is not None for t in totals.values()):
        data.append({"type": "bar", "name": esc(f"gpu_net_j ({method}, net of idle)"),
                     "x": [esc(short[v]) for v in totals], "hovertext": [esc(v) for v in totals],
                     "y": [t.net_j for t in totals.values()]})
    return page.figure(data, f"{host}: total GPU energy per algorithm ({method})", {"type": "category"},
                       {"title": {"text": "joules"}}, barmode="group")


def _gpu_energy(page: Page, hosts: Mapping[str, list[Row]]) -> str:
    """The GPU's own totals per host and algorithm; ``""`` where no GPU meter measured the rounds."""
    cells, body = [], []
    for host, rows in hosts.items():
        totals = _gpu_totals(rows)
        if not totals:
            continue
        cells.append(_gpu_bars(page, host, totals))
        body += [(host, v, f"{t.rows} ({t.short} short)" if t.short else t.rows, num_text(t.gpu_j),
                  t.method or "-", num_text(t.net_j), "-" if t.idle_share is None else f"{t.idle_share:.0%}",
                  num_text(t.rest_j), t.rest_method or "-") for v, t in totals.items()]
    if not body:
        return ""
    all_rows = [r for rows in hosts.values() for r in rows]
    return ("<h3>The round's GPU by its own meter (client rounds and server steps)</h3>" + gpu_note(all_rows)
            + grid(cells) + table(("host", "algorithm", "rows", "GPU J", "GPU method", "net of idle J", "idle share",
                                   "rest of energy J", "rest method"), body, "gpu-totals"))


def accuracy(page: Page, hosts: Mapping[str, list[Row]]) -> str:
    """Test accuracy (``kind=eval`` rows) against the energy spent up to that round, per run and host."""
    cells, own_drawn = [], False
    for host, rows in hosts.items():
        runs: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in rows:
            runs[(r.data.get("run_id", ""), r.variant)].append(r)
        data, protocols = [], set()
        for (run, variant), members in runs.items():
            xs, points = accuracy_points(members)  # your own code's windows that carry an accuracy
            if points:
                name = f"{run} {variant}".strip()
                data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{name} (your own code)"),
                             "x": xs, "y": [r.num("test_accuracy") for r in points],
                             "text": [esc(own_label(r.data) or "") for r in points],
                             "hovertemplate": "%{text}: %{y:.3g} after %{x:.4g} J<extra></extra>",
                             "marker": {"color": page.color(name)}})
                own_drawn = True
                continue
            evals = [r for r in members if r.data.get("kind") == "eval" and r.num("test_accuracy") is not None]
            if not evals:
                continue
            spent: dict[float, float] = defaultdict(float)
            shorts: dict[float, int] = defaultdict(int)  # per round: its windows the meters did not resolve
            for r in members:
                if r.data.get("kind") in ("client", "server") and r.num("round") is not None:
                    spent[r.num("round")] += r.num("energy_j") or 0.0
                    shorts[r.num("round")] += is_short(r.data)
            xs, total, unresolved = [], 0.0, 0
            cumulative, short_upto = {}, {}
            for rnd in sorted(spent):
                total += spent[rnd]
                unresolved += shorts[rnd]
                cumulative[rnd], short_upto[rnd] = total, unresolved
            for r in evals:
                xs.append(cumulative.get(r.num("round"), None))
            hollow = [bool(short_upto.get(r.num("round"))) for r in evals]
            protocol = "+".join(sorted({r.data.get("eval_protocol") or "global" for r in evals}))
            data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{run} {variant} ({protocol})"),
                         "x": xs, "y": [r.num("test_accuracy") for r in evals],
                         "text": ["its joules hold short windows: not resolved" if h else "" for h in hollow],
                         "marker": {"color": page.color(variant),
                                    "symbol": ["circle-open" if h else "circle" for h in hollow]}})
            protocols.add(protocol)
        if data:
            estimate = " (energy ESTIMATED)" if "estimate" in methods_of(rows) else ""
            which = " ".join(part for part in (f"({'+'.join(sorted(protocols))} protocol)" if protocols else "",
                                               "of your own code" if own_drawn else "") if part)
            cells.append(page.figure(data, f"{host}: test accuracy {which} against cumulative energy{estimate}",
                                     {"title": {"text": f"cumulative energy, J{estimate}"}},
                                     {"title": {"text": "test accuracy"},
                                      **({"range": [0, 1]} if all(y <= 1 for d in data for y in d["y"]) else {})}))
    if not cells:
        return ('<p class="note">None of these reports has <code>kind=eval</code> rows (write them with '
                '<code>edgeprof train</code> or <code>edgeprof measure --evaluate</code>) nor a window of your own '
                'code labelled <code>test_accuracy</code> (<code>w.labels["test_accuracy"] = ...</code>, or '
                '<code>@mon.measure(returns="test_accuracy")</code>).</p>')
    own = ("<p>Your own code: each window that carries a <code>test_accuracy</code> label, against the energy of "
           "every window of its run written up to it (itself included; nested windows count twice, as in the "
           "report).</p>") if own_drawn else ""
    return own + grid(cells)


def methods_section(reports: Sequence[Report]) -> str:
    """How each report's energy was obtained: its methods, the meters used and missing, carbon."""
    body = []
    for rep in reports:
        methods = sorted({m for r in rep.rows for m in r.get("energy_method", "").split("+") if m}) or ["none"]
        meters = rep.sidecar.get("meters", {})
        found = ", ".join(m.get("name", "?") for m in meters.get("meters", [])) or "-"
        missing = "; ".join(f"{m.get('meter')}: {m.get('reason')}" for m in meters.get("not_found", [])) or "-"
        carbon = rep.sidecar.get("energy", {}).get("carbon", {})
        label = ", ".join(m + (" (an ESTIMATE, not a measurement)" if m == "estimate" else "") for m in methods)
        body.append((rep.path.stem, label, found, missing,
                     f"{carbon.get('g_per_kwh', '-')} g/kWh: {carbon.get('source', '-')}", _gpu_method(rep)))
    gpu = any(row[-1] != "-" for row in body)  # the round GPU's column only where a report has one
    explain = ("<p>Each row of a report says how its energy was obtained: <b>counter</b> (a hardware energy "
               "counter, e.g. RAPL), <b>integrated_power</b> (power samples integrated over the window, e.g. "
               "Jetson rails, NVML), <b>estimate</b> (process CPU seconds times an assumed watts per core: an "
               "estimate, never shown as a measurement), <b>invalid</b> (a reading inside the window was "
               "implausible, e.g. a counter that jumped back: no number is shown, the sidecar's meters.invalid "
               "says why; totals and medians leave such rows out). Wall seconds come from a monotonic clock, CPU "
               "seconds from the process's CPU time, peak memory from the kernel's per-window high-water mark.</p>")
    header = ("report", "energy method", "meters used", "meters not found", "carbon intensity")
    if gpu:
        explain += ("<p>On a GPU, <code>gpu_j</code> is the joules of the GPU that ran the round by its own meter, "
                    "and <code>energy_j</code> adds the other domains of the total to it, each by its own method (a "
                    "CPU estimate makes it an ESTIMATE in part): the GPU's joules keep their own method wherever "
                    "they are shown, and their net of idle subtracts the GPU's idle power measured before the "
                    "run.</p>")
        return explain + table(header + ("round GPU (gpu_j)",), body)
    return explain + table(header, [row[:-1] for row in body])


def _gpu_method(report: Report) -> str:
    """How a report's round GPU was measured and its idle power (``counter; idle 106 W``), ``-`` without one."""
    if not gpu_energy.measured(report.rows):
        return "-"
    method = gpu_energy.methods(report.rows) or "no method recorded"
    return f"{method}; {_idle_text(gpu_energy.gpu_idle(report.sidecar))}"


def _idle_text(idle: "gpu_energy.GpuIdle") -> str:
    """``idle 106.3 W (gpu_0)``, or ``no net of idle: <why>``."""
    if idle.power_w is None:
        return f"no net of idle: {idle.why}"
    return f"idle {idle.power_w:.4g} W ({', '.join(idle.domains)})"
