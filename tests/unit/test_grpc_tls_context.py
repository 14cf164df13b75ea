"""transport/grpc/tls.py (through frontends/grpc/listener.py:ssl_context): the gRPC
listener's TLS context from Triton's flags. Handshakes run in memory (ssl.MemoryBIO), so
these check what a client meets without a socket."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from tests.support.certs import Certs, have_openssl, make_certs

from tritium.frontends.grpc.listener import ssl_context as server_ssl_context
from tritium.options import GrpcOptions, ServerOptions

pytestmark = pytest.mark.skipif(not have_openssl(), reason="openssl makes the certificates")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("grpc-tls"))


def _options(certs: Certs, **extra: object) -> ServerOptions:
    base: dict[str, object] = {
        "use_ssl": True,
        "server_cert": str(certs.server_cert),
        "server_key": str(certs.server_key),
    }
    return ServerOptions(grpc=GrpcOptions(**{**base, **extra}))  # type: ignore[arg-type]


def _context(certs: Certs, **extra: object) -> ssl.SSLContext:
    context = server_ssl_context(_options(certs, **extra))
    assert context is not None
    return context


def _client(certs: Certs, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.set_alpn_protocols(["h2"])
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[ssl.SSLObject, ...]:
    """Both ends over memory buffers; raises the first ssl.SSLError either side meets. Under
    TLS 1.3 a refused client certificate surfaces on the client's first read, so each side
    also reads once after the handshake."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"srv": False, "cli": False}
    for _ in range(20):
        for name, end in (("cli", cli), ("srv", srv)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    cli.write(b"ping")
    s_in.write(c_out.read())
    assert srv.read(4) == b"ping"
    c_in.write(s_out.read())
    try:
        cli.read(1)
    except ssl.SSLWantReadError:
        pass
    return srv, cli


def test_no_ssl_no_context(certs: Certs) -> None:
    assert server_ssl_context(ServerOptions()) is None
    no_ssl = GrpcOptions(server_cert=str(certs.server_cert))
    assert server_ssl_context(ServerOptions(grpc=no_ssl)) is None


def test_plain_tls_context(certs: Certs) -> None:
    context = _context(certs)
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    assert context.options & ssl.OP_NO_COMPRESSION
    assert not context.check_hostname
    srv, cli = _handshake(context, _client(certs))
    assert cli.selected_alpn_protocol() == "h2"
    assert srv.getpeercert() is None  # no client certificate asked for


def test_root_cert_without_mutual_requests_no_client_cert(certs: Certs) -> None:
    """Triton leaves grpc's GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE without --grpc-use-ssl-
    mutual: a client without a certificate is served, and one with a stranger's too."""
    context = _context(certs, root_cert=str(certs.ca))
    assert context.verify_mode == ssl.CERT_NONE
    _handshake(context, _client(certs))
    srv, _ = _handshake(context, _client(certs, certs.other_cert, certs.other_key))
    assert srv.getpeercert() is None


def test_mutual_requires_a_client_cert_from_the_root(certs: Certs) -> None:
    context = _context(certs, use_ssl_mutual=True, root_cert=str(certs.ca))
    assert context.verify_mode == ssl.CERT_REQUIRED
    srv, cli = _handshake(context, _client(certs, certs.client_cert, certs.client_key))
    assert cli.selected_alpn_protocol() == "h2"
    subject = dict(item[0] for item in srv.getpeercert()["subject"])  # type: ignore[index]
    assert subject["commonName"] == "client"


@pytest.mark.parametrize("who", ["nobody", "stranger"])
def test_mutual_refuses_no_cert_and_a_strangers(certs: Certs, who: str) -> None:
    context = _context(certs, use_ssl_mutual=True, root_cert=str(certs.ca))
    client = (
        _client(certs) if who == "nobody" else _client(certs, certs.other_cert, certs.other_key)
    )
    with pytest.raises(ssl.SSLError):
        _handshake(context, client)


def test_mutual_trusts_only_the_root_not_the_system_store(certs: Certs) -> None:
    context = _context(certs, use_ssl_mutual=True, root_cert=str(certs.ca))
    assert context.cert_store_stats()["x509"] == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"server_cert": "/nonexistent/cert.pem"}, "cannot read --grpc-server-cert"),
        ({"server_key": "/nonexistent/key.pem"}, "cannot read --grpc-server-key"),
        ({"root_cert": "/nonexistent/ca.pem"}, "cannot read --grpc-root-cert"),
        ({"server_cert": ""}, "needs --grpc-server-cert and --grpc-server-key"),
        ({"use_ssl_mutual": True}, "--grpc-use-ssl-mutual needs --grpc-root-cert"),
    ],
)
def test_missing_files_name_the_flag(certs: Certs, extra: dict[str, object], message: str) -> None:
    with pytest.raises(OSError, match=message):
        server_ssl_context(_options(certs, **extra))


def test_mismatched_key_says_so(certs: Certs) -> None:
    with pytest.raises(OSError, match="the key does not match the certificate"):
        server_ssl_context(_options(certs, server_key=str(certs.client_key)))


@pytest.mark.parametrize("content", ["", "not a certificate\n"])
def test_garbage_files_are_refused(certs: Certs, tmp_path: Path, content: str) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text(content)
    with pytest.raises(OSError, match="cannot load --grpc-server-cert"):
        server_ssl_context(_options(certs, server_cert=str(junk)))
    with pytest.raises(OSError, match="cannot load --grpc-root-cert"):
        server_ssl_context(_options(certs, root_cert=str(junk)))


def test_a_directory_is_not_a_certificate(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot read --grpc-server-cert"):
        server_ssl_context(_options(certs, server_cert=str(tmp_path)))


def test_an_encrypted_key_fails_instead_of_prompting(certs: Certs, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [
            *("openssl", "rsa", "-in", str(certs.server_key), "-aes256"),
            *("-passout", "pass:secret", "-out", str(encrypted)),
        ],
        check=True,
        capture_output=True,
    )
    with pytest.raises(OSError, match="encrypted"):
        server_ssl_context(_options(certs, server_key=str(encrypted)))
