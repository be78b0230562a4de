"""edgeprof: on-device energy profiling for personalized federated learning.

The public API is re-exported lazily from :mod:`edgeprof.api` so that ``import edgeprof`` stays fast
(torch, onnxruntime and the optional back-ends are imported only by the modules that use them). Profiling
your own code: ``edgeprof.monitor`` and ``edgeprof.phase`` (:mod:`edgeprof.monitoring`, which imports
neither torch nor Flower).
"""

from __future__ import annotations

import os

# OpenMP workers (torch's intra-op pool) sleep between parallel regions instead of spinning. A client round
# is many small parallel regions; spinning workers burn CPU that the profiler would charge to the round and,
# on a busy machine, fight the main thread for the cores (PFLEGO's joint gradient on digits/mlp: ~86 ms
# spinning vs ~1 ms passive on 2 loaded cores). The OpenMP runtime reads this when torch loads, so it takes
# effect when edgeprof is imported before torch (the CLI and the scripts do); an explicit OMP_WAIT_POLICY in
# the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

__all__ = ["RunConfig", "run", "read_report", "monitor", "Monitor", "Measurement", "phase", "__version__"]

_MONITORING = ("monitor", "Monitor", "Measurement", "phase")


def __getattr__(name: str):
    if name in ("RunConfig", "run", "read_report"):
        from edgeprof import api

        return getattr(api, name)
    if name in _MONITORING:
        from edgeprof import monitoring

        return getattr(monitoring, name)
    raise AttributeError(f"module 'edgeprof' has no attribute {name!r}")
