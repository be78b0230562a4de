"""The host: what the sidecar records about the machine (CPU, memory, OS, host name) and the libraries a run
used. Named for the host, not the compute device a round runs on (:mod:`edgeprof.nn.compute`)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
from pathlib import Path


def max_threads() -> int:
    """The machine's logical cores: more intra-op threads than that only oversubscribe it."""
    return os.cpu_count() or 1


def prefer_passive_openmp() -> bool:
    """Ask OpenMP's workers (torch's intra-op pool) to sleep between parallel regions instead of spinning.

    A client round is many small parallel regions; spinning workers burn CPU that the profiler would charge
    to the round and, on a busy machine, fight the main thread for the cores (PFLEGO's joint gradient on
    digits/mlp: ~86 ms spinning vs ~1 ms passive on 2 loaded cores). The OpenMP runtime reads
    ``OMP_WAIT_POLICY`` when torch loads, so the entry points (the ``edgeprof`` script, the Flower apps, the
    scripts) call this before anything imports torch; an explicit ``OMP_WAIT_POLICY`` wins. Returns whether it
    can still take effect (torch not loaded yet).
    """
    import sys

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules


#: the C++ libraries a run loads, in the order :func:`load_native_libraries` imports them
NATIVE_LIBRARIES = ("onnx", "onnxruntime", "torch")


def load_native_libraries(names: tuple[str, ...] = NATIVE_LIBRARIES) -> None:
    """Import the C++ libraries ``names`` (torch, onnx and ONNX Runtime) with the stop signals held (raised once
    they are loaded).

    A Ctrl-C that lands while a C++ library is half-way through its module initialisation can abort the process:
    torch's initialisers (``_c10d_init``, autograd's) run Python code through pybind11, and a stop raised there
    is a C++ exception where none may pass, so the process ends in SIGABRT with pybind11's message instead of one
    line (5 of 800 runs stopped at random moments of set-up; ``tests/test_stops.py`` sends one inside torch's
    import). Held, the Ctrl-C takes effect a moment later, with the libraries whole. Whatever imports torch first in
    a command calls this first: the algorithm registry (torch alone: its modules import torch, and a run's config is
    checked against them before set-up), the drivers' set-up and ``edgeprof export`` (all three).
    """
    import importlib

    from edgeprof.signals import signals_held

    with signals_held():
        for name in names:
            importlib.import_module(name)


LIBRARIES = ("edgeprof", "torch", "onnxruntime", "onnx", "numpy", "psutil", "scikit-learn", "typer", "rich",
             "nvidia-ml-py", "codecarbon", "flwr", "plotly")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else platform.processor())."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key = line.split(":")[0].strip().lower()
            if key in ("model name", "hardware", "processor") and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    return value
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_label(configured: str | None = None) -> str:
    """The name rows carry in their ``host`` column: $EDGEPROF_HOST, else $EDGEPROF_DEVICE (its old name, read
    while EDGEPROF_HOST is unset), else ``configured``, else the host name."""
    return (os.environ.get("EDGEPROF_HOST") or os.environ.get("EDGEPROF_DEVICE") or configured
            or socket.gethostname())


def host_info() -> dict:
    """CPU model, cores, memory, OS, Python and the host's name."""
    import psutil

    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 2),
        "os": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def library_versions() -> dict:
    """Installed versions of the libraries edgeprof uses (None when absent).

    Read once per process: the running code does not change with what is installed meanwhile, and a run's
    first and final sidecars both list them (each reading costs about 7 ms, most of it parsing metadata files).
    """
    return dict(_library_versions())


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple[tuple[str, str | None], ...]:
    out = []
    for name in LIBRARIES:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)
