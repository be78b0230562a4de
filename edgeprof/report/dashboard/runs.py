"""The runs' sections: runs and devices, per-round time series, energy and carbon totals, accuracy against
cumulative energy, and how the figures were measured."""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from edgeprof.report.analysis import variant_of
from edgeprof.report.dashboard.page import (Page, Row, energy_note, esc, grid, marked, methods_of, short_labels,
                                            table)
from edgeprof.report.writer import Report


def runs_and_devices(reports: Sequence[Report], rows: Sequence[Row]) -> str:
    """One row per report (its devices, status, rows, algorithms), then the devices side by side."""
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
    runs = table(("run", "device", "CPU", "logical cores", "memory GiB", "status", "rows", "algorithms"), body)
    devs: dict[str, dict] = {}
    for rep in reports:
        for r in rows:
            if r.report is rep:
                devs.setdefault(r.device, {"sidecar": rep.sidecar})
    keys = ("cpu_model", "cpu_cores_logical", "cpu_cores_physical", "memory_gib", "os", "machine", "python")
    side_by_side = table(["", *devs], [[k, *[d["sidecar"].get("device", {}).get(k, "-") for d in devs.values()]]
                                        for k in keys]
                          + [[lib, *[d["sidecar"].get("libraries", {}).get(lib, "-") for d in devs.values()]]
                             for lib in ("torch", "onnxruntime", "numpy")])
    return runs + "<h3>Devices side by side</h3>" + side_by_side


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


def timeseries(page: Page, devices: Mapping[str, list[Row]]) -> str:
    """Each client round's wall seconds against its round, per device."""
    cells = []
    for device, rows in devices.items():
        data = _round_traces(page, rows)
        if data:
            cells.append(page.figure(data, f"{device}: wall seconds of each client round (one line per tau)",
                                     {"title": {"text": "round (in a sweep: the cell's position in the order)"}},
                                     {"title": {"text": "wall seconds"}, "type": "log"}))
    return grid(cells) if cells else '<p class="note">No client rows.</p>'


def _totals(rows: Sequence[Row]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        if r.data.get("kind") not in ("client", "server"):
            continue
        t = out.setdefault(r.variant, {"energy_j": 0.0, "carbon_g": 0.0, "wall_s": 0.0, "rounds": set(),
                                       "has_energy": False, "has_carbon": False, "methods": set()})
        t["rounds"].add((r.data.get("run_id"), r.data.get("round")))
        t["methods"] |= methods_of([r])
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
                     marked(f"{t['energy_j']:.4g}", estimate) if t["has_energy"] else "-",
                     marked(f"{t['carbon_g']:.4g}", estimate) if t["has_carbon"] else "-",
                     "+".join(sorted(t["methods"])) or "none"))
    return table(("device", "algorithm", "rounds", "wall s", "energy J", "g CO2e", "energy method"), body, "totals")


def _total_bars(page: Page, device: str, totals: Mapping[str, dict], what: str, unit: str,
                estimate: bool) -> str:
    """Bars of one total (``energy`` or ``carbon``) per algorithm; empty when no algorithm has it."""
    key, flag = {"energy": ("energy_j", "has_energy"), "carbon": ("carbon_g", "has_carbon")}[what]
    if not any(t[flag] for t in totals.values()):
        return ""
    short = short_labels(totals)
    data = [{"type": "bar", "name": esc(marked(unit, estimate)), "x": [esc(short[v]) for v in totals],
             "hovertext": [esc(v) for v in totals], "y": [t[key] if t[flag] else None for t in totals.values()],
             "marker": {"color": [page.color(v) for v in totals]}}]
    return page.figure(data, marked(f"{device}: total {what} per algorithm", estimate), {"type": "category"},
                       {"title": {"text": unit}})


def energy(page: Page, devices: Mapping[str, list[Row]]) -> str:
    """Total energy and carbon per algorithm and device, as bars and a table, ESTIMATE where estimated."""
    cells, tables = [], []
    for device, rows in devices.items():
        totals = _totals(rows)
        estimate = "estimate" in methods_of(rows)
        cells += [_total_bars(page, device, totals, "energy", "joules", estimate),
                  _total_bars(page, device, totals, "carbon", "grams CO2e", estimate)]
        tables.append(_totals_table(device, totals))
    all_rows = [r for rows in devices.values() for r in rows]
    return energy_note(all_rows) + grid([c for c in cells if c]) + "".join(tables)


def accuracy(page: Page, devices: Mapping[str, list[Row]]) -> str:
    """Test accuracy (``kind=eval`` rows) against the energy spent up to that round, per run and device."""
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
                         "x": xs, "y": [r.num("test_accuracy") for r in evals],
                         "marker": {"color": page.color(variant)}})
            protocols.add(protocol)
        if data:
            estimate = " (energy ESTIMATED)" if "estimate" in methods_of(rows) else ""
            cells.append(page.figure(data, f"{device}: test accuracy ({'+'.join(sorted(protocols))} protocol) "
                                           f"against cumulative energy{estimate}",
                                     {"title": {"text": "cumulative energy, J"}},
                                     {"title": {"text": "test accuracy"}, "range": [0, 1]}))
    if not cells:
        return ('<p class="note">None of these reports has <code>kind=eval</code> rows (write them with '
                '<code>edgeprof train</code> or <code>edgeprof measure --evaluate</code>).</p>')
    return grid(cells)


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
                     f"{carbon.get('g_per_kwh', '-')} g/kWh: {carbon.get('source', '-')}"))
    explain = ("<p>Each row of a report says how its energy was obtained: <b>counter</b> (a hardware energy "
               "counter, e.g. RAPL), <b>integrated_power</b> (power samples integrated over the window, e.g. "
               "Jetson rails, NVML), <b>estimate</b> (process CPU seconds times an assumed watts per core: an "
               "estimate, never shown as a measurement), <b>invalid</b> (a reading inside the window was "
               "implausible, e.g. a counter that jumped back: no number is shown, the sidecar's meters.invalid "
               "says why; totals and medians leave such rows out). Wall seconds come from a monotonic clock, CPU "
               "seconds from the process's CPU time, peak memory from the kernel's per-window high-water mark.</p>")
    return explain + table(("report", "energy method", "meters used", "meters not found", "carbon intensity"),
                            body)
