"""``h2``'s server connection with RFC 9113 §5.1.2's answer to a client that opens more
streams than our SETTINGS_MAX_CONCURRENT_STREAMS: RST_STREAM(REFUSED_STREAM) on each stream
beyond it, and the connection lives.

``h2`` raises ``TooManyStreamsError`` instead, a connection error: the whole read is lost
and the connection ends with PROTOCOL_ERROR, though the RFC treats it as a stream error and
names REFUSED_STREAM as the code that tells the client it may retry the request. A stream
refused here still goes through HPACK (its header block updates the shared dynamic table,
so the next stream's headers decode right) and through ``h2``'s stream state (its ID is
used; DATA the client already sent on it is dropped, its bytes given back to the
connection window), but no event reaches the connection: it never becomes a call.
"""

from __future__ import annotations

import logging
from typing import Any

import h2.connection
from h2.connection import AllowedStreamIDs, ConnectionInputs, _decode_headers
from h2.errors import ErrorCodes
from hyperframe.frame import HeadersFrame

log = logging.getLogger("tritium")


class ServerConnection(h2.connection.H2Connection):
    def _receive_headers_frame(self, frame: HeadersFrame) -> tuple[list[Any], list[Any]]:
        if frame.stream_id in self.streams:
            return super()._receive_headers_frame(frame)
        if self.open_inbound_streams < self.local_settings.max_concurrent_streams:
            return super()._receive_headers_frame(frame)
        return self._refuse(frame)

    def _refuse(self, frame: HeadersFrame) -> tuple[list[Any], list[Any]]:
        """A new stream over the bound: decoded, opened and reset at once."""
        headers = _decode_headers(self.decoder, frame.data)
        events = self.state_machine.process_input(ConnectionInputs.RECV_HEADERS)
        stream = self._get_or_create_stream(
            frame.stream_id, AllowedStreamIDs(not self.config.client_side)
        )
        stream.receive_headers(headers, "END_STREAM" in frame.flags, self.config.header_encoding)
        log.debug(
            "HTTP/2 stream %d refused: over SETTINGS_MAX_CONCURRENT_STREAMS (%d)",
            frame.stream_id,
            self.local_settings.max_concurrent_streams,
        )
        return stream.reset_stream(ErrorCodes.REFUSED_STREAM), events
