"""One gRPC listener's settings: a plain record the front-end builds from its flags
(``frontends/grpc/listener.py:grpc_settings``), so that the transport reads no server
options. Times in seconds."""

from __future__ import annotations

from dataclasses import dataclass

from ..http2.pings import PingPolicy


@dataclass(frozen=True, slots=True)
class Settings:
    """``max_receive``/``max_send``: the largest request and response message; ``max_streams``:
    SETTINGS_MAX_CONCURRENT_STREAMS. The bounds of a connection (``bounds.py``):
    ``preface_timeout``, ``idle_timeout``, ``stall_timeout``, ``input_bytes``,
    ``output_bytes``. Pings (``transport/http2/pings.py:PingPolicy``): ``ping_interval``,
    ``ping_permit_idle``, ``ping_max_strikes``, ``ping_max_unanswered``; our keepalive pings
    every ``keepalive_time`` (0: none), each answered within ``keepalive_timeout``. A
    connection drains after ``max_age`` (0: never) with ``max_age_grace`` (0: no bound).
    ``compression``: the level of the responses of methods marked ``infer`` ("none", "low",
    "medium", "high")."""

    max_receive: int
    max_send: int
    max_streams: int
    preface_timeout: float
    idle_timeout: float
    stall_timeout: float
    input_bytes: int
    output_bytes: int
    ping_interval: float
    ping_permit_idle: bool
    ping_max_strikes: int
    ping_max_unanswered: int
    keepalive_time: float
    keepalive_timeout: float
    max_age: float
    max_age_grace: float
    compression: str


def ping_policy(settings: Settings) -> PingPolicy:
    """A new connection's ping policy (grpc core's abuse policy, ``transport/http2/pings.py``)."""
    return PingPolicy(
        interval=settings.ping_interval,
        permit_idle=settings.ping_permit_idle,
        max_strikes=settings.ping_max_strikes,
        max_unanswered=settings.ping_max_unanswered,
    )
