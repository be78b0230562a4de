"""The TLS files of a Flower deployment: a certificate authority and a server certificate for given names.

A SuperLink without ``--insecure`` serves TLS with ``--ssl-ca-certfile ca.crt --ssl-certfile server.pem
--ssl-keyfile server.key``; every SuperNode and the ``flwr`` CLI check the server's certificate against
``ca.crt`` and against the name or IP they connect to, which must be one of the certificate's subject alternative
names (docs/flower.md, "Step by step"). :func:`write_certs` makes the four files with the ``cryptography`` package
(flwr's own dependency, imported only here): an ECDSA P-256 CA that may sign server certificates only
(``path_length=0``), and a server certificate for every given DNS name and IP address (``serverAuth``, with the key
identifiers a strict verifier asks for). The private keys are PKCS#8 PEM without a passphrase (the SuperLink reads
them unattended) and get mode 0600.

No file is ever replaced: when any of the four exists, nothing is written (ConfigError, exit 2, naming it). The set
is whole or absent: each file is written beside its target and linked into place, and a failure (a full disk, a
stop signal) removes what this call had placed, and the folder if it made it (OutputError, exit 4).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import re
from pathlib import Path
from typing import Sequence, Union

from edgeprof.errors import ConfigError, OutputError, require

#: the files :func:`write_certs` writes, in order, and their modes (the private keys readable by their owner only)
FILES = {"ca.crt": 0o644, "ca.key": 0o600, "server.pem": 0o644, "server.key": 0o600}
#: the longest validity offered, in days (a hundred years: past it, a typo rather than a choice)
MAX_DAYS = 36500
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")

Name = Union[str, ipaddress.IPv4Address, ipaddress.IPv6Address]


def parse_name(text: str) -> Name:
    """``text`` as a subject alternative name: an IP address (IPv4 or IPv6) or a DNS name (labels of letters,
    digits and inner hyphens, 1-63 characters each, separated by dots, at most 253 characters, not all digits).
    ConfigError with one line otherwise: ``10.0.0.300``, ``host:9093``, ``https://host``, ``*.lab``."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if not (0 < len(text) <= 253 and all(_LABEL.fullmatch(label) for label in labels)) \
            or all(label.isdigit() for label in labels):
        raise ConfigError(f"--name {text!r} is neither an IP address nor a DNS name (letters, digits and inner "
                          f"hyphens, in labels separated by dots)")
    return text.rstrip(".").lower()


def _names(texts: Sequence[str]) -> list[Name]:
    """Each given name parsed, in order, without repeats; ConfigError when none is given."""
    names: list[Name] = []
    for text in texts:
        name = parse_name(text)
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigError("give the server's name or IP with --name (one --name per name, e.g. --name localhost "
                          "--name 127.0.0.1)")
    return names


def certificate_files(names: Sequence[str], days: int = 365) -> dict[str, bytes]:
    """The contents of ca.crt, ca.key, server.pem and server.key for a server reached as ``names``, valid from now
    for ``days`` days (1 to :data:`MAX_DAYS`). ConfigError for a bad name or number of days, or without
    ``cryptography`` (``pip install 'edgeprof[flower]'``)."""
    require("cryptography.x509", "flower", "flower-certs")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise ConfigError(f"--days must be a whole number of days from 1 to {MAX_DAYS}, got {days}")
    parsed = _names(names)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)  # 5 min for clock skew
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgeprof Flower CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_key_usage(x509, signs=True), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    alternative = [x509.DNSName(n) if isinstance(n, str) else x509.IPAddress(n) for n in parsed]
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(parsed[0]))]))
              .issuer_name(ca_name).public_key(key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
              .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(_key_usage(x509, signs=False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM

    def private(k) -> bytes:
        return k.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    return {"ca.crt": ca.public_bytes(pem), "ca.key": private(ca_key),
            "server.pem": server.public_bytes(pem), "server.key": private(key)}


def _key_usage(x509, *, signs: bool):
    """A CA's key signs certificates and revocation lists; a server's key signs its TLS handshakes."""
    return x509.KeyUsage(digital_signature=not signs, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=signs, crl_sign=signs,
                         encipher_only=False, decipher_only=False)


def write_certs(folder: Path, names: Sequence[str], days: int = 365) -> list[Path]:
    """Write ca.crt, ca.key, server.pem and server.key (:func:`certificate_files`) into ``folder`` (created if
    missing) and return their paths. ConfigError, writing nothing, when any of them exists or a name is bad;
    OutputError when the folder or a file cannot be written, leaving none of the four (module docstring)."""
    folder = Path(folder)
    contents = certificate_files(names, days)
    targets = [folder / name for name in FILES]
    for path in targets:
        if os.path.lexists(path):
            raise ConfigError(f"{path} exists: flower-certs never replaces a certificate or key (remove the four "
                              f"files, or name another folder)")
    placed: list[Path] = []
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path in targets:
            _place(path, contents[path.name], FILES[path.name])
            placed.append(path)
    except BaseException as err:  # an OSError, or a stop signal between two files
        for path in placed:
            with contextlib.suppress(OSError):
                path.unlink()
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing of anyone else's goes
        if isinstance(err, FileExistsError):
            raise ConfigError(f"{err.filename2 or err.filename} exists: flower-certs never replaces a certificate "
                              f"or key") from err
        if isinstance(err, OSError):
            raise OutputError(f"cannot write the certificates to {folder}: {err.strerror or err}") from err
        raise
    return targets


def _place(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file ``path`` with ``mode``, whole or not at all, never replacing a file that
    appeared meanwhile (FileExistsError): :func:`edgeprof.atomic.write_bytes` with ``replace=False``."""
    from edgeprof.atomic import write_bytes

    write_bytes(path, data, mode=mode, replace=False)
