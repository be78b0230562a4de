"""edgeprof: on-device energy profiling for personalized federated learning.

The public API is re-exported lazily from :mod:`edgeprof.api` so that ``import edgeprof`` stays fast
(torch, onnxruntime and the optional back-ends are imported only by the modules that use them).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["RunConfig", "run", "read_report", "__version__"]


def __getattr__(name: str):
    if name in ("RunConfig", "run", "read_report"):
        from edgeprof import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgeprof' has no attribute {name!r}")
