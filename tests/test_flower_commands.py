"""The commands `edgeprof flower-app-dir` prints are the docs' (docs/flower.md), and they start and connect as printed.

Real processes on loopback with TLS: a throw-away CA and a server certificate for 127.0.0.1 are made in
the test; the printed SuperLink, SuperNode and ``flwr run`` commands are run verbatim, with only the
placeholders (``<server>``, ``<i>``, ``/path/ca.crt``) filled in, and the federation's report must be
complete.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")

from edgeprof.cli import app  # noqa: E402
from edgeprof.flower.loopback import free_ports, wait_for_port  # noqa: E402

from docs_text import command  # noqa: E402
from test_flower_e2e import BIN, kill_group  # noqa: E402

pytestmark = pytest.mark.slow


def _write_tls(folder: Path) -> None:
    """ca.crt, server.pem and server.key (SAN 127.0.0.1) as the docs name them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgeprof test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca.public_bytes(pem))
    (folder / "server.pem").write_bytes(cert.public_bytes(pem))
    (folder / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))


def _printed(output: str) -> dict[str, str]:
    """The server, device and submit commands and the config.toml block from the printed text."""
    server = re.search(r"^2\. server:\s+(.+)$", output, re.M).group(1)
    device = re.search(r"^3\. device i:\s+(.+)$", output, re.M).group(1)
    toml = re.search(r"^(\[superlink\.prod\]\n(?:.+ = .+\n)+)", output, re.M).group(1)
    submit = re.search(r"then: (flwr run .+)$", output, re.M).group(1)
    return {"server": server, "device": device, "toml": toml, "submit": submit}


def _docs_command(prefix: str) -> str:
    """The command of docs/flower.md's steps that starts with ``prefix`` (its continuation lines joined)."""
    return command("docs/flower.md", prefix)


def test_printed_server_and_device_commands_are_the_docs(tmp_path):
    result = CliRunner().invoke(app, ["flower-app-dir", str(tmp_path / "myapp"), "--clients", "4"])

    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    assert printed["server"] == _docs_command("flower-superlink --host")
    assert printed["device"].replace("<i>", "0") == \
        _docs_command("flower-supernode --superlink").replace("<i>", "0").replace("<I>", "4")
    assert "--port 9093" in printed["server"] and "<server>:9093" in printed["device"]


def test_printed_commands_start_connect_and_finish_a_run_on_loopback(tmp_path, request):
    if shutil.which("flower-superlink", path=str(BIN)) is None:
        pytest.skip("flower-superlink is not installed")
    link, node_port = free_ports(2)
    out = tmp_path / "profiles"
    result = CliRunner().invoke(app, [
        "flower-app-dir", str(tmp_path / "myapp"), "--clients", "1", "--participation", "1", "--rounds", "1",
        "--tau", "2", "--dataset", "synthetic", "--backbone", "mlp", "--threads", "1", "--run-name", "printed",
        "--out", str(out), "--port", str(link), "--node-wait", "60"])
    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    _write_tls(tmp_path)
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home"), "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}
    Path(env["FLWR_HOME"]).mkdir()
    (Path(env["FLWR_HOME"]) / "config.toml").write_text(
        printed["toml"].replace("<server>", "127.0.0.1").replace("/path/ca.crt", str(tmp_path / "ca.crt")))

    def start(name: str, command: str, *extra: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "w")
        argv = shlex.split(command.replace("<server>", "127.0.0.1").replace("<i>", "0"))
        proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:], *extra], cwd=tmp_path, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        request.addfinalizer(lambda: (kill_group(proc), log.close()))
        return proc

    start("superlink", printed["server"])
    wait_for_port(link, 60)
    # one SuperNode per host needs no --port of its own; a free one keeps this test off a busy 9094
    start("supernode", printed["device"], "--port", str(node_port))
    argv = shlex.split(printed["submit"])
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)

    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    sidecar = out / "printed.json"
    deadline = time.monotonic() + 60
    while (not sidecar.is_file() or json.loads(sidecar.read_text())["status"] == "running") \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    if not sidecar.is_file():
        pytest.fail(f"no report sidecar after the run\n{done.stdout[-3000:]}\n{logs}")
    data = json.loads(sidecar.read_text())
    assert data["status"] == "complete", logs
    assert data["rounds_completed"] == 1
