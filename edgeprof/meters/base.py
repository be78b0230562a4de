"""The one small interface every energy back-end implements.

A :class:`Meter` is opened by its back-end module (after a probe said it is available), exposes a
fixed tuple of :class:`Domain` objects, and answers :meth:`Meter.read_j` with the *cumulative* energy
of every domain in joules since the meter was opened. Counter wrap-around, sampling threads and unit
conversion are the back-end's business; the profiler only subtracts two readings.

Every domain carries its method (how its joules were obtained) and whether it counts towards the
total: nested domains (RAPL core inside package inside psys, Jetson sub-rails inside the board's
input rail) are reported but never summed into ``energy_j``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Mapping

#: how a figure was obtained, from most to least direct
METHODS = ("counter", "integrated_power", "estimate")

#: the report column (``<column>_j`` and ``<column>_method``) each domain adds into
REPORT_COLUMNS = (
    "cpu_package",
    "dram",
    "psys",
    "gpu",
    "board_total",
    "board_cpu",
    "board_gpu",
    "board_soc",
    "cpu_estimate",
)


@dataclass(frozen=True)
class Domain:
    """One thing a meter measures.

    ``name`` is unique across the meters of a run (e.g. ``cpu_package_0``, ``gpu_1``), ``column`` is
    one of :data:`REPORT_COLUMNS`, ``method`` one of :data:`METHODS`. ``in_total`` is False for a
    domain that is contained in another counted domain.
    """

    name: str
    column: str
    method: str
    in_total: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}")
        if self.column not in REPORT_COLUMNS:
            raise ValueError(f"unknown report column {self.column!r}")


@dataclass(frozen=True)
class ProbeResult:
    """Whether a back-end can be used here; when not, why and how to fix it."""

    meter: str
    available: bool
    reason: str = ""
    fix: str = ""
    domains: tuple[str, ...] = field(default_factory=tuple)


class Meter(ABC):
    """A cumulative energy counter per domain. Subclasses live one per module in ``edgeprof.meters``."""

    #: short name used in reports and ``edgeprof doctor``
    name: ClassVar[str] = "meter"
    #: seconds between updates of the underlying counter; windows shorter than this are flagged
    update_period_s: float = 0.0

    @abstractmethod
    def domains(self) -> tuple[Domain, ...]:
        """The domains this meter reports, fixed for its lifetime."""

    @abstractmethod
    def read_j(self) -> Mapping[str, float]:
        """Cumulative joules per domain name since the meter was opened (never decreasing)."""

    def read_at_cpu_j(self, cpu_s: float) -> Mapping[str, float]:
        """The reading that goes with a process CPU time ``cpu_s`` the caller has just sampled.

        A meter whose figure is derived from CPU time (the estimate) computes it from ``cpu_s`` instead of
        reading the clock again, so its joules are exactly the caller's CPU seconds times its model; every
        other meter ignores ``cpu_s`` and reads as :meth:`read_j` does.
        """
        return self.read_j()

    def sync(self) -> None:
        """Wait for outstanding device work before a reading (e.g. CUDA kernels); default: nothing."""

    def close(self) -> None:
        """Release handles and stop sampler threads; idempotent."""

    def describe(self) -> dict:
        """What the sidecar records about this meter."""
        return {
            "name": self.name,
            "update_period_s": self.update_period_s,
            "domains": [
                {"name": d.name, "column": d.column, "method": d.method, "in_total": d.in_total}
                for d in self.domains()
            ],
        }

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
