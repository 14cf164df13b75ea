"""TLS, mutual TLS and response compression with @grpc/grpc-js on Node.js, against servers
started for them (see test_grpc_interop_node.py for the rest of the interop tests)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.certs import Certs, have_openssl, make_certs
from tests.support.grpc_messages import assert_simple_answer, simple_request, stream_responses
from tests.support.node_grpc import (  # noqa: F401 (grpc_js_installed: an autouse fixture)
    NEEDS_NODE,
    OK,
    UNAVAILABLE,
    NodeCall,
    NodeRun,
    assert_ok,
    grpc_js_installed,
    run_node,
)
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

pytestmark = NEEDS_NODE

INFER, STREAM = "ModelInfer", "ModelStreamInfer"


@pytest.fixture(scope="module")
def simple_repo(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("interop") / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / "simple", repo / "simple")
    return repo


def _server(repo: Path, *args: str) -> ServerProcess:
    return ServerProcess([repo], *args, wait_ready=False)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if not have_openssl():
        pytest.skip("openssl is not installed: cannot make test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(simple_repo: Path, certs: Certs) -> Iterator[ServerProcess]:
    proc = _server(
        simple_repo, "--grpc-use-ssl",
        "--grpc-server-cert", str(certs.server_cert), "--grpc-server-key", str(certs.server_key),
    )  # fmt: skip
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mtls_server(simple_repo: Path, certs: Certs) -> Iterator[ServerProcess]:
    proc = _server(
        simple_repo, "--grpc-use-ssl-mutual",
        "--grpc-server-cert", str(certs.server_cert), "--grpc-server-key", str(certs.server_key),
        "--grpc-root-cert", str(certs.ca),
    )  # fmt: skip
    yield proc
    proc.stop()


def _simple_over(proc: ServerProcess, tls: dict[str, str] | None) -> NodeRun:
    calls = [
        NodeCall.unary(INFER, simple_request(3)),
        NodeCall.bidi(STREAM, [simple_request(i, f"t{i}") for i in range(4)]),
    ]
    return run_node(proc.grpc_url, calls, tls=tls, serial=True)


def _assert_simple_run(run: NodeRun) -> None:
    assert_ok(run, 0)
    assert_simple_answer(pb.ModelInferResponse.FromString(run.calls[0].responses[0]), 3)
    assert_ok(run, 1)
    responses = stream_responses(run.calls[1].responses)
    assert [r.id for r in responses] == [f"t{i}" for i in range(4)]
    for i, response in enumerate(responses):
        assert_simple_answer(response, i)


def test_tls_with_the_ca(tls_server: ServerProcess, certs: Certs) -> None:
    _assert_simple_run(_simple_over(tls_server, {"root_cert": str(certs.ca)}))


def test_tls_untrusted_server_is_refused(tls_server: ServerProcess, certs: Certs) -> None:
    """The client trusts only the stranger CA: the handshake fails, no call goes through."""
    run = _simple_over(tls_server, {"root_cert": str(certs.other_ca)})
    assert [c.status for c in run.calls] == [UNAVAILABLE, UNAVAILABLE]


def test_mutual_tls_with_the_client_cert(mtls_server: ServerProcess, certs: Certs) -> None:
    tls = {
        "root_cert": str(certs.ca),
        "client_cert": str(certs.client_cert),
        "client_key": str(certs.client_key),
    }
    _assert_simple_run(_simple_over(mtls_server, tls))


@pytest.mark.parametrize("who", ["no certificate", "stranger's certificate"])
def test_mutual_tls_refuses_other_clients(
    mtls_server: ServerProcess, certs: Certs, who: str
) -> None:
    tls = {"root_cert": str(certs.ca)}
    if who != "no certificate":
        tls |= {"client_cert": str(certs.other_cert), "client_key": str(certs.other_key)}
    run = _simple_over(mtls_server, tls)
    # refused in the handshake (UNAVAILABLE) or, under TLS 1.3 where the client may finish
    # first, when the server's alert ends the connection: either way no call succeeds
    assert all(c.status != OK and c.responses == [] for c in run.calls), run.calls


@pytest.fixture(scope="module")
def compressing_server(simple_repo: Path) -> Iterator[ServerProcess]:
    proc = _server(simple_repo, "--grpc-infer-response-compression-level", "high")
    yield proc
    proc.stop()


def test_response_compression(compressing_server: ServerProcess) -> None:
    """``--grpc-infer-response-compression-level high``: grpc-js accepts gzip and deflate, so
    the server compresses inference responses and grpc-js inflates them."""
    run = _simple_over(compressing_server, None)
    _assert_simple_run(run)
    assert [w["response_encoding"] in ("gzip", "deflate") for w in run.wire] == [True, True]
