"""edgeprof: on-device energy profiling for personalized federated learning.

The public API is re-exported lazily from :mod:`edgeprof.api` so that ``import edgeprof`` stays fast
(torch, onnxruntime and the optional back-ends are imported only by the modules that use them). Profiling
your own code: ``edgeprof.monitor`` and ``edgeprof.phase`` (:mod:`edgeprof.measure.monitoring`, which imports
neither torch nor Flower). Importing edgeprof sets nothing in the process: the entry points (the ``edgeprof``
script, the Flower apps, the scripts) ask for OpenMP's passive wait themselves
(:func:`edgeprof.host.prefer_passive_openmp`).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["RunConfig", "run", "read_report", "monitor", "Monitor", "Measurement", "phase", "__version__"]

_MONITORING = ("monitor", "Monitor", "Measurement", "phase")


def __getattr__(name: str):
    if name in ("RunConfig", "run", "read_report"):
        from edgeprof import api

        return getattr(api, name)
    if name in _MONITORING:
        from edgeprof.measure import monitoring
        return getattr(monitoring, name)
    raise AttributeError(f"module 'edgeprof' has no attribute {name!r}")
