"""The shape of a report's JSON sidecar, checked when a report is read back.

Readers (``summary``, ``dashboard``, the analysis) look into the sidecar's sections (``host.hostname``,
``energy.carbon.source``, ``meters.meters[].name`` ...). A sidecar edited by hand, cut by a disk or written by
something else can hold a string where a section belongs. :func:`usable_sidecar` validates each section
against the pydantic models below, keeps every section that has its shape and leaves out each one that has
not, and says which in one line (``why``); sections it does not know (a sweep's) are kept as they are. The
``trace`` section must name a file beside the report (a name, no folder) and a rate that is a number above zero.
A sidecar an older edgeprof wrote names the machine ``device``; :func:`current_names` reads it as ``host``.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class Carbon(_Section):
    g_per_kwh: Optional[float] = None
    source: str = ""


class EnergySection(_Section):
    carbon: Optional[Carbon] = None
    idle: Optional[dict[str, Any]] = None


class MeterInfo(_Section):
    name: str = "?"


class Missing(_Section):
    meter: Optional[str] = None
    reason: Optional[str] = None


class Meters(_Section):
    meters: list[MeterInfo] = Field(default_factory=list)
    not_found: list[Missing] = Field(default_factory=list)
    invalid: dict[str, Any] = Field(default_factory=dict)


class MonitorSection(_Section):
    notes: list[str] = Field(default_factory=list)


class Trace(_Section):
    """The power trace's section: ``file`` is a file name beside the report (``<run>.trace.parquet`` or
    ``.trace.csv``), never a path elsewhere; ``hz`` a finite rate above zero."""

    file: str = Field(pattern=r"^[^/\\]+\.trace\.(parquet|csv)$")
    format: Optional[str] = None
    hz: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)

    @field_validator("file")
    @classmethod
    def _beside(cls, value: str) -> str:
        if value.startswith(".") or any(not ch.isprintable() for ch in value):
            raise ValueError("a trace file is a plain file name beside the report")
        return value


class Sidecar(_Section):
    """The sections readers use; every one optional (an older or a cut sidecar lacks some)."""

    run_id: Optional[str] = None
    status: Optional[str] = None
    reason: Optional[str] = None
    rows: Optional[int] = Field(default=None, ge=0)
    rounds_completed: Optional[int] = Field(default=None, ge=0)
    config: Optional[dict[str, Any]] = None
    host: Optional[dict[str, Any]] = None
    libraries: Optional[dict[str, Any]] = None
    meters: Optional[Meters] = None
    energy: Optional[EnergySection] = None
    monitor: Optional[MonitorSection] = None
    trace: Optional[Trace] = None
    phases: Optional[list[str]] = None
    notes: Optional[list[str]] = None


def current_names(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the machine's names an older edgeprof wrote read under today's: the section ``device`` (host name,
    CPU, memory) as ``host``, and the ``device`` of each Flower node (``flower.alpha.nodes.<i>``) and client
    (``flower.clients.<i>``) as its ``host``. Where both names are there, today's is kept and the old one dropped;
    values of an unexpected type are left for the shape check. ``data`` itself is not changed."""
    out = _renamed(data, "device", "host")
    flower = out.get("flower")
    if not isinstance(flower, dict):
        return out
    flower = dict(flower)
    alpha = flower.get("alpha")
    if isinstance(alpha, dict) and isinstance(alpha.get("nodes"), dict):
        flower["alpha"] = {**alpha, "nodes": _each_renamed(alpha["nodes"])}
    if isinstance(flower.get("clients"), dict):
        flower["clients"] = _each_renamed(flower["clients"])
    return {**out, "flower": flower}


def _renamed(item: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """A copy of ``item`` with key ``old`` under ``new`` (dropped where ``new`` is there), in its place."""
    if old not in item:
        return item
    if new in item:
        return {k: v for k, v in item.items() if k != old}
    return {new if k == old else k: v for k, v in item.items()}


def _each_renamed(items: dict[str, Any]) -> dict[str, Any]:
    return {k: _renamed(v, "device", "host") if isinstance(v, dict) else v for k, v in items.items()}


def _shown(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"the number {value!r}"
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kind.get(type(value), f"a {type(value).__name__}")


def usable_sidecar(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the sidecar without the sections whose shape is wrong, one line naming them, '' when none)."""
    bad: dict[str, str] = {}
    kept = dict(data)
    for _ in range(len(data) + 1):  # each pass leaves out at least one section, or ends
        try:
            Sidecar.model_validate(kept)
            break
        except ValidationError as err:
            wrong = [e for e in err.errors() if e["loc"] and str(e["loc"][0]) in kept]
            if not wrong:
                break
            for error in wrong:
                key = str(error["loc"][0])
                where = ".".join(str(p) for p in error["loc"])
                what = "missing" if error["type"] == "missing" else _shown(_at(data, error["loc"]))
                bad.setdefault(key, f"{where} is {what} ({error['msg'][0].lower()}{error['msg'][1:]})")
                kept.pop(key, None)
    why = "" if not bad else "left out sidecar section(s) of the wrong shape: " + "; ".join(bad.values())
    return kept, why


def _at(data: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return data
    return data
