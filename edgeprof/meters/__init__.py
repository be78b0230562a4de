"""Energy meters: one module per back-end behind :class:`~edgeprof.meters.base.Meter`.

``discover()`` (in :mod:`edgeprof.meters.discovery`) opens what this machine offers; see that module for
the order. Back-end modules import their optional dependencies (``pynvml``) only when probed.
"""

from __future__ import annotations

from edgeprof.meters.base import METHODS, REPORT_COLUMNS, Domain, Meter, ProbeResult
from edgeprof.meters.discovery import MeterSet, discover

__all__ = ["METHODS", "REPORT_COLUMNS", "Domain", "Meter", "ProbeResult", "MeterSet", "discover"]
