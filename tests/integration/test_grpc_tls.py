"""gRPC over TLS with Triton's flags (``--grpc-use-ssl``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert``, ``--grpc-use-ssl-mutual``), driven the way Triton's
own ``simple_grpc_infer_client.py --ssl --root-certificates … [--private-key …
--certificate-chain …]`` drives it, with the official tritonclient (sync and aio). Certificates
come from tests/support/certs.py (openssl, at test time)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tests.support.certs import Certs, have_openssl, make_certs
from tests.support.clients import add_sub_inputs, simple_grpc_infer_aio, simple_grpc_infer_client
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.skipif(not have_openssl(), reason="openssl makes the certificates")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("grpc-certs"))


@pytest.fixture(scope="module")
def simple_repo(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("grpc-tls") / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / "simple", repo / "simple")
    return repo


def _tls_args(certs: Certs, *extra: str) -> list[str]:
    return [
        "--grpc-use-ssl",
        *("--grpc-server-cert", str(certs.server_cert)),
        *("--grpc-server-key", str(certs.server_key)),
        *extra,
    ]


@pytest.fixture(scope="module")
def tls_server(simple_repo: Path, certs: Certs) -> Iterator[ServerProcess]:
    proc = ServerProcess([simple_repo], *_tls_args(certs))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mutual_server(simple_repo: Path, certs: Certs) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        [simple_repo],
        *_tls_args(certs, "--grpc-use-ssl-mutual", "--grpc-root-cert", str(certs.ca)),
    )
    yield proc
    proc.stop()


def _client(proc: ServerProcess, **tls: Any) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(proc.grpc_url, ssl=bool(tls), **tls)


def _good(certs: Certs, mutual: bool = False) -> dict[str, Any]:
    tls: dict[str, Any] = {"root_certificates": str(certs.ca)}
    if mutual:
        tls.update(private_key=str(certs.client_key), certificate_chain=str(certs.client_cert))
    return tls


def _assert_serves(proc: ServerProcess, certs: Certs, mutual: bool = False) -> None:
    c = _client(proc, **_good(certs, mutual))
    try:
        assert c.is_server_live(client_timeout=30)
        simple_grpc_infer_client(c)
    finally:
        c.close()


def _assert_refused(proc: ServerProcess, **tls: Any) -> None:
    c = _client(proc, **tls)
    try:
        with pytest.raises(InferenceServerException) as caught:
            c.is_server_live(client_timeout=30)
        assert caught.value.status() == "StatusCode.UNAVAILABLE"
    finally:
        c.close()


# ------------------------------------------------------------------------- plain TLS


def test_simple_grpc_infer_client_over_tls(tls_server: ServerProcess, certs: Certs) -> None:
    _assert_serves(tls_server, certs)


def test_aio_client_over_tls(tls_server: ServerProcess, certs: Certs) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(tls_server.grpc_url, ssl=True, **_good(certs))
        try:
            await simple_grpc_infer_aio(c)
        finally:
            await c.close()

    asyncio.run(main())


def test_streaming_over_tls(tls_server: ServerProcess, certs: Certs) -> None:
    results: list[Any] = []
    c = _client(tls_server, **_good(certs))
    try:
        c.start_stream(callback=lambda result, error: results.append(error or result))
        inputs, a, b = add_sub_inputs("grpc")
        for request_id in range(3):
            c.async_stream_infer("simple", inputs, request_id=str(request_id))
        c.stop_stream()  # waits for the responses
    finally:
        c.close()
    assert len(results) == 3
    for result in results:
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_a_client_trusting_another_ca_is_refused(tls_server: ServerProcess, certs: Certs) -> None:
    _assert_refused(tls_server, root_certificates=str(certs.other_ca))
    _assert_serves(tls_server, certs)


def test_plaintext_client_to_the_tls_port_fails_and_the_server_goes_on(
    tls_server: ServerProcess, certs: Certs
) -> None:
    _assert_refused(tls_server)  # an insecure channel: HTTP/2 preface where TLS is expected
    _assert_serves(tls_server, certs)


@pytest.mark.parametrize(
    "garbage",
    [
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\xff\xff" + b"\x00" * 64,  # a TLS record header that lies about its size
        bytes(range(256)),
    ],
)
def test_garbage_on_the_tls_port_ends_that_connection_only(
    tls_server: ServerProcess, certs: Certs, garbage: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", tls_server.ports["grpc"]), timeout=30) as sock:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        try:
            while sock.recv(65536):  # whatever alert comes back, then the close
                pass
        except ConnectionResetError:
            pass
    _assert_serves(tls_server, certs)


def test_tls_offers_h2_by_alpn(tls_server: ServerProcess, certs: Certs) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.set_alpn_protocols(["h2", "http/1.1"])
    address = ("127.0.0.1", tls_server.ports["grpc"])
    with (
        socket.create_connection(address, timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_root_cert_without_mutual_serves_clients_without_certificates(
    simple_repo: Path, certs: Certs
) -> None:
    """Triton keeps grpc's GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE unless mutual TLS is on."""
    proc = ServerProcess([simple_repo], *_tls_args(certs, "--grpc-root-cert", str(certs.ca)))
    try:
        _assert_serves(proc, certs)
    finally:
        proc.stop()


# ------------------------------------------------------------------------- mutual TLS


def test_simple_grpc_infer_client_over_mutual_tls(
    mutual_server: ServerProcess, certs: Certs
) -> None:
    _assert_serves(mutual_server, certs, mutual=True)


def test_aio_client_over_mutual_tls(mutual_server: ServerProcess, certs: Certs) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(
            mutual_server.grpc_url, ssl=True, **_good(certs, mutual=True)
        )
        try:
            await simple_grpc_infer_aio(c, compression="gzip")
        finally:
            await c.close()

    asyncio.run(main())


def test_mutual_refuses_a_client_without_a_certificate(
    mutual_server: ServerProcess, certs: Certs
) -> None:
    _assert_refused(mutual_server, root_certificates=str(certs.ca))
    _assert_serves(mutual_server, certs, mutual=True)


def test_mutual_refuses_a_strangers_certificate(mutual_server: ServerProcess, certs: Certs) -> None:
    _assert_refused(
        mutual_server,
        root_certificates=str(certs.ca),
        private_key=str(certs.other_key),
        certificate_chain=str(certs.other_cert),
    )
    _assert_serves(mutual_server, certs, mutual=True)


def test_mutual_keeps_serving_the_good_client_while_others_are_refused(
    mutual_server: ServerProcess, certs: Certs
) -> None:
    good = _client(mutual_server, **_good(certs, mutual=True))
    try:
        assert good.is_server_live(client_timeout=30)
        _assert_refused(mutual_server, root_certificates=str(certs.ca))
        simple_grpc_infer_client(good)  # the same connection, still served
    finally:
        good.close()


# ------------------------------------------------------------------------- refusing to start


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("cert", "--grpc-server-cert"),
        ("key", "--grpc-server-key"),
        ("root", "--grpc-root-cert"),
        ("mismatch", "does not match"),
    ],
)
def test_bad_certificate_files_refuse_to_start(
    simple_repo: Path, certs: Certs, tmp_path: Path, which: str, message: str
) -> None:
    cert, key, root = str(certs.server_cert), str(certs.server_key), str(certs.ca)
    missing = str(tmp_path / "missing.pem")
    if which == "cert":
        cert = missing
    elif which == "key":
        key = missing
    elif which == "root":
        root = missing
    else:
        key = str(certs.client_key)
    args = [
        *("--grpc-use-ssl-mutual", "--grpc-root-cert", root),
        *("--grpc-server-cert", cert, "--grpc-server-key", key),
    ]
    with pytest.raises(RuntimeError, match="server exited") as caught:
        ServerProcess([simple_repo], *args, start_timeout=60)
    assert message in str(caught.value)
