"""The ``edgeprof`` commands of a Flower federation: ``flower-app-dir`` writes the app folder of a deployment and
prints its commands, ``flower-simulate`` runs many clients on this machine (docs/flower.md). Registered on the
``edgeprof`` app by :mod:`edgeprof.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgeprof.cli import options as o
from edgeprof.cli.exits import guard

FlowerDir = Annotated[Path, typer.Argument(help="Folder of the Flower app to write (created if missing).")]


def flower_commands(folder: Path, clients: int, port: int) -> str:
    """The commands that start the deployment docs/flower.md describes (its steps 2-4), ready to copy."""
    return (f"2. server:    flower-superlink --host 0.0.0.0 --port {port} --ssl-ca-certfile ca.crt "
            f"--ssl-certfile server.pem --ssl-keyfile server.key --disable-runtime-dependency-installation\n"
            f"3. device i:  flower-supernode --superlink <server>:{port} --root-certificates ca.crt "
            f"--node-config \"partition-id=<i> num-partitions={clients}\"\n"
            f"4. submit:    add to $FLWR_HOME/config.toml (default ~/.flwr/config.toml):\n"
            f"[superlink.prod]\n"
            f"address = \"<server>:{port}\"\n"
            f"root-certificates = \"/path/ca.crt\"\n"
            f"             then: flwr run {folder} prod --stream")


def flower_app_dir(
    ctx: typer.Context,
    folder: FlowerDir = Path("edgeprof-flower-app"),
    algo: o.Algo = "pflego", tau: o.Tau = 50, backbone: o.Backbone = "cnn-omniglot", threads: o.Threads = None,
    execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    rounds: o.Rounds = 3, clients: o.Clients = 10, participation: o.Participation = 0.2,
    participation_mode: o.Mode = "fixed", seed: o.Seed = 0,
    dataset: o.Dataset = "digits", degree: o.Degree = "high", split: o.Split = "balanced",
    data_dir: o.DataDir = None,
    out: o.ServerOut = Path("profiles"), run_name: o.RunName = None,
    round_timeout: o.RoundTimeout = 600.0, node_wait: o.NodeWait = 300.0, total_samples: o.TotalSamples = 0,
    port: o.Port = 9093, trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
) -> None:
    """Write a Flower app folder (pyproject.toml) running edgeprof's ServerApp and ClientApp; print the commands."""
    with guard():
        from edgeprof.errors import ConfigError
        from edgeprof.flower.config import FlowerSettings, to_run_config, write_app_dir

        if not 1 <= port <= 65535:
            raise ConfigError(f"port must be in 1..65535, got {port}")
        cfg = o.run_config(ctx.params, given=o.given_options(ctx), out=out.resolve(), progress=False)
        path = write_app_dir(folder, to_run_config(cfg, FlowerSettings(round_timeout, node_wait, total_samples)))
        typer.echo(f"1. wrote {path}\n{flower_commands(folder, clients, port)}")


def flower_simulate(
    ctx: typer.Context,
    algo: o.Algo = "pflego", tau: o.Tau = 50, backbone: o.Backbone = "cnn-omniglot", threads: o.Threads = 1,
    execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    rounds: o.Rounds = 3, clients: o.Clients = 10, participation: o.Participation = 0.2,
    participation_mode: o.Mode = "fixed", seed: o.Seed = 0,
    dataset: o.Dataset = "digits", degree: o.Degree = "high", split: o.Split = "balanced",
    data_dir: o.DataDir = None,
    out: o.Out = Path("profiles"), run_name: o.RunName = None,
    client_cpus: o.ClientCpus = 1.0, client_gpus: o.ClientGpus = None, round_timeout: o.RoundTimeout = 600.0,
    trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
) -> None:
    """Run many clients on this machine with Flower's simulation engine (per-client energy is attribution)."""
    with guard():
        from edgeprof.flower.config import FlowerSettings
        from edgeprof.flower.simulation import simulate

        folder = simulate(o.run_config(ctx.params, given=o.given_options(ctx), out=out.resolve(), progress=False),
                          FlowerSettings(round_timeout_s=round_timeout, simulation=True),
                          client_cpus=client_cpus, client_gpus=client_gpus)
        typer.echo(f"reports in {folder}")
