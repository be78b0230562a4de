"""``edgeprof doctor``: what this machine can measure, and for each missing meter why and how to fix it.

:func:`doctor_report` runs the same discovery as a profiled run (so it reports exactly what a run would
use, every registered back-end included), closes the meters again, and returns one plain dict per
back-end; :func:`render_doctor` turns the rows into a plain-text table.
"""

from __future__ import annotations

from typing import Any

from edgeprof.meters.discovery import NOT_NEEDED, discover, resolve_sysfs_root


def doctor_report(*, sysfs_root: str | None = None, **settings: Any) -> list[dict]:
    """One row per registered back-end: status, domains, methods, update period, read cost (measured as a run
    measures it: the fastest of a few reads) and how a run reads it (at the edges, or off the measured thread),
    sampling rate, reason, fix, and ``skipped`` (the zones or rails it left out, and why).

    ``settings`` are ``discover()``'s (``cpu_watts``, ``nvml_module``, ... as the back-ends declare them).
    """
    meter_set = discover(sysfs_root=sysfs_root, **settings)
    try:
        opened = {m["name"]: m for m in meter_set.describe()["meters"]}
    finally:
        meter_set.close()
    rows = []
    for probe in meter_set.probes:
        info = opened.get(probe.meter)
        if info is None:
            status = "not used" if probe.reason.startswith(NOT_NEEDED) else "not found"
            rows.append({"meter": probe.meter, "status": status, "domains": [], "methods": [],
                         "update_period_s": None, "sampling_hz": None, "resolution": "",
                         "reason": probe.reason, "fix": probe.fix, "notes": "", "skipped": list(probe.skipped)})
            continue
        domains = info["domains"]
        notes = [str(info[k]) for k in ("total", "model") if info.get(k)]
        rows.append({
            "meter": probe.meter, "status": "found",
            "domains": [d["name"] + ("" if d["in_total"] else f" (inside {d['inside']}, not in total)"
                                     if d.get("inside") else " (not in total)") for d in domains],
            "methods": sorted({d["method"] for d in domains}),
            "update_period_s": info.get("update_period_s"), "sampling_hz": info.get("sampling_hz"),
            "resolution": info.get("resolution", ""), "reason": "", "fix": "", "notes": "; ".join(notes),
            "read_cost_s": info.get("read_cost_s"), "read": info.get("read", ""),
            "watts_per_core": info.get("watts_per_core"), "watts_source": info.get("watts_source", ""),
            "skipped": list(probe.skipped),
        })
    rows.append({"meter": "sysfs", "status": "info", "domains": [], "methods": [], "update_period_s": None,
                 "sampling_hz": None, "resolution": "", "reason": f"sysfs root: {resolve_sysfs_root(sysfs_root)}",
                 "fix": "set EDGEPROF_SYSFS_ROOT when the host's /sys is mounted elsewhere", "notes": "",
                 "skipped": []})
    return rows


def render_doctor(rows: list[dict]) -> str:
    """A plain-text report: one block per meter, found ones first."""
    order = {"found": 0, "not found": 1, "not used": 2, "info": 3}
    lines = []
    for row in sorted(rows, key=lambda r: order.get(r["status"], 9)):
        lines.append(f"{row['meter']:<13} {row['status'].upper()}")
        if row["status"] == "found":
            period = row["update_period_s"]
            lines.append(f"  domains:       {', '.join(row['domains'])}")
            lines.append(f"  method:        {', '.join(row['methods'])}")
            lines.append(f"  update period: {period:g} s" if period is not None else "  update period: -")
            if row.get("read_cost_s") is not None:
                cost = row["read_cost_s"]
                shown = f"{cost * 1e3:.3g} ms" if cost >= 1e-3 else f"{cost * 1e6:.3g} us"
                lines.append(f"  read cost:     {shown} a read (read {row['read']})")
            if row["sampling_hz"]:
                lines.append(f"  sampling:      {row['sampling_hz']:g} Hz")
            if row["resolution"]:
                lines.append(f"  resolution:    {row['resolution']}")
            if row.get("watts_per_core") is not None:
                lines.append(f"  watts/core:    {row['watts_per_core']:g} W per busy core ({row['watts_source']})")
            if row["notes"]:
                lines.append(f"  notes:         {row['notes']}")
        else:
            lines.append(f"  why:           {row['reason']}")
            if row["fix"]:
                lines.append(f"  fix:           {row['fix']}")
        for why in row.get("skipped", ()):
            lines.append(f"  skipped:       {why}")
    return "\n".join(lines) + "\n"
