"""Hostile numbers and names: every one is refused with one line and exit 2 before anything runs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app

FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp",
        "--clients", "4", "--rounds", "1", "--tau", "1", "--no-progress"]


@pytest.mark.parametrize("option,value,expected", [
    ("--beta", "inf", "beta must be positive"),
    ("--rho", "inf", "rho must be positive"),
    ("--mu", "inf", "mu must be finite"),
    ("--mu", "nan", "mu must be finite"),
    ("--cpu-watts", "inf", "cpu-watts must be positive"),
    ("--carbon-intensity", "inf", "carbon-intensity must be positive"),
    ("--jetson-hz", "inf", "jetson-hz must be positive"),
    ("--jetson-hz", "1e9", "jetson-hz must be at most"),
    ("--idle-seconds", "inf", "idle seconds must be in"),
    ("--idle-seconds", "1e12", "idle seconds must be in"),
    ("--hold-seconds", "nan", "hold seconds must be in 0..600"),
    ("--hold-seconds", "inf", "hold seconds must be in 0..600"),
    ("--seed", "-1", "seed must be an integer in"),
    ("--seed", str(2**64), "seed must be an integer in"),
    ("--threads", "99999999999999", "threads must be an integer in"),
    ("--threads", "100000", "threads must be an integer in"),
    ("--synthetic-samples", "99999999999999", "synthetic samples must be an integer in"),
    ("--clients", str(10**12), "clients must be an integer in"),
    ("--tau", str(10**9), "tau must be an integer in"),
    ("--cpu-watts", "1e308", "cpu-watts must be at most 1000 W per busy core"),
    ("--carbon-intensity", "1e308", "carbon-intensity must be at most 10,000"),
    ("--device", "cpu:1", "the host CPU is one device and takes no index"),
    ("--run-name", "-leading-dash", "must start with an ASCII letter or digit"),
    ("--run-name", "r" * 122, "be at most 121 characters"),
])
def test_a_number_outside_its_documented_bounds_is_refused(tmp_path, option, value, expected):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, option, value, "--out", str(out)])

    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:") and expected in lines[0], result.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("argv,expected", [
    (["--trace", "--trace-hz", "0"], "--trace --trace-hz 0 would record no trace"),
    (["--trace-hz", "5"], "--trace-hz 5 sets the rate of --trace, which was not given"),
    (["--algo", "fedavg", "--rho", "5"], "--rho does not apply to fedavg, which takes only --beta;"),
    (["--algo", "fedavg", "--mu", "3"], "--mu does not apply to fedavg, which takes only --beta;"),
    (["--algo", "fedavg", "--server-optimizer", "sgd"], "--server-optimizer does not apply to fedavg"),
    (["--algo", "fedprox", "--server-optimizer", "adam"], "--server-optimizer does not apply to fedprox, which "
                                                          "takes only --beta, --mu;"),
    (["--algo", "pflego", "--mu", "0.1"], "--mu does not apply to pflego, which takes only --beta, --rho, "
                                          "--server-optimizer;"),
])
def test_an_option_that_would_be_ignored_is_refused(tmp_path, argv, expected):
    """A value the run would not use (a trace rate with no trace, a rate the algorithm does not have) is refused in
    one line, never silently dropped or recorded as if used."""
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, *argv, "--out", str(out)])

    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:") and expected in lines[0], result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_a_rate_no_trained_algorithm_uses_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["train", "--algos", "fedavg,fedprox", "--rho", "1", *FAST,
                                      "--out", str(tmp_path)])

    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == ("edgeprof: error: --rho applies to none of fedavg, fedprox, which take only "
                                     "--beta, --mu; leave it out")


@pytest.mark.parametrize("argv,recorded", [
    (["measure", "--algo", "fedavg", "--run-name", "r"],
     {"r": {"beta": 0.007, "rho": None, "mu": None, "server_optimizer": None}}),
    (["train", "--algos", "pflego,fedprox", "--rho", "0.01", "--mu", "0.5", "--server-optimizer", "sgd",
      "--run-name", "r"],
     {"r-pflego": {"beta": 0.189, "rho": 0.01, "mu": None, "server_optimizer": "sgd"},
      "r-fedprox": {"beta": 0.007, "rho": None, "mu": 0.5, "server_optimizer": None}}),
])
def test_the_sidecar_records_only_the_settings_each_algorithm_used(tmp_path, argv, recorded):
    """Defaults are never refused; a rate given for several algorithms reaches those that use it, and each report's
    config holds None for what its algorithm does not use (MNIST column of Table 6 for the rest)."""
    import json

    result = CliRunner().invoke(app, [*argv, *FAST, "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    for name, want in recorded.items():
        config = json.loads((tmp_path / f"{name}.json").read_text())["config"]
        assert {k: config[k] for k in want} == want


def test_an_engine_no_swept_algorithm_has_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--algos", "pflego,fedavg", "--engines", "nope", "--taus", "1",
                                      "--out", str(tmp_path)])

    assert result.exit_code == 2, result.output
    assert "engine 'nope'" in result.stderr and "Traceback" not in result.output


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="no /dev/full here")
def test_output_to_a_full_device_is_one_line_and_exit_4(tmp_path):
    import subprocess
    import sys

    result = CliRunner().invoke(app, ["measure", *FAST, "--run-name", "r", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "edgeprof.cli", "summary", str(tmp_path / "r.csv")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)

    assert done.returncode == 4
    assert done.stderr.strip() == "edgeprof: error: cannot write the output: No space left on device"
