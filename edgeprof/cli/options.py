"""The command line's options, declared once: choices read from the registries, help panels, one RunConfig.

Each option every command shares is one ``Annotated`` alias below, with its help and its panel; a command
lists the aliases it takes and their defaults (the meter options are built from the meter registry by
:func:`with_meter_options`: their back-ends declare them alone). Choices (algorithms, data sets, backbones, ...)
are read from their registries when help is printed or a value is parsed, never copied here, so an algorithm added to
:data:`edgeprof.algorithms.ALGORITHMS` (even with :func:`~edgeprof.algorithms.register` at run time) is offered
and accepted with no change to the CLI. A refused choice is the config's own line (``unknown algorithm 'x';
choose one of: ...``) as a usage error: exit 2. :func:`run_config` turns a command's parsed options
into its :class:`~edgeprof.config.RunConfig`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping, Optional, Sequence

import typer

# --- help panels ------------------------------------------------------------------------------------------
MODEL = "Model and algorithm"
FEDERATION = "Federation"
DATA = "Data"
ENERGY = "Energy and carbon"
OUTPUT = "Output"
SWEEP = "Sweep"
FLOWER = "Flower"


# --- choices from the registries --------------------------------------------------------------------------
def _algorithms() -> tuple[str, ...]:
    from edgeprof.algorithms import ALGORITHMS

    return tuple(ALGORITHMS)  # names only: looking up a spec would import its module


def _owned(module: str, name: str) -> Callable[[], tuple[str, ...]]:
    """A reader of the names ``name`` that the layer ``module`` owns (read when asked, never copied here)."""
    def read() -> tuple[str, ...]:
        import importlib

        return getattr(importlib.import_module(module), name)

    return read


def _metrics() -> tuple[str, ...]:
    from edgeprof.report.analysis import GPU_METRICS, METRICS

    return METRICS + GPU_METRICS


class RegistryChoice:
    """One name from a registry, or with ``many`` a comma-separated list of them (parsed to a tuple).

    It is the option's ``parser``: typer calls it with the text given on the command line, and a refused name is
    a :class:`typer.BadParameter` carrying the config's own line, which typer words as ``Invalid value for
    '--algo': unknown algorithm 'x'; choose one of: ...`` (exit 2). ``what`` names the choice in that line, as
    :func:`edgeprof.config.check_choice` words it; ``key`` picks the part of an item that must be a registry name
    (``algo:engine`` items are checked on ``algo``). :meth:`metavar` is the help's ``[a | b | c]``, read from the
    registry when the command line is parsed (:func:`refresh_metavars`), never copied at import.
    """

    def __init__(self, what: str, choices: Callable[[], Sequence[str]], *, many: bool = False,
                 key: Callable[[str], str] = lambda item: item) -> None:
        self.what, self.choices, self.many, self.key = what, choices, many, key
        self.__name__ = what  # typer < 0.26 wraps a parser in click's FuncParamType, which names it so
        self.placeholder = f"<{what}{'s' if many else ''}>"
        _CHOICES[self.placeholder] = self

    def metavar(self) -> str:
        names = " | ".join(self.choices())  # spaced: a narrow help column wraps between names, not inside one
        return f"[{names}],..." if self.many else f"[{names}]"

    def check(self, value: str) -> None:
        from edgeprof.config import check_choice

        check_choice(self.what, self.key(value), tuple(self.choices()))

    def __call__(self, value: Any) -> Any:
        from edgeprof.errors import ConfigError

        if not isinstance(value, str):  # already parsed (a default given as a tuple)
            return value
        items = tuple(v.strip() for v in value.split(",") if v.strip()) if self.many else (value,)
        if self.many and not items:
            raise typer.BadParameter(f"needs at least one {self.what}")
        try:
            for item in items:
                self.check(item)
        except ConfigError as err:
            raise typer.BadParameter(str(err)) from None
        return items if self.many else value

    def complete(self, incomplete: str) -> list[str]:
        """Shell completion: the registry's names that start with what was typed."""
        return [c for c in self.choices() if c.startswith(incomplete)]


class BackboneChoice(RegistryChoice):
    """A named backbone from the registry, or your own as ``package.module:factory`` / ``path/to/file.py:factory``.

    Only the form of a factory spec is checked while parsing; importing it and building the model is the run's
    set-up (ConfigError, exit 2, when it names nothing importable; ModelError, exit 6, when the model is refused).
    """

    def __init__(self) -> None:
        super().__init__("backbone", _owned("edgeprof.nn.names", "BACKBONES"))

    def metavar(self) -> str:
        from edgeprof.nn.names import FACTORY_FORM

        return f"[{' | '.join((*self.choices(), FACTORY_FORM))}]"

    def check(self, value: str) -> None:
        from edgeprof.nn.names import check_backbone

        check_backbone(value)


#: every choice by the placeholder its options are declared with, until :func:`refresh_metavars` replaces it
_CHOICES: dict = {}


def refresh_metavars(command: Any) -> None:
    """Give every option of ``command`` (a click command or group, typer's own) that takes a registry choice the
    choice's metavar as the registry holds it now: an algorithm registered at run time is offered in the help."""
    for param in getattr(command, "params", ()):
        choice = getattr(param, "edgeprof_choice", None) or _CHOICES.get(param.metavar)
        if choice is not None:
            param.edgeprof_choice = choice
            param.metavar = choice.metavar()
    for sub in getattr(command, "commands", {}).values():
        refresh_metavars(sub)


ALGORITHM = RegistryChoice("algorithm", _algorithms)
ALGORITHM_LIST = RegistryChoice("algorithm", _algorithms, many=True)
VARIANT_LIST = RegistryChoice("algorithm", _algorithms, many=True, key=lambda item: item.partition(":")[0])
DATASET = RegistryChoice("dataset", _owned("edgeprof.data.names", "DATASETS"))
BACKBONE = BackboneChoice()
DEGREE = RegistryChoice("degree of personalization", _owned("edgeprof.data.names", "DEGREES"))
PARTICIPATION_MODE = RegistryChoice("participation mode", _owned("edgeprof.algorithms.participants",
                                                                 "PARTICIPATION_MODES"))
SERVER_OPTIMIZER = RegistryChoice("server optimizer", _owned("edgeprof.algorithms.aggregation", "SERVER_OPTIMIZERS"))
EVAL_PROTOCOL = RegistryChoice("evaluation protocol", _owned("edgeprof.algorithms.contract", "EVAL_PROTOCOLS"))
SPLIT = RegistryChoice("split", _owned("edgeprof.data.names", "SPLITS"))
METRIC = RegistryChoice("metric", _metrics)


def _opt(*names: str, panel: Optional[str], choice: Optional[RegistryChoice] = None, **kwargs: Any) -> Any:
    if choice is not None:
        kwargs.update(parser=choice, metavar=choice.placeholder, autocompletion=choice.complete)
    return typer.Option(*names, rich_help_panel=panel, **kwargs)


# --- model and algorithm ----------------------------------------------------------------------------------
Algo = Annotated[str, _opt("--algo", "-a", panel=MODEL, choice=ALGORITHM,
                           help="Algorithm (phases and engines: `edgeprof algos`).")]
Algos = Annotated[tuple, _opt("--algos", "-a", panel=MODEL, choice=ALGORITHM_LIST,
                              help="Comma-separated algorithms, trained one after another.")]
Variants = Annotated[tuple, _opt("--algos", "-a", panel=MODEL, choice=VARIANT_LIST,
                                 help="Comma-separated algorithms, each `algo` or `algo:engine`.")]
Engines = Annotated[str, _opt(panel=MODEL, help="Comma-separated engines to run each plain algo with, where it has "
                                              "them (`edgeprof algos`); default: its first engine.")]
Engine = Annotated[Optional[str], _opt(panel=MODEL, help="Client engine, one of the algorithm's (`edgeprof algos`; "
                                                      "default: its first).")]
Tau = Annotated[int, _opt(panel=MODEL, help="Local steps per client round (tau >= 1).")]
Backbone = Annotated[str, _opt(panel=MODEL, choice=BACKBONE,
                               help="Backbone: Table 4's, a torchvision model (extra 'vision'), or your own as "
                                    "package.module:factory or path/to/file.py:factory (docs: Your own backbone).")]
Beta = Annotated[Optional[float], _opt(panel=MODEL, help="Client step size (default: the paper's Tables 6-7).")]
Rho = Annotated[Optional[float], _opt(panel=MODEL, help="Server step size of algorithms with a server optimizer (default: Tables 6-7).")]
Mu = Annotated[Optional[float], _opt(panel=MODEL, help="Proximal / regularisation coefficient: FedProx's mu, Ditto's lambda (default: Table 6).")]
ServerOptimizer = Annotated[str, _opt(panel=MODEL, choice=SERVER_OPTIMIZER,
                                      help="Server optimizer of algorithms that have one (`edgeprof algos`).")]
Threads = Annotated[Optional[int], _opt(panel=MODEL, help="Intra-op threads for torch and ONNX Runtime.")]
Execution = Annotated[str, _opt(panel=MODEL, help="How torch's forwards and backwards run: auto (this node's calibration, "
                                                "else the built-in table), calibrate (time the candidates now and "
                                                "store the fastest), or FORMAT:CHUNK, e.g. channels_last:64 or "
                                                "contiguous:all (docs: Measuring, execution plans).")]

Device = Annotated[str, _opt(panel=MODEL, help="Where torch runs the rounds: auto (CUDA when torch sees a GPU, "
                                             "else cpu), cpu, cuda or cuda:N (docs: GPUs).")]
Tf32 = Annotated[bool, _opt(panel=MODEL, help="On a CUDA GPU, run float32 matmuls and convolutions in TF32 (10-bit "
                                            "mantissa; labelled in the sidecar); refused on the CPU. Default: "
                                            "FP32 (docs: GPUs).")]

# --- federation -------------------------------------------------------------------------------------------
Rounds = Annotated[int, _opt(panel=FEDERATION, help="Federated rounds to run.")]
Clients = Annotated[int, _opt(panel=FEDERATION, help="Number of clients I the data is partitioned across.")]
Participation = Annotated[float, _opt(
    panel=FEDERATION, help="Fraction of clients per round, in (0, 1]: r = round(pi*I) clients (fixed; int(I*pi) "
                           "with --split paper) or each with probability pi (bernoulli).")]
Mode = Annotated[str, _opt("--participation-mode", panel=FEDERATION, choice=PARTICIPATION_MODE,
                           help="How the round's clients are drawn (see --participation).")]
Seed = Annotated[int, _opt(panel=FEDERATION, help="Seed for data, partition, initialization and client sampling.")]

SweepClients = Annotated[int, _opt("--clients", panel=FEDERATION,
                                   help="Clients; every one takes part in every measured round.")]

# --- data -------------------------------------------------------------------------------------------------
Dataset = Annotated[str, _opt(panel=DATA, choice=DATASET,
                              help="Data set: digits is embedded (scikit-learn), synthetic is generated, the "
                                   "others are read from --data-dir.")]
ShapeDataset = Annotated[str, _opt("--dataset", panel=DATA, choice=DATASET,
                                   help="Data set whose image shape a backbone outside Table 4 is built for "
                                        "(nothing is read).")]
Degree = Annotated[str, _opt(panel=DATA, choice=DEGREE,
                             help="Degree of personalization, classes per client: high K=2, medium K=C/2, "
                                  "none all, group by omniglot alphabet.")]
Split = Annotated[str, _opt(panel=DATA, choice=SPLIT,
                            help="Split and client sampling: balanced (classes from a balanced stream, train and "
                                 "test pooled, 25% per class per client to test, r = round(pi*I)) or paper (the "
                                 "paper authors' code: classes drawn per client, the official test split dealt "
                                 "to test sets, r = int(I*pi)).")]
DataDir = Annotated[Optional[Path], _opt("--data-dir", panel=DATA, path_type=Path,
                                         help="Folder with the data files (file-based sets).")]
Samples = Annotated[int, _opt("--synthetic-samples", panel=DATA,
                              help="--dataset synthetic only: total number of samples.")]
Classes = Annotated[int, _opt("--synthetic-classes", panel=DATA, help="--dataset synthetic only: number of classes.")]
TestFraction = Annotated[float, _opt(panel=DATA, help="Share of each class a client keeps for test, in (0, 1) "
                                                      "(--split balanced; --split paper: of a data set without "
                                                      "official test files).")]
SamplesPerClient = Annotated[int, _opt(panel=DATA, help="Training samples kept per client (0: all).")]

# --- energy and carbon ------------------------------------------------------------------------------------
IdleSeconds = Annotated[float, _opt(panel=ENERGY, help="Seconds of idle baseline before the run (0: off).")]
HoldSeconds = Annotated[float, _opt(panel=ENERGY, help="Hold each client window this long: the client's round "
                                                       "repeats inside it and the row is one round's mean "
                                                       "(held_rounds), for rounds shorter than a meter's update "
                                                       "period, as on GPUs (0: off; not with --evaluate).")]
Country = Annotated[Optional[str], _opt(panel=ENERGY, help="ISO country code for the carbon intensity (e.g. FRA).")]
Region = Annotated[Optional[str], _opt(panel=ENERGY, help="Region within the country, where data exists.")]
CarbonIntensity = Annotated[Optional[float], _opt(panel=ENERGY, help="Carbon intensity in gCO2e/kWh (overrides).")]
MeterSetting = Annotated[Optional[list[str]], _opt("--meter-setting", panel=ENERGY,
                                                   help="NAME=VALUE: a setting a meter back-end declares (repeat "
                                                        "for more; edgeprof doctor lists the meters).")]

Trace = Annotated[bool, _opt(panel=ENERGY, help="Also write the power trace: every meter sampled at --trace-hz "
                                               "while a window is open, into <run>.trace.parquet (CSV without "
                                               "pyarrow) beside the report (docs: Power over time).")]
TraceHz = Annotated[float, _opt(panel=ENERGY, help="Samples per second of --trace (1 to 1000).")]


def with_meter_options(command: Callable) -> Callable:
    """``command`` with one option per meter option of the registered back-ends (:class:`MeterOption
    <edgeprof.meters.base.MeterOption>`: ``--<key>``, its type, default and help, in the energy panel before the
    command's first energy option), received in the command's ``**meter_options``: the CLI names no meter setting,
    each is declared by its back-end alone. The command's ``ctx.params`` hold them by name for :func:`run_config`."""
    import inspect

    from edgeprof.meters.registry import options

    signature = inspect.signature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    # the default None, shown as the back-end's: an option left out must not override --meter-setting NAME=VALUE
    added = [inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                               annotation=Annotated[Optional[o.type], _opt(
                                   f"--{o.key}", panel=ENERGY, show_default=False,
                                   help=o.help if o.default is None else f"{o.help} Default: {o.default:g}.")])
             for o in options()]
    at = next((i for i, p in enumerate(params) if _panel(p.annotation) == ENERGY), len(params))
    command.__signature__ = signature.replace(parameters=params[:at] + added + params[at:])
    return command


def _panel(annotation: Any) -> Optional[str]:
    """The help panel of an option declared as ``Annotated[..., typer.Option(...)]`` (None for anything else)."""
    return next((getattr(m, "rich_help_panel", None) for m in getattr(annotation, "__metadata__", ())), None)


# --- output: --out is a folder in every command -----------------------------------------------------------
def out_option(what: str) -> Any:
    """``--out/-o``: the folder a command writes ``what`` to (every command: a folder, never a file)."""
    return _opt("--out", "-o", panel=OUTPUT, path_type=Path, help=f"Folder {what} is written to (created if missing).")


Out = Annotated[Path, out_option("the report (CSV + JSON sidecar)")]
ModelOut = Annotated[Path, out_option("the ONNX file <backbone>.onnx")]
ServerOut = Annotated[Path, out_option("the report on the server (made absolute)")]
PageOut = Annotated[Path, out_option("the HTML page")]
RunName = Annotated[Optional[str], _opt(panel=OUTPUT, help="Report file name (default: algo-tau-time-id).")]
RunPrefix = Annotated[Optional[str], _opt("--run-name", panel=OUTPUT,
                                          help="Report name prefix: <name>-<algo> (default: automatic).")]
SweepName = Annotated[Optional[str], _opt("--run-name", panel=OUTPUT,
                                          help="Report file name (default: sweep-time-id).")]
PageName = Annotated[Optional[str], _opt(panel=OUTPUT, help="Page file name in --out, .html added (default: the "
                                                          "report's name for one report, else dashboard).")]
PageFile = Annotated[Optional[Path], _opt("--output", panel=OUTPUT, path_type=Path,
                                          help="Deprecated: the HTML file to write; use --out and --name.")]
Title = Annotated[str, _opt(panel=OUTPUT, help="Title of the page.")]
TargetAccuracy = Annotated[float, _opt(panel=OUTPUT, help="Test accuracy the energy-to-target column counts to.")]
TrainTaus = Annotated[Optional[str], _opt("--taus", panel=MODEL, help=(
    "Comma-separated local step counts to train each algorithm at (instead of --tau); the table names the tau that "
    "reaches --target-accuracy for the fewest client joules."))]
TrainSeeds = Annotated[Optional[str], _opt("--seeds", panel=FEDERATION, help=(
    "Comma-separated seeds to train every (algorithm, tau) with (instead of --seed); figures to target are medians "
    "with a 95% t interval over them."))]
CostFrom = Annotated[Optional[Path], _opt("--cost-from", panel=OUTPUT, help=(
    "A sweep report of another device: also project client joules to target there (rounds measured here x its "
    "fitted J per client round at the same tau), labelled PROJECTION."))]
Evaluate = Annotated[bool, _opt(panel=OUTPUT, help="Also record training loss and test accuracy every round.")]
EvalProtocol = Annotated[str, _opt(panel=OUTPUT, choice=EVAL_PROTOCOL, help=(
    "How accuracy is measured: global (every client after the server step, mean of their accuracies) or "
    "paper (the round's sampled clients right after their local update, summed correct / summed test "
    "samples, as the PFLEGO authors' code and Table 1)."))]
ShowProgress = Annotated[bool, _opt("--progress/--no-progress", panel=OUTPUT, help="Show a progress bar.")]

# --- sweep ------------------------------------------------------------------------------------------------
Taus = Annotated[str, _opt(panel=SWEEP, help="Comma-separated local step counts tau.")]
Repeats = Annotated[int, _opt(panel=SWEEP, help="Measured rounds per (algorithm, tau) cell.")]
MaxBaselineTau = Annotated[Optional[int], _opt(
    panel=SWEEP, help="Skip cells of algorithms other than pflego above this tau (they dominate the time).")]
Warmup = Annotated[bool, _opt(panel=SWEEP, help="One unrecorded round per algorithm before measuring.")]
Check = Annotated[bool, _opt(panel=SWEEP, help="Exit 8 unless pflego is flat and fedavg linear in tau.")]
CheckMetric = Annotated[str, _opt(panel=SWEEP, choice=METRIC, help="Metric --check judges.")]

# --- flower -----------------------------------------------------------------------------------------------
RoundTimeout = Annotated[float, _opt(panel=FLOWER, help="Seconds the server waits for a round's replies.")]
NodeWait = Annotated[float, _opt(panel=FLOWER, help="Seconds the server waits for every partition to have a "
                                                  "SuperNode.")]
TotalSamples = Annotated[int, _opt(panel=FLOWER, help="sum_j N_j of the federation when known (0: sum over known "
                                                    "clients).")]
Port = Annotated[int, _opt(panel=FLOWER, help="The SuperLink's port in the printed commands; device i gets "
                                                "port + 1 + i.")]


def _client_cpus(value: Any) -> int:
    """``--client-cpus`` as Flower's simulation takes it (:func:`edgeprof.flower.simulation.whole_cpus`): a fraction
    is refused in one line saying why."""
    from edgeprof.errors import ConfigError
    from edgeprof.flower.simulation import whole_cpus

    try:
        number = int(str(value))
    except ValueError:
        try:
            number = float(str(value))
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a whole number") from None
    try:
        return whole_cpus(number)
    except ConfigError as err:
        raise typer.BadParameter(str(err)) from None


ClientCpus = Annotated[int, _opt(panel=FLOWER, parser=_client_cpus, metavar="INTEGER",
                                 help="Whole CPUs reserved per virtual client (Flower's simulation takes integers).")]
ClientGpus = Annotated[Optional[float], _opt(panel=FLOWER, help="GPUs (fractions allowed) each virtual client reserves "
                                           "(default: 1 for rounds on CUDA, else 0; docs: GPUs).")]


def given_options(ctx: Any) -> tuple[str, ...]:
    """The parameters of a command that its user gave (on the command line or through the environment), not
    left at their defaults: ``ctx`` is the command's click context. The sources are compared by name: typer 0.26
    and later run on their own copy of click, whose ParameterSource is not click's own (which another package may
    have installed beside it)."""
    typed = {"COMMANDLINE", "ENVIRONMENT"}
    return tuple(name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", None) in typed)


def run_config(params: Mapping[str, Any], *, given: Sequence[str] = (), algos: Optional[Sequence[str]] = None,
               **fixed: Any):
    """The RunConfig of a command: each parsed option named like a RunConfig field, then ``fixed`` over them.

    ``params`` is the command's ``ctx.params``; options that are not run settings (``--port``, ``--check``)
    are left out. ConfigError (exit 2) for the first invalid setting, as :func:`edgeprof.config.validate` says.
    ``given`` names the options the user gave (:func:`given_options`): one that none of ``algos`` (default: the
    config's algorithm) uses is refused (:func:`edgeprof.config.check_used`), and so is ``--trace-hz`` without
    ``--trace`` and ``--trace`` at 0 Hz (the rate counts only with ``--trace``).
    """
    from edgeprof.config import ENERGY_NAMES, EnergySettings, RunConfig, check_given, check_used, parse_meter_settings
    from edgeprof.meters.registry import options

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    values = {**params, **fixed}
    trace = bool(values.pop("trace", False))
    _check_trace(trace, values.get("trace_hz"), "trace_hz" in given)
    values["trace_hz"] = values.get("trace_hz") if trace else None
    energy = {k: values[k] for k in (*ENERGY_NAMES, *(o.name for o in options())) if values.get(k) is not None}
    meters = parse_meter_settings(values.get("meter_setting") or ())
    cfg = RunConfig(**{k: v for k, v in values.items() if k in fields},
                    energy=EnergySettings.of(meter_settings=meters, **energy))
    check_used(list(algos or (cfg.algo,)), given)
    check_given(cfg, given)
    return cfg


def _check_trace(trace: bool, hz: Optional[float], hz_given: bool) -> None:
    """ConfigError with one line for a trace rate that would silently trace nothing: ``--trace-hz`` given
    without ``--trace``, or ``--trace`` with a rate of 0."""
    from edgeprof.errors import ConfigError

    if hz_given and not trace:
        raise ConfigError(f"--trace-hz {hz:g} sets the rate of --trace, which was not given; add --trace "
                          "(or leave --trace-hz out)")
    if trace and hz == 0:
        raise ConfigError("--trace --trace-hz 0 would record no trace; give a rate in 1..1000 Hz "
                          "(or leave --trace out)")


# --- trace (one window of a report's power trace) ---------------------------------------------------------
def _window_kinds() -> tuple[str, ...]:
    from edgeprof.report.trace_view import TRACED_KINDS

    return TRACED_KINDS


WINDOW_KIND = RegistryChoice("window kind", _window_kinds)
TraceRound = Annotated[Optional[int], _opt("--round", panel=None, help="The round whose window to show (default: "
                                                                       "the median-energy window of every round).")]
TraceKind = Annotated[Optional[str], _opt("--kind", panel=None, choice=WINDOW_KIND,
                                          help="Which windows: client rounds, server steps, a monitor's own windows "
                                               "or its eval windows (default: client rounds where the report has "
                                               "them, else your own code's windows).")]
TraceWindow = Annotated[Optional[str], _opt("--window", panel=None,
                                            help="The windows of this name (a monitor's window names, e.g. epoch; "
                                                 "default: the name traced most often).")]
TraceClient = Annotated[Optional[int], _opt("--client", panel=None, help="The client whose window to show.")]
DashboardTraceRound = Annotated[Optional[int], _opt(
    "--trace-round", panel=OUTPUT, help="Power over time: draw each algorithm's traced client window of this round "
                                        "(default: its median-energy window of all rounds).")]
DashboardTraceClient = Annotated[Optional[int], _opt("--trace-client", panel=OUTPUT,
                                                     help="Power over time: draw this client's traced window.")]
