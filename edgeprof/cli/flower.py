"""The ``edgeprof`` commands of a Flower federation: ``flower-app-dir`` writes the app folder of a deployment and
prints its commands, ``flower-certs`` writes the TLS files its SuperLink serves, ``flower-simulate`` runs many
clients on this machine (docs/flower.md). Registered on the ``edgeprof`` app by :mod:`edgeprof.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgeprof.cli import options as o
from edgeprof.cli.exits import guard

FlowerDir = Annotated[Path, typer.Argument(help="Folder of the Flower app to write (created if missing).")]
CertsDir = Annotated[Path, typer.Argument(help="Folder to write the four TLS files to (created if missing).")]
Insecure = Annotated[bool, typer.Option(rich_help_panel=o.FLOWER,
                                        help="Print commands without TLS (one machine or a lab only).")]


#: the folder the printed commands keep the TLS files in (``edgeprof flower-certs``), beside the app folder: inside
#: it, ``flwr run`` would ship the CA's key with the app
CERTS = Path("certs")
#: the names the one-host certificate is for: what the SuperNodes and ``flwr`` on this machine connect to
ONE_HOST_NAMES = ("localhost", "127.0.0.1")


def flower_commands(folder: Path, clients: int, port: int, insecure: bool = False) -> str:
    """The commands that start the deployment docs/flower.md describes (its steps 2-4) on this machine, ready to
    run as printed from the folder ``flower-app-dir`` ran in: one SuperNode per partition, each on its own port
    (``port`` + 1 + i), the TLS files of ``edgeprof flower-certs certs`` (with ``insecure``: no TLS, and a SuperLink
    that listens on the loopback only); then what to change on real hosts."""
    tls = "--insecure" if insecure else " ".join(
        f"--{flag} {CERTS / name}" for flag, name in (("ssl-ca-certfile", "ca.crt"), ("ssl-certfile", "server.pem"),
                                                      ("ssl-keyfile", "server.key")))
    node_tls = "--insecure" if insecure else f"--root-certificates {CERTS / 'ca.crt'}"
    where = ("no TLS, on the loopback only; docs/flower.md, \"Quick start on one machine (insecure)\"" if insecure
             else "TLS; docs/flower.md, \"Step by step\"")
    lines = [f"On this machine, as printed, from this folder ({where}):"]
    if not insecure:
        lines.append(f"2. TLS files: edgeprof flower-certs {CERTS} " + " ".join(f"--name {n}" for n in ONE_HOST_NAMES))
    lines.append(f"2. server:    flower-superlink --host {'127.0.0.1' if insecure else '0.0.0.0'} --port {port} {tls} "
                 f"--disable-runtime-dependency-installation")
    lines += [f"3. device {i}:  flower-supernode --superlink 127.0.0.1:{port} {node_tls} --port {port + 1 + i} "
              f"--node-config \"partition-id={i} num-partitions={clients}\"" for i in range(clients)]
    lines += ["4. submit:    add to $FLWR_HOME/config.toml (default ~/.flwr/config.toml):",
              "[superlink.prod]", f"address = \"127.0.0.1:{port}\"",
              "insecure = true" if insecure else f"root-certificates = \"{(CERTS / 'ca.crt').resolve()}\"",
              f"             then: flwr run {folder} prod --stream"]
    if insecure:
        lines.append("On real hosts: leave out --insecure and use TLS (flower-app-dir without --insecure prints how).")
    else:
        lines.append("On real hosts: give flower-certs the server's DNS name or IP (--name, once per name the devices "
                     "and flwr use; it never replaces its files); write that name for 127.0.0.1 in --superlink and "
                     "in address; copy certs/ca.crt (never ca.key) to every device and to where you submit, and name "
                     "its path in --root-certificates; a device's --port matters only where SuperNodes share a host.")
    return "\n".join(lines)


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
    port: o.Port = 9093, insecure: Insecure = False, trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
) -> None:
    """Write a Flower app folder (pyproject.toml) running edgeprof's ServerApp and ClientApp; print the commands."""
    with guard():
        from edgeprof.errors import ConfigError
        from edgeprof.flower.config import FlowerSettings, to_run_config, write_app_dir

        if not 1 <= port <= 65535 - clients:
            raise ConfigError(f"port must be in 1..65535 with a port after it for each of the {clients} devices "
                              f"(at most {65535 - clients}), got {port}")
        cfg = o.run_config(ctx.params, given=o.given_options(ctx), out=out.resolve(), progress=False)
        path = write_app_dir(folder, to_run_config(cfg, FlowerSettings(round_timeout, node_wait, total_samples)))
        typer.echo(f"1. wrote {path}\n{flower_commands(folder, clients, port, insecure)}")


def flower_certs(
    folder: CertsDir = CERTS,
    names: Annotated[list[str], typer.Option(
        "--name", rich_help_panel=o.FLOWER, show_default=False,
        help="A DNS name or IP address the SuperNodes and flwr reach the SuperLink by; once per name (at least one).",
    )] = [],  # noqa: B006 - typer's way to declare a repeated option; never mutated
    days: Annotated[int, typer.Option(rich_help_panel=o.FLOWER,
                                      help="Days the CA and the server certificate are valid.")] = 365,
) -> None:
    """Write a CA and a server certificate for the SuperLink (ca.crt, ca.key, server.pem, server.key); never
    replaces a file."""
    with guard():
        from edgeprof.flower.certs import write_certs

        paths = write_certs(folder, names, days)
        typer.echo("wrote " + ", ".join(str(p) for p in paths) + f"\nSuperLink: --ssl-ca-certfile {paths[0]} "
                   f"--ssl-certfile {paths[2]} --ssl-keyfile {paths[3]}; SuperNodes and flwr: {paths[0]}. Keep "
                   f"{paths[1]} (the CA's key) off the devices.")


def flower_simulate(
    ctx: typer.Context,
    algo: o.Algo = "pflego", tau: o.Tau = 50, backbone: o.Backbone = "cnn-omniglot", threads: o.Threads = 1,
    execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    rounds: o.Rounds = 3, clients: o.Clients = 10, participation: o.Participation = 0.2,
    participation_mode: o.Mode = "fixed", seed: o.Seed = 0,
    dataset: o.Dataset = "digits", degree: o.Degree = "high", split: o.Split = "balanced",
    data_dir: o.DataDir = None,
    out: o.Out = Path("profiles"), run_name: o.RunName = None,
    client_cpus: o.ClientCpus = 1, client_gpus: o.ClientGpus = None, round_timeout: o.RoundTimeout = 600.0,
    trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
) -> None:
    """Run many clients on this machine with Flower's simulation runtime (per-client energy is attribution)."""
    with guard():
        from edgeprof.flower.config import FlowerSettings
        from edgeprof.flower.simulation import simulate

        csv_path = simulate(o.run_config(ctx.params, given=o.given_options(ctx), out=out.resolve(), progress=False),
                            FlowerSettings(round_timeout_s=round_timeout, simulation=True),
                            client_cpus=client_cpus, client_gpus=client_gpus)
        from edgeprof.cli import _print_summary, _read

        _print_summary(_read(csv_path))  # as measure's, with the note that the clients share this machine
