"""The Python API: build a config, run it, read the report back.

>>> from edgeprof import RunConfig, run, read_report
>>> result = run(RunConfig(algo="pflego", tau=10, rounds=2, out="profiles"))   # doctest: +SKIP
>>> report = read_report(result.csv_path)                                       # doctest: +SKIP
>>> [r["wall_s"] for r in report.where(kind="client")]                          # doctest: +SKIP

Your own code, profiled with the same meters and method labels (:mod:`edgeprof.session.monitoring`):

>>> import edgeprof
>>> with edgeprof.monitor(out="profiles", name="mine") as mon:                  # doctest: +SKIP
...     with mon.window("epoch", round=1):
...         with mon.phase("forward"):
...             ...

The algorithms' client rounds and server steps are plain functions on arrays:
:func:`edgeprof.algorithms.pflego.client_round`, :func:`edgeprof.algorithms.pflego.server_step`,
:func:`edgeprof.algorithms.fedavg.client_round`, :func:`edgeprof.algorithms.fedavg.server_step`.
"""

from __future__ import annotations

from pathlib import Path

from edgeprof.config import RunConfig
from edgeprof.session.measurement import Measurement
from edgeprof.session.monitoring import Monitor, monitor, phase
from edgeprof.report.writer import Report, read_report
from edgeprof.rounds.simulate import RunResult
from edgeprof.rounds.simulate import run as _run


def run(cfg: RunConfig, **kwargs) -> RunResult:
    """Run ``cfg`` (see :func:`edgeprof.rounds.simulate.run`); ``out`` may be a str."""
    if not isinstance(cfg.out, Path):
        import dataclasses

        cfg = dataclasses.replace(cfg, out=Path(cfg.out))
    return _run(cfg, **kwargs)


__all__ = ["RunConfig", "run", "read_report", "Report", "RunResult", "monitor", "Monitor", "Measurement", "phase"]
