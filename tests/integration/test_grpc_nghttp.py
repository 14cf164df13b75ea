"""The gRPC port against independent HTTP/2 clients written in C (issue 24): Debian's
``nghttp2-client`` — ``nghttp`` (one connection, every frame shown with ``-v``) and ``h2load``
(many multiplexed requests). They share no code with tritium's HTTP/2 (``transport/http2``)
nor with the ``h2`` the other raw tests use. ``make interop-deps`` installs them."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit.grpc_raw import INFER, check_simple, simple_request, start_server

from testkit.server_process import ServerProcess

NGHTTP, H2LOAD = shutil.which("nghttp"), shutil.which("h2load")
pytestmark = pytest.mark.skipif(
    NGHTTP is None or H2LOAD is None,
    reason="nghttp/h2load not installed (Debian's nghttp2-client: `make interop-deps`)",
)
GRPC_HEADERS = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    proc = start_server([example_repo], ["simple"])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def body(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A length-prefixed ModelInferRequest for ``simple`` (seed 7), as gRPC frames it."""
    message = simple_request(7)
    path = tmp_path_factory.mktemp("nghttp") / "body.bin"
    path.write_bytes(b"\0" + len(message).to_bytes(4, "big") + message)
    return path


def _url(server: ServerProcess) -> str:
    return f"http://{server.grpc_url}{INFER}"


def _nghttp(*args: str) -> subprocess.CompletedProcess[bytes]:
    assert NGHTTP is not None
    return subprocess.run([NGHTTP, *args], capture_output=True, timeout=TIMEOUT_S, check=False)


def _answer(data: bytes) -> bytes:
    """The one message of a response body."""
    assert data[0] == 0, "not compressed"
    size = int.from_bytes(data[1:5], "big")
    assert len(data) == 5 + size
    return data[5:]


def test_nghttp_unary_model_infer(server: ServerProcess, body: Path) -> None:
    verbose = _nghttp("-v", "-n", "-d", str(body), *GRPC_HEADERS, _url(server))
    trace = verbose.stdout.decode()
    assert verbose.returncode == 0, trace + verbose.stderr.decode()
    assert ":status: 200" in trace and "content-type: application/grpc" in trace
    assert "grpc-status: 0" in trace
    assert "recv RST_STREAM" not in trace and "recv GOAWAY" not in trace
    plain = _nghttp("-d", str(body), *GRPC_HEADERS, _url(server))
    assert plain.returncode == 0
    check_simple(_answer(plain.stdout), 7)


def test_nghttp_with_a_tiny_window_gets_the_answer_in_pieces(
    server: ServerProcess, body: Path
) -> None:
    """The client's stream window is 63 bytes (``-w 6``): the answer goes out as the
    client's WINDOW_UPDATEs allow, several DATA frames, the trailers after the last."""
    run = _nghttp("-v", "-w", "6", "-d", str(body), *GRPC_HEADERS, _url(server))
    trace = run.stdout.decode(errors="replace")
    assert run.returncode == 0, trace
    assert len(re.findall(r"recv DATA frame <length=\d+, flags=0x00", trace)) >= 2
    assert "grpc-status: 0" in trace
    plain = _nghttp("-w", "6", "-d", str(body), *GRPC_HEADERS, _url(server))
    check_simple(_answer(plain.stdout), 7)


def test_nghttp_multiplexes_requests_on_one_connection(server: ServerProcess, body: Path) -> None:
    run = _nghttp("-v", "-n", "-m", "40", "-d", str(body), *GRPC_HEADERS, _url(server))
    trace = run.stdout.decode()
    assert run.returncode == 0, trace
    assert trace.count("grpc-status: 0") == 40
    assert "recv GOAWAY" not in trace


def test_h2load_many_streams_over_several_connections(server: ServerProcess, body: Path) -> None:
    assert H2LOAD is not None
    run = subprocess.run(
        [H2LOAD, "-n", "400", "-c", "4", "-m", "16", "-d", str(body), *GRPC_HEADERS,
         _url(server)],
        capture_output=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    out = run.stdout.decode()
    assert run.returncode == 0, out
    assert "400 succeeded, 0 failed, 0 errored" in out, out
    assert re.search(r"status codes: 400 2xx", out), out
