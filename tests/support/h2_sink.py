"""An ``Events`` handler that records what tritium's HTTP/2 core (``transport/http2``) tells
it, and a core with the gRPC front-end's bounds: unit tests and the frame-level fuzz target
drive the sans-IO core with it."""

from __future__ import annotations

from typing import Any

from tritium.transport.http2 import FloodLedger, H2Server, Limits

MAX_FRAME = 1 << 20
MAX_HEADER_LIST = 16 * 1024


class EventSink:
    """Each event as a tuple (name, args...); DATA is copied (its view is the core's)."""

    def __init__(self, acknowledge: bool = False) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.core: H2Server | None = None
        self.acknowledge = acknowledge  # give DATA back at once, as a reading handler does

    def on_request(self, stream_id: int, headers: Any, end_stream: bool) -> None:
        self.events.append(("request", stream_id, list(headers), end_stream))

    def on_data(self, stream_id: int, data: memoryview, flow: int, end_stream: bool) -> None:
        self.events.append(("data", stream_id, bytes(data), flow, end_stream))
        if self.acknowledge and flow and self.core is not None:
            self.core.acknowledge(stream_id, flow)

    def on_reset(self, stream_id: int, code: int) -> None:
        self.events.append(("reset", stream_id, code))

    def on_window(self, stream_id: int) -> None:
        self.events.append(("window", stream_id))

    def on_settings(self) -> None:
        self.events.append(("settings",))

    def on_ping(self) -> None:
        self.events.append(("ping",))

    def on_ping_ack(self, payload: bytes) -> None:
        self.events.append(("ping_ack", payload))

    def on_goaway(self, last_stream_id: int, code: int, debug: bytes) -> None:
        self.events.append(("goaway", last_stream_id, code, debug))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [event for event in self.events if event[0] == name]


def core(sink: EventSink, **bounds: int) -> H2Server:
    """A core with the gRPC front-end's settings (``bounds`` overrides them)."""
    settings = {
        "max_streams": 100,
        "max_frame": MAX_FRAME,
        "max_header_list": MAX_HEADER_LIST,
        "max_block": 2 * MAX_HEADER_LIST,
        "stream_window": 1 << 20,
        "connection_window": 16 << 20,
        **bounds,
    }
    h2 = H2Server(sink, Limits(**settings), FloodLedger(0.0))
    sink.core = h2
    return h2
