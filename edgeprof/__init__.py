"""edgeprof: on-device energy profiling for personalized federated learning.

The public API is :mod:`edgeprof.api`'s names, re-exported lazily so that ``import edgeprof`` stays fast (torch,
onnxruntime and the optional back-ends are imported only by the modules that use them): each name is imported
from the module that defines it on first use, so ``edgeprof.RunConfig`` or ``edgeprof.monitor`` loads neither
torch nor Flower, and ``edgeprof.run`` or ``edgeprof.RunResult`` loads the run's machinery. Profiling your own
code: ``edgeprof.monitor`` and ``edgeprof.phase`` (:mod:`edgeprof.session.monitoring`). Importing edgeprof sets
nothing in the process: the entry points (the ``edgeprof`` script, the Flower apps, the scripts) ask for
OpenMP's passive wait themselves (:func:`edgeprof.host.prefer_passive_openmp`).
"""

from __future__ import annotations

__version__ = "0.1.0"

#: each public name -> the module it is imported from on first use (the one that defines it; ``run`` is
#: edgeprof.api's own, which takes ``out`` as a str too). The same names, in this order, as ``edgeprof.api.__all__``.
_HOMES = {
    "RunConfig": "edgeprof.config",
    "run": "edgeprof.api",
    "read_report": "edgeprof.report.writer",
    "Report": "edgeprof.report.writer",
    "RunResult": "edgeprof.rounds.simulate",
    "monitor": "edgeprof.session.monitoring",
    "Monitor": "edgeprof.session.monitoring",
    "Measurement": "edgeprof.session.measurement",
    "phase": "edgeprof.session.monitoring",
}

__all__ = [*_HOMES, "__version__"]


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'edgeprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
