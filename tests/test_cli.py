"""The CLI: bad input gets one clear line and a non-zero exit, no traceback, no report written."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app

FAST = ["--dataset", "synthetic", "--synthetic-samples", "200", "--synthetic-classes", "4", "--backbone", "mlp", "--clients", "4",
        "--rounds", "1", "--tau", "2", "--no-progress"]


def _invoke(args, out: Path):
    return CliRunner().invoke(app, ["measure", *args, "--out", str(out)])


def _write_corrupt_mnist(folder: Path) -> Path:
    folder.mkdir()
    (folder / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(struct.pack(">I", 1234) + b"junk"))
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"junk"))
    return folder


@pytest.mark.parametrize("args,expected", [
    (["--algo", "fedfoo"], "unknown algorithm 'fedfoo'"),
    (["--tau", "0"], "tau must be an integer >= 1"),
    (["--participation", "0"], "participation must be in (0, 1]"),
    (["--participation", "1.5"], "participation must be in (0, 1]"),
    (["--backbone", "resnet"], "unknown backbone"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], "/nonexistent/mnist"),
    (["--run-name", "../escape"], "run name"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, expected):
    out = tmp_path / "profiles"

    result = _invoke([*FAST, *args], out)

    assert result.exit_code != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeprof: error:"), result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.output
    assert not list(out.glob("*.csv")) if out.exists() else True


def test_corrupt_data_file(tmp_path):
    data = _write_corrupt_mnist(tmp_path / "mnist")
    out = tmp_path / "profiles"

    result = _invoke([*FAST, "--dataset", "mnist", "--data-dir", str(data)], out)

    assert result.exit_code == 3
    assert "edgeprof: error:" in result.stderr and "train-images" in result.stderr
    assert not out.exists() or not list(out.iterdir())


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    result = _invoke(FAST, blocker / "profiles")

    assert result.exit_code == 4
    assert "not writable" in result.stderr and "Traceback" not in result.output


def test_measure_writes_report_and_summary(tmp_path):
    out = tmp_path / "profiles"

    result = _invoke([*FAST, "--run-name", "cli-run"], out)

    assert result.exit_code == 0, result.output
    assert (out / "cli-run.csv").is_file() and (out / "cli-run.json").is_file()
    assert "median per client round" in result.stdout and "cli-run.csv" in result.stdout.replace("\n", "")


COMMANDS = ["measure", "export", "algos", "summary", "doctor", "train", "sweep", "dashboard", "flower-app-dir",
            "flower-simulate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.stdout


def test_export_writes_onnx(tmp_path):
    result = CliRunner().invoke(app, ["export", "--backbone", "mlp", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mlp.onnx").stat().st_size > 1000


def test_doctor_lists_the_estimate_and_why_rapl_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPROF_SYSFS_ROOT", str(tmp_path))

    result = CliRunner().invoke(app, ["doctor", "--cpu-watts", "7.5"])

    assert result.exit_code == 0, result.output
    assert "cpu_estimate" in result.stdout and "estimate" in result.stdout
    assert "rapl" in result.stdout and "NOT FOUND" in result.stdout and "fix" in result.stdout


@pytest.mark.slow
def test_readme_command_runs_through_the_console_script(tmp_path):
    import shutil
    import subprocess
    import sys

    exe = shutil.which("edgeprof", path=str(Path(sys.executable).parent))
    assert exe, "the edgeprof console script is not installed next to this Python"

    done = subprocess.run([exe, "measure", "--algo", "pflego", "--tau", "50", "--rounds", "1", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    (csv_path,) = tmp_path.glob("pflego-tau50-*.csv")
    assert f"report: {csv_path}" in done.stdout
    from edgeprof.report import read_report

    report = read_report(csv_path)
    assert report.sidecar["config"]["dataset"] == "digits" and report.sidecar["config"]["backbone"] == "cnn-omniglot"
    assert len(report.where(kind="client")) == 2  # 20% of 10 clients
