"""HTTPS on the HTTP endpoint (``--http-ssl-cert``/``--http-ssl-key``, tritium's own flags),
with a self-signed certificate made by ``openssl`` at test time, driven by tritonclient.http."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tests.support.clients import assert_simple_works
from testkit.server_process import ServerProcess


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def https_server(
    example_repo: Path, certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("https") / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / "simple", repo / "simple")
    cert, key = certificate
    proc = ServerProcess(
        [repo], "--http-ssl-cert", str(cert), "--http-ssl-key", str(key), wait_ready=False
    )
    yield proc
    proc.stop()


def _client(proc: ServerProcess, **tls: object) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(proc.http_url, ssl=True, **tls)  # type: ignore[arg-type]


def test_https_with_the_ca_file(
    https_server: ServerProcess, certificate: tuple[Path, Path]
) -> None:
    c = _client(https_server, ssl_options={"ca_certs": str(certificate[0])})
    try:
        assert c.is_server_live()
        assert c.get_model_metadata("simple")["name"] == "simple"
        assert_simple_works(c, "http")
    finally:
        c.close()


def _unverified(cafile: str | None = None) -> ssl.SSLContext:
    """A client context that accepts any certificate (what ``curl -k`` does)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def test_https_insecure(https_server: ServerProcess) -> None:
    c = _client(https_server, insecure=True, ssl_context_factory=_unverified)
    try:
        assert_simple_works(c, "http")
    finally:
        c.close()


def test_plain_http_to_the_https_port_fails_and_the_server_goes_on(
    https_server: ServerProcess, certificate: tuple[Path, Path]
) -> None:
    with socket.create_connection(("127.0.0.1", https_server.ports["http"]), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n\r\n")
        assert not sock.recv(65536).startswith(b"HTTP/1.1 200")
    context = ssl.create_default_context(cafile=str(certificate[0]))
    with (
        socket.create_connection(("127.0.0.1", https_server.ports["http"]), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /v2/health/live HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert tls.recv(65536).startswith(b"HTTP/1.1 200 OK")


def test_mismatched_key_refuses_to_start(certificate: tuple[Path, Path], tmp_path: Path) -> None:
    other = tmp_path / "other.pem"
    subprocess.run(
        ["openssl", "genrsa", "-out", str(other), "2048"], check=True, capture_output=True
    )
    with pytest.raises(RuntimeError, match="failed to start the front-ends"):
        ServerProcess(
            [tmp_path],
            *("--http-ssl-cert", str(certificate[0]), "--http-ssl-key", str(other)),
        )
