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
])
def test_a_number_outside_its_documented_bounds_is_refused(tmp_path, option, value, expected):
    out = tmp_path / "profiles"

    result = CliRunner().invoke(app, ["measure", *FAST, option, value, "--out", str(out)])

    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:") and expected in lines[0], result.stderr
    assert not out.exists() or not any(out.iterdir())


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
