"""`edgeprof flower-certs` writes a CA and a server certificate a TLS client accepts for exactly the given names.

The files are checked with the ``cryptography`` package that wrote them and used for real: a TLS server on the
loopback (Python's ``ssl``) serves ``server.pem`` and ``server.key``, and a client that trusts only ``ca.crt``
connects by each given name and by a name not given. The command's refusals are one line and exit 2, with nothing
written; a disk that fills leaves none of the four files (a real, small tmpfs, as in test_faults.py). The files
running a real SuperLink and SuperNode: tests/test_flower_commands.py and tests/test_flower_node_auth.py.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.cli import app

from test_faults import _fill, _one_line, small_disk  # noqa: F401 - small_disk is a fixture used by name

x509 = pytest.importorskip("cryptography.x509")

FOUR = ["ca.crt", "ca.key", "server.pem", "server.key"]


def _certs(folder: Path, *names: str) -> CliRunner:
    return CliRunner().invoke(app, ["flower-certs", str(folder), *(w for n in names for w in ("--name", n))])


def test_the_four_files_chain_to_the_ca_name_every_given_name_and_keep_the_keys_private(tmp_path):
    import ipaddress

    folder = tmp_path / "certs"

    result = CliRunner().invoke(app, ["flower-certs", str(folder), "--name", "localhost", "--name", "server.lab",
                                      "--name", "127.0.0.1", "--name", "::1"])

    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == sorted(FOUR)
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((folder / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "server.lab"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert {name: (folder / name).stat().st_mode & 0o777 for name in ("ca.key", "server.key")} == \
        {"ca.key": 0o600, "server.key": 0o600}
    assert "Keep" in result.stdout and "ca.key" in result.stdout


def _handshake(folder: Path, server_hostname: str) -> None:
    """Serve one TLS connection on the loopback with the server's files; connect trusting only ca.crt."""
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(folder / "server.pem", folder / "server.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with served.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):  # the client gave up on the certificate
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client = ssl.create_default_context(cafile=folder / "ca.crt")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    client.wrap_socket(raw, server_hostname=server_hostname) as tls:
                tls.sendall(b"x")
        finally:
            thread.join(10)


@pytest.mark.parametrize("name,accepted", [("localhost", True), ("127.0.0.1", True), ("other.lab", False),
                                           ("127.0.0.2", False)])
def test_a_tls_client_that_trusts_the_ca_accepts_exactly_the_given_names(tmp_path, name, accepted):
    assert _certs(tmp_path, "localhost", "127.0.0.1").exit_code == 0

    if accepted:
        _handshake(tmp_path, name)
    else:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match|not valid for"):
            _handshake(tmp_path, name)


@pytest.mark.parametrize("name", ["10.0.0.300", "host:9093", "https://host", "-bad.lab", "a..b", "bad_name.lab",
                                  "x" * 64 + ".lab", "*.lab", ""])
def test_a_name_that_is_neither_a_dns_name_nor_an_ip_is_one_line_and_exit_2(tmp_path, name):
    result = _certs(tmp_path / "certs", "localhost", name)

    assert result.exit_code == 2, result.output
    assert f"--name {name!r} is neither an IP address nor a DNS name" in _one_line(result.stderr)
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize("argv,says", [([], "give the server's name or IP with --name"),
                                       (["--name", "localhost", "--days", "0"], "--days must be a whole number")])
def test_no_name_or_no_days_is_one_line_and_exit_2(tmp_path, argv, says):
    result = CliRunner().invoke(app, ["flower-certs", str(tmp_path / "certs"), *argv])

    assert result.exit_code == 2, result.output
    assert says in _one_line(result.stderr)
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize("existing", FOUR)
def test_an_existing_file_is_never_replaced_and_nothing_is_written(tmp_path, existing):
    (tmp_path / existing).write_bytes(b"the user's own file\n")

    result = _certs(tmp_path, "localhost")

    assert result.exit_code == 2, result.output
    assert f"{tmp_path / existing} exists: flower-certs never replaces" in _one_line(result.stderr)
    assert [p.name for p in tmp_path.iterdir()] == [existing]
    assert (tmp_path / existing).read_bytes() == b"the user's own file\n"


def test_without_cryptography_the_command_names_the_flower_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.x509", None)  # what `import cryptography.x509` then raises on

    result = _certs(tmp_path / "certs", "localhost")

    assert result.exit_code == 2, result.output
    assert _one_line(result.stderr) == ("edgeprof: error: flower-certs needs cryptography, which is not installed: "
                                        "pip install 'edgeprof[flower]'")
    assert not (tmp_path / "certs").exists()


@pytest.mark.parametrize("pages_left", [0, 2], ids=["full", "full-after-two-files"])
def test_a_disk_that_fills_leaves_none_of_the_four_and_exits_4(small_disk, pages_left):
    _fill(small_disk)
    filler = small_disk / "filler"
    os.truncate(filler, max(0, filler.stat().st_size // 4096 - pages_left) * 4096)  # room for that many files

    result = _certs(small_disk / "certs", "localhost")

    assert result.exit_code == 4, result.output
    line = _one_line(result.stderr)
    assert line.startswith("edgeprof: error: cannot write the certificates") and "No space left" in line, line
    assert sorted(p.name for p in small_disk.rglob("*")) == ["filler"]  # no file, no temporary, no folder
