"""The commands `edgeprof flower-app-dir` prints are the docs' (docs/flower.md), and they run as printed.

Real processes on the loopback: the printed TLS files command (``edgeprof flower-certs``), SuperLink, one
SuperNode per partition on its own port, the ``config.toml`` block and ``flwr run`` are run verbatim, nothing
filled in, from the folder ``flower-app-dir`` ran in, with TLS and with ``--insecure`` (the docs' quick start);
the federation's report must be complete.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("flwr")

from edgeprof.cli import app  # noqa: E402
from edgeprof.flower.loopback import wait_for_port  # noqa: E402

from docs_text import command, fenced_blocks, page, shell_lines  # noqa: E402
from test_flower_e2e import BIN, kill_group  # noqa: E402

pytestmark = pytest.mark.slow

QUICK_START = "edgeprof flower-app-dir quickstart --insecure"


def _printed(output: str) -> dict:
    """The printed commands: the TLS files (None with --insecure), the server, each device's in order, the
    config.toml block and the submit command."""
    certs = re.search(r"^2\. TLS files:\s+(.+)$", output, re.M)
    server = re.search(r"^2\. server:\s+(.+)$", output, re.M).group(1)
    devices = re.findall(r"^3\. device \d+:\s+(.+)$", output, re.M)
    toml = re.search(r"^(\[superlink\.prod\]\n(?:.+ = .+\n)+)", output, re.M).group(1)
    submit = re.search(r"then: (flwr run .+)$", output, re.M).group(1)
    return {"certs": certs and certs.group(1), "server": server, "devices": devices, "toml": toml,
            "submit": submit}


def _docs_command(prefix: str) -> str:
    """The command of docs/flower.md that starts with ``prefix`` (its continuation lines joined)."""
    return command("docs/flower.md", prefix)


def test_printed_tls_commands_are_the_docs_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(app, ["flower-app-dir", "myapp", "--clients", "4"])

    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    assert _docs_command("edgeprof flower-certs").startswith(printed["certs"] + " ")
    assert printed["server"] == _docs_command("flower-superlink --host 0.0.0.0")
    step3 = _docs_command("flower-supernode --superlink <server>:9093 --root-certificates certs/ca.crt --port 9094 "
                          "--node-config")
    assert printed["devices"] == [step3.replace("<server>", "127.0.0.1").replace("<I>", "4").replace(
        "<i>", str(i)).replace("--port 9094", f"--port {9094 + i}") for i in range(4)]
    assert printed["toml"] == f'[superlink.prod]\naddress = "127.0.0.1:9093"\n' \
                              f'root-certificates = "{tmp_path / "certs" / "ca.crt"}"\n'
    assert printed["submit"] == "flwr run myapp prod --stream" == _docs_command("flwr run myapp")
    assert "<" not in result.stdout.replace("(default ~/.flwr", "")


def test_an_apps_threads_are_its_devices_not_the_cores_of_the_machine_that_writes_it(tmp_path, monkeypatch):
    """flower-app-dir writes a run config for other machines: --threads 8 on a two-core laptop is the devices'
    setting, written as given (each node holds it to its own cores at the roll call); the run config's own bound
    still refuses what no machine has."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("os.cpu_count", lambda: 2)

    written = CliRunner().invoke(app, ["flower-app-dir", "myapp", "--threads", "8"])
    refused = CliRunner().invoke(app, ["flower-app-dir", "other", "--threads", "5000"])

    assert written.exit_code == 0, written.output
    config = tomllib.loads((tmp_path / "myapp" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config["threads"] == 8
    assert refused.exit_code == 2 and "threads must be an integer in 1..1024, got 5000" in refused.stderr
    assert not (tmp_path / "other").exists()


def test_a_projects_own_pyproject_is_never_replaced_and_the_apps_own_is_refreshed(tmp_path, monkeypatch):
    """``flower-app-dir .`` in a project would have replaced its pyproject.toml: refused, one line, exit 4, the file
    as it was. A folder flower-app-dir wrote before is refreshed with the new settings."""
    monkeypatch.chdir(tmp_path)
    mine = '[project]\nname = "mine"\nversion = "1"\n'
    (tmp_path / "pyproject.toml").write_text(mine)

    refused = CliRunner().invoke(app, ["flower-app-dir", ".", "--rounds", "4"])

    assert refused.exit_code == 4, refused.output
    assert [ln for ln in refused.stderr.splitlines() if ln.strip()] == [
        "edgeprof: error: pyproject.toml exists and edgeprof did not write it: flower-app-dir never replaces a "
        "project's own pyproject.toml; give it a folder of its own (a new one, or one it wrote before)"]
    assert (tmp_path / "pyproject.toml").read_text() == mine and refused.stdout == ""

    for rounds in ("4", "7"):  # the second run replaces what the first wrote
        result = CliRunner().invoke(app, ["flower-app-dir", "myapp", "--rounds", rounds])
        assert result.exit_code == 0, result.output
        written = (tmp_path / "myapp" / "pyproject.toml").read_text().splitlines()
        assert [ln for ln in written if ln.startswith("rounds = ")] == [f"rounds = {rounds}"]


def test_printed_insecure_commands_are_the_docs_quick_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shown = _docs_command(QUICK_START)

    result = CliRunner().invoke(app, shlex.split(shown)[1:])

    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    lines = shell_lines(page("docs/flower.md"))
    assert printed["certs"] is None
    assert printed["server"] == _docs_command("flower-superlink --host 127.0.0.1")
    assert printed["devices"] == [line for line in lines if line.startswith("flower-supernode --superlink 127.0.0.1:")]
    assert printed["toml"] in [body for info, body in fenced_blocks(page("docs/flower.md")) if info == "toml"]
    assert printed["submit"] == _docs_command("flwr run quickstart")


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive TCP ports free right now on every address (the SuperLink listens on
    0.0.0.0, each SuperNode on the next port)."""
    for _ in range(200):
        first = random.randint(20000, 60000 - n)
        socks = [socket.socket() for _ in range(n)]
        try:
            for i, s in enumerate(socks):
                s.bind(("0.0.0.0", first + i))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def flower_env(tmp_path: Path, toml: str) -> dict[str, str]:
    """The environment the printed commands run in: ``$FLWR_HOME/config.toml`` holding ``toml`` as printed."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(toml)
    return {**os.environ, "FLWR_HOME": str(home), "PYTHONUNBUFFERED": "1",
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}


def start(tmp_path: Path, request, env: dict[str, str], name: str, line: str) -> subprocess.Popen:
    """Start the shell line ``line`` (a Flower command) in ``tmp_path``, logging to ``<name>.log``; its process
    group is killed when the test ends."""
    log = open(tmp_path / f"{name}.log", "w")
    argv = shlex.split(line)
    proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    request.addfinalizer(lambda: (kill_group(proc), log.close()))
    return proc


def run(tmp_path: Path, env: dict[str, str], line: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the shell line ``line`` (a ``flwr`` command) in ``tmp_path`` to its end."""
    argv = shlex.split(line)
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))


def wait_complete(sidecar: Path, timeout: float = 60) -> dict:
    """The report's sidecar once the ServerApp has closed it (or as it is after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while (not sidecar.is_file() or json.loads(sidecar.read_text())["status"] == "running") \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    return json.loads(sidecar.read_text()) if sidecar.is_file() else {}


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "insecure"])
def test_printed_commands_start_connect_and_finish_a_run_on_loopback(tmp_path, monkeypatch, request, tls):
    if shutil.which("flower-superlink", path=str(BIN)) is None:
        pytest.skip("flower-superlink is not installed")
    monkeypatch.chdir(tmp_path)
    link = _free_run(3)  # the SuperLink's port, and one after it for each of the two SuperNodes
    result = CliRunner().invoke(app, [
        "flower-app-dir", "myapp", "--clients", "2", "--participation", "1", "--rounds", "1", "--tau", "2",
        "--dataset", "synthetic", "--backbone", "mlp", "--threads", "1", "--run-name", "printed", "--out", "profiles",
        "--port", str(link), "--node-wait", "120", *([] if tls else ["--insecure"])])
    assert result.exit_code == 0, result.output
    printed = _printed(result.stdout)
    if tls:
        certs = CliRunner().invoke(app, shlex.split(printed["certs"])[1:])  # `edgeprof flower-certs ...`
        assert certs.exit_code == 0, certs.output
    env = flower_env(tmp_path, printed["toml"])

    start(tmp_path, request, env, "superlink", printed["server"])
    wait_for_port(link, 60)
    for i, device in enumerate(printed["devices"]):
        start(tmp_path, request, env, f"supernode-{i}", device)
    done = run(tmp_path, env, printed["submit"])

    assert done.returncode == 0, done.stdout + done.stderr + logs(tmp_path)
    data = wait_complete(tmp_path / "profiles" / "printed.json")
    assert data.get("status") == "complete", logs(tmp_path)
    assert data["rounds_completed"] == 1
    assert "address already in use" not in logs(tmp_path).lower()
