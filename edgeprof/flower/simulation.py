"""Many clients on one machine with Flower's simulation engine (Ray back-end by default).

The ServerApp and ClientApp are edgeprof's own, with the run config baked in as defaults (the Python
entry point of the simulation passes no run config). Flower's simulation gives every virtual SuperNode
``partition-id`` and ``num-partitions`` in its node config, so client i loads the partition of
``edgeprof measure``'s client i. The run config carries ``simulation = true``, and the report's sidecar
then says that the clients shared the machine: per-client energy in such a report is the machine's
energy during each client's window - attribution, not measurement - and clients that run concurrently
are counted in each other's windows. The alternative without Python is ``flwr run <app-dir>`` against
the local SuperLink (docs/flower.md).

GPUs: Ray shows each virtual client only the GPUs it reserves (``num_gpus``), numbered from 0, and hides
every GPU from a client that reserves none. So the device is decided once, here (``auto`` resolved on this
machine), and a run on CUDA reserves one GPU per client unless ``client_gpus`` says otherwise (a fraction
such as 0.25 lets four clients share one); :func:`client_gpus_for` refuses what Ray would break, and
:func:`edgeprof.nn.compute.check_usable` (the check ``measure`` makes) a device this machine cannot run rounds on, both before Ray starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import threading
import warnings
from pathlib import Path
from typing import Iterator, Optional

from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError, require
from edgeprof.flower.config import FlowerSettings, to_run_config


def backend_config(client_cpus: float = 1.0, client_gpus: float = 0.0, total_cpus: Optional[int] = None) -> dict:
    """Flower's backend config: resources per virtual client (and for the whole Ray instance)."""
    config: dict = {"client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus}}
    if total_cpus is not None:
        config["init_args"] = {"num_cpus": total_cpus}
    return config


@contextlib.contextmanager
def _without_notice(logger: str, text: str) -> Iterator[None]:
    """Within the block, ``logger`` drops the records that contain ``text``: a notice about how edgeprof calls a
    library, which the person running edgeprof can do nothing about."""

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logging.getLogger(logger).addFilter(keep)
    try:
        yield
    finally:
        logging.getLogger(logger).removeFilter(keep)


@contextlib.contextmanager
def _stops_to_server(stop) -> Iterator[None]:
    """Within the block, a stop signal (Ctrl-C, SIGTERM, SIGHUP) is handed to the ServerApp (``stop``, a
    :class:`~edgeprof.flower.server_app.StopRequest`) instead of raised here, and Ray's start keeps that handler.

    Raised in the main thread, a stop would unwind Flower's simulation under its ServerApp thread: Ray shut
    down while clients are still awaited (seen: a Ray crash, exit 1 or 134), the report left ``running``, and
    a process that waits for the ServerApp's round timeout before it exits. ``ray.init`` installs its own
    SIGTERM handler, which aborts the process: the handlers are put back as soon as Ray has started. Outside
    the main thread (no signal handler can be set there) the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from edgeprof.signals import STOP_SIGNALS

    try:
        import ray
    except ImportError:  # Flower's simulation says what is missing
        ray = None
    start = None if ray is None else ray.init

    def init(*args, **kwargs):
        try:
            return start(*args, **kwargs)
        finally:
            for signum in STOP_SIGNALS:
                signal.signal(signum, stop.ask)

    previous = {signum: signal.signal(signum, stop.ask) for signum in STOP_SIGNALS}
    if ray is not None:
        ray.init = init
    try:
        yield
    finally:
        if ray is not None:
            ray.init = start
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def client_gpus_for(device: str, client_gpus: Optional[float]) -> float:
    """The GPUs each virtual client reserves for rounds on ``device`` (resolved: not ``auto``).

    On CUDA: ``client_gpus``, default 1 (clients on one GPU take turns, so no client's window holds another's
    GPU work); 0 is refused (Ray would hide the GPU), and so is ``cuda:N`` for N > 0 (a client sees its
    reserved GPU as ``cuda:0``). On any other device: 0; a reservation is refused (it could never be met
    on a machine without a GPU, and the rounds would not use it elsewhere). ConfigError with one line.
    """
    kind, _, index = device.partition(":")
    if client_gpus is not None and not 0 <= client_gpus < math.inf:
        raise ConfigError(f"--client-gpus must be a number >= 0, got {client_gpus}")
    if kind != "cuda":
        if client_gpus:
            raise ConfigError(f"--client-gpus {client_gpus:g} reserves GPUs, but the rounds run on {device}: "
                              "use --device cuda, or leave --client-gpus out")
        return 0.0
    if client_gpus == 0:
        raise ConfigError(f"--device {device} with --client-gpus 0: Ray hides every GPU from a client that "
                          "reserves none; give each client a share (1, or 0.25 for four on one GPU) or use --device cpu")
    if index not in ("", "0"):
        raise ConfigError(f"--device {device}: Ray shows each simulated client only the GPU it reserves, as "
                          "cuda:0; use --device cuda (Ray picks the GPU)")
    return 1.0 if client_gpus is None else float(client_gpus)


def simulate(cfg: RunConfig, settings: FlowerSettings = FlowerSettings(), *, backend: str = "ray",
             client_cpus: float = 1.0, client_gpus: Optional[float] = None, total_cpus: Optional[int] = None) -> Path:
    """Run ``cfg`` with ``cfg.clients`` virtual SuperNodes; returns the report CSV's folder.

    ``client_gpus``: GPUs each client reserves (None: 1 for rounds on CUDA, else 0; :func:`client_gpus_for`).
    """
    from edgeprof.nn.compute import check_usable, resolve_device

    if not 0 < client_cpus < math.inf:
        raise ConfigError(f"--client-cpus must be a number above 0, got {client_cpus}")
    # decided here, where every GPU is visible: a client sees only what it reserves
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))
    client_gpus = client_gpus_for(cfg.device, client_gpus)
    check_usable(cfg.device, cfg.tf32)
    run_simulation = require("flwr.simulation", "flower", "flower-simulate").run_simulation

    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.server_app import StopRequest, make_server_app

    run_config = to_run_config(cfg, dataclasses.replace(settings, simulation=True))
    stop = StopRequest(Path(cfg.out))
    # Flower's notice that run_simulation is deprecated is about edgeprof's call, not the user's to change
    with warnings.catch_warnings(), _stops_to_server(stop), _without_notice("flwr", "`run_simulation` function is"):
        # Ray's tip on clients that reserve no GPU: none here runs on one
        warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
        run_simulation(server_app=make_server_app(run_config, stop), client_app=make_client_app(run_config),
                       num_supernodes=cfg.clients, backend_name=backend,
                       backend_config=backend_config(client_cpus, client_gpus, total_cpus))
    stop.raise_asked()  # a stop signal, once the ServerApp has closed its report and the simulation has ended
    return Path(cfg.out)
