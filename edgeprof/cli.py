"""The ``edgeprof`` command line: thin typer commands; options -> one RunConfig -> one run function.

Every :class:`~edgeprof.errors.EdgeprofError` becomes one line on stderr and its documented exit code in
exactly one place, :func:`guard`; click's own usage errors (``--tau abc``, an unknown option) become the
same one line with exit 2 in :class:`OneLineErrors`. Exit codes: 2 config, 3 data, 4 output, 5 meter,
6 model, 7 report, 8 claim not shown (``sweep --check``), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import click
import typer
from typer.core import TyperGroup

from edgeprof.errors import EdgeprofError

INTERRUPTED_EXIT = 130
USAGE_EXIT = 2


def _err(message: str) -> None:
    typer.echo(f"edgeprof: error: {' '.join(message.split())}", err=True)


def _dedupe(message: str) -> str:
    """Drop a repeated "Did you mean ...?" (typer and click both add one to an unknown command)."""
    return re.sub(r"( Did you mean [^?]*\?)\1+", r"\1", message)


class OneLineErrors(TyperGroup):
    """The command group; click's usage errors print one ``edgeprof: error:`` line instead of a box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as err:
            if not standalone_mode:
                raise
            command = f" (see 'edgeprof {err.ctx.info_name} --help')" if getattr(err, "ctx", None) and \
                err.ctx.parent is not None else " (see 'edgeprof --help')"
            _err(_dedupe(err.format_message()) + command)
            sys.exit(USAGE_EXIT if isinstance(err, click.UsageError) else err.exit_code)
        except click.Abort:
            if not standalone_mode:
                raise
            typer.echo("edgeprof: aborted", err=True)
            sys.exit(1)
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


class _NoteHandler(logging.Handler):
    """Print the package's notes (``edgeprof`` logger, warnings and up) as ``edgeprof: note: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"edgeprof: note: {record.getMessage()}", err=True)


def _show_notes() -> None:
    logger = logging.getLogger("edgeprof")
    if not any(isinstance(h, _NoteHandler) for h in logger.handlers):
        logger.addHandler(_NoteHandler(logging.WARNING))
        logger.propagate = False


def _version(value: bool) -> None:
    if value:
        from edgeprof import __version__

        typer.echo(f"edgeprof {__version__}")
        raise typer.Exit()


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Profile the energy and time of personalized federated learning rounds on this device.")


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print edgeprof's version and exit.")] = False) -> None:
    _show_notes()


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
Algo = Annotated[str, typer.Option("--algo", "-a", help="Algorithm: pflego, fedavg, fedprox, fedper, fedrep, fedbabu, "
                                                  "ditto, fedrecon, fedsim, fedalt (see `edgeprof algos`).")]
Tau = Annotated[int, typer.Option(help="Local steps per client round (tau >= 1).")]
Rounds = Annotated[int, typer.Option(help="Federated rounds to run.")]
Clients = Annotated[int, typer.Option(help="Number of clients I the data is partitioned across.")]
Participation = Annotated[float, typer.Option(
    help="Fraction of clients per round, in (0, 1]: r = round(pi*I) clients (fixed) or each with probability pi.")]
Mode = Annotated[str, typer.Option("--participation-mode", help="fixed (r clients per round) or bernoulli.")]
Dataset = Annotated[str, typer.Option(
    help="digits (embedded with scikit-learn), synthetic (generated), or a local folder of: mnist, fashion-mnist, "
         "emnist, cifar10, omniglot.")]
Degree = Annotated[str, typer.Option(
    help="Degree of personalization: high (K=2), medium (K=C/2), none (all classes), group (omniglot alphabets).")]
Backbone = Annotated[str, typer.Option(help="Backbone from Table 4: mlp, cnn-cifar, cnn-omniglot.")]
DataDir = Annotated[Optional[Path], typer.Option("--data-dir", help="Folder with the data files (file-based sets).")]
Seed = Annotated[int, typer.Option(help="Seed for data, partition, initialization and client sampling.")]
Out = Annotated[Path, typer.Option("--out", "-o", help="Folder the report (CSV + JSON sidecar) is written to.")]
Threads = Annotated[Optional[int], typer.Option(help="Intra-op threads for torch and ONNX Runtime.")]
Beta = Annotated[Optional[float], typer.Option(help="Client step size (default: the paper's Tables 6-7).")]
Rho = Annotated[Optional[float], typer.Option(help="Server step size of pflego/fedrecon (default: Tables 6-7).")]
Mu = Annotated[Optional[float], typer.Option(help="FedProx's mu and Ditto's lambda (default: Table 6).")]
ServerOptimizer = Annotated[str, typer.Option(help="pflego/fedrecon server optimizer: adam or sgd.")]
Samples = Annotated[int, typer.Option("--synthetic-samples", help="--dataset synthetic only: total number of samples.")]
Classes = Annotated[int, typer.Option("--synthetic-classes", help="--dataset synthetic only: number of classes.")]
CpuWatts = Annotated[Optional[float], typer.Option(help="Watts per busy core for the CPU estimate.")]
Country = Annotated[Optional[str], typer.Option(help="ISO country code for the carbon intensity (e.g. FRA).")]
CarbonIntensity = Annotated[Optional[float], typer.Option(help="Carbon intensity in gCO2e/kWh (overrides).")]
ShowProgress = Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")]


def _run_with_progress(cfg, display=None) -> "object":
    """Run ``cfg`` with a set-up line and a bar of rounds that starts once set-up is over."""
    from edgeprof.progress import Display
    from edgeprof.simulate import run

    own = display is None
    display = Display(cfg.progress) if own else display
    with display if own else contextlib.nullcontext():
        bar: list = []

        def progress(done: int, total: int) -> None:
            if not bar:  # progress(0, total): set-up is over, the bar's clock starts now
                bar.append(display.bar(f"{cfg.algo} tau={cfg.tau}", total))
            if bar[0] is not None:
                bar[0](done, total)

        return run(cfg, progress=progress, stage=display.stage)


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


def _print_final_eval(csv_path: Path) -> None:
    from edgeprof.report.writer import read_report

    evals = read_report(csv_path).where(kind="eval")
    if evals:
        last = max(evals, key=lambda r: int(r["round"]))
        typer.echo(f"after round {last['round']}: training loss {float(last['train_loss']):.4g}, "
                   f"test accuracy {float(last['test_accuracy']):.2%}")


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
    beta: Beta = None,
    rho: Rho = None,
    mu: Mu = None,
    server_optimizer: ServerOptimizer = "adam",
    engine: Annotated[Optional[str], typer.Option(help="Client engine (pflego: onnx or torch-reuse).")] = None,
    run_name: Annotated[Optional[str], typer.Option(help="Report file name (default: algo-tau-time-id).")] = None,
    evaluate: Annotated[bool, typer.Option(help="Also record training loss and test accuracy every round.")] = False,
    synthetic_samples: Samples = 2000,
    synthetic_classes: Classes = 10,
    cpu_watts: CpuWatts = None,
    jetson_hz: Annotated[float, typer.Option(help="Sampling rate of the Jetson power rails, Hz.")] = 10.0,
    idle_seconds: Annotated[float, typer.Option(help="Seconds of idle baseline before the run (0: off).")] = 0.0,
    country: Country = None,
    region: Annotated[Optional[str], typer.Option(help="Region within the country, where data exists.")] = None,
    carbon_intensity: CarbonIntensity = None,
    progress: ShowProgress = True,
) -> None:
    """Run federated rounds in-process and write a CSV energy report with a JSON sidecar."""
    from edgeprof.config import RunConfig

    with guard():
        cfg = RunConfig(algo=algo, tau=tau, rounds=rounds, clients=clients, participation=participation,
                        participation_mode=participation_mode, dataset=dataset, degree=degree, backbone=backbone,
                        data_dir=data_dir, seed=seed, out=out, threads=threads, beta=beta, rho=rho, mu=mu,
                        server_optimizer=server_optimizer, engine=engine, run_name=run_name, evaluate=evaluate,
                        synthetic_samples=synthetic_samples, synthetic_classes=synthetic_classes, cpu_watts=cpu_watts,
                        jetson_hz=jetson_hz, idle_seconds=idle_seconds, country=country, region=region,
                        carbon_intensity=carbon_intensity, progress=progress)
        result = _run_with_progress(cfg)
        _print_summary(result.csv_path)
        if cfg.evaluate:
            _print_final_eval(result.csv_path)


@app.command()
def export(
    backbone: Backbone = "cnn-omniglot",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the ONNX file.")] = Path("models"),
    seed: Seed = 0,
) -> None:
    """Export a backbone to ONNX (dynamic batch axis) under models/."""
    with guard():
        from edgeprof.config import BACKBONES, check_choice

        check_choice("backbone", backbone, BACKBONES)
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
    cpu_watts: CpuWatts = None,
) -> None:
    """List the energy meters found, what each measures and how; for each missing one, why and the fix."""
    with guard():
        from edgeprof.config import check_meter_options
        from edgeprof.meters.doctor import doctor_report, render_doctor

        check_meter_options(cpu_watts=cpu_watts)
        typer.echo(render_doctor(doctor_report(cpu_watts=cpu_watts)))


# --- train (baselines) ------------------------------------------------------------------------------------
@app.command()
def train(
    algos: Annotated[str, typer.Option("--algos", "-a", help="Comma-separated algorithms, trained one after "
                                       "another (see `edgeprof algos`).")] = "pflego",
    tau: Tau = 50,
    rounds: Rounds = 50,
    clients: Clients = 20,
    participation: Participation = 0.2,
    participation_mode: Mode = "fixed",
    dataset: Dataset = "digits",
    degree: Degree = "high",
    backbone: Backbone = "mlp",
    data_dir: DataDir = None,
    seed: Seed = 0,
    out: Out = Path("profiles"),
    threads: Threads = None,
    beta: Beta = None,
    rho: Rho = None,
    mu: Mu = None,
    server_optimizer: ServerOptimizer = "adam",
    target_accuracy: Annotated[float, typer.Option(help="Test accuracy the energy-to-target column counts to.")] = 0.9,
    run_name: Annotated[Optional[str], typer.Option(help="Report name prefix: <name>-<algo> (default: automatic).")] = None,
    synthetic_samples: Samples = 2000,
    synthetic_classes: Classes = 10,
    cpu_watts: CpuWatts = None,
    country: Country = None,
    carbon_intensity: CarbonIntensity = None,
    progress: ShowProgress = True,
) -> None:
    """Train algorithms for T rounds (loss of eq. (1), test accuracy, client energy every round); one report each."""
    from edgeprof.config import RunConfig
    from edgeprof.errors import ConfigError

    with guard():
        names = [a.strip() for a in algos.split(",") if a.strip()]
        if not names:
            raise ConfigError("--algos needs at least one algorithm")
        if not 0.0 < target_accuracy <= 1.0:
            raise ConfigError(f"target accuracy must be in (0, 1], got {target_accuracy}")
        base = RunConfig(algo=names[0], tau=tau, rounds=rounds, clients=clients, participation=participation,
                         participation_mode=participation_mode, dataset=dataset, degree=degree, backbone=backbone,
                         data_dir=data_dir, seed=seed, out=out, threads=threads, beta=beta, rho=rho, mu=mu,
                         server_optimizer=server_optimizer, run_name=run_name, evaluate=True,
                         synthetic_samples=synthetic_samples, synthetic_classes=synthetic_classes, cpu_watts=cpu_watts, country=country,
                         carbon_intensity=carbon_intensity, progress=progress)
        _train_and_report(base, names, target_accuracy)


def _train_and_report(base, names, target: float) -> None:
    from rich.console import Console

    from edgeprof.report.writer import read_report
    from edgeprof.train import energy_to_target, render, train_configs

    from edgeprof.progress import Display

    configs = train_configs(base, names)  # every config is validated before the first run starts
    results, paths = [], []
    with Display(base.progress) as display:  # one bar per algorithm, each started after its own set-up
        for cfg in configs:
            result = _run_with_progress(cfg, display)
            paths.append(result.csv_path)
            results.extend(energy_to_target(read_report(result.csv_path), target))
    Console().print(render(results))
    for path in paths:
        typer.echo(f"report: {path}")




# --- sweep and dashboard ----------------------------------------------------------------------------------
def _csv_list(value: str, kind: type, name: str) -> tuple:
    """Parse a comma-separated option; ConfigError names the option on a bad item."""
    from edgeprof.errors import ConfigError

    try:
        return tuple(kind(v.strip()) for v in value.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--{name} must be a comma-separated list of {kind.__name__}s, got {value!r}") from None


@app.command()
def sweep(
    algos: Annotated[str, typer.Option(
        help="Comma-separated algorithms, each `algo` or `algo:engine`.")] = "pflego,fedavg",
    taus: Annotated[str, typer.Option(help="Comma-separated local step counts tau.")] = "1,5,10,25,50,100",
    repeats: Annotated[int, typer.Option(help="Measured rounds per (algorithm, tau) cell.")] = 3,
    engines: Annotated[str, typer.Option(help="Engines to run each plain algo with, where it has them "
                                              "(e.g. onnx,torch-reuse); default: its first engine.")] = "",
    dataset: Dataset = "synthetic",
    backbone: Backbone = "cnn-omniglot",
    samples_per_client: Annotated[int, typer.Option(help="Training samples kept per client (0: all).")] = 600,
    clients: Annotated[int, typer.Option(help="Clients; every one takes part in every measured round.")] = 1,
    degree: Degree = "high",
    data_dir: DataDir = None,
    seed: Seed = 0,
    out: Out = Path("profiles"),
    threads: Threads = None,
    max_baseline_tau: Annotated[Optional[int], typer.Option(
        help="Skip cells of algorithms other than pflego above this tau (they dominate the time).")] = None,
    warmup: Annotated[bool, typer.Option(help="One unrecorded round per algorithm before measuring.")] = True,
    run_name: Annotated[Optional[str], typer.Option(help="Report file name (default: sweep-time-id).")] = None,
    check: Annotated[bool, typer.Option(help="Exit 8 unless pflego is flat and fedavg linear in tau.")] = False,
    check_metric: Annotated[str, typer.Option(help="Metric --check judges: wall_s, cpu_s or energy_j.")] = "wall_s",
    cpu_watts: CpuWatts = None,
    country: Country = None,
    carbon_intensity: CarbonIntensity = None,
    progress: ShowProgress = True,
) -> None:
    """Measure one client round against tau for several algorithms, interleaved, into one report; fit and judge."""
    with guard():
        from edgeprof.analysis import METRICS
        from edgeprof.config import RunConfig
        from edgeprof.errors import ConfigError
        from edgeprof.sweep import SweepConfig

        base = RunConfig(dataset=dataset, backbone=backbone, clients=clients, participation=1.0, degree=degree,
                         data_dir=data_dir, seed=seed, out=out, threads=threads, run_name=run_name,
                         cpu_watts=cpu_watts, country=country, carbon_intensity=carbon_intensity,
                         progress=progress)
        cfg = SweepConfig(base=base, algos=_csv_list(algos, str, "algos"), engines=_csv_list(engines, str, "engines"),
                          taus=_csv_list(taus, int, "taus"), repeats=repeats,
                          samples_per_client=samples_per_client or None, max_baseline_tau=max_baseline_tau,
                          warmup=warmup)
        if check_metric not in METRICS:
            raise ConfigError(f"unknown --check-metric {check_metric!r}; choose one of: {', '.join(METRICS)}")
        if check and not {"pflego", "fedavg"} <= {v.algo for v in cfg.variants()}:
            raise ConfigError("--check needs both pflego and fedavg in --algos")
        _sweep_and_report(cfg, check=check, check_metric=check_metric)


def _sweep_and_report(cfg, *, check: bool, check_metric: str) -> None:
    from rich.console import Console

    from edgeprof.analysis import ClaimNotShown, analyze, check_claim, render
    from edgeprof.report.writer import read_report
    from edgeprof.progress import Display
    from edgeprof.sweep import cell_weights, plan_cells, run_sweep

    weights = cell_weights(plan_cells(cfg))
    with Display(cfg.base.progress) as display:
        bar: list = []

        def progress(done: int, total: int) -> None:
            if not bar:  # progress(0, total): set-up and warm-up are over
                bar.append(display.weighted_bar("sweep cells", weights))
            if bar[0] is not None:
                bar[0](done, total)

        result = run_sweep(cfg, progress=progress, stage=display.stage)
    analysis = analyze(read_report(result.csv_path).rows)
    console = Console()
    for table in render(analysis):
        console.print(table)
    typer.echo(f"report: {result.csv_path}")
    if check:
        problems = check_claim(analysis, check_metric)
        if problems:
            raise ClaimNotShown("claim not shown: " + "; ".join(problems))
        typer.echo(f"check: pflego is flat and fedavg linear in tau ({check_metric})")


@app.command()
def dashboard(
    reports: Annotated[list[Path], typer.Argument(help="Report CSVs (their JSON sidecars are read too).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    title: Annotated[str, typer.Option(help="Title of the page.")] = "edgeprof report",
) -> None:
    """Write one self-contained HTML page (plots, fits, verdicts; opens offline) from one or more reports."""
    with guard():
        from edgeprof.report.dashboard import write_dashboard

        path = write_dashboard(reports, output, title=title)
        typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


# --- flower -----------------------------------------------------------------------------------------------
FlowerDir = Annotated[Path, typer.Argument(help="Folder of the Flower app to write (created if missing).")]
RoundTimeout = Annotated[float, typer.Option(help="Seconds the server waits for a round's replies.")]
NodeWait = Annotated[float, typer.Option(help="Seconds the server waits for every partition to have a SuperNode.")]
TotalSamples = Annotated[int, typer.Option(help="sum_j N_j of the federation when known (0: sum over known clients).")]


def _flower_cfg(**options):
    from edgeprof.config import RunConfig

    return RunConfig(progress=False, **options)


def flower_commands(folder: Path, clients: int, port: int) -> str:
    """The commands that start the deployment the README describes (its steps 2-4), ready to copy."""
    return (f"2. server:    flower-superlink --host 0.0.0.0 --port {port} --ssl-ca-certfile ca.crt "
            f"--ssl-certfile server.pem --ssl-keyfile server.key --disable-runtime-dependency-installation\n"
            f"3. device i:  flower-supernode --superlink <server>:{port} --root-certificates ca.crt "
            f"--node-config \"partition-id=<i> num-partitions={clients}\"\n"
            f"4. submit:    add to $FLWR_HOME/config.toml (default ~/.flwr/config.toml):\n"
            f"[superlink.prod]\n"
            f"address = \"<server>:{port}\"\n"
            f"root-certificates = \"/path/ca.crt\"\n"
            f"             then: flwr run {folder} prod --stream")


@app.command("flower-app-dir")
def flower_app_dir(
    folder: FlowerDir = Path("edgeprof-flower-app"),
    algo: Algo = "pflego", tau: Tau = 50, rounds: Rounds = 3, clients: Clients = 10,
    participation: Participation = 0.2, participation_mode: Mode = "fixed", dataset: Dataset = "digits",
    degree: Degree = "high", backbone: Backbone = "cnn-omniglot", data_dir: DataDir = None, seed: Seed = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Report folder on the server (made absolute).")] = Path("profiles"),
    threads: Threads = None,
    run_name: Annotated[Optional[str], typer.Option(help="Report file name (default: algo-tau-time-id).")] = None,
    round_timeout: RoundTimeout = 600.0, node_wait: NodeWait = 300.0, total_samples: TotalSamples = 0,
    port: Annotated[int, typer.Option(help="The SuperLink's port in the printed commands.")] = 9093,
) -> None:
    """Write a Flower app folder (pyproject.toml) running edgeprof's ServerApp and ClientApp; print the commands."""
    with guard():
        from edgeprof.errors import ConfigError
        from edgeprof.flower.config import FlowerSettings, to_run_config, write_app_dir

        if not 1 <= port <= 65535:
            raise ConfigError(f"port must be in 1..65535, got {port}")
        cfg = _flower_cfg(algo=algo, tau=tau, rounds=rounds, clients=clients, participation=participation,
                          participation_mode=participation_mode, dataset=dataset, degree=degree, backbone=backbone,
                          data_dir=data_dir, seed=seed, out=Path(out).resolve(), threads=threads, run_name=run_name)
        path = write_app_dir(folder, to_run_config(cfg, FlowerSettings(round_timeout, node_wait, total_samples)))
        typer.echo(f"1. wrote {path}\n{flower_commands(folder, clients, port)}")


@app.command("flower-simulate")
def flower_simulate(
    algo: Algo = "pflego", tau: Tau = 50, rounds: Rounds = 3, clients: Clients = 10,
    participation: Participation = 0.2, participation_mode: Mode = "fixed", dataset: Dataset = "digits",
    degree: Degree = "high", backbone: Backbone = "cnn-omniglot", data_dir: DataDir = None, seed: Seed = 0,
    out: Out = Path("profiles"), threads: Threads = 1,
    run_name: Annotated[Optional[str], typer.Option(help="Report file name (default: algo-tau-time-id).")] = None,
    client_cpus: Annotated[float, typer.Option(help="CPUs reserved per virtual client (Ray).")] = 1.0,
    client_gpus: Annotated[float, typer.Option(help="GPUs (fractions allowed) per virtual client.")] = 0.0,
    round_timeout: RoundTimeout = 600.0,
) -> None:
    """Run many clients on this machine with Flower's simulation engine (per-client energy is attribution)."""
    with guard():
        from edgeprof.flower.config import FlowerSettings
        from edgeprof.flower.simulation import simulate

        cfg = _flower_cfg(algo=algo, tau=tau, rounds=rounds, clients=clients, participation=participation,
                          participation_mode=participation_mode, dataset=dataset, degree=degree, backbone=backbone,
                          data_dir=data_dir, seed=seed, out=Path(out).resolve(), threads=threads, run_name=run_name)
        folder = simulate(cfg, FlowerSettings(round_timeout_s=round_timeout, simulation=True),
                          client_cpus=client_cpus, client_gpus=client_gpus)
        typer.echo(f"reports in {folder}")


def main() -> None:  # pragma: no cover - console entry point alternative
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
