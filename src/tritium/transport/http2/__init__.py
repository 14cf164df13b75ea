"""A server-side HTTP/2 core (RFC 9113), sans-IO: ``H2Server.receive`` takes bytes and calls
the ``Events`` handler; its send methods queue frames that ``take_output`` hands out.

- ``frames``: frame types, flags, error codes, the 9-byte header, and every frame type's
  serialisation and parsing (``parse_frame``).
- ``hpack``: header blocks through ``hpack``'s public decoder (with a cache of blocks that
  do not change the dynamic table) and an own encoder of literals that never index.
- ``flood``: the token bucket of control frames that do no work (``FloodLedger``).
- ``connection``: the connection: preface, SETTINGS, streams and their states, flow control
  both ways, header blocks and their bounds, PING, RST_STREAM, GOAWAY.
"""

from .connection import Events, H2ConnectionError, H2Server, Limits, StreamGone
from .frames import PREFACE, ErrorCode
from .flood import FloodLedger

__all__ = [
    "PREFACE",
    "ErrorCode",
    "Events",
    "FloodLedger",
    "H2ConnectionError",
    "H2Server",
    "Limits",
    "StreamGone",
]
