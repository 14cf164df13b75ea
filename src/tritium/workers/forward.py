"""Sequences and the response cache across workers: every correlation ID has one owner worker
(``owner_of``), whose sequence batcher keeps its state, and so has every cache key
(``Member.cache_owner``); a request that reaches another worker is forwarded to the owner
over the owner's own Unix socket, and its responses come back.

Each worker listens on a Linux abstract-namespace Unix socket, ``\\0<name>.w<index>``
(``<name>``: ``tritium-<supervisor pid>-<random>``, made by the supervisor): nothing in the
file system, so nothing is left behind whatever way the server dies. An abstract socket has
no permissions, so the owner checks each connection's peer (``SO_PEERCRED``): the same user,
and a process whose parent is this worker's supervisor (a sibling worker); any other is
closed unread. Frames are a 4-byte length and a pickle:
both ends are processes of the same server, started by the same supervisor from the same
code, and the client's bytes inside are tensors (numpy arrays), never code. An error crosses
as its kind and message (``channel.error_doc``).

- to the owner: ``("request", id, ClientRequest)``, ``("cancel", id)``;
- back: ``("response", id, InferenceResponse without its error, error doc or None, final)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import struct
import zlib
from typing import Any

from ..errors import ServerError, unavailable
from ..server import InferenceRequest, InferenceServer, ResponseSender
from ..types import ClientRequest, InferenceResponse
from .channel import MAX_MESSAGE, error_doc, error_of

log = logging.getLogger("tritium")

_HEADER = struct.Struct(">I")
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CONNECT_TIMEOUT_S = 10.0


def owner_of(correlation_id: int | str, workers: int) -> int:
    """The worker that keeps a sequence's state (the same answer in every worker)."""
    if isinstance(correlation_id, int):
        return correlation_id % workers
    return zlib.crc32(correlation_id.encode()) % workers


def socket_path(name: str, index: int) -> str:
    """Worker ``index``'s abstract socket address (the leading NUL: no file)."""
    return f"\0{name}.w{index}"


def sibling(sock: Any) -> bool:
    """Whether the peer of ``sock`` (a socket, or asyncio's wrapper of one) is a worker of
    this server: the same user, and its parent is our parent (the supervisor)."""
    if sock is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size)
    pid, uid, _ = _CREDS.unpack(creds)
    if uid != os.geteuid() or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
    return len(fields) > 1 and int(fields[1]) == os.getppid()


async def _read(reader: asyncio.StreamReader) -> Any:
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > MAX_MESSAGE:
        raise ConnectionError(f"forwarded frame of {size} bytes over {MAX_MESSAGE}")
    return pickle.loads(await reader.readexactly(size))  # noqa: S301 - our own processes


def _write(writer: asyncio.StreamWriter, frame: tuple[Any, ...]) -> None:
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(body)) + body)


class SequenceOwner:
    """The owner's side: runs forwarded requests as its own and sends their responses."""

    def __init__(self, server: InferenceServer, path: str) -> None:
        self._server = server
        self._path = path
        self._listener: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        # bound here, not by asyncio: uvloop refuses an abstract address (EINVAL)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self._path)
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self._listener = await asyncio.start_unix_server(self._serve, sock=sock)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        running: dict[int, InferenceRequest] = {}
        if not sibling(writer.get_extra_info("socket")):
            log.warning("sequence socket: a connection from outside this server closed")
            writer.close()
            return
        try:
            while True:
                frame = await _read(reader)
                if frame[0] == "request":
                    self._start(writer, running, int(frame[1]), frame[2])
                elif frame[0] == "cancel" and int(frame[1]) in running:
                    running[int(frame[1])].cancel()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for request in running.values():
                request.cancel()  # the forwarding worker is gone: so is its client
            writer.close()

    def _start(
        self,
        writer: asyncio.StreamWriter,
        running: dict[int, InferenceRequest],
        ident: int,
        client: ClientRequest,
    ) -> None:
        def callback(response: InferenceResponse | None, final: bool) -> None:
            if final:
                running.pop(ident, None)
            if writer.is_closing():
                return
            error = None if response is None or response.error is None else response.error
            sent = None if response is None else _without_error(response)
            _write(
                writer,
                ("response", ident, sent, None if error is None else error_doc(error), final),
            )

        try:
            request = self._server.request(client)
            running[ident] = request
            self._server.submit(request, ResponseSender(callback))
        except ServerError as exc:
            running.pop(ident, None)
            _write(writer, ("response", ident, None, error_doc(exc), True))


class Forwarder:
    """The forwarding side: one connection per owner, opened when first needed."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._links: dict[int, tuple[asyncio.StreamWriter, dict[int, ResponseSender]]] = {}
        self._opening: dict[int, asyncio.Future[None]] = {}
        self._next = 0

    def forward(self, owner: int, request: InferenceRequest, sender: ResponseSender) -> None:
        self._next += 1
        ident = self._next
        asyncio.ensure_future(self._send(owner, ident, request, sender))

    async def _send(
        self, owner: int, ident: int, request: InferenceRequest, sender: ResponseSender
    ) -> None:
        try:
            writer, waiting = await self._link(owner)
        except OSError as exc:
            sender.send(
                _failed(
                    request,
                    f"the worker that keeps sequence "
                    f"{request.options.correlation_id} is not serving "
                    f"({exc.strerror or exc})",
                ),
                True,
            )
            return
        waiting[ident] = sender
        request.on_cancel = lambda: (
            None if writer.is_closing() else _write(writer, ("cancel", ident))
        )
        _write(writer, ("request", ident, request.client))

    async def _link(self, owner: int) -> tuple[asyncio.StreamWriter, dict[int, ResponseSender]]:
        while owner not in self._links:
            if owner in self._opening:
                await asyncio.shield(self._opening[owner])
                continue
            opening: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._opening[owner] = opening
            try:
                reader, writer = await _connect(socket_path(self._name, owner))
                waiting: dict[int, ResponseSender] = {}
                self._links[owner] = (writer, waiting)
                asyncio.ensure_future(self._receive(owner, reader, waiting))
            finally:
                del self._opening[owner]
                opening.set_result(None)
        return self._links[owner]

    async def _receive(
        self, owner: int, reader: asyncio.StreamReader, waiting: dict[int, ResponseSender]
    ) -> None:
        try:
            while True:
                _, ident, response, error, final = await _read(reader)
                sender = waiting.pop(ident, None) if final else waiting.get(ident)
                if sender is None:
                    continue
                if error is not None:
                    assert sender.request is not None
                    response = response or InferenceResponse(
                        sender.request.model_name, "", sender.request.id
                    )
                    response.error = error_of(error)
                sender.send(response, final)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            link = self._links.pop(owner, None)
            if link is not None:
                link[0].close()
            for sender in waiting.values():
                if sender.request is not None and not sender.finished:
                    sender.send(
                        _failed(
                            sender.request, "the worker that kept this sequence's state stopped"
                        ),
                        True,
                    )
            waiting.clear()


async def _connect(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to a sibling's abstract socket (connected here, not by asyncio: uvloop
    refuses an abstract address; a local connect waits only while its backlog is full)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_TIMEOUT_S)
        await asyncio.to_thread(sock.connect, address)
        sock.setblocking(False)
        return await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
    except BaseException:
        sock.close()
        raise


def _failed(request: InferenceRequest, why: str) -> InferenceResponse:
    return InferenceResponse(request.model_name, "", request.id, error=unavailable(why))


def _without_error(response: InferenceResponse) -> InferenceResponse:
    """The response with its error left out (the error travels as a document: error_doc)."""
    fields = (response.model_name, response.model_version, response.id, response.outputs)
    return InferenceResponse(*fields, response.parameters)
