"""BLS from processes the model forks (``multiprocessing.Pool`` workers, ``os.fork``).

A forked child gets a copy of the stub: its socket to the server, shared with the parent and
every sibling (frames one of them reads are lost to the others), and its locks as they were at
the fork, maybe held by a thread the child does not have. So at each ``os.fork`` of the stub
(``os.register_at_fork``):

- before: a socketpair, the child's link to its parent;
- in the child: the stub's frames go over its end of the link instead of the server's socket,
  as a new ``FrameMux``, send lock, ``Outbox`` and ``StubLoop`` (``Stub.forked``); the copy of
  the server's socket is closed. Tensors go inline: the link has no size bound;
- in the parent: a relay thread reads the child's frames and sends them on through the
  stub's own ``BlsClient`` under call ids of its own (``BlsClient.relay``), large tensors moved
  into the stub's shared-memory segments; a thread per call brings the answers back to the
  child under the child's call ids, tensors inline. The parent's client already serves
  concurrent calls from many threads, so 10 workers calling at once are 10 such calls.

A grandchild works the same way, relayed by its parent. Logs the child writes
(``pb_utils.Logger``) reach the server through the relay. Nothing runs, and nothing is
created, in a stub whose model never forks.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from . import ipc, pb_utils, shm_tensors
from .bls_client import BlsClient, Frame

_INTERNAL = pb_utils.TritonError.INTERNAL
_REPLIES = (ipc.BLS_REPLY, ipc.CALL_REPLY)


def install(bls: BlsClient, forked: Callable[[ipc.BlockingChannel], None]) -> None:
    """Relay the BLS calls of the children this process forks; ``forked``: what the child
    runs with its end of the link (``Stub.forked``)."""
    if hasattr(os, "register_at_fork"):
        hooks = _ForkHooks(bls, forked)
        os.register_at_fork(
            before=hooks.before, after_in_parent=hooks.parent, after_in_child=hooks.child
        )


class _ForkHooks:
    def __init__(self, bls: BlsClient, forked: Callable[[ipc.BlockingChannel], None]) -> None:
        self._bls = bls
        self._forked = forked
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def before(self) -> None:
        try:
            self._pair = socket.socketpair()
        except OSError:  # out of descriptors: the child gets a link that is closed
            self._pair = None

    def parent(self) -> None:
        pair, self._pair = self._pair, None
        if pair is not None:
            pair[1].close()
            relay = _Relay(self._bls, ipc.BlockingChannel(pair[0], checked=False))
            threading.Thread(target=relay.run, name="tritium-fork-relay", daemon=True).start()

    def child(self) -> None:
        pair, self._pair = self._pair, None
        if pair is None:
            try:
                pair = socket.socketpair()
            except OSError:
                return
        pair[0].close()  # without a parent on it: the child's BLS calls fail, nothing hangs
        self._forked(ipc.BlockingChannel(pair[1], checked=False))


class _Relay:
    """The parent's side of one child's link."""

    def __init__(self, upstream: BlsClient, link: ipc.BlockingChannel) -> None:
        self._up = upstream
        self._link = link
        self._send_lock = threading.Lock()
        self._calls: dict[int, int] = {}  # the child's BLS call id → ours (for its cancel)

    def run(self) -> None:
        try:
            while True:
                self._forward(*self._link.recv())
        except (EOFError, OSError):  # the child is gone
            pass
        finally:
            self._link.close()

    def _forward(self, kind: int, body: Any, buffers: ipc.Buffers) -> None:
        if kind == ipc.BLS_REQUEST:
            self._request(body, buffers)
        elif kind in (ipc.BLS_CONTROL, ipc.CALL):
            self._start(kind, body[0], tuple(body[1:]), None)
        elif kind == ipc.BLS_CANCEL:
            ours = self._calls.get(body)
            if ours is not None:
                self._up.cancel(ours)
        elif kind == ipc.OBSERVE:
            self._up.send_frame(kind, body)

    def _request(self, body: Any, buffers: ipc.Buffers) -> None:
        """A child request: its inputs, inline on the link, packed again for the server
        (large ones into shared memory)."""
        out = shm_tensors.FrameTensors(self._up.segments)
        try:
            inputs = [(name, out.pack(ipc.unpack_array(t, buffers))) for name, t in body[9]]
        except (OSError, ValueError, TypeError) as exc:
            out.rollback()
            self._failed(ipc.BLS_REQUEST, body[0], f"unable to pass the inputs: {exc}")
            return
        rest = (*body[1:9], inputs, *body[10:])
        if not self._start(ipc.BLS_REQUEST, body[0], rest, out.buffers):
            out.rollback()

    def _start(self, kind: int, child_id: int, rest: tuple[Any, ...], buffers: Any) -> bool:
        try:
            ours, call = self._up.relay(kind, rest, buffers)
        except (ipc.FrameTooLarge, OSError) as exc:
            self._failed(kind, child_id, f"unable to pass the request: {exc}")
            return False
        if kind == ipc.BLS_REQUEST:
            self._calls[child_id] = ours
        pump = threading.Thread(
            target=self._answers, args=(kind, child_id, ours, call), name="tritium-fork-answers"
        )
        pump.daemon = True
        pump.start()
        return True

    def _answers(self, asked: int, child_id: int, ours: int, call: Any) -> None:
        """Bring the answers of our call ``ours`` back to the child, the final one last."""
        try:
            while True:
                try:
                    kind, body, buffers = self._up.relayed_answer(ours, call)
                except EOFError:  # the server is gone
                    self._failed(asked, child_id, "the server closed the connection")
                    return
                final = kind in _REPLIES or bool(body[2])
                self._send(*self._for_child(child_id, (kind, body, buffers)))
                if final:
                    return
        except OSError:  # the child is gone: its answers are dropped as they come
            self._up.forget(ours)
        finally:
            self._calls.pop(child_id, None)

    def _for_child(self, child_id: int, frame: Frame) -> tuple[int, Any, ipc.Buffers]:
        kind, body, buffers = frame
        if kind != ipc.BLS_RESPONSE or body[1] is None or body[1][0] is None:
            return kind, (child_id, *body[1:]), []
        tensors, message, extra = body[1]
        inline: ipc.Buffers = []
        moved = [
            (name, ipc.pack_array(shm_tensors.unpack(t, buffers, self._up.segments), inline))
            for name, t in tensors
        ]
        return kind, (child_id, (moved, message, extra), body[2]), inline

    def _failed(self, kind: int, child_id: int, message: str) -> None:
        """The call could not be made: the error answer the child's caller expects."""
        if kind == ipc.BLS_REQUEST:
            answer: tuple[int, Any] = (
                ipc.BLS_RESPONSE,
                (child_id, (None, message, _INTERNAL), True),
            )
        elif kind == ipc.BLS_CONTROL:
            answer = (ipc.BLS_REPLY, (child_id, (False, message)))
        else:
            answer = (ipc.CALL_REPLY, (child_id, False, message))
        try:
            self._send(*answer, [])
        except OSError:
            pass

    def _send(self, kind: int, body: Any, buffers: ipc.Buffers) -> None:
        with self._send_lock:
            self._link.send(kind, body, buffers or None)
