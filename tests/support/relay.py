"""A TCP relay whose connections to the server come from another loopback address
(``127.0.0.2``): a second client host for the official clients, which cannot choose their
source address. Threads, for the tests only."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class Relay:
    """Listens on 127.0.0.1 (``port``); each connection is relayed to ``target`` from
    ``source`` (the server sees that host as the client)."""

    def __init__(self, target: tuple[str, int], source: str = "127.0.0.2") -> None:
        self._target = target
        self._source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:  # closed
                return
            outbound = socket.create_connection(self._target, source_address=(self._source, 0))
            self._open += [inbound, outbound]
            for a, b in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._open:
            sock.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
