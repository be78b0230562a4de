"""scripts/gpu_check.py on a machine without a GPU: its help, its one-line refusal, and a dry run of every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_help_works_anywhere(tmp_path):
    done = _run("--help", cwd=tmp_path)
    assert done.returncode == 0 and "--out" in done.stdout and "--dry-run-on-cpu" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    done = _run("--out", str(tmp_path / "out"), cwd=tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpu_check: error: torch")
    assert "sees no CUDA GPU" in lines[0] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,message", [(["--taus", "5,x"], "--taus must be"), (["--repeats", "0"], "positive")])
def test_bad_options_are_one_line(tmp_path, args, message):
    done = _run("--out", str(tmp_path), *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_dry_run_on_the_cpu_writes_the_reports_and_every_figure(tmp_path):
    out = tmp_path / "out"
    done = _run("--out", str(out), "--dry-run-on-cpu", "--skip-tests", "--taus", "1,3", "--repeats", "2",
                "--samples", "40", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((out / "gpu_check.json").read_text())
    assert figures["device"] == "cpu" and set(figures["backbones"]) == {"cnn-omniglot", "cnn-cifar"}
    for backbone, fig in figures["backbones"].items():
        assert (out / f"gpu-check-{backbone}.csv").is_file()
        assert fig["tau_for_ratio"] == 3 and fig["ratio_wall_s"] > 0 and fig["growth_taus"] == [1, 3]
        assert set(fig["phases"]["pflego"]) == {"cache_forward", "head_steps", "joint_grad"}
        assert 0 < fig["floor_forward_s"] < fig["floor_forward_backward_s"]
    assert "FedAvg/PFLEGO at tau=3" in done.stdout and "floor: one forward" in done.stdout


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_power_integral_over_a_window_interpolates_its_edges():
    """Power 100 W until t=10.5, then 300 W: over [10.25, 11.0] the samples at 0.1 s steps integrate exactly to the
    piecewise-linear area (the edges interpolated between the samples around them)."""
    check = _module()
    samples = [(10.0 + 0.1 * i, 100.0 if 10.0 + 0.1 * i <= 10.5 + 1e-9 else 300.0, 50.0) for i in range(21)]

    joules, inside = check.integral_j(samples, 10.25, 11.0)

    # 100 W to 10.5, a ramp 10.5 -> 10.6 (mean 200 W), 300 W from 10.6 to 11.0
    assert inside == 8 and joules == pytest.approx(100 * 0.25 + 200 * 0.1 + 300 * 0.4, rel=1e-9)
    assert check.integral_j(samples, 20.0, 21.0)[1] == 0
