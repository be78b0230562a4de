"""scripts/setup.sh's choice of where torch comes from, run as a user runs it (``--dry-run``: it prints the
commands it would run and runs none of them).

The machine it decides for is faked at the edges the script reads: ``uname`` and ``nvidia-smi`` are small
scripts put first on ``PATH``, and PyTorch's CPU-only index is a real HTTP server on loopback
(``EDGEPROF_TORCH_CPU_INDEX``), or a loopback port where nothing listens.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


@pytest.fixture
def cpu_index(tmp_path):
    """A CPU-only wheel index that answers (a ``torch/`` page), served on loopback; its URL."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html><body></body></html>")

    def handler(*args):
        return http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path / "index"))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _silent_port() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def _dry_run(tmp_path: Path, *, arch: str = "x86_64", nvidia: bool = False, **env: str):
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    (shims / "uname").write_text(f'#!/bin/sh\ncase "$1" in -m) echo {arch} ;; *) echo Linux ;; esac\n')
    (shims / "uname").chmod(0o755)
    if nvidia:
        (shims / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (shims / "nvidia-smi").chmod(0o755)
    venv = tmp_path / "venv"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPROF_")}
    run_env.update(PATH=f"{shims}{os.pathsep}{os.environ['PATH']}", PYTHON=sys.executable, EDGEPROF_VENV=str(venv),
                   **env)
    done = subprocess.run(["bash", str(SETUP), "--dry-run"], capture_output=True, text=True, env=run_env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not venv.exists()  # a dry run creates nothing
    torch_line = next(line for line in done.stdout.splitlines() if line.startswith("+ ") and "torch==" in line)
    return torch_line, done.stderr


no_driver = pytest.mark.skipif(NVIDIA_DRIVER.exists(), reason="this machine has an NVIDIA driver")


@no_driver
def test_without_an_nvidia_gpu_torch_comes_from_the_cpu_index_when_it_answers(tmp_path, cpu_index):
    torch_line, err = _dry_run(tmp_path, EDGEPROF_TORCH_CPU_INDEX=cpu_index)

    assert torch_line.endswith(f"torch==2.13.0 --extra-index-url {cpu_index}")
    assert f"CPU-only build, from {cpu_index}" in err


@no_driver
def test_when_the_cpu_index_does_not_answer_one_line_says_so_and_pip_uses_its_own_indexes(tmp_path):
    silent = _silent_port()

    torch_line, err = _dry_run(tmp_path, EDGEPROF_TORCH_CPU_INDEX=silent)

    assert torch_line.endswith("torch==2.13.0")
    assert [line for line in err.splitlines() if line.startswith("setup:")] == [
        f"setup: note: no NVIDIA GPU here, and {silent} does not answer: pip takes torch from its own indexes, whose "
        "Linux build may be the CUDA one (about 3 GB); EDGEPROF_TORCH_INDEX_URL names another"]


@pytest.mark.parametrize("machine", [{"nvidia": True}, {"arch": "aarch64"}], ids=["nvidia-smi", "aarch64"])
def test_with_an_nvidia_gpu_or_off_x86_64_the_cpu_index_is_not_asked(tmp_path, cpu_index, machine):
    torch_line, err = _dry_run(tmp_path, EDGEPROF_TORCH_CPU_INDEX=cpu_index, **machine)

    assert torch_line.endswith("torch==2.13.0")
    assert "index" not in torch_line and "no NVIDIA GPU" not in err


def test_an_index_the_user_names_is_the_only_one_for_torch(tmp_path, cpu_index):
    torch_line, err = _dry_run(tmp_path, EDGEPROF_TORCH_CPU_INDEX=cpu_index,
                               EDGEPROF_TORCH_INDEX_URL="https://example.invalid/simple",
                               EDGEPROF_EXTRAS="dev,vision")

    assert torch_line.endswith("torch==2.14.1 torchvision==0.29.1 --index-url https://example.invalid/simple")
    assert "no NVIDIA GPU" not in err


def test_an_unknown_argument_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(["bash", str(SETUP), "--dryrun"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "EDGEPROF_VENV": str(tmp_path / "venv")})

    assert done.returncode == 2
    assert done.stderr == "setup: error: unknown argument '--dryrun' (the only one is --dry-run)\n"
    assert not (tmp_path / "venv").exists()
