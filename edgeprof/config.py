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

from edgeprof.errors import ConfigError

DATASETS = ("digits", "synthetic", "mnist", "fashion-mnist", "emnist", "cifar10", "omniglot")
BACKBONES = ("mlp", "cnn-cifar", "cnn-omniglot")
DEGREES = ("high", "medium", "none", "group")
PARTICIPATION_MODES = ("fixed", "bernoulli")
SERVER_OPTIMIZERS = ("adam", "sgd")


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
    evaluate: bool = False
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
            return float(max(1, round(self.participation * self.clients)))
        return self.participation * self.clients

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


def check_meter_options(*, cpu_watts: Optional[float] = None, jetson_hz: float = 10.0) -> None:
    """The options every command that opens meters takes (measure, sweep, train, doctor, Flower)."""
    check_positive(cpu_watts=cpu_watts, jetson_hz=jetson_hz)


def validate(cfg: RunConfig) -> None:
    """Raise ConfigError with one clear line for the first invalid setting."""
    _choice("algorithm", cfg.algo, algorithm_names())
    _choice("dataset", cfg.dataset, DATASETS)
    _choice("backbone", cfg.backbone, BACKBONES)
    _choice("degree of personalization", cfg.degree, DEGREES)
    _choice("participation mode", cfg.participation_mode, PARTICIPATION_MODES)
    _choice("server optimizer", cfg.server_optimizer, SERVER_OPTIMIZERS)
    _check(isinstance(cfg.tau, int) and cfg.tau >= 1, f"tau must be an integer >= 1, got {cfg.tau}")
    _check(cfg.rounds >= 1, f"rounds must be >= 1, got {cfg.rounds}")
    _check(cfg.clients >= 1, f"clients must be >= 1, got {cfg.clients}")
    _check(0.0 < cfg.participation <= 1.0 and not math.isnan(cfg.participation),
           f"participation must be in (0, 1], got {cfg.participation}")
    _check(0.0 < cfg.test_fraction < 1.0, f"test fraction must be in (0, 1), got {cfg.test_fraction}")
    _check(cfg.threads is None or cfg.threads >= 1, f"threads must be >= 1, got {cfg.threads}")
    check_positive(beta=cfg.beta, rho=cfg.rho, carbon_intensity=cfg.carbon_intensity)
    check_meter_options(cpu_watts=cfg.cpu_watts, jetson_hz=cfg.jetson_hz)
    _check(cfg.mu is None or cfg.mu >= 0, f"mu must be >= 0, got {cfg.mu}")
    _check(cfg.idle_seconds >= 0, f"idle seconds must be >= 0, got {cfg.idle_seconds}")
    _check(cfg.synthetic_samples >= 1 and cfg.synthetic_classes >= 2,
           "synthetic data needs at least 1 sample and 2 classes")
    from edgeprof.algorithms import ALGORITHMS

    if cfg.engine is not None:
        _choice(f"engine for {cfg.algo}", cfg.engine, ALGORITHMS[cfg.algo].engines)
    _check(cfg.run_name is None or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}", cfg.run_name) is not None,
           f"run name {cfg.run_name!r} may use only letters, digits, '.', '_' and '-'")
