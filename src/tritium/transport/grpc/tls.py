"""TLS for the gRPC endpoint with Triton's flags (``--grpc-use-ssl``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert``, ``--grpc-use-ssl-mutual``).

Triton builds grpc's ``SslServerCredentials`` from these: the certificate chain and key, the
root certificates, and ``GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY`` only under
``--grpc-use-ssl-mutual``. Without it grpc keeps its default,
``GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE``: the server asks no client for a certificate and
the root certificates verify nothing. We do the same, but still load ``--grpc-root-cert`` when it
is given, so a wrong path fails at start instead of lying in wait for the day mutual TLS is
switched on (Triton reads the file and silently ignores one it cannot open).

HTTP/2 over TLS (RFC 9113 §9.2) wants TLS 1.2 or later, no TLS compression, no renegotiation
and ephemeral key exchange with an AEAD cipher under TLS 1.2; ALPN offers ``h2``, as grpc's
servers do. Only the CAs named by ``--grpc-root-cert`` are trusted for client certificates,
never the system's store (``ssl.create_default_context`` would load it)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

ALPN_PROTOCOLS = ["h2"]
# TLS 1.2 suites HTTP/2 allows (ECDHE + AEAD); TLS 1.3 suites are all allowed and set apart.
_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The five flags above, as the front-end reads them (file paths; "" when not given)."""

    use_ssl: bool
    use_ssl_mutual: bool
    server_cert: str
    server_key: str
    root_cert: str


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    """The TLS context of the gRPC listener; None serves plaintext HTTP/2 (h2c).

    Raises OSError with a message naming the flag and the file when a file cannot be read, is
    not PEM, or the key does not match the certificate; the runtime refuses to start with it."""
    if not (tls.use_ssl or tls.use_ssl_mutual):
        return None
    if not (tls.server_cert and tls.server_key):
        raise OSError("gRPC TLS needs --grpc-server-cert and --grpc-server-key")
    if tls.use_ssl_mutual and not tls.root_cert:
        raise OSError("--grpc-use-ssl-mutual needs --grpc-root-cert (the CA of client certs)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_ciphers(_TLS12_CIPHERS)
    context.set_alpn_protocols(ALPN_PROTOCOLS)
    _load_chain(context, tls.server_cert, tls.server_key)
    if tls.root_cert:
        _load_roots(context, tls.root_cert)
    context.verify_mode = ssl.CERT_REQUIRED if tls.use_ssl_mutual else ssl.CERT_NONE
    return context


def _refuse_password() -> str:
    """An encrypted key has no flag for its password (nor in Triton): fail instead of letting
    OpenSSL prompt on the terminal, which would hang a server started by a supervisor."""
    raise ValueError("the key is encrypted; give an unencrypted PEM key")


def _load_chain(context: ssl.SSLContext, cert: str, key: str) -> None:
    _readable("--grpc-server-cert", cert)
    _readable("--grpc-server-key", key)
    try:
        context.load_cert_chain(cert, key, password=_refuse_password)
    except (OSError, ValueError) as exc:
        raise OSError(
            f"cannot load --grpc-server-cert {cert!r} with --grpc-server-key {key!r}: "
            f"{_reason(exc)}"
        ) from None


def _load_roots(context: ssl.SSLContext, root: str) -> None:
    _readable("--grpc-root-cert", root)
    try:
        context.load_verify_locations(cafile=root)
    except (OSError, ValueError) as exc:
        raise OSError(f"cannot load --grpc-root-cert {root!r}: {_reason(exc)}") from None
    if not context.cert_store_stats()["x509"]:
        raise OSError(f"cannot load --grpc-root-cert {root!r}: it holds no certificate")


def _readable(flag: str, path: str) -> None:
    """Names the one file that cannot be opened (OpenSSL's error would not say which)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise OSError(f"cannot read {flag} {path!r}: {exc.strerror or exc}") from None


_REASONS = {
    "KEY_VALUES_MISMATCH": "the key does not match the certificate",
    "NO_CERTIFICATE_OR_CRL_FOUND": "no PEM certificate in it",
    "NO_START_LINE": "not PEM",
}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        return _REASONS.get(reason, reason or "not a PEM certificate chain and private key")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
