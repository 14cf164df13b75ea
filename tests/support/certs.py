"""Test certificates made with the ``openssl`` command: a CA, a server certificate for
127.0.0.1/localhost and a client certificate, both signed by the CA, plus a second CA that
signed nothing of ours (a stranger's trust root)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA certificate (PEM)
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed none of the above
    other_cert: Path  # a client certificate signed by other_ca
    other_key: Path


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _run(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=tritium test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def _leaf(directory: Path, name: str, ca: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _run(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _run(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    """Writes the files into ``directory`` (which must exist) and names them."""
    _ca(directory, "ca")
    _ca(directory, "other_ca")
    _leaf(
        directory,
        "server",
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    _leaf(directory, "client", "ca", "extendedKeyUsage=clientAuth\n")
    _leaf(directory, "other", "other_ca", "extendedKeyUsage=clientAuth\n")
    return Certs(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other_ca.pem",
        other_cert=directory / "other.pem",
        other_key=directory / "other.key",
    )
