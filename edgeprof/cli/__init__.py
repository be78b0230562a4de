"""The ``edgeprof`` command line: thin typer commands; options -> one RunConfig -> one run function.

A command lists the options it takes, each declared once in :mod:`edgeprof.cli.options` (help, help panel,
choices read from the registries), and hands ``ctx.params`` to :func:`edgeprof.cli.options.run_config`.
``--out/-o`` is a folder in every command. How a command ends (one line and an exit code, never a traceback) is
:mod:`edgeprof.cli.exits`. Exit codes: 2 config, 3 data, 4 output, 5 meter, 6 model, 7 report (also a Flower
simulation that did not complete), 8 claim not shown (``sweep --check``), 128 + the signal for a run stopped by a signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgeprof.cli import exits, options as o
from edgeprof.cli.exits import OneLineErrors, guard, show_notes

_log = logging.getLogger("edgeprof.cli")


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
    show_notes()


def _run_with_progress(cfg, display=None, sidecar=None) -> "object":
    """Run ``cfg`` with a set-up line and a bar of rounds that starts once set-up is over."""
    from edgeprof.cli.progress import Display
    from edgeprof.rounds.simulate import run

    own = display is None
    display = Display(cfg.progress) if own else display
    with display if own else contextlib.nullcontext():
        bar: list = []

        def progress(finished: int, total: int) -> None:
            if not bar:  # progress(0, total): set-up is over, the bar's clock starts now
                bar.append(display.bar(f"{cfg.algo} tau={cfg.tau}", total))
            if bar[0] is not None:
                bar[0](finished, total)

        return run(cfg, progress=progress, stage=display.stage, sidecar=sidecar)


def _reports_only(paths: list[Path]) -> list[Path]:
    """``paths`` without the power traces of the reports among them (a ``*.csv`` glob takes an interrupted run's
    ``<run>.trace.csv`` too: its report reads it), each left out said in a note; ReportError for a trace given
    without its report."""
    from edgeprof.errors import ReportError

    given = {p.resolve() for p in paths}
    kept = []
    for path in paths:
        name = path.name
        if not name.endswith(".trace.csv"):
            kept.append(path)
            continue
        report = path.with_name(name[:-len(".trace.csv")] + ".csv")
        if report.resolve() not in given:
            raise ReportError(f"{path} is the power trace of {report}, not a report: give {report} (edgeprof trace "
                              f"{report} prints its trace)")
        _log.warning(f"left out {path}: the power trace of {report}, which is read with it")
    return kept


def _console():
    """A rich console for tables: the terminal's width, or 140 columns when writing to a file or pipe (where
    rich would otherwise squeeze numbers into 80 columns and cut them)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=140)


def _read(csv_path: Path) -> "object":
    """The report at ``csv_path`` (read once: its notes once); ReportError, after the line that says how the run
    ended where it ended before any row (a Flower run no node served)."""
    from edgeprof.errors import ReportError
    from edgeprof.report.summary import printable, rowless_ending
    from edgeprof.report.writer import read_report

    try:
        return read_report(csv_path)
    except ReportError:
        ending = rowless_ending(csv_path)
        if ending is not None:
            typer.echo(printable(ending))
        raise


def _print_summary(report) -> "object":
    """Print the summary of ``report`` (as :func:`_read` read it); return it."""
    from edgeprof.report.summary import (carbon_total, ending_line, flower_lines, gpu_summary,
                                         held_rounds, host_table, invalid_rows, overhead_fraction, printable, render,
                                         measured_noun, run_lines, short_phases, short_rows, summarize,
                                         tau_fits, unresolved_words)

    csv_path = report.path
    console = _console()
    console.print(render(summarize(report)))
    for line in run_lines(report):  # the data sets and backbones the rows name, a monitor's run labels
        typer.echo(printable(line))
    for part in tau_fits(report):  # a sweep: cost against tau, fitted, and the ratios to PFLEGO
        console.print(part)
    for part in gpu_summary(report):  # on a GPU: its own meter's joules, net of idle, their verdicts
        console.print(part)
    hosts = host_table(report)  # a Flower run: its hosts, their data, rounds and replies not used
    if hosts is not None:
        console.print(hosts)
    ending = ending_line(report)  # how the run ended, as its sidecar says
    if ending is not None:
        typer.echo(printable(ending))
    for line in flower_lines(report):  # a Flower run: what was rejected or left out, and its notes
        typer.echo(printable(line))
    invalid, rows = invalid_rows(report)
    if invalid:
        typer.echo(f"energy: {invalid} of {rows} rows have an implausible reading (method invalid, no joules; "
                   f"the sidecar's meters.invalid, or a note above, says why); medians and totals leave them out")
    held = held_rounds(report)
    if held:
        typer.echo(f"held: each client window repeated its round (median {held[1]:g} rounds a window, "
                   f"--hold-seconds); its row is the mean of one round")
    short, rows, period = short_rows(report)
    if short:
        typer.echo(f"energy: {short} of {rows} rows {unresolved_words(report, period)}: their joules are not "
                   f"resolved (short_window); sweeps' energy fits leave them out; in measure and sweep, "
                   f"--hold-seconds holds each client window long enough")
    phases, clients = short_phases(report)
    if phases:
        typer.echo("energy: " + ", ".join(f"{printable(name)} in {n} of {clients}" for name, n in phases.items())
                   + f" client rows {unresolved_words(report)}: those phases' joules are not resolved "
                     "(short_phases), and their medians above include them")
    carbon = carbon_total(report)
    if carbon is not None:
        source = (report.sidecar.get("energy", {}).get("carbon") or {}).get("source", "") if isinstance(
            report.sidecar, dict) else ""
        typer.echo(f"carbon: {carbon[0]:.4g} g CO2e over {carbon[1]} {measured_noun(report)}"
                   + (f" ({printable(source)})" if source else ""))
    overhead = overhead_fraction(report)
    if overhead is not None:
        typer.echo(f"profiler overhead ({overhead[1]}): {overhead[0]:.3%} of the client rounds' wall time")
    typer.echo(f"report: {csv_path}")
    return report


def _print_final_eval(csv_path: Path) -> None:
    from edgeprof.report.writer import read_report

    evals = [r for r in read_report(csv_path).where(kind="eval") if r.get("round")]
    if evals:
        last = max(evals, key=lambda r: int(r["round"]))
        accuracy = last.get("test_accuracy")  # empty: no test sample to score
        typer.echo(f"after round {last['round']}: training loss {float(last['train_loss']):.4g}, "
                   + (f"test accuracy {float(accuracy):.2%}" if accuracy else "no test sample to score"))


def _measure_and_report(cfg) -> None:
    """Run ``cfg``, then print the report's summary (and, with ``--evaluate``, the last evaluation)."""
    result = _run_with_progress(cfg)  # a stop from here on names its report (edgeprof.signals.report_closed)
    _print_summary(_read(result.csv_path))
    if cfg.evaluate:
        _print_final_eval(result.csv_path)


@app.command()
@o.with_meter_options
def measure(
    ctx: typer.Context,
    algo: o.Algo = "pflego", engine: o.Engine = None, tau: o.Tau = 50, backbone: o.Backbone = "cnn-omniglot",
    beta: o.Beta = None, rho: o.Rho = None, mu: o.Mu = None, server_optimizer: o.ServerOptimizer = "adam",
    threads: o.Threads = None, execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    rounds: o.Rounds = 3, clients: o.Clients = 10, participation: o.Participation = 0.2,
    participation_mode: o.Mode = "fixed", seed: o.Seed = 0,
    dataset: o.Dataset = "digits", degree: o.Degree = "high", split: o.Split = "balanced",
    test_fraction: o.TestFraction = 0.25,
    data_dir: o.DataDir = None,
    synthetic_samples: o.Samples = 2000, synthetic_classes: o.Classes = 10,
    idle_seconds: o.IdleSeconds = 0.0,
    country: o.Country = None, region: o.Region = None, carbon_intensity: o.CarbonIntensity = None,
    meter_setting: o.MeterSetting = None, trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
    hold_seconds: o.HoldSeconds = 0.0,
    out: o.Out = Path("profiles"), run_name: o.RunName = None, evaluate: o.Evaluate = False,
    eval_protocol: o.EvalProtocol = "global",
    progress: o.ShowProgress = True, **meter_options,
) -> None:
    """Run federated rounds in-process and write a CSV energy report with a JSON sidecar."""
    with guard():
        _measure_and_report(o.run_config(ctx.params, given=o.given_options(ctx)))


@app.command()
def export(ctx: typer.Context, backbone: o.Backbone = "cnn-omniglot", seed: o.Seed = 0,
           dataset: o.ShapeDataset = "digits", out: o.ModelOut = Path("models")) -> None:
    """Export a backbone to ONNX (dynamic batch axis) under models/, checked against torch first."""
    with guard():
        from edgeprof.config import check_int
        from edgeprof.errors import ConfigError
        from edgeprof.nn.names import TABLE4_BACKBONES  # not torch yet: it loads below, with the stops held

        check_int("seed", seed)  # the bounds measure's --seed has
        if backbone in TABLE4_BACKBONES and "dataset" in o.given_options(ctx):
            raise ConfigError(f"--dataset sets the input shape of a torchvision or your own backbone; {backbone} "
                              "(Table 4's) takes its paper's shape whatever the data: leave --dataset out")
        from edgeprof.host import load_native_libraries

        load_native_libraries()
        from edgeprof.nn.backbones import build_backbone, file_stem, input_shape_for
        from edgeprof.nn.ort import export_backbone

        module = build_backbone(backbone, input_shape_for(backbone, dataset), seed=seed)
        path = export_backbone(module, out / f"{file_stem(backbone)}.onnx")
        typer.echo(f"wrote {path} (input {'x'.join(map(str, module.input_shape))}, {module.feature_dim} features)")


@app.command()
def algos() -> None:
    """List the algorithms as each declares itself: phases, engines, server step, personal state, evaluation."""
    from edgeprof.algorithms import ALGORITHMS

    for name, spec in ALGORITHMS.items():
        typer.echo(f"{name:10s} phases: {', '.join(spec.phases):40s} engines: {', '.join(spec.engines)}")
        typer.echo(f"{'':10s} server step: {spec.server_kind}; personal: {spec.personal or 'nothing'}; "
                   f"evaluated as: {spec.evaluation}")


@app.command()
def summary(reports: Annotated[list[Path], typer.Argument(
        metavar="REPORT...", help="Report CSVs written by edgeprof (several: the reports of one `train` run).")]) -> None:
    """Print the summary table of existing reports; for reports of `edgeprof train`, the energy to the target
    accuracy per (algorithm, tau) over their seeds and each algorithm's energy-optimal tau."""
    with guard():
        from edgeprof.cli.training import print_to_target, train_summary
        from edgeprof.report.writer import Distinct

        once = Distinct()  # one that repeats an earlier one is refused, not counted twice: before anything is printed
        read = [once.add(_read(path)) for path in _reports_only(reports)]
        to_target = train_summary(read)
        for report in read:
            _print_summary(report)
        if to_target is not None:
            print_to_target(_console(), *to_target)


@app.command()
def trace(report: Annotated[Path, typer.Argument(help="A report CSV written with --trace.")],
          round_: o.TraceRound = None, kind: o.TraceKind = None, client: o.TraceClient = None,
          window: o.TraceWindow = None) -> None:
    """Print one window's power per phase from a report's power trace (default: its median-energy client window, or
    for a report of your own code its median-energy window of the name traced most often)."""
    with guard():
        from edgeprof.report.trace_view import notes, table, view

        shown = view(report, round=round_, kind=kind, client=client, name=window)
        _console().print(table(shown))
        for line in notes(shown):
            typer.echo(line)


# --- doctor (meters) -------------------------------------------------------------------------------------
@app.command()
@o.with_meter_options
def doctor(meter_setting: o.MeterSetting = None, **meter_options) -> None:
    """List the energy meters found, what each measures and how; for each missing one, why and the fix."""
    with guard():
        from edgeprof.config import EnergySettings, parse_meter_settings
        from edgeprof.meters.doctor import doctor_report, render_doctor

        energy = EnergySettings.of(meter_settings=parse_meter_settings(meter_setting or ()), **meter_options)
        typer.echo(render_doctor(doctor_report(**energy.meter_settings)))


# --- train (baselines) ------------------------------------------------------------------------------------
@app.command()
@o.with_meter_options
def train(
    ctx: typer.Context,
    algos: o.Algos = "pflego", tau: o.Tau = 50, backbone: o.Backbone = "mlp",
    beta: o.Beta = None, rho: o.Rho = None, mu: o.Mu = None, server_optimizer: o.ServerOptimizer = "adam",
    threads: o.Threads = None, execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    rounds: o.Rounds = 50, clients: o.Clients = 20, participation: o.Participation = 0.2,
    participation_mode: o.Mode = "fixed", seed: o.Seed = 0,
    dataset: o.Dataset = "digits", degree: o.Degree = "high", split: o.Split = "balanced",
    test_fraction: o.TestFraction = 0.25,
    data_dir: o.DataDir = None,
    synthetic_samples: o.Samples = 2000, synthetic_classes: o.Classes = 10,
    country: o.Country = None, carbon_intensity: o.CarbonIntensity = None,
    meter_setting: o.MeterSetting = None, trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
    out: o.Out = Path("profiles"), run_name: o.RunPrefix = None, target_accuracy: o.TargetAccuracy = 0.9,
    eval_protocol: o.EvalProtocol = "global", taus: o.TrainTaus = None, seeds: o.TrainSeeds = None,
    cost_from: o.CostFrom = None,
    progress: o.ShowProgress = True, **meter_options,
) -> None:
    """Train algorithms for T rounds (loss of eq. (1), test accuracy, client energy every round); one report per
    (algorithm, tau, seed); the energy to the target accuracy, and with --taus the tau that needs the fewest joules."""
    with guard():
        from edgeprof.cli.training import tau_and_seed_lists
        from edgeprof.errors import ConfigError

        if not 0.0 < target_accuracy <= 1.0:
            raise ConfigError(f"target accuracy must be in (0, 1], got {target_accuracy}")

        given = o.given_options(ctx)
        tau_list, seed_list = tau_and_seed_lists(given, taus, seeds, _csv_list)
        base = o.run_config(ctx.params, given=given, algos=algos, algo=algos[0], evaluate=True)
        costs = None
        if cost_from is not None:
            from edgeprof.report.to_target import read_costs

            costs = read_costs(cost_from, algos, tau_list or (base.tau,), base.backbone)
        # each algorithm's run keeps only the rates it uses
        _train_and_report(base, algos, target_accuracy, tau_list, seed_list, costs)


def _train_and_report(base, names, target: float, taus=(), seeds=(), costs=None) -> None:

    from edgeprof.cli.progress import Display
    from edgeprof.report.writer import read_report
    from edgeprof.cli.training import TO_TARGET_PROTOCOL, print_to_target
    from edgeprof.rounds.train import energy_to_target, render, train_configs

    configs = train_configs(base, names, taus, seeds)  # every config is validated before the first run starts
    protocol = {"target_accuracy": target, "eval_protocol": base.eval_protocol, "algos": list(names),
                "taus": sorted({c.tau for c in configs}), "seeds": sorted({c.seed for c in configs}),
                "rounds": base.rounds, "protocol": TO_TARGET_PROTOCOL}
    results, paths = [], []
    with Display(base.progress) as display:  # one bar per run, each started after its own set-up
        for cfg in configs:
            result = _run_with_progress(cfg, display, sidecar={"train": protocol})
            paths.append(result.csv_path)
            results.extend(energy_to_target(read_report(result.csv_path), target))
    if len(configs) == len(names):  # one tau, one seed: the table as before
        _console().print(render(results))
    print_to_target(_console(), results, target, base.eval_protocol, costs, always=len(configs) > len(names))
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
@o.with_meter_options
def sweep(
    ctx: typer.Context,
    algos: o.Variants = "pflego,fedavg", engines: o.Engines = "", backbone: o.Backbone = "cnn-omniglot",
    threads: o.Threads = None, execution: o.Execution = "auto", device: o.Device = "auto", tf32: o.Tf32 = False,
    clients: o.SweepClients = 1, seed: o.Seed = 0,
    dataset: o.Dataset = "synthetic", degree: o.Degree = "high", split: o.Split = "balanced",
    test_fraction: o.TestFraction = 0.25,
    data_dir: o.DataDir = None,
    samples_per_client: o.SamplesPerClient = 600,
    taus: o.Taus = "1,5,10,25,50,100", repeats: o.Repeats = 3, max_baseline_tau: o.MaxBaselineTau = None,
    warmup: o.Warmup = True, check: o.Check = False, check_metric: o.CheckMetric = "wall_s",
    country: o.Country = None, carbon_intensity: o.CarbonIntensity = None,
    meter_setting: o.MeterSetting = None, trace: o.Trace = False, trace_hz: o.TraceHz = 50.0,
    hold_seconds: o.HoldSeconds = 0.0, idle_seconds: o.IdleSeconds = 0.0,
    out: o.Out = Path("profiles"), run_name: o.SweepName = None, progress: o.ShowProgress = True,
    **meter_options,
) -> None:
    """Measure one client round against tau for several algorithms, interleaved, into one report; fit and judge."""
    with guard():
        from edgeprof.errors import ConfigError
        from edgeprof.rounds.sweep import SweepConfig

        cfg = SweepConfig(base=o.run_config(ctx.params, given=o.given_options(ctx), participation=1.0), algos=algos,
                          engines=_csv_list(engines, str, "engines"), taus=_csv_list(taus, int, "taus"),
                          repeats=repeats, samples_per_client=samples_per_client or None,
                          max_baseline_tau=max_baseline_tau, warmup=warmup)
        if check and not {"pflego", "fedavg"} <= {v.algo for v in cfg.variants()}:
            raise ConfigError("--check needs both pflego and fedavg in --algos")
        if "check_metric" in o.given_options(ctx) and not check:
            raise ConfigError(f"--check-metric {check_metric} says what --check judges, and --check was not given; "
                              "add --check (or leave it out)")
        if check:
            _check_metric_measurable(check_metric, cfg.base)
        _sweep_and_report(cfg, check=check, check_metric=check_metric)


def _check_metric_measurable(metric: str, base) -> None:
    """Refuse, before any cell runs, a --check on a GPU metric that this sweep cannot have: ``gpu_j`` is the joules
    of rounds on a GPU, ``gpu_net_j`` those net of an idle baseline (--idle-seconds)."""
    from edgeprof.errors import ConfigError
    from edgeprof.nn.compute import resolve_device
    from edgeprof.report.analysis import GPU_METRICS

    if metric not in GPU_METRICS:
        return
    if resolve_device(base.device) == "cpu":
        said = "" if base.device == "cpu" else f" (--device {base.device} is cpu here: torch sees no CUDA GPU)"
        raise ConfigError(f"--check-metric {metric} judges the joules of rounds on a GPU, and this sweep runs on the "
                          f"CPU{said}; use --check-metric energy_j, or run on a GPU")
    if metric == "gpu_net_j" and base.energy.idle_seconds <= 0:
        raise ConfigError("--check-metric gpu_net_j judges the GPU's joules net of its idle power, which needs an "
                          "idle baseline; add --idle-seconds 10 (or use --check-metric gpu_j)")


def _sweep_and_report(cfg, *, check: bool, check_metric: str) -> None:

    from edgeprof.report.analysis import TABLE_METRICS, ClaimNotShown, check_claim, render
    from edgeprof.cli.progress import Display
    from edgeprof.rounds.sweep import analyze_report, cell_weights, plan_cells, run_sweep

    weights = cell_weights(plan_cells(cfg))
    with Display(cfg.base.progress) as display:
        bar: list = []

        def progress(done: int, total: int) -> None:
            if not bar:  # progress(0, total): set-up and warm-up are over
                bar.append(display.weighted_bar("sweep cells", weights))
            if bar[0] is not None:
                bar[0](done, total)

        result = run_sweep(cfg, progress=progress, stage=display.stage)
    analysis, notes = analyze_report(result.csv_path)
    console = _console()
    for table in render(analysis, tuple(dict.fromkeys((*TABLE_METRICS, check_metric))) if check else TABLE_METRICS):
        console.print(table)  # with --check, the judged metric's fits too, named as judged (energy_j (ESTIMATE))
    for note in notes:  # on a GPU: how gpu_j was measured, its idle power
        typer.echo(note)
    typer.echo(f"report: {result.csv_path}")
    if check:
        problems = check_claim(analysis, check_metric)
        if problems:
            raise ClaimNotShown("claim not shown: " + "; ".join(problems))
        typer.echo(f"check: pflego is flat and fedavg linear in tau ({analysis.label_of(check_metric)})")


@app.command()
def dashboard(
    ctx: typer.Context,
    reports: Annotated[list[Path], typer.Argument(help="Report CSVs (their JSON sidecars are read too).")],
    out: o.PageOut = Path("profiles"), name: o.PageName = None, title: o.Title = "edgeprof report",
    output: o.PageFile = None, trace_round: o.DashboardTraceRound = None, trace_client: o.DashboardTraceClient = None,
) -> None:
    """Write one self-contained HTML page (plots, fits, verdicts; opens offline) from one or more reports."""
    with guard():
        from edgeprof.errors import ConfigError
        from edgeprof.report.dashboard import write_dashboard

        if any("\ud800" <= c <= "\udfff" for c in title):  # bytes the terminal's encoding could not decode
            raise ConfigError(f"--title {title!r} is not valid text in this terminal's encoding; give it in UTF-8")
        reports = _reports_only(reports)
        path = write_dashboard(reports, _page_path(reports, out, name, output, o.given_options(ctx)), title=title,
                               trace_round=trace_round, trace_client=trace_client)
        typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


def _page_path(reports: list[Path], out: Path, name: Optional[str], output: Optional[Path],
               given: tuple[str, ...]) -> Path:
    """``--out`` / ``--name``.html; the name defaults to the one report's, else ``dashboard``; ``given``: the options
    the user gave (one way to name the page, never two).

    The old spellings still name the file, with a note: ``--output FILE``, and ``-o`` given a ``.html`` path
    that is not a folder (``-o`` was ``--output`` before ``--out`` meant a folder in every command).
    """
    from edgeprof.errors import ConfigError

    if output is not None:
        if {"out", "name"} & set(given):
            raise ConfigError("--output names the page's file; --out and --name name its folder and file: give "
                              "one or the other")
        _log.warning("--output is deprecated; use --out FOLDER and --name NAME")
        return output
    if out.suffix.lower() == ".html" and not out.is_dir():
        if name is not None:
            raise ConfigError(f"--out {out} names a page, and --name another: give --out a folder")
        _log.warning(f"--out names a folder; writing the page to {out} as before (deprecated; use "
                     f"--out {out.parent} --name {out.stem})")
        return out
    stem = name or (reports[0].stem if len(reports) == 1 else "dashboard")
    if stem in (".", "..") or Path(stem).name != stem:
        raise ConfigError(f"--name must be a file name, not a path: {stem!r}")
    return out / (stem if stem.endswith(".html") else f"{stem}.html")


# --- flower (edgeprof.cli.flower) -------------------------------------------------------------------------
from edgeprof.cli import flower as _flower  # noqa: E402  (its commands take the options above)

app.command("flower-app-dir")(_flower.flower_app_dir)
app.command("flower-simulate")(_flower.flower_simulate)
app.command("flower-certs")(_flower.flower_certs)


def main() -> None:
    """The ``edgeprof`` console script (through :mod:`edgeprof.__main__`): :func:`edgeprof.cli.exits.run`."""
    exits.run(app)


if __name__ == "__main__":  # pragma: no cover
    main()
