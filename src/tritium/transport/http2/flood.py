"""Control frames that make the server work without making progress on a call (pure logic,
clock passed in).

``FloodLedger`` is a token bucket over SETTINGS, PING, WINDOW_UPDATE, PRIORITY, RST_STREAM,
GOAWAY, CONTINUATION, unknown types, HEADERS that open no stream, and empty DATA without
END_STREAM. Each costs one credit. The bucket starts at ``BURST`` credits and refills at
``REFILL_PER_S`` a second up to ``BURST`` (nghttp2 allows RST_STREAM at a burst of 1,000
then 33 a second); each stream the client opens earns ``STREAM_CREDIT`` (its PRIORITY,
RST_STREAM and WINDOW_UPDATEs), each DATA frame the server sends earns
``CREDIT_PER_DATA_SENT`` and each 16 KiB of it one more: the WINDOW_UPDATEs that acknowledge
it and the BDP PINGs a gRPC client sends as data arrives (grpc core sends a stream and a
connection WINDOW_UPDATE and often a PING for every message of a long stream: perf_analyzer's
streaming at concurrency 4 spent 3 for each DATA frame, and at 2 credits a frame it was cut
after ~3,000 answers). Envoy allows 10 inbound WINDOW_UPDATEs per DATA frame sent
(``max_inbound_window_update_frames_per_data_frame_sent``). Below zero the connection is
flooding: GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

BURST = 1000
REFILL_PER_S = 100.0
STREAM_CREDIT = 10
CREDIT_PER_DATA_SENT = 10
MAX_CREDIT = 1 << 20  # what earned credit may bank up to

_DATA, _HEADERS = 0x0, 0x1
_END_STREAM = 0x1


class FloodLedger:
    __slots__ = ("_credit", "_refilled", "_highest", "flooded")

    def __init__(self, now: float) -> None:
        self._credit = float(BURST)
        self._refilled = now
        self._highest = 0  # the highest stream id a HEADERS frame used
        self.flooded = False

    def refill(self, now: float) -> None:
        """Time's credit, up to ``BURST`` (earned credit above it is kept)."""
        if self._credit < BURST:
            self._credit = min(float(BURST), self._credit + (now - self._refilled) * REFILL_PER_S)
        self._refilled = now

    def frame(self, kind: int, flags: int, length: int, stream_id: int) -> bool:
        """A received frame, from its header: True once the connection floods."""
        if kind == _DATA:
            if length or flags & _END_STREAM:
                return False  # a payload, or the end of the request
        elif kind == _HEADERS and stream_id > self._highest:  # a new stream
            self._highest = stream_id
            self._earn(STREAM_CREDIT)
            return False
        self._credit -= 1
        if self._credit < 0:
            self.flooded = True
        return self.flooded

    def sent(self, frames: int, size: int) -> None:
        """``frames`` DATA frames of ``size`` bytes in all went to the peer."""
        self._earn(CREDIT_PER_DATA_SENT * frames + (size >> 14))

    def _earn(self, credit: int) -> None:
        self._credit = min(float(MAX_CREDIT), self._credit + credit)
