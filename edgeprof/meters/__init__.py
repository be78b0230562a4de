"""Energy meters: one module per back-end behind :class:`~edgeprof.meters.base.Meter`.

Each back-end module declares a :class:`~edgeprof.meters.base.Backend`; :mod:`edgeprof.meters.registry`
lists them in discovery order, one line each, and the report's energy columns follow from that list.
``discover()`` (in :mod:`edgeprof.meters.discovery`) opens what this machine offers. Back-end modules
import their optional dependencies (``pynvml``) only when probed.
"""

from __future__ import annotations

from edgeprof.meters.base import INVALID, METHODS, Backend, Domain, Invalid, Meter, MeterContext, ProbeResult, Reading
from edgeprof.meters.discovery import MeterSet, discover

__all__ = ["INVALID", "METHODS", "Backend", "Domain", "Invalid", "Meter", "MeterContext", "ProbeResult", "Reading",
           "MeterSet", "discover"]
