"""What a monitor is given and what it gives back: :class:`MonitorConfig`, the settings of one run, validated
on construction, and :class:`Measurement`, one finished window (:mod:`edgeprof.session.monitoring`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from edgeprof.errors import MonitorError
from edgeprof.report.schema import check_phase_name
from edgeprof.results import Span, WindowResult
from edgeprof.session.row_labels import split_labels

if TYPE_CHECKING:
    from edgeprof.config import EnergySettings


@dataclass(frozen=True)
class MonitorConfig:
    """Settings of one monitor run; validated on construction (MonitorError / ConfigError, one line).

    ``name`` prefixes the run id (``<name>-<time>-<random>``) unless ``run_id`` gives it whole; the meter
    and carbon settings are those of ``edgeprof measure`` (its meter options, ``--country``, ...). The fields are
    :func:`~edgeprof.session.monitoring.monitor`'s arguments of the same names.
    """

    out: Path = Path("profiles")
    name: str = "monitor"
    run_id: Optional[str] = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    phases: tuple[str, ...] = ()
    energy: "EnergySettings" = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        from edgeprof.config import RUN_NAME, EnergySettings

        if self.energy is None:
            object.__setattr__(self, "energy", EnergySettings())
        if not isinstance(self.energy, EnergySettings):
            raise MonitorError(f"energy must be an EnergySettings, got {self.energy!r}")

        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "phases", tuple(self.phases))
        object.__setattr__(self, "labels", dict(self.labels))
        for what, value in (("name", self.name), ("run id", self.run_id)):
            if value is not None and not (isinstance(value, str) and RUN_NAME.fullmatch(value)):
                raise MonitorError(f"{what} {value!r} may use only letters, digits, '.', '_' and '-' (it names files)")
        split_labels(self.labels)
        for p in self.phases:
            check_phase_name(p)

    @property
    def run_name(self) -> Optional[str]:
        """``run_id``, by the name the run's set-up reads (:func:`edgeprof.session.run.make_run_id`)."""
        return self.run_id

    def to_dict(self) -> dict:
        """The settings as plain data (the sidecar's ``config``)."""
        return {"out": str(self.out), "name": self.name, "run_id": self.run_id, "labels": dict(self.labels),
                "phases": list(self.phases), "energy": self.energy.to_dict()}


def _number(cell: str) -> Optional[float]:
    return float(cell) if cell not in ("", None) else None


@dataclass(frozen=True)
class Measurement:
    """One finished window: its figures, as written in its report row, and the profiler's result.

    ``energy_j`` and ``carbon_g`` are None where the row's cell is empty (no meter, an implausible reading:
    ``energy_method`` then says ``invalid``); ``energy_method`` is the row's, e.g. ``counter`` or ``estimate``.
    """

    name: str
    kind: str
    labels: Mapping[str, Any]
    result: WindowResult
    row: Mapping[str, str]
    overlapped: bool

    @property
    def wall_s(self) -> float:
        """Wall-clock seconds the window was open."""
        return self.result.wall_s

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the whole process while the window was open."""
        return self.result.cpu_s

    @property
    def energy_j(self) -> Optional[float]:
        """Joules of the row's ``energy_j`` cell; None where it is empty."""
        return _number(self.row.get("energy_j", ""))

    @property
    def energy_method(self) -> str:
        """How ``energy_j`` was obtained: ``counter``, ``integrated_power``, ``estimate`` or ``invalid`` (the row's
        cell)."""
        return self.row.get("energy_method", "")

    @property
    def carbon_g(self) -> Optional[float]:
        """Grams of CO2e of the row's ``carbon_g`` cell; None where it is empty."""
        return _number(self.row.get("carbon_g", ""))

    @property
    def phases(self) -> Mapping[str, Span]:
        """Each phase's span (seconds, CPU seconds, joules per meter), by phase name."""
        return self.result.phases
