"""The per-request access log (``--access-log-file``, tritium's own): one JSON object per line
per inference request, written off the event loop, bounded and rotated.

A front-end that finds ``InferenceServer.access_log`` set starts an ``AccessEntry`` when an
inference request arrives (protocol, peer, identity, body bytes), hands it to the server with
the request (``InferenceServer.request`` links the ``InferenceRequest``, whose timestamps give
the queue and compute times), and ``AccessLog.put``s it once the answer is written or failed
(status, transport code, bytes out). When the log is off there is no entry at all.

``put`` only appends to a bounded buffer (no formatting, no I/O): a writer thread formats
the buffered entries and writes them in batches, a few times a second or as soon as a batch is
full. A full buffer drops the line and counts it; the writer logs how many were dropped.
Before a line would take the file past ``max_bytes``, the file is rotated: ``PATH.1`` ...
``PATH.<backups>`` (the oldest removed); with no backups the file starts over. Lines never
carry tensor data, header values or secrets: a token's name and the name of the restricted-API
header that admitted the request, never their values.

With ``--workers N`` every worker appends to the one file and they rotate it together: each
batch is written under a POSIX record lock on a descriptor the supervisor gave every worker
(``lock_fd``, a memfd); under it, a worker whose descriptor no longer names ``PATH`` (another
worker rotated it) opens ``PATH`` again, takes the file's size from the file itself, and
rotates when the batch would pass ``max_bytes``. One lock and two ``stat`` calls per batch
(a few batches a second per worker), none per request; lines are whole (one worker's batch
at a time) and every line lands in the file that was ``PATH`` when it was written.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from ..request import InferenceRequest

log = logging.getLogger("tritium")

DEFAULT_MAX_BYTES = 100 << 20
DEFAULT_BACKUPS = 5
BUFFER_LINES = 65_536  # entries waiting for the writer; more are dropped (and counted)
BATCH_LINES = 1024  # the writer is woken when this many wait
FLUSH_INTERVAL_S = 0.2  # otherwise it writes what waits this often
MAX_FIELD = 512  # client-chosen text (model names) is cut to this many characters


@dataclass(slots=True)
class AccessEntry:
    """One inference request's line, filled in as the request goes (on the event loop)."""

    protocol: str  # "http" | "grpc"
    peer: str
    identity: str | None = None  # the bearer token's name (never the token)
    api_key: str | None = None  # the restricted-API header that admitted it (never its value)
    stream: bool = False  # one request of a ModelStreamInfer stream (or generate_stream)
    model: str = ""
    version: str = ""
    request_id: str = ""  # the client's request id
    bytes_in: int = 0
    bytes_out: int = 0
    status: str = "SUCCESS"  # Triton's: SUCCESS or the error kind (INVALID_ARG, ...)
    code: int | None = None  # the transport's: HTTP status, gRPC status code
    request: InferenceRequest | None = None  # linked by InferenceServer.request
    began: float = 0.0  # wall clock at arrival
    began_ns: int = 0  # perf_counter_ns at arrival
    queue_us: int | None = None
    compute_us: int | None = None
    duration_us: int = 0

    @classmethod
    def begin(
        cls,
        protocol: str,
        peer: str,
        bytes_in: int,
        identity: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
    ) -> AccessEntry:
        return cls(
            protocol,
            peer,
            identity,
            api_key,
            stream,
            bytes_in=bytes_in,
            began=time.time(),
            began_ns=time.perf_counter_ns(),
        )

    def outcome(self, status: str, code: int | None) -> None:
        self.status, self.code = status, code

    def ended(self) -> None:
        """The answer is out: the request's own times (from its statistics timestamps)."""
        self.duration_us = (time.perf_counter_ns() - self.began_ns) // 1000
        request = self.request
        if request is None:
            return
        self.model, self.request_id = request.model_name, request.id
        version = request.model_version
        self.version = str(version) if isinstance(version, int) and version > 0 else ""
        if request.start_ns:
            self.queue_us = (request.start_ns - request.arrival_ns) // 1000
        timing = request.timing
        if timing is not None:
            self.compute_us = sum(timing) // 1000
        self.request = None  # the line keeps numbers, not the request (and its tensors)

    def as_doc(self) -> dict[str, Any]:
        stamp = datetime.fromtimestamp(self.began, UTC).isoformat(timespec="microseconds")
        return {
            "time": stamp.replace("+00:00", "Z"),
            "protocol": self.protocol,
            "stream": self.stream,
            "peer": self.peer,
            "identity": self.identity,
            "api_key": self.api_key,
            "model": self.model[:MAX_FIELD],
            "version": self.version[:MAX_FIELD],
            "request_id": self.request_id[:MAX_FIELD],
            "status": self.status,
            "code": self.code,
            "queue_us": self.queue_us,
            "compute_us": self.compute_us,
            "duration_us": self.duration_us,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }


class AccessLog:
    """The file, its bounds and its writer thread (``start=False``: no thread; ``drain``
    writes what waits, for tests)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int = DEFAULT_MAX_BYTES,
        backups: int = DEFAULT_BACKUPS,
        buffer_lines: int = BUFFER_LINES,
        start: bool = True,
        lock_fd: int = -1,
    ) -> None:
        self.path = os.fspath(path)
        self._lock_fd = lock_fd  # -1: this process writes the file alone
        self.max_bytes = max_bytes
        self.backups = backups
        self._limit = buffer_lines
        fd = self._open()
        self._fd: int | None = fd
        self._size = os.fstat(fd).st_size
        self._pending: deque[AccessEntry] = deque()
        self.dropped = 0  # lines dropped since the start (the buffer was full)
        self._reported = 0
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._run, name="tritium-access-log", daemon=True
            )
            self._thread.start()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    # -- the event loop's side -----------------------------------------------------------------
    def put(self, entry: AccessEntry) -> None:
        """The request's line, to be written soon; never blocks (a full buffer drops it)."""
        pending = self._pending
        if len(pending) >= self._limit or self._closed:
            self.dropped += 1
            return
        pending.append(entry)
        if len(pending) >= BATCH_LINES:
            self._wake.set()

    # -- the writer's side ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            self.drain()

    def drain(self) -> None:
        """Format and write every entry waiting (the writer thread, or ``close``)."""
        with self._write_lock:
            lines = []
            pending = self._pending
            while pending:
                lines.append(orjson.dumps(pending.popleft().as_doc()) + b"\n")
            if lines and self._fd is not None:
                if self._lock_fd < 0:
                    self._write(lines)
                else:
                    self._write_shared(lines)
            dropped = self.dropped
            if dropped != self._reported:
                log.warning(
                    "access log %s: %d lines dropped so far (the writer fell behind)",
                    self.path,
                    dropped,
                )
                self._reported = dropped

    def _write(self, lines: list[bytes]) -> None:
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            if self.max_bytes > 0 and self._size + size + len(line) > self.max_bytes:
                if chunk:
                    self._append(b"".join(chunk))
                    chunk, size = [], 0
                if self._size > 0:
                    self._rotate()
            chunk.append(line)
            size += len(line)
        if chunk:
            self._append(b"".join(chunk))

    def _write_shared(self, lines: list[bytes]) -> None:
        """``_write`` under the workers' lock, on the file that is ``PATH`` now."""
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, 0)
        try:
            self._follow()
            self._write(lines)
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, 0)

    def _follow(self) -> None:
        """Another worker may have rotated ``PATH`` since: open it again if so; the size
        is the file's (every worker appends to it)."""
        assert self._fd is not None
        try:
            current = os.stat(self.path)
            mine = os.fstat(self._fd)
            if (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
                fd = self._open()
                os.close(self._fd)
                self._fd = fd
            self._size = os.fstat(self._fd).st_size
        except OSError:  # PATH is gone (removed from outside): start it again
            try:
                fd = self._open()
            except OSError as exc:
                log.error("cannot open the access log %s: %s", self.path, exc)
                return
            os.close(self._fd)
            self._fd, self._size = fd, os.fstat(fd).st_size

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            self._size += len(data)
        except OSError as exc:  # a full disk must not stop the server; say so
            log.error("cannot write the access log %s: %s", self.path, exc)

    def _rotate(self) -> None:
        """PATH → PATH.1 → ... → PATH.<backups> (the oldest removed); none: start over."""
        assert self._fd is not None
        try:
            if self.backups <= 0:
                os.ftruncate(self._fd, 0)
                self._size = 0
                return
            for index in range(self.backups - 1, 0, -1):
                older = f"{self.path}.{index}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{index + 1}")
            os.replace(self.path, f"{self.path}.1")
            fd = self._open()  # until it opens, lines go on to the renamed file
        except OSError as exc:
            log.error("cannot rotate the access log %s: %s", self.path, exc)
            return
        os.close(self._fd)
        self._fd, self._size = fd, os.fstat(fd).st_size

    def close(self) -> None:
        """Write what waits and close the file (at shutdown)."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.drain()
        with self._write_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
