"""The ``edgeprof`` command line: thin typer commands; options -> one RunConfig -> one run function.

Every :class:`~edgeprof.errors.EdgeprofError` becomes one line on stderr and a non-zero exit in
exactly one place, :func:`guard`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from edgeprof.errors import EdgeprofError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Profile the energy and time of personalized federated learning rounds on this device.")

INTERRUPTED_EXIT = 130


def _err(message: str) -> None:
    typer.echo(f"edgeprof: error: {message}", err=True)


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Turn the project's errors into one line and an exit code; Ctrl-C into exit 130."""
    try:
        yield
    except EdgeprofError as err:
        _err(str(err))
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        typer.echo("edgeprof: interrupted; the report keeps every round that finished", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None


# --- shared options -------------------------------------------------------------------------------------
Algo = Annotated[str, typer.Option("--algo", "-a", help="Algorithm: pflego or fedavg (see `edgeprof algos`).")]
Tau = Annotated[int, typer.Option(help="Local steps per client round (tau >= 1).")]
Rounds = Annotated[int, typer.Option(help="Federated rounds to run.")]
Clients = Annotated[int, typer.Option(help="Number of clients I the data is partitioned across.")]
Participation = Annotated[float, typer.Option(
    help="Fraction of clients per round, in (0, 1]: r = round(pi*I) clients (fixed) or each with probability pi.")]
Mode = Annotated[str, typer.Option("--participation-mode", help="fixed (r clients per round) or bernoulli.")]
Dataset = Annotated[str, typer.Option(
    help="digits (embedded, default), synthetic, mnist, fashion-mnist, emnist, cifar10, omniglot.")]
Degree = Annotated[str, typer.Option(
    help="Degree of personalization: high (K=2), medium (K=C/2), none (all classes), group (omniglot alphabets).")]
Backbone = Annotated[str, typer.Option(help="Backbone from Table 4: mlp, cnn-cifar, cnn-omniglot.")]
DataDir = Annotated[Optional[Path], typer.Option("--data-dir", help="Folder with the data files (file-based sets).")]
Seed = Annotated[int, typer.Option(help="Seed for data, partition, initialization and client sampling.")]
Out = Annotated[Path, typer.Option("--out", "-o", help="Folder the report (CSV + JSON sidecar) is written to.")]
Threads = Annotated[Optional[int], typer.Option(help="Intra-op threads for torch and ONNX Runtime.")]


def _progress_callback(enabled: bool, total: int, label: str):
    """A rich progress bar advanced once per round; a no-op context when disabled."""
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=False)


def _run_with_progress(cfg) -> "object":
    from edgeprof.simulate import run

    with _progress_callback(cfg.progress, cfg.rounds, cfg.algo) as bar:
        if bar is None:
            return run(cfg)
        task = bar.add_task(f"{cfg.algo} tau={cfg.tau}", total=cfg.rounds)
        return run(cfg, progress=lambda done, total: bar.update(task, completed=done))


def _print_summary(csv_path: Path) -> None:
    from rich.console import Console

    from edgeprof.report.summary import overhead_fraction, render, summarize
    from edgeprof.report.writer import read_report

    report = read_report(csv_path)
    Console().print(render(summarize(report)))
    overhead = overhead_fraction(report)
    if overhead is not None:
        typer.echo(f"profiler overhead: {overhead:.3%} of the client rounds' wall time")
    typer.echo(f"report: {csv_path}")


@app.command()
def measure(
    algo: Algo = "pflego",
    tau: Tau = 50,
    rounds: Rounds = 3,
    clients: Clients = 10,
    participation: Participation = 0.2,
    participation_mode: Mode = "fixed",
    dataset: Dataset = "digits",
    degree: Degree = "high",
    backbone: Backbone = "cnn-omniglot",
    data_dir: DataDir = None,
    seed: Seed = 0,
    out: Out = Path("profiles"),
    threads: Threads = None,
    beta: Annotated[Optional[float], typer.Option(help="Client step size (default: the paper's Tables 6-7).")] = None,
    rho: Annotated[Optional[float], typer.Option(help="PFLEGO's server step size (default: Tables 6-7).")] = None,
    server_optimizer: Annotated[str, typer.Option(help="PFLEGO server optimizer: adam or sgd.")] = "adam",
    engine: Annotated[Optional[str], typer.Option(help="Client engine (pflego: onnx).")] = None,
    run_name: Annotated[Optional[str], typer.Option(help="Report file name (default: algo-tau-time-id).")] = None,
    evaluate: Annotated[bool, typer.Option(help="Also record training loss and test accuracy every round.")] = False,
    samples: Annotated[int, typer.Option(help="Synthetic data: total number of samples.")] = 2000,
    classes: Annotated[int, typer.Option(help="Synthetic data: number of classes.")] = 10,
    cpu_watts: Annotated[Optional[float], typer.Option(help="Watts per busy core for the CPU estimate.")] = None,
    jetson_hz: Annotated[float, typer.Option(help="Sampling rate of the Jetson power rails, Hz.")] = 10.0,
    idle_seconds: Annotated[float, typer.Option(help="Seconds of idle baseline before the run (0: off).")] = 0.0,
    country: Annotated[Optional[str], typer.Option(help="ISO country code for the carbon intensity (e.g. FRA).")] = None,
    region: Annotated[Optional[str], typer.Option(help="Region within the country, where data exists.")] = None,
    carbon_intensity: Annotated[Optional[float], typer.Option(help="Carbon intensity in gCO2e/kWh (overrides).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run federated rounds in-process and write a CSV energy report with a JSON sidecar."""
    from edgeprof.config import RunConfig

    with guard():
        cfg = RunConfig(algo=algo, tau=tau, rounds=rounds, clients=clients, participation=participation,
                        participation_mode=participation_mode, dataset=dataset, degree=degree, backbone=backbone,
                        data_dir=data_dir, seed=seed, out=out, threads=threads, beta=beta, rho=rho,
                        server_optimizer=server_optimizer, engine=engine, run_name=run_name, evaluate=evaluate,
                        synthetic_samples=samples, synthetic_classes=classes, cpu_watts=cpu_watts, jetson_hz=jetson_hz,
                        idle_seconds=idle_seconds, country=country, region=region,
                        carbon_intensity=carbon_intensity, progress=progress)
        result = _run_with_progress(cfg)
        _print_summary(result.csv_path)


@app.command()
def export(
    backbone: Backbone = "cnn-omniglot",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the ONNX file.")] = Path("models"),
    seed: Seed = 0,
) -> None:
    """Export a backbone to ONNX (dynamic batch axis) under models/."""
    with guard():
        from edgeprof.config import BACKBONES
        from edgeprof.errors import ConfigError

        if backbone not in BACKBONES:
            raise ConfigError(f"unknown backbone {backbone!r}; choose one of: {', '.join(BACKBONES)}")
        from edgeprof.nn.backbones import build_backbone
        from edgeprof.nn.ort import export_backbone

        path = export_backbone(build_backbone(backbone, seed=seed), Path(out) / f"{backbone}.onnx")
        typer.echo(f"wrote {path}")


@app.command()
def algos() -> None:
    """List the algorithms, their profiled phases and engines."""
    from edgeprof.algorithms import ALGORITHMS

    for name, spec in ALGORITHMS.items():
        typer.echo(f"{name:10s} phases: {', '.join(spec.phases):40s} engines: {', '.join(spec.engines)}")


@app.command()
def summary(report: Annotated[Path, typer.Argument(help="A report CSV written by edgeprof.")]) -> None:
    """Print the summary table of an existing report."""
    with guard():
        _print_summary(report)


# --- doctor (meters) -------------------------------------------------------------------------------------
@app.command()
def doctor(
    cpu_watts: Annotated[Optional[float], typer.Option(help="Watts per busy core for the CPU estimate.")] = None,
) -> None:
    """List the energy meters found, what each measures and how; for each missing one, why and the fix."""
    with guard():
        from edgeprof.meters.doctor import doctor_report, render_doctor

        typer.echo(render_doctor(doctor_report(cpu_watts=cpu_watts)))


# --- train (baselines) ------------------------------------------------------------------------------------


# --- sweep and dashboard ----------------------------------------------------------------------------------


# --- flower -----------------------------------------------------------------------------------------------


def main() -> None:  # pragma: no cover - console entry point alternative
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
