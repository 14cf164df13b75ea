"""The gRPC front-end's ping policy from its flags (``transport/http2/pings.py:PingPolicy``)."""

from __future__ import annotations

from ...options import ServerOptions
from ...transport.http2.pings import PingPolicy


def ping_policy(options: ServerOptions) -> PingPolicy:
    grpc = options.grpc
    return PingPolicy(
        interval=grpc.http2_min_recv_ping_interval_without_data_ms / 1000,
        permit_idle=grpc.keepalive_permit_without_calls,
        max_strikes=grpc.http2_max_ping_strikes,
        max_unanswered=grpc.http2_max_pings_without_data,
    )
