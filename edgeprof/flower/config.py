"""Flower run config <-> :class:`~edgeprof.config.RunConfig`, and the Flower app folder.

Flower hands every ServerApp and ClientApp the run config (``[tool.flwr.app.config]`` of the app's
``pyproject.toml``, overridden by ``flwr run -c 'key=value'``). Its values are str, int, float or bool,
never None, so an unset optional setting is written as ``""`` (a 0 is a value, checked as the CLI checks it).
Keys are the RunConfig field names with ``-`` for ``_`` plus a few Flower-only keys (:data:`FLOWER_DEFAULTS`).
Every value goes through the same validation as the CLI's (:mod:`edgeprof.config`), and a learning rate or server
optimizer the algorithm does not use is refused (:func:`edgeprof.config.check_used`).

This module imports nothing from flwr, so it can be unit-tested and used by the CLI without Flower.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from edgeprof.config import EnergySettings, RunConfig, check_used, parse_meter_settings
from edgeprof.errors import ConfigError

#: RunConfig fields that are not meaningful in a federation (each node profiles itself; the
#: per-node meters options come from the node config, see :func:`node_overrides`), or written key by key
_SKIPPED = ("progress", "energy")
#: the energy settings a run config carries as keys of their own (``country``, ...), besides each meter option
#: (:func:`_meter_options`); the rest of the meter settings travel as ``meter-settings`` ("name=value,name=value")
_ENERGY_KEYS = ("country", "region", "carbon_intensity", "trace_hz")
#: the node-config key of the torch device a node's rounds run on (:data:`HOST_KEY` is the node's name in the report)
COMPUTE_DEVICE_KEY = "compute-device"
#: the node-config key naming the node in the report's ``host`` column; ``device``, its old name, is read where it is
#: absent (:func:`node_host`)
HOST_KEY = "host"
OLD_HOST_KEY = "device"
#: optional numeric fields, written as "" when unset: a 0 is a value, checked as the CLI checks it (a proximal
#: mu = 0 is a setting; beta = 0 or carbon-intensity = 0 is refused, never replaced by a default)
_BLANK_NUMBERS = ("threads", "beta", "rho", "mu", "carbon_intensity")
#: optional string/path fields, written as "" when unset
_OPTIONAL_STRINGS = ("data_dir", "run_name", "engine", "country", "region")


@dataclass(frozen=True)
class FlowerSettings:
    """The Flower-only part of the run config."""

    round_timeout_s: float = 60.0  # how long the server waits for a round's replies
    node_wait_s: float = 120.0  # how long the server waits for every partition to have a node
    total_samples: int = 0  # sum_j N_j of the whole federation when known in advance (0: sum of known N_i)
    simulation: bool = False  # set by `edgeprof flower-simulate`: clients share one machine

    def __post_init__(self) -> None:
        """ConfigError with one line for a setting no server could wait by (NaN, negative, past its documented
        bound: :data:`MAX_WAIT_S`, :data:`MAX_TOTAL_SAMPLES`)."""
        if not 0 < self.round_timeout_s <= MAX_WAIT_S:
            raise ConfigError(f"round-timeout must be a number of seconds above 0 and at most {MAX_WAIT_S:g}, "
                              f"got {self.round_timeout_s}")
        if not 0 <= self.node_wait_s <= MAX_WAIT_S:
            raise ConfigError(f"node-wait must be a number of seconds >= 0, at most {MAX_WAIT_S:g}, "
                              f"got {self.node_wait_s}")
        if isinstance(self.total_samples, bool) or not isinstance(self.total_samples, int) or not (
                0 <= self.total_samples <= MAX_TOTAL_SAMPLES):
            raise ConfigError(f"total-samples must be >= 0, a whole number at most {MAX_TOTAL_SAMPLES:,}, "
                              f"got {self.total_samples}")


#: the longest a server waits for a round's replies or for its nodes (``round-timeout``, ``node-wait``): a day
MAX_WAIT_S = 86_400.0
#: the largest ``total-samples`` (sum_j N_j of a federation)
MAX_TOTAL_SAMPLES = 10**9

FLOWER_DEFAULTS = {"round-timeout": 60.0, "node-wait": 120.0, "total-samples": 0, "simulation": False}


def _key(field_name: str) -> str:
    return field_name.replace("_", "-")


def _meter_options() -> dict:
    """The meter options of the registered back-ends by name (:func:`edgeprof.meters.registry.options`): each is a
    run- and node-config key of its own (``<key>``), blank when its default is None, read as its declared type."""
    from edgeprof.meters.registry import options

    return {o.name: o for o in options()}


def to_run_config(cfg: RunConfig, settings: FlowerSettings = FlowerSettings()) -> dict[str, Any]:
    """The Flower run config (hyphenated keys, no None) for ``cfg`` and the Flower settings."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        if f.name in _SKIPPED:
            continue
        value = getattr(cfg, f.name)
        if value is None:
            value = ""  # _BLANK_NUMBERS and _OPTIONAL_STRINGS
        elif isinstance(value, Path):
            value = str(value)
        out[_key(f.name)] = value
    options = _meter_options()
    for name in (*options, *_ENERGY_KEYS):
        value = getattr(cfg.energy, name)
        out[_key(name)] = "" if value is None else value
    others = {k: v for k, v in cfg.energy.meter_settings.items() if k not in options}
    out["meter-settings"] = ",".join(f"{k}={v}" for k, v in others.items())
    out.update({"round-timeout": float(settings.round_timeout_s), "node-wait": float(settings.node_wait_s),
                "total-samples": int(settings.total_samples), "simulation": bool(settings.simulation)})
    return out


#: settings that hold whole numbers, and those that hold any number (the others hold text or a bool)
_INTEGERS = ("rounds", "clients", "tau", "seed", "synthetic_samples", "synthetic_classes", "threads", "total_samples")
_NUMBERS = ("beta", "rho", "mu", "carbon_intensity", "trace_hz", "participation", "test_fraction", "round_timeout",
            "node_wait")


def _kind_of(value: Any) -> str:
    return {bool: "a bool", int: "a whole number", float: "a number", str: "text"}.get(type(value),
                                                                                     type(value).__name__)


def _from_value(name: str, value: Any, default: Any) -> Any:
    """A run-config value as the setting ``name`` takes it, strictly: ConfigError with one line naming the key and
    what it accepts (a TOML or ``flwr run -c`` value of another type is never coerced)."""
    key = _key(name)
    option = _meter_options().get(name)
    if option is not None:
        return _option_value(key, option, value)
    if name in _OPTIONAL_STRINGS + _BLANK_NUMBERS and value == "":
        return None
    if isinstance(default, bool) or name == "simulation":
        if not isinstance(value, bool):
            raise ConfigError(f"run-config key {key} takes true or false, got {value!r} ({_kind_of(value)})")
        return value
    if name in _INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"run-config key {key} takes a whole number, got {value!r} ({_kind_of(value)})")
        return value
    if isinstance(default, float) or name in _NUMBERS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"run-config key {key} takes a number, got {value!r} ({_kind_of(value)})")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"run-config key {key} takes text, got {value!r} ({_kind_of(value)})")
    return Path(value) if name in ("data_dir", "out") else value


def _option_value(key: str, option, value: Any) -> Any:
    """A meter option's run-config value: blank (``""``) for an option whose default is None, else a value of its
    declared type (a whole number counts as a number); ConfigError with one line for anything else."""
    if value == "" and option.default is None:
        return None
    if option.type is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"run-config key {key} takes a number, got {value!r} ({_kind_of(value)})")
        return float(value)
    if not isinstance(value, option.type) or isinstance(value, bool) and option.type is not bool:
        raise ConfigError(f"run-config key {key} takes {option.type.__name__}, got {value!r} ({_kind_of(value)})")
    return value


def from_run_config(run_config: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
                    ) -> tuple[RunConfig, FlowerSettings]:
    """Parse a Flower run config (over ``defaults``, itself a run config) into (RunConfig, settings).

    Unknown keys are a :class:`ConfigError` so a typo in ``flwr run -c`` is not silently ignored.
    """
    merged = {**(defaults or {}), **dict(run_config)}
    base = RunConfig()
    known = {_key(f.name): f.name for f in dataclasses.fields(base) if f.name not in _SKIPPED}
    energy_keys = {_key(n): n for n in (*_meter_options(), *_ENERGY_KEYS)}
    unknown = sorted(k for k in merged if k not in known and k not in FLOWER_DEFAULTS and k not in energy_keys
                     and k != "meter-settings")
    if unknown:
        raise ConfigError(f"unknown edgeprof run-config key(s): {', '.join(unknown)}")
    kwargs = {name: _from_value(name, merged[key], getattr(base, name)) for key, name in known.items()
              if key in merged}
    cfg = RunConfig(progress=False, energy=energy_from(merged), **kwargs)
    check_used([cfg.algo], [n for n, v in kwargs.items() if v is not None and v != getattr(base, n)],
               form="run-config key {}", listed="{}")
    cfg = cfg.resolved()
    flower = {k: _from_value(k.replace("-", "_"), merged.get(k, v), v) for k, v in FLOWER_DEFAULTS.items()}
    settings = FlowerSettings(flower["round-timeout"], flower["node-wait"], flower["total-samples"],
                              flower["simulation"])
    return cfg, settings


#: node-config keys through which a device's operator decides what a run config may make it do
TRUST_KEYS = ("allow-backbones", "data-root", "data-dir", "dataset")


def check_trust(cfg: RunConfig, node_config: Mapping[str, Any]) -> None:
    """What a run config (whoever submitted the run) may make this device do: experiment settings only. A backbone
    that is code to import (``module:factory``, ``file.py:factory``) runs only where the node's
    ``allow-backbones`` (comma-separated patterns, ``mynets:*``, ``/srv/nets/*.py:*``) matches it, and only as a
    callable that module defines (:mod:`edgeprof.flower.trust`: the matched module is imported to look, nothing is
    called); a ``data-dir`` the run config names is read only inside the node's ``data-root``, and never where the
    node has its own ``data-dir``. ConfigError with one line, which the node logs and the server reports as this
    node's failed reply (the federation goes on)."""
    from edgeprof.nn.names import factory_spec

    if factory_spec(cfg.backbone) is not None:
        from edgeprof.flower.trust import check_allowed

        check_allowed(cfg.backbone, node_config.get("allow-backbones", ""))
    if cfg.data_dir is not None and "data-dir" not in node_config:
        root = str(node_config.get("data-root", "") or "")
        inside = bool(root) and Path(cfg.data_dir).resolve().is_relative_to(Path(root).resolve())
        if not inside:
            raise ConfigError(f"this node reads no path a run config names (data-dir {cfg.data_dir}); its operator "
                              "gives its own data with --node-config \"data-dir='...'\" or allows a folder with "
                              "data-root")


def energy_from(config: Mapping[str, Any], base: EnergySettings = EnergySettings()) -> EnergySettings:
    """The energy settings a run or node config gives (each meter option's key, ``country``, ``region``,
    ``carbon-intensity``, ``trace-hz`` (0: no power trace), and ``meter-settings`` = "name=value,..." for any setting a
    meter back-end declares), over ``base``."""
    meters = base.meter_settings
    text = str(config.get("meter-settings", "") or "")
    meters.update(parse_meter_settings([w for w in text.split(",") if w.strip()]))
    fields = {"country": base.country, "region": base.region, "carbon_intensity": base.carbon_intensity,
              "idle_seconds": base.idle_seconds, "trace_hz": base.trace_hz}
    options = _meter_options()
    for name in (*options, *_ENERGY_KEYS):
        if _key(name) not in config:
            continue
        value = _from_value(name, config[_key(name)], getattr(base, name))
        if name in options:
            meters[name] = value
        else:
            fields[name] = value
    return EnergySettings(meters=meters, **fields)  # a None (``name=``) leaves the setting at its default


def node_host(node_config: Mapping[str, Any]) -> str:
    """The node's name its node config gives for the report's ``host`` column: :data:`HOST_KEY`, else the old key
    :data:`OLD_HOST_KEY` (``device``, read only where ``host`` is absent or empty), else ``""``."""
    return str(node_config.get(HOST_KEY, "") or node_config.get(OLD_HOST_KEY, "") or "")


def node_overrides(cfg: RunConfig, node_config: Mapping[str, Any]) -> RunConfig:
    """``cfg`` with the per-device settings a SuperNode may set in its ``--node-config``.

    ``threads``, ``execution``, ``compute-device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``: where its rounds run;
    the key ``host`` names the node in the report, :func:`node_host`) and the energy settings (each meter option's
    key, ``country``, ``region``, ``carbon-intensity``, ``meter-settings``) describe the device, not the experiment,
    so each node may set its own.
    """
    changes = {}
    for name in ("threads", "execution"):
        if _key(name) in node_config:
            changes[name] = _from_value(name, node_config[_key(name)], getattr(cfg, name))
    if COMPUTE_DEVICE_KEY in node_config:  # where this node's rounds run; "host" is the node's name in reports
        changes["device"] = str(node_config[COMPUTE_DEVICE_KEY])
    if any(_key(n) in node_config for n in (*_meter_options(), *_ENERGY_KEYS)) or "meter-settings" in node_config:
        changes["energy"] = energy_from(node_config, cfg.energy)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


#: the first line of every app pyproject edgeprof writes: the one kind of pyproject it replaces
APP_HEADER = "# Written by `edgeprof flower-app-dir`: a Flower app whose server and client are edgeprof's."


def app_pyproject(run_config: Mapping[str, Any], name: str = "edgeprof-flower") -> str:
    """The ``pyproject.toml`` of a Flower app whose components are edgeprof's ServerApp and ClientApp."""
    lines = [
        APP_HEADER,
        "# edgeprof (with the `flower` extra) must be installed on the server and on every device.",
        "[project]", f'name = "{name}"', 'version = "1.0.0"',
        'description = "edgeprof energy profiling of federated rounds on Flower"', 'license = "Apache-2.0"',
        "",
        "[tool.flwr.app]", 'publisher = "edgeprof"', "",
        "[tool.flwr.app.components]", 'serverapp = "edgeprof.flower.server_app:app"',
        'clientapp = "edgeprof.flower.client_app:app"', "",
        "[tool.flwr.app.config]",
    ]
    lines += [f"{key} = {_toml_value(value)}" for key, value in run_config.items()]
    return "\n".join(lines) + "\n"


def write_app_dir(folder: Path, run_config: Mapping[str, Any]) -> Path:
    """Create (or refresh) the Flower app folder ``folder`` and return its pyproject path; the pyproject is written
    whole or not at all (:mod:`edgeprof.atomic`: a full disk leaves no empty one, and a previous one as it was); a
    folder this call created is removed again when the pyproject cannot be written. A ``pyproject.toml`` there
    that edgeprof did not write (its first line is not :data:`APP_HEADER`: a project's own) is never replaced:
    OutputError, one line."""
    import contextlib

    from edgeprof.atomic import write_text
    from edgeprof.errors import OutputError

    folder = Path(folder)
    created = not folder.exists()
    _refuse_a_foreign_pyproject(folder / "pyproject.toml")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "pyproject.toml"
        write_text(path, app_pyproject(run_config))
    except OSError as err:
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing of anyone else's goes
        raise OutputError(f"cannot write the Flower app folder {folder}: {err.strerror or err}") from err
    return path


def _refuse_a_foreign_pyproject(path: Path) -> None:
    """OutputError when ``path`` holds a pyproject that edgeprof did not write (or one it cannot read to tell)."""
    from edgeprof.errors import OutputError

    if not path.exists() and not path.is_symlink():
        return
    try:
        with path.open("rb") as f:
            first = f.readline(len(APP_HEADER.encode()) + 2).decode("utf-8", errors="replace").rstrip("\r\n")
    except OSError as err:
        raise OutputError(f"cannot write the Flower app folder {path.parent}: cannot read its {path.name} to tell "
                          f"whether edgeprof wrote it ({err.strerror or err})") from err
    if first != APP_HEADER:
        raise OutputError(f"{path} exists and edgeprof did not write it: flower-app-dir never replaces a project's "
                          f"own pyproject.toml; give it a folder of its own (a new one, or one it wrote before)")
