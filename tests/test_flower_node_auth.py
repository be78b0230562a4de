"""docs/flower.md's node authentication recipe works on flwr as installed: the SuperLink accepts the SuperNode whose
key was registered and refuses one whose key was not.

Real processes on the loopback with TLS (the printed ``edgeprof flower-certs`` files): the SuperLink ``flower-app-dir``
prints, with ``--enable-supernode-auth``; two key pairs made with the docs' ``ssh-keygen`` command (or, where
ssh-keygen is not installed, the same OpenSSH-format P-384 keys written with ``cryptography``); the docs' ``flwr
supernode register`` for one of them; the docs' SuperNode command for each, on a port of its own. The registered
node serves a one-round run to a complete report, the other exits refused, and the SuperLink lists one node.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")

from edgeprof.cli import app  # noqa: E402
from edgeprof.flower.loopback import wait_for_port  # noqa: E402

from test_flower_commands import (  # noqa: E402
    _docs_command, _free_run, _printed, flower_env, logs, run, start, wait_complete)
from test_flower_e2e import BIN  # noqa: E402

pytestmark = pytest.mark.slow


def _keygen(tmp_path, name: str) -> None:
    """The key pair ``name`` / ``name.pub`` as the docs make it: their ssh-keygen command, the docs' ``node-0``
    renamed; with ``cryptography`` where there is no ssh-keygen."""
    line = _docs_command("ssh-keygen").replace("node-0", name)
    if shutil.which("ssh-keygen"):
        subprocess.run(shlex.split(line), cwd=tmp_path, check=True, capture_output=True, timeout=60)
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    assert "-t ecdsa -b 384" in line and "-m PEM" not in line  # what is written below
    key = ec.generate_private_key(ec.SECP384R1())
    (tmp_path / name).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                    serialization.NoEncryption()))
    (tmp_path / f"{name}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                         serialization.PublicFormat.OpenSSH))


def test_a_registered_node_serves_a_run_and_an_unregistered_one_is_refused(tmp_path, monkeypatch, request):
    if shutil.which("flower-superlink", path=str(BIN)) is None:
        pytest.skip("flower-superlink is not installed")
    monkeypatch.chdir(tmp_path)
    link = _free_run(3)
    result = CliRunner().invoke(app, [
        "flower-app-dir", "myapp", "--clients", "1", "--participation", "1", "--rounds", "1", "--tau", "2",
        "--dataset", "synthetic", "--backbone", "mlp", "--threads", "1", "--run-name", "auth", "--out", "profiles",
        "--port", str(link), "--node-wait", "120"])
    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    assert CliRunner().invoke(app, shlex.split(printed["certs"])[1:]).exit_code == 0
    for name in ("node-0", "stranger"):
        _keygen(tmp_path, name)
    env = flower_env(tmp_path, printed["toml"])
    device = _docs_command("flower-supernode --superlink <server>:9093 --root-certificates certs/ca.crt --port 9094 "
                           "--auth-supernode-private-key").replace("<server>:9093", f"127.0.0.1:{link}") \
        .replace("<I>", "1")

    start(tmp_path, request, env, "superlink", printed["server"] + " --enable-supernode-auth")
    wait_for_port(link, 60)
    registered = run(tmp_path, env, _docs_command("flwr supernode register"), timeout=120)
    assert registered.returncode == 0, registered.stdout + registered.stderr + logs(tmp_path)
    start(tmp_path, request, env, "supernode-0", device.replace("--port 9094", f"--port {link + 1}"))
    stranger = start(tmp_path, request, env, "stranger", device.replace("node-0", "stranger")
                     .replace("--port 9094", f"--port {link + 2}"))
    done = run(tmp_path, env, "flwr run myapp prod --stream")

    assert done.returncode == 0, done.stdout + done.stderr + logs(tmp_path)
    data = wait_complete(tmp_path / "profiles" / "auth.json")
    assert data.get("status") == "complete" and data["rounds_completed"] == 1, logs(tmp_path)
    assert stranger.wait(120) != 0
    refused = (tmp_path / "stranger.log").read_text()
    assert "Exit Code: 305" in refused and "Failed to activate SuperNode" in refused, refused
    assert "No SuperNode found with the given public key" in (tmp_path / "superlink.log").read_text()
    listed = run(tmp_path, env, "flwr supernode ls prod --format json", timeout=120)
    nodes = json.loads(listed.stdout[listed.stdout.index("{"):])["nodes"]
    assert [n["status"] for n in nodes] == ["online"], listed.stdout
