"""Listening sockets of the HTTP front-end (and the metrics endpoint): plain or TLS."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from ...options import ServerOptions
from .limits import HttpLimits
from .protocol import HttpProtocol, render_internal


def https_context(options: ServerOptions) -> ssl.SSLContext | None:
    """The TLS context of ``--http-ssl-cert``/``--http-ssl-key``; None serves plain HTTP.

    Raises OSError (or ssl.SSLError, one) when the files cannot be read or do not match."""
    if not options.http_ssl_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(options.http_ssl_cert, options.http_ssl_key or None)
    return context


async def listen_http(
    app: Any,
    where: tuple[str, int],
    limits: HttpLimits,
    ssl: ssl.SSLContext | None = None,
) -> asyncio.Server:
    """Serve ``app`` (a handler, with an optional ``render_error``) on ``where``."""
    loop = asyncio.get_running_loop()
    render = getattr(app, "render_error", render_internal)
    return await loop.create_server(
        lambda: HttpProtocol(app, limits, render),
        where[0],
        where[1],
        reuse_address=True,
        backlog=1024,
        ssl=ssl,
        ssl_handshake_timeout=limits.header_timeout if ssl is not None else None,
    )
