"""Many clients on one machine with Flower's simulation engine (Ray back-end by default).

The ServerApp and ClientApp are edgeprof's own, with the run config baked in as defaults (the Python
entry point of the simulation passes no run config). Flower's simulation gives every virtual SuperNode
``partition-id`` and ``num-partitions`` in its node config, so client i loads the partition of
``edgeprof measure``'s client i. The run config carries ``simulation = true``, and the report's sidecar
then says that the clients shared the machine: per-client energy in such a report is the machine's
energy during each client's window - attribution, not measurement - and clients that run concurrently
are counted in each other's windows. The alternative without Python is ``flwr run <app-dir>`` against
the local SuperLink (docs/flower.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from edgeprof.config import RunConfig
from edgeprof.errors import require
from edgeprof.flower.config import FlowerSettings, to_run_config


def backend_config(client_cpus: float = 1.0, client_gpus: float = 0.0, total_cpus: Optional[int] = None) -> dict:
    """Flower's backend config: resources per virtual client (and for the whole Ray instance)."""
    config: dict = {"client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus}}
    if total_cpus is not None:
        config["init_args"] = {"num_cpus": total_cpus}
    return config


def simulate(cfg: RunConfig, settings: FlowerSettings = FlowerSettings(), *, backend: str = "ray",
             client_cpus: float = 1.0, client_gpus: float = 0.0, total_cpus: Optional[int] = None) -> Path:
    """Run ``cfg`` with ``cfg.clients`` virtual SuperNodes; returns the report CSV's folder."""
    run_simulation = require("flwr.simulation", "flower", "flower-simulate").run_simulation

    from edgeprof.flower.client_app import make_client_app
    from edgeprof.flower.server_app import make_server_app

    run_config = to_run_config(cfg, dataclasses.replace(settings, simulation=True))
    run_simulation(server_app=make_server_app(run_config), client_app=make_client_app(run_config),
                   num_supernodes=cfg.clients, backend_name=backend,
                   backend_config=backend_config(client_cpus, client_gpus, total_cpus))
    return Path(cfg.out)
