"""Run settings: one frozen dataclass, validated in one place.

Everything a run needs is in :class:`RunConfig`; the CLI builds one from its options and hands it to
:func:`edgeprof.simulate.run`. ``None`` for a learning rate means "the paper's default for this
dataset, degree and algorithm" (:mod:`edgeprof.hyperparams`), resolved by :meth:`RunConfig.resolved`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from edgeprof.data import names as data_names
from edgeprof.errors import ConfigError
from edgeprof.nn import names as nn_names

PARTICIPATION_MODES = ("fixed", "bernoulli")
SERVER_OPTIMIZERS = ("adam", "sgd")
#: how accuracy is measured with ``evaluate``: ``global`` scores every client after the server step (the
#: unweighted mean of per-client accuracies); ``paper`` scores the round's sampled clients right after their
#: local update, before the server step, as correct predictions summed over them / their test samples (the
#: PFLEGO authors' reference code, and so Table 1)
EVAL_PROTOCOLS = ("global", "paper")

#: names owned by the layers below, read from them whenever asked (``config.DATASETS`` is
#: ``edgeprof.data.names.DATASETS``): one list each, never a copy here
_OWNED = {
    "DATASETS": data_names, "FILE_DATASETS": data_names, "DEGREES": data_names, "SPLITS": data_names,
    "TABLE4_BACKBONES": nn_names, "VISION_BACKBONES": nn_names, "BACKBONES": nn_names, "FACTORY_FORM": nn_names,
    "factory_spec": nn_names, "check_backbone": nn_names,
}


def __getattr__(name: str):
    if name in _OWNED:
        return getattr(_OWNED[name], name)
    raise AttributeError(f"module 'edgeprof.config' has no attribute {name!r}")


def algorithm_names() -> tuple[str, ...]:
    from edgeprof.algorithms import ALGORITHMS

    return tuple(ALGORITHMS)


@dataclass(frozen=True)
class RunConfig:
    """Settings of one federated run (``measure`` or ``train``)."""

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
    evaluate: bool = False
    eval_protocol: str = "global"
    # energy (meters issue)
    cpu_watts: Optional[float] = None
    jetson_hz: float = 10.0
    idle_seconds: float = 0.0
    country: Optional[str] = None
    region: Optional[str] = None
    carbon_intensity: Optional[float] = None
    progress: bool = True

    def __post_init__(self) -> None:
        validate(self)

    @property
    def sampled_per_round(self) -> float:
        """r of the paper: the expected number of participating clients per round."""
        if self.participation_mode == "fixed":
            from edgeprof.participants import clients_per_round

            return float(clients_per_round(self.clients, self.participation, self.participant_rounding))
        return self.participation * self.clients

    @property
    def participant_rounding(self) -> str:
        """How r follows from pi*I (:data:`edgeprof.participants.ROUNDINGS`): ``floor`` with the paper split."""
        return "floor" if self.split == "paper" else "round"

    def resolved(self) -> "RunConfig":
        """A copy with every learning rate left at None filled from the paper's tables."""
        from edgeprof.algorithms import ALGORITHMS
        from edgeprof.hyperparams import defaults

        spec = ALGORITHMS[self.algo]
        table = defaults(spec.hyperparams, self.dataset, self.degree)
        changes = {k: table[k] for k in ("beta", "rho", "mu") if getattr(self, k) is None and k in table}
        if self.engine is None:
            changes["engine"] = spec.engines[0]
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out


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


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """ConfigError naming the allowed values when ``value`` is not one of them."""
    _choice(name, value, allowed)


#: the fastest Jetson rail sampling, Hz (the INA3221 converts in about 1 ms per channel)
MAX_JETSON_HZ = 1000.0


def check_meter_options(*, cpu_watts: Optional[float] = None, jetson_hz: float = 10.0) -> None:
    """The options every command that opens meters takes (measure, sweep, train, doctor, Flower)."""
    check_positive(cpu_watts=cpu_watts, jetson_hz=jetson_hz)
    _check(jetson_hz <= MAX_JETSON_HZ, f"jetson-hz must be at most {MAX_JETSON_HZ:g}, got {jetson_hz}")


#: documented bounds of the integer settings: (smallest, largest); see the README
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
#: what a run name (and so its report's file name) may be
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")


def check_energy_options(settings) -> None:
    """The meter, idle-baseline and carbon settings a run and a monitor share (``cpu_watts``, ``jetson_hz``,
    ``idle_seconds``, ``carbon_intensity`` attributes): ConfigError with one line for the first invalid one."""
    check_positive(carbon_intensity=settings.carbon_intensity)
    check_meter_options(cpu_watts=settings.cpu_watts, jetson_hz=settings.jetson_hz)
    _check(math.isfinite(settings.idle_seconds) and 0 <= settings.idle_seconds <= MAX_IDLE_SECONDS,
           f"idle seconds must be in 0..{MAX_IDLE_SECONDS:g}, got {settings.idle_seconds}")


def max_threads() -> int:
    """The machine's logical cores: more intra-op threads than that only oversubscribe it."""
    import os

    return os.cpu_count() or 1


def _check_int(name: str, value) -> None:
    low, high = BOUNDS[name]
    _check(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
           f"{name.replace('_', ' ')} must be an integer in {low}..{high:,}, got {value}")


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
        _check_int(name, getattr(cfg, name))
    _check(0.0 < cfg.participation <= 1.0 and not math.isnan(cfg.participation),
           f"participation must be in (0, 1], got {cfg.participation}")
    _check(0.0 < cfg.test_fraction < 1.0, f"test fraction must be in (0, 1), got {cfg.test_fraction}")
    _check(cfg.threads is None or (isinstance(cfg.threads, int) and 1 <= cfg.threads <= max_threads()),
           f"threads must be an integer in 1..{max_threads()} (this machine's cores), got {cfg.threads}")
    check_positive(beta=cfg.beta, rho=cfg.rho)
    check_energy_options(cfg)
    _check(cfg.mu is None or (math.isfinite(cfg.mu) and cfg.mu >= 0), f"mu must be finite and >= 0, got {cfg.mu}")
    from edgeprof.algorithms import ALGORITHMS

    if cfg.engine is not None:
        _choice(f"engine for {cfg.algo}", cfg.engine, ALGORITHMS[cfg.algo].engines)
    from edgeprof.nn.execution import check as check_execution

    check_execution(cfg.execution)
    from edgeprof.nn.compute import check_device

    check_device(cfg.device)
    _check(cfg.run_name is None or RUN_NAME.fullmatch(cfg.run_name) is not None,
           f"run name {cfg.run_name!r} may use only letters, digits, '.', '_' and '-'")
