"""The round GPU's own joules (``gpu_j``) beside the total: how its meter got them, its idle power, net of idle.

A GPU run's ``energy_j`` adds the round GPU's meter reading (``gpu_j``: NVML's energy counter, or its power samples
integrated; the method is in ``gpu_method``) to the other domains that count towards the total, on a machine
without RAPL the CPU-time estimate (``cpu_estimate_j``), so ``energy_method`` reads ``counter+estimate`` and every
figure drawn from it is an estimate in part. The GPU's joules are a measurement of their own: the summary, the
sweep's verdicts and the dashboard show them apart, labelled with ``gpu_method``, with the rest of ``energy_j``
beside them under its own method, never added to a figure labelled as a measurement.

Net of idle: ``gpu_net_j = gpu_j - P_idle * wall_s``, ``P_idle`` the idle power the run measured for the round GPU's
domains before it started (``--idle-seconds``: the sidecar's ``energy.idle.power_w`` of the domains that
``meters.meters[].domains[]`` puts in column ``gpu``). It is derived when a report is read, never written into it.
A row's seconds and joules are those of one round in a held window, so the difference is too. Where the sidecar
has no usable idle power for that GPU, no net figure is made and :class:`GpuIdle` says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from edgeprof.report.analysis import is_short

#: the report column of the round GPU's joules (the ``<column>_j`` / ``<column>_method`` pair)
GPU_COLUMN = "gpu"
NET_METRIC = "gpu_net_j"


def _meter_domains(sidecar: Mapping) -> list[Mapping]:
    meters = sidecar.get("meters") if isinstance(sidecar, Mapping) else None
    found = meters.get("meters") if isinstance(meters, Mapping) else None
    return [d for m in (found if isinstance(found, list) else []) if isinstance(m, Mapping)
            for d in (m.get("domains") if isinstance(m.get("domains"), list) else []) if isinstance(d, Mapping)]


def gpu_domains(sidecar: Mapping) -> tuple[str, ...]:
    """The names of the domains whose joules make up ``gpu_j`` (``gpu_0``), as the sidecar's meters list them."""
    return tuple(str(d.get("name")) for d in _meter_domains(sidecar) if d.get("column") == GPU_COLUMN)


def rest_columns(sidecar: Mapping) -> tuple[str, ...]:
    """The other report columns that count towards ``energy_j`` (``cpu_estimate``), in the meters' order; none where
    the GPU is inside one of them (RAPL's psys: ``energy_j`` is the platform's, the GPU's joules among them, so no
    column holds the rest)."""
    domains = _meter_domains(sidecar)
    if any(d.get("column") == GPU_COLUMN and d.get("inside") for d in domains):
        return ()
    return tuple(dict.fromkeys(str(d.get("column")) for d in domains
                               if d.get("in_total") and d.get("column") not in (GPU_COLUMN, None)))


@dataclass(frozen=True)
class GpuIdle:
    """The idle power of the round's GPU from a report's sidecar (``power_w``), or why there is none (``why``)."""

    power_w: Optional[float]
    domains: tuple[str, ...] = ()
    seconds: Optional[float] = None
    why: str = ""

    def describe(self) -> str:
        """One line: the idle power and how ``gpu_net_j`` uses it, or why no net figure is shown."""
        if self.power_w is None:
            return f"GPU net of idle: not shown, {self.why}"
        over = f", measured over {self.seconds:g} s before the run" if self.seconds else ""
        return (f"GPU idle power: {self.power_w:.4g} W ({', '.join(self.domains)}{over}); "
                f"gpu_net_j = gpu_j - {self.power_w:.4g} W x wall_s")


def _power(value: object) -> Optional[float]:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def gpu_idle(sidecar: Mapping) -> GpuIdle:
    """The round GPU's idle power, the sum over its domains of the sidecar's ``energy.idle.power_w``."""
    domains = gpu_domains(sidecar)
    if not domains:
        return GpuIdle(None, why="the sidecar's meters name no domain of the gpu column")
    energy = sidecar.get("energy")
    idle = energy.get("idle") if isinstance(energy, Mapping) else None
    if not isinstance(idle, Mapping):
        return GpuIdle(None, domains, why="the run measured no idle baseline (--idle-seconds); none is assumed")
    if idle.get("disabled"):
        return GpuIdle(None, domains, why="the run's idle baseline was turned off (--idle-seconds 0)")
    powers = idle.get("power_w") if isinstance(idle.get("power_w"), Mapping) else {}
    missing = [d for d in domains if _power(powers.get(d)) is None]
    if missing:
        return GpuIdle(None, domains, why=f"the idle baseline has no power in watts for {', '.join(missing)}")
    return GpuIdle(sum(_power(powers[d]) for d in domains), domains, _power(idle.get("seconds")))


def measured(rows: Iterable[Mapping[str, str]]) -> bool:
    """Whether a GPU meter measured the round's GPU: a client row has ``gpu_j``."""
    return any(r.get("kind") == "client" and r.get("gpu_j", "") != "" for r in rows)


def net_j(row: Mapping[str, str], idle: GpuIdle) -> Optional[float]:
    """``gpu_j - idle W * wall_s`` of one row, None without either or without an idle power."""
    if idle.power_w is None or row.get("gpu_j", "") == "" or row.get("wall_s", "") == "":
        return None
    return float(row["gpu_j"]) - idle.power_w * float(row["wall_s"])


def with_net(rows: Iterable[Mapping[str, str]], sidecar: Mapping) -> list[dict[str, str]]:
    """The rows of one report, each with ``gpu_net_j`` where :func:`net_j` has a value (full precision)."""
    idle = gpu_idle(sidecar)
    out = []
    for row in rows:
        value = net_j(row, idle)
        out.append(dict(row) if value is None else {**row, NET_METRIC: repr(value)})
    return out


def methods(rows: Iterable[Mapping[str, str]]) -> str:
    """The methods of the rows' ``gpu_j`` (``counter``, ``integrated_power``), joined by ``+``."""
    return "+".join(sorted({m for r in rows if r.get("gpu_j", "") != ""
                            for m in r.get("gpu_method", "").split("+") if m}))


def label(metric: str, method: str) -> str:
    """``gpu_j (counter)``, ``gpu_net_j (counter, net of idle)``: the metric with how it was obtained."""
    how = method or "no method recorded"
    return f"{metric} ({how}, net of idle)" if metric == NET_METRIC else f"{metric} ({how})"


def notes(rows: Sequence[Mapping[str, str]], sidecar: Mapping) -> list[str]:
    """The lines printed beside a GPU run's figures: what ``gpu_j`` is and what ``energy_j`` adds to it, and the
    GPU's idle power (or why there is none); nothing for a run whose GPU no meter measured."""
    if not measured(rows):
        return []
    rest = rest_text(rows, rest_columns(sidecar))
    added = f"; energy_j adds {rest} to it" if rest else ""
    return [f"GPU: gpu_j is the joules of the GPU that ran the round by its own meter "
            f"({methods(rows) or 'no method recorded'}), with figures and verdicts of its own{added}",
            gpu_idle(sidecar).describe()]


def rest_text(rows: Iterable[Mapping[str, str]], columns: Sequence[str]) -> str:
    """``cpu_estimate_j (estimate)``: the rest of ``energy_j`` beside the GPU with its rows' methods; ``""`` without."""
    if not columns:
        return ""
    found = {m for r in rows for c in columns for m in r.get(f"{c}_method", "").split("+") if m}
    return f"{', '.join(f'{c}_j' for c in columns)} ({'+'.join(sorted(found)) or 'no method recorded'})"


def rest_j(row: Mapping[str, str], columns: Sequence[str]) -> tuple[Optional[float], str]:
    """The rest of ``energy_j`` beside the GPU (the other in-total ``columns``' joules) and their methods; None when
    one of them has no value (the total leaves nothing out, so neither does its rest)."""
    values = [row.get(f"{c}_j", "") for c in columns]
    if not columns or "" in values:
        return None, ""
    found = {m for c in columns for m in row.get(f"{c}_method", "").split("+") if m}
    return float(sum(float(v) for v in values)), "+".join(sorted(found))


@dataclass(frozen=True)
class Totals:
    """Sums over rows with ``gpu_j``: the GPU's joules, net of idle and the rest of ``energy_j`` (each None unless
    every row has it: a sum over some of the rows is none), their methods, and how many windows were short."""

    rows: int
    gpu_j: float
    net_j: Optional[float]
    rest_j: Optional[float]
    method: str
    rest_method: str
    short: int

    @property
    def idle_share(self) -> Optional[float]:
        """The share of the GPU's joules that its idle power accounts for."""
        return (self.gpu_j - self.net_j) / self.gpu_j if self.net_j is not None and self.gpu_j > 0 else None


def totals(rows: Sequence[tuple[Mapping[str, str], Sequence[str]]]) -> Totals:
    """The :class:`Totals` of ``rows``, each given with the rest columns of its report (:func:`rest_columns`)."""
    measured_rows = [(r, rest) for r, rest in rows if r.get("gpu_j", "") != ""]
    nets = [float(r[NET_METRIC]) for r, _ in measured_rows if r.get(NET_METRIC, "") != ""]
    others = [rest_j(r, rest) for r, rest in measured_rows]
    rests = [v for v, _ in others if v is not None]
    every = len(measured_rows)
    return Totals(every, float(sum(float(r["gpu_j"]) for r, _ in measured_rows)),
                  float(sum(nets)) if every and len(nets) == every else None,
                  float(sum(rests)) if every and len(rests) == every else None,
                  methods(r for r, _ in measured_rows),
                  "+".join(sorted({m for v, ms in others if v is not None for m in ms.split("+") if m})),
                  sum(is_short(r) for r, _ in measured_rows))
