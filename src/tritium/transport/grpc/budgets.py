"""What one gRPC connection may make the server do: per turn of the event loop, and in
control frames that do no work (pure logic, clock passed in).

Turns. One read is handed to the HTTP/2 core at most ``FRAMES_PER_TURN`` frames /
``BYTES_PER_TURN`` bytes at a time, and at most ``MESSAGES_PER_TURN`` request messages are
cut out of DATA (and started) per turn; the rest waits, with reading paused, for a later turn
of the loop, so every other connection gets its turns in between (a stream's message costs
tens of µs).

Unread answers. While the peer reads nothing (the socket's write buffer is past its high-water
mark), what the peer's frames make us write (SETTINGS and PING ACKs, RST_STREAM,
WINDOW_UPDATE, headers) is counted; past ``MAX_UNREAD_BYTES`` reading stops until the socket
drains, as grpc core stops reading past 10,000 pending induced frames.

Floods: the HTTP/2 core charges control frames that do no work to its ``FloodLedger``
(``transport/http2/flood.py``); a flood ends the connection with GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

FRAMES_PER_TURN = 100
BYTES_PER_TURN = 1 << 20
MESSAGES_PER_TURN = 64
MAX_UNREAD_BYTES = 256 * 1024
BUSY, UNREAD = 1, 2  # why reading is paused: work left for later turns, answers left unread
