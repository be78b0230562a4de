"""Values in a Flower run config or node config are checked as the CLI checks the same values: one check for both.

Every case parses a real run config (:func:`edgeprof.flower.config.to_run_config` of a real RunConfig, one key
changed, as ``flwr run -c 'key=value'`` changes it) with the production parser, and the CLI case runs the real
command: a value is refused on Flower exactly when, and with the line that, the CLI refuses it.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app
from edgeprof.config import RunConfig
from edgeprof.errors import ConfigError
from edgeprof.flower.config import FlowerSettings, from_run_config, node_overrides, to_run_config

FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
        "--clients", "4", "--rounds", "1", "--tau", "1", "--no-progress"]


def _run_config(**changed) -> dict:
    """A Flower run config as ``flower-app-dir`` writes it, with ``changed`` (run-config keys) over it."""
    good = to_run_config(RunConfig(dataset="synthetic", backbone="mlp", clients=4), FlowerSettings())
    return {**good, **{k.replace("_", "-"): v for k, v in changed.items()}}


def _flower_refusal(run_config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        from_run_config(run_config)
    return str(err.value)


def _cli_refusal(tmp_path, *argv: str) -> str:
    result = CliRunner().invoke(app, ["measure", *FAST, *argv, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    return line.removeprefix("edgeprof: error: ")


@pytest.mark.parametrize("key,value,option", [
    ("beta", 0, "0"),  # was replaced by Table 6's 0.189 on Flower
    ("rho", 0.0, "0"),
    ("carbon-intensity", 0, "0"),  # was replaced by the world average on Flower
    ("cpu-watts", 0, "0"),
    ("threads", 0, "0"),
    ("cpu-watts", 1e308, "1e308"),
    ("carbon-intensity", 1e308, "1e308"),
    ("device", "cpu:1", "cpu:1"),
])
def test_a_value_the_cli_refuses_is_refused_on_flower_with_the_same_line(tmp_path, key, value, option):
    on_flower = _flower_refusal(_run_config(**{key: value}))

    on_the_cli = _cli_refusal(tmp_path, f"--{key}", option)

    assert on_flower == on_the_cli and str(value).split(":")[0] in on_flower


@pytest.mark.parametrize("key,bound,past,expected", [
    ("round-timeout", 86_400.0, 86_400.5, "round-timeout must be a number of seconds above 0 and at most 86400"),
    ("round-timeout", 86_400.0, 1e300, "at most 86400"),
    ("node-wait", 86_400.0, 1e9, "node-wait must be a number of seconds >= 0, at most 86400"),
    ("total-samples", 10**9, 10**12, "total-samples must be >= 0, a whole number at most 1,000,000,000"),
])
def test_a_flower_wait_or_size_past_its_documented_bound_is_refused(key, bound, past, expected):
    refusal = _flower_refusal(_run_config(**{key: past}))

    _, settings = from_run_config(_run_config(**{key: bound}))

    assert expected in refusal
    assert {"round-timeout": settings.round_timeout_s, "node-wait": settings.node_wait_s,
            "total-samples": settings.total_samples}[key] == bound


@pytest.mark.parametrize("algo,key,value,expected", [
    ("fedavg", "rho", 5.0, "run-config key rho does not apply to fedavg, which takes only beta; leave it out"),
    ("fedavg", "mu", 0.0, "run-config key mu does not apply to fedavg, which takes only beta; leave it out"),
    ("fedavg", "server-optimizer", "sgd", "run-config key server-optimizer does not apply to fedavg, which takes "
                                          "only beta; leave it out"),
    ("pflego", "mu", 0.5, "run-config key mu does not apply to pflego, which takes only beta, rho, "
                          "server-optimizer; leave it out"),
])
def test_a_flower_setting_the_algorithm_does_not_use_is_refused(algo, key, value, expected):
    assert _flower_refusal(_run_config(algo=algo, **{key: value})) == expected


@pytest.mark.parametrize("algo,used", [
    ("fedavg", {"beta": 0.007, "rho": None, "mu": None, "server_optimizer": "adam"}),
    ("ditto", {"beta": 0.007, "rho": None, "mu": 0.25, "server_optimizer": "adam"}),
    ("pflego", {"beta": 0.189, "rho": 0.003, "mu": None, "server_optimizer": "adam"}),
])
def test_unset_flower_settings_are_blank_and_only_the_used_ones_are_filled(algo, used):
    run_config = _run_config(algo=algo)

    cfg, _ = from_run_config(run_config)

    assert all(run_config[k] == "" for k in ("beta", "rho", "mu", "threads", "cpu-watts", "carbon-intensity"))
    assert {k: getattr(cfg, k) for k in used} == used


@pytest.mark.parametrize("node_config,expected", [
    ({"compute-device": "cpu:1"}, "the host CPU is one device and takes no index"),
    ({"cpu-watts": 0}, "cpu-watts must be positive, got 0"),
    ({"cpu-watts": 5e3}, "cpu-watts must be at most 1000 W per busy core"),
    ({"threads": 0}, "threads must be an integer in 1.."),
])
def test_a_node_config_value_is_checked_as_the_run_config_is(node_config, expected):
    cfg, _ = from_run_config(_run_config())

    with pytest.raises(ConfigError, match=expected):
        node_overrides(cfg, node_config)
