"""TLS for the gRPC listener (Triton's --grpc-use-ssl* flags)."""

from __future__ import annotations

import ssl

from ...options import ServerOptions


def server_ssl_context(options: ServerOptions) -> ssl.SSLContext | None:
    """None unless --grpc-use-ssl; raises OSError when a file cannot be loaded."""
    if not options.grpc_use_ssl:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    context.load_cert_chain(options.grpc_server_cert, options.grpc_server_key)
    if options.grpc_use_ssl_mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(options.grpc_root_cert)
    return context
