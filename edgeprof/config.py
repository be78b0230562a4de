"""Run settings: one frozen dataclass, validated in one place.

Everything a run needs is in :class:`RunConfig`; the CLI builds one from its options and hands it to
:func:`edgeprof.rounds.simulate.run`. ``None`` for a learning rate means "the paper's default for this
dataset, degree and algorithm" (:mod:`edgeprof.algorithms.hyperparams`), resolved by :meth:`RunConfig.resolved`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from edgeprof.algorithms.aggregation import SERVER_OPTIMIZERS
from edgeprof.algorithms.contract import EVAL_PROTOCOLS
from edgeprof.algorithms.participants import PARTICIPATION_MODES
from edgeprof.data import names as data_names
from edgeprof.errors import ConfigError
from edgeprof.nn import names as nn_names


def algorithm_names() -> tuple[str, ...]:
    from edgeprof.algorithms import ALGORITHMS

    return tuple(ALGORITHMS)


@dataclass(frozen=True)
class EnergySettings:
    """How a run's energy is measured and priced: one value, composed into :class:`RunConfig` and
    :class:`edgeprof.session.measurement.MonitorConfig` and handed whole to the meters, the Flower mods and the CLI.

    ``meters``: the settings the meter back-ends declare (``Backend.settings`` in :mod:`edgeprof.meters`), name ->
    value (None: not set, the back-end's default; its name must still be declared: ``cpu_wats`` is a typo, refused
    in one line); each is checked by the back-end that declares it, so a new option of a meter is declared in its
    module and reaches ``--meter-setting NAME=VALUE``, the Flower node config and
    ``edgeprof.monitor(meter_settings=...)`` with no change elsewhere (and, declared as a
    :class:`~edgeprof.meters.base.MeterOption`, a flag, a Flower key and a keyword argument of its own). Kept as sorted
    pairs (the value is hashable: run configs are cache keys);
    :attr:`meter_settings` gives the mapping, and each meter option is answered by its name too
    (``energy.<option>``: the value given, else its back-end's default). ``idle_seconds``:
    the idle baseline measured before a run (0: none); ``country``, ``region``, ``carbon_intensity``: the
    carbon intensity (codecarbon's data, or the figure given). ``trace_hz``: the rate at which every meter is
    sampled while a window is open, into the run's power trace (0: no trace; ``--trace``,
    :mod:`edgeprof.measure.trace`).
    """

    meters: tuple = ()
    idle_seconds: float = 0.0
    country: Optional[str] = None
    region: Optional[str] = None
    carbon_intensity: Optional[float] = None
    trace_hz: float = 0.0

    def __post_init__(self) -> None:
        pairs = [(str(k), v) for k, v in (self.meters.items() if isinstance(self.meters, Mapping) else self.meters)]
        unset = [k for k, v in pairs if v is None]
        if unset:  # None is "not set", but a name no back-end declares is a typo even so (``cpu_wats=``)
            from edgeprof.meters.registry import check_names

            check_names(unset)
        meters = tuple(sorted((k, v) for k, v in pairs if v is not None))
        object.__setattr__(self, "meters", meters)
        check_energy_options(self)
        if meters:  # one form for one setting: a value equal to its back-end's default is no setting
            from edgeprof.meters.registry import settings as declared

            defaults = declared()
            object.__setattr__(self, "meters", tuple((k, v) for k, v in meters if defaults.get(k, object()) != v))

    @classmethod
    def of(cls, *, meter_settings: Optional[Mapping[str, Any]] = None, **given: Any) -> "EnergySettings":
        """The settings from the options every command shares: each meter option by its name (the registered
        back-ends' :class:`~edgeprof.meters.base.MeterOption`, None: not given), any other meter setting in
        ``meter_settings`` (None: not set), and this class's own fields; a meter option given overrides the same
        setting in ``meter_settings``, one not given leaves it. TypeError for a name that is neither."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"meters"}
        options = {k: v for k, v in given.items() if k not in fields}
        if options:
            from edgeprof.meters.registry import options as declared

            unknown = sorted(set(options) - {o.name for o in declared()})
            if unknown:
                raise TypeError(f"EnergySettings.of() got unexpected keyword argument(s) {', '.join(unknown)}")
        meters = {**(meter_settings or {}), **{k: v for k, v in options.items() if v is not None}}
        return cls(meters=meters, **{k: v for k, v in given.items() if k in fields})

    @property
    def meter_settings(self) -> dict[str, Any]:
        """The meter settings given, name -> value (the back-ends' defaults fill the others)."""
        return dict(self.meters)

    def __getattr__(self, name: str):  # energy.<meter option>: the value given, else the back-end's default
        option = meter_option(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return dict(self.__dict__.get("meters", ())).get(name, option.default)

    def to_dict(self) -> dict:
        return {"meters": self.meter_settings, "idle_seconds": self.idle_seconds, "country": self.country,
                "region": self.region, "carbon_intensity": self.carbon_intensity, "trace_hz": self.trace_hz}


def parse_meter_settings(words: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` words (``--meter-setting``) as a mapping; a number is read as one, an empty value as None
    (not set), anything else kept as text. ConfigError with one line for a word without ``=`` (the names are
    checked where the settings are built, :class:`EnergySettings`, whatever their values)."""
    out: dict[str, Any] = {}
    for word in words:
        name, sep, value = str(word).partition("=")
        _check(bool(sep) and bool(name.strip()), f"meter setting must be NAME=VALUE, got {word!r}")
        try:
            out[name.strip().replace("-", "_")] = float(value) if value.strip() else None
        except ValueError:
            out[name.strip().replace("-", "_")] = value
    return out


def meter_option(name: str):
    """The meter option ``name`` of a registered back-end (:func:`edgeprof.meters.registry.options`), else None."""
    if name.startswith("_"):  # no option is private; copy and pickle ask for dunder names before a value is built
        return None
    from edgeprof.meters.registry import options

    return next((o for o in options() if o.name == name), None)


#: the energy settings' own names, that a RunConfig answers too (``cfg.country`` is ``cfg.energy.country``), as it
#: answers each meter option (:func:`meter_option`)
ENERGY_NAMES = ("idle_seconds", "country", "region", "carbon_intensity", "trace_hz")


@dataclass(frozen=True)
class RunConfig:
    """Settings of one federated run (``measure`` or ``train``); its energy settings are ``energy``."""

    algo: str = "pflego"
    tau: int = 50
    rounds: int = 3
    clients: int = 10
    participation: float = 0.2
    participation_mode: str = "fixed"
    dataset: str = "digits"
    degree: str = "high"
    split: str = "balanced"
    backbone: str = "cnn-omniglot"
    data_dir: Optional[Path] = None
    synthetic_samples: int = 2000
    synthetic_classes: int = 10
    test_fraction: float = 0.25
    seed: int = 0
    out: Path = Path("profiles")
    run_name: Optional[str] = None
    threads: Optional[int] = None
    beta: Optional[float] = None
    rho: Optional[float] = None
    mu: Optional[float] = None
    server_optimizer: str = "adam"
    engine: Optional[str] = None
    execution: str = "auto"
    #: where torch runs (:mod:`edgeprof.nn.compute`): ``auto`` is cuda where torch sees a GPU, else cpu
    device: str = "auto"
    #: float32 matmuls and cuDNN convolutions in TF32 on a CUDA GPU (``--tf32``; refused on the CPU); FP32 otherwise
    tf32: bool = False
    evaluate: bool = False
    eval_protocol: str = "global"
    #: seconds each client window holds: the client's round repeats inside its window until this long has passed
    #: (at least once), and the row gives the mean of one round (``held_rounds``); 0: one round per window
    hold_seconds: float = 0.0
    energy: EnergySettings = dataclasses.field(default_factory=lambda: EnergySettings())
    progress: bool = True

    def __post_init__(self) -> None:
        validate(self)

    def __getattr__(self, name: str):  # cfg.country, cfg.<meter option>, ...: the energy settings' (read only)
        if name in ENERGY_NAMES or meter_option(name) is not None:
            return getattr(self.energy, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def sampled_per_round(self) -> float:
        """r of the paper: the expected number of participating clients per round."""
        if self.participation_mode == "fixed":
            from edgeprof.algorithms.participants import clients_per_round

            return float(clients_per_round(self.clients, self.participation, self.participant_rounding))
        return self.participation * self.clients

    @property
    def participant_rounding(self) -> str:
        """How r follows from pi*I (:data:`edgeprof.algorithms.participants.ROUNDINGS`): ``floor`` with the paper split."""
        return "floor" if self.split == "paper" else "round"

    def resolved(self) -> "RunConfig":
        """A copy with every learning rate the algorithm uses left at None filled from the paper's tables, and
        the settings it does not use (:func:`~edgeprof.algorithms.hyperparams.used`) cleared: a rate to None, the
        server optimizer to its default; so a run records only what it used."""
        from edgeprof.algorithms import ALGORITHMS
        from edgeprof.algorithms.hyperparams import defaults, used

        spec, uses = ALGORITHMS[self.algo], used(ALGORITHMS[self.algo])
        table = defaults(spec.hyperparams, self.dataset, self.degree)
        changes = {k: (table.get(k) if k in uses else None) for k in ("beta", "rho", "mu")
                   if getattr(self, k) is None or k not in uses}
        if "server_optimizer" not in uses:
            changes["server_optimizer"] = SERVER_OPTIMIZERS[0]
        if self.engine is None:
            changes["engine"] = spec.engines[0]
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The settings as plain data (the sidecar's ``config``); a setting the algorithm does not use is None."""
        from edgeprof.algorithms import ALGORITHMS
        from edgeprof.algorithms.hyperparams import SETTINGS, used

        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = (str(value) if isinstance(value, Path) else value.to_dict()
                           if isinstance(value, EnergySettings) else value)
        unused = (set(SETTINGS) - used(ALGORITHMS[self.algo])) | self._unused_data_settings()
        return {k: None if k in unused else v for k, v in out.items()}

    def _unused_data_settings(self) -> set[str]:
        """The data and evaluation settings this run does not use (the CLI refuses them given, :func:`check_given`;
        through the API a config may carry them, and the record says null): the synthetic data set's size but for
        it, the data folder of a data set that reads no file, the protocol of an evaluation not run."""
        unused = set()
        if self.dataset != "synthetic":
            unused |= {"synthetic_samples", "synthetic_classes"}
        if self.dataset not in data_names.FILE_DATASETS:
            unused.add("data_dir")
        if not self.evaluate:
            unused.add("eval_protocol")
        return unused


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def check_positive(**values: Optional[float]) -> None:
    """ConfigError for the first value given that is neither None nor > 0 (and finite)."""
    for name, value in values.items():
        _check(value is None or (value > 0 and math.isfinite(value)),
               f"{name.replace('_', '-')} must be positive, got {value}")


def check_used(algos: Sequence[str], given: Sequence[str], form: str = "--{}", listed: str = "--{}") -> None:
    """ConfigError with one line for a setting in ``given`` (beta, rho, mu, server_optimizer) that none of ``algos``
    uses (:func:`edgeprof.algorithms.hyperparams.used`): a value given for nothing is refused, never recorded as if
    it had been used. ``form`` spells the refused setting as the caller's user wrote it (``--{}``: ``--rho``),
    ``listed`` the settings the algorithms take."""
    from edgeprof.algorithms import ALGORITHMS
    from edgeprof.algorithms.hyperparams import SETTINGS, used

    taken = set().union(*(used(ALGORITHMS[a]) for a in algos))
    unused = [n for n in given if n in SETTINGS and n not in taken]
    if unused:
        takes = ", ".join(listed.format(n.replace("_", "-")) for n in SETTINGS if n in taken)
        whom = (f"does not apply to {algos[0]}, which takes only" if len(algos) == 1 else
                f"applies to none of {', '.join(algos)}, which take only")
        raise ConfigError(f"{form.format(unused[0].replace('_', '-'))} {whom} {takes}; leave it out")


def check_given(cfg: RunConfig, given: Sequence[str]) -> None:
    """ConfigError with one line for a data or evaluation option given where this run would ignore it (and record it
    in the sidecar as if used): ``--synthetic-samples``/``--synthetic-classes`` but for ``--dataset synthetic``,
    ``--data-dir`` for a data set that reads no file, ``--eval-protocol`` without ``--evaluate``."""
    files, unused = data_names.FILE_DATASETS, cfg._unused_data_settings()  # the record's null ones, one rule
    why = {"synthetic_samples": f"sets the synthetic data set, and this run's is {cfg.dataset}; add --dataset "
                                "synthetic (or leave it out)",
           "data_dir": f"is where the files of {', '.join(files)} are read from, and {cfg.dataset} reads none; leave "
                       "it out (or name one of those with --dataset)",
           "eval_protocol": "says how --evaluate scores a round, and --evaluate was not given; add --evaluate (or "
                            "leave it out)"}
    why["synthetic_classes"] = why["synthetic_samples"]
    for name in ("synthetic_samples", "synthetic_classes", "data_dir", "eval_protocol"):
        if name in given and name in unused:
            raise ConfigError(f"--{name.replace('_', '-')} {why[name]}")


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """ConfigError naming the allowed values when ``value`` is not one of them."""
    _choice(name, value, allowed)


def check_meter_options(**settings: Any) -> None:
    """Meter settings by name (any a registered back-end declares): ConfigError
    with one line for a name no back-end declares or a value its back-end refuses (:mod:`edgeprof.meters`)."""
    given = {k: v for k, v in settings.items() if v is not None}
    if given:  # nothing given: nothing to check (and no back-end module loaded)
        from edgeprof.meters.registry import check_settings

        check_settings(given)


#: documented bounds of the integer settings: (smallest, largest); see docs/measuring.md
BOUNDS = {
    "tau": (1, 1_000_000),
    "rounds": (1, 10_000_000),
    "clients": (1, 10_000),
    "seed": (0, 2**32 - 1),
    "synthetic_samples": (1, 200_000),
    "synthetic_classes": (2, 1_000),
}
#: the longest idle baseline, seconds
MAX_IDLE_SECONDS = 3600.0
#: the power trace's sampling rate, Hz, when on: each sample reads every meter (tens of microseconds of CPU)
TRACE_HZ_BOUNDS = (1.0, 1000.0)
#: what a run name (and so its report's file name) may be; :data:`RUN_NAME_RULE` says it in words
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")
RUN_NAME_RULE = ("must start with an ASCII letter or digit, go on with ASCII letters, digits, '.', '_' and '-' only, "
                 "and be at most 121 characters")
#: the highest carbon intensity taken, gCO2e/kWh (the most carbon-intense grids are near 1,000)
MAX_CARBON_INTENSITY = 10_000.0


def check_energy_options(settings: "EnergySettings") -> None:
    """The meter, idle-baseline and carbon settings a run and a monitor share: ConfigError with one line for
    the first invalid one."""
    check_positive(carbon_intensity=settings.carbon_intensity)
    where = [f"--{n} {v}" for n, v in (("country", settings.country), ("region", settings.region)) if v is not None]
    _check(settings.carbon_intensity is None or not where,
           f"{' and '.join(where)} say where codecarbon's intensity is looked up, and --carbon-intensity replaces it: "
           "give one or the other (the sidecar would record a place the figure does not come from)")
    _check(settings.carbon_intensity is None or settings.carbon_intensity <= MAX_CARBON_INTENSITY,
           f"carbon-intensity must be at most {MAX_CARBON_INTENSITY:,.0f} gCO2e/kWh, got {settings.carbon_intensity}")
    check_meter_options(**dict(settings.meters))
    _check(isinstance(settings.idle_seconds, (int, float)) and math.isfinite(settings.idle_seconds)
           and 0 <= settings.idle_seconds <= MAX_IDLE_SECONDS,
           f"idle seconds must be in 0..{MAX_IDLE_SECONDS:g}, got {settings.idle_seconds}")
    low, high = TRACE_HZ_BOUNDS
    hz = settings.trace_hz
    _check(isinstance(hz, (int, float)) and not isinstance(hz, bool) and (hz == 0 or low <= hz <= high),
           f"trace rate must be in {low:g}..{high:g} Hz (0: no trace), got {hz}")


#: the most intra-op threads a run config may name; the machine that runs it holds them to its own cores
#: (:func:`edgeprof.nn.compute.check_threads`): a Flower run config is written for devices other than the writer's
MAX_THREADS = 1024


def check_int(name: str, value) -> None:
    """ConfigError with one line unless ``value`` is an integer within the documented :data:`BOUNDS` of ``name``."""
    low, high = BOUNDS[name]
    _check(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
           f"{name.replace('_', ' ')} must be an integer in {low}..{high:,}, got {value}")


#: the longest a client window may be held (``--hold-seconds``)
MAX_HOLD_S = 600.0


def validate(cfg: RunConfig) -> None:
    """Raise ConfigError with one clear line for the first invalid setting."""
    _choice("algorithm", cfg.algo, algorithm_names())
    _choice("dataset", cfg.dataset, data_names.DATASETS)
    nn_names.check_backbone(cfg.backbone)
    _choice("degree of personalization", cfg.degree, data_names.DEGREES)
    _choice("split", cfg.split, data_names.SPLITS)
    _choice("participation mode", cfg.participation_mode, PARTICIPATION_MODES)
    _choice("server optimizer", cfg.server_optimizer, SERVER_OPTIMIZERS)
    _choice("evaluation protocol", cfg.eval_protocol, EVAL_PROTOCOLS)
    if not (isinstance(cfg.tau, int) and cfg.tau >= 1):
        _check(False, f"tau must be an integer >= 1, got {cfg.tau}")
    for name in BOUNDS:
        check_int(name, getattr(cfg, name))
    _check(0.0 < cfg.participation <= 1.0 and not math.isnan(cfg.participation),
           f"participation must be in (0, 1], got {cfg.participation}")
    _check(0.0 < cfg.test_fraction < 1.0, f"test fraction must be in (0, 1), got {cfg.test_fraction}")
    _check(cfg.threads is None or (isinstance(cfg.threads, int) and not isinstance(cfg.threads, bool)
                                   and 1 <= cfg.threads <= MAX_THREADS),
           f"threads must be an integer in 1..{MAX_THREADS}, got {cfg.threads}")
    check_positive(beta=cfg.beta, rho=cfg.rho)
    _check(isinstance(cfg.energy, EnergySettings), f"energy must be an EnergySettings, got {cfg.energy!r}")
    _check(cfg.mu is None or (math.isfinite(cfg.mu) and cfg.mu >= 0), f"mu must be finite and >= 0, got {cfg.mu}")
    from edgeprof.algorithms import ALGORITHMS

    if cfg.engine is not None:
        _choice(f"engine for {cfg.algo}", cfg.engine, ALGORITHMS[cfg.algo].engines)
    from edgeprof.nn.execution import check as check_execution

    check_execution(cfg.execution)
    from edgeprof.nn.compute import check_device

    check_device(cfg.device)
    _check(str(cfg.device).partition(":")[0] != "cpu" or cfg.device == "cpu",
           f"device {cfg.device!r}: the host CPU is one device and takes no index; use cpu (or cuda, cuda:N, auto)")
    _check(isinstance(cfg.tf32, bool), f"tf32 must be true or false, got {cfg.tf32!r}")
    if cfg.tf32 and str(cfg.device).partition(":")[0] == "cpu":
        from edgeprof.nn.compute import tf32_refused

        _check(False, tf32_refused(cfg.device))
    _check(cfg.run_name is None or (isinstance(cfg.run_name, str) and RUN_NAME.fullmatch(cfg.run_name) is not None),
           f"run name {cfg.run_name!r} {RUN_NAME_RULE}")
    _check(isinstance(cfg.hold_seconds, (int, float)) and 0 <= cfg.hold_seconds <= MAX_HOLD_S,
           f"hold seconds must be in 0..{MAX_HOLD_S:g}, got {cfg.hold_seconds}")
    _check(not (cfg.hold_seconds and cfg.evaluate),
           "--hold-seconds repeats each client's round inside its window, training it several times a round: "
           "it measures cost, not accuracy, so it does not go with --evaluate")
