"""Stub side of BLS: ``InferenceRequest.exec/async_exec`` and model control from a model.

The stub's one socket now carries frames for several readers: the main loop wants the
server's commands (EXECUTE, IS_READY, ...), and any thread blocked in ``exec`` wants its child
request's responses, possibly while the main thread is itself inside ``execute``. ``FrameMux``
reads as leader/follower: whichever waiting thread finds no reader becomes the reader, reads
the frames that have arrived, hands each to whoever it is for, and wakes the others; so a
model may call ``exec`` from ``execute`` or from its own threads without a dedicated reader
thread on the hot path. ``async_exec`` waits on the event loop instead of a thread: while any
of its calls is out, the loop watches the socket (``add_reader``) and reads what arrives
itself (``FrameMux.poll``), and a call's answer, whichever thread routes it, resolves the
future the coroutine awaits (``FrameMux.take_answer``); many calls at once cost no thread.

``BlsClient`` is what ``pb_utils`` calls (``pb_utils._set_bls``): it sends BLS_REQUEST frames
(tensors inline or, when large, in shared memory: ``shm_tensors``) and turns BLS_RESPONSE
frames into ``pb_utils.InferenceResponse`` objects; ``exec(decoupled=True)`` returns a
``ResponseIterator`` over 0..N responses ending with the final one, as Triton's.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ...types import DataType
from . import ipc, pb_utils, shm_tensors

if TYPE_CHECKING:  # imported by a model's coroutine, not by the stub (stub_loop)
    import asyncio

# The batch id of the ``execute`` call running in this context (-1: none known, e.g. a thread
# the model started): the server cancels a child when its parent batch is cancelled.
current_batch: ContextVar[int] = ContextVar("tritium_bls_parent", default=-1)

_TYPE_CODE = {
    t.wire: getattr(pb_utils, "TYPE_STRING" if t is DataType.BYTES else f"TYPE_{t.wire}")
    for t in DataType
}
Frame = tuple[int, Any, ipc.Buffers]
_REPLIES = (ipc.BLS_REPLY, ipc.CALL_REPLY)  # one answer, by call id (CALL_REPLY: stub_observe)
_ANSWERS = (ipc.BLS_RESPONSE, *_REPLIES)


class _InputsFailed(Exception):
    """The inputs could not be sent (shared memory full): an error response."""


class _Call:
    """One child request (or control request) waiting for its answers; ``wake``: what to call
    when the next one arrives (an ``async_exec`` waiting on its loop), or None."""

    __slots__ = ("answers", "done", "wake")

    def __init__(self) -> None:
        self.answers: deque[Frame] = deque()
        self.done = False
        self.wake: Callable[[], None] | None = None


class FrameMux:
    """Leader/follower reads of one ``BlockingChannel`` by several threads."""

    def __init__(self, channel: ipc.BlockingChannel, on_cancel: Callable[[Any], None]) -> None:
        self._on_cancel = on_cancel
        self.reattach(channel)

    def reattach(self, channel: ipc.BlockingChannel) -> None:
        """Read ``channel`` from now on, as a new mux: in a forked child (``stub_fork``),
        whose copy of the condition may have been held by a thread that does not exist."""
        self._channel = channel
        self._cond = threading.Condition()
        self._reading = False
        self._waiters = 0
        self._closed = False
        self._commands: deque[Frame] = deque()
        self._calls: dict[int, _Call] = {}
        self._diverted_kind = -1  # commands of this kind go to ``next_diverted`` (divert)
        self._diverted: deque[Frame] = deque()

    def next_command(self) -> Frame:
        """The server's next command for the main loop; EOFError once the server is gone."""
        commands = self._commands
        return self._wait(lambda: bool(commands), commands.popleft)

    def divert(self, kind: int) -> None:
        """Commands of ``kind`` go to ``next_diverted`` (a helper thread's: the main loop
        may be busy in ``execute``) from now on, not to ``next_command``."""
        with self._cond:
            self._diverted_kind = kind

    def next_diverted(self) -> Frame:
        """The next command of the diverted kind; EOFError once the server is gone. While
        its thread waits here it takes its turn reading the socket like any waiter."""
        diverted = self._diverted
        return self._wait(lambda: bool(diverted), diverted.popleft)

    def register(self, call_id: int) -> _Call:
        call = _Call()
        with self._cond:
            self._calls[call_id] = call
        return call

    def next_answer(self, call_id: int, call: _Call) -> Frame:
        """The next answer to ``call``; its registration ends with the final one."""
        answers = call.answers
        frame = self._wait(lambda: bool(answers), answers.popleft)
        if frame[0] in _REPLIES or frame[1][2]:  # a reply, or the final response
            with self._cond:
                self._calls.pop(call_id, None)
        return frame

    def take_answer(self, call_id: int, call: _Call, wake: Callable[[], None]) -> Frame | None:
        """The next answer to ``call`` if it has arrived (its registration ends with the final
        one); else None, and ``wake`` is called, by whichever thread routes it, once it does
        or once the server is gone. EOFError when the server is gone and nothing is left."""
        with self._cond:
            if call.answers:
                call.wake = None
                frame = call.answers.popleft()
                if frame[0] in _REPLIES or frame[1][2]:
                    self._calls.pop(call_id, None)
                return frame
            if self._closed:
                raise EOFError("server closed the connection")
            call.wake = wake
            return None

    def forget(self, call_id: int) -> None:
        """Nobody waits for ``call_id`` any more: its answers are dropped as they come."""
        with self._cond:
            call = self._calls.pop(call_id, None)
            if call is not None:
                call.wake = None

    def fileno(self) -> int:
        return self._channel.fileno()

    def poll(self) -> None:
        """Route the frames that have arrived, without waiting: a model busy in ``execute``
        (nobody reading) asking ``is_cancelled()`` still sees the server's CANCEL."""
        with self._cond:
            while not self._reading and not self._closed and self._channel.readable():
                self._read_one()

    def _read_one(self) -> None:
        """Read a frame as the reader (called holding the condition, released while
        reading), and the frames that came in the same read, and route them; wake the
        waiting threads (and a closed socket wakes every ``async_exec`` waiting too)."""
        cond = self._cond
        self._reading = True
        cond.release()
        frames: list[Frame] = []
        closed = False
        try:
            frames.append(self._channel.recv())
            while self._channel.buffered():  # no one else would read those: the socket is
                frames.append(self._channel.recv())  # drained, nothing makes it readable
        except (EOFError, OSError):
            closed = True
        finally:
            cond.acquire()
            self._reading = False
        for frame in frames:
            self._route(frame)
        if closed:
            self._closed = True
            for call in self._calls.values():
                self._wake(call)
        if self._waiters:
            cond.notify_all()

    def _wait(self, ready: Callable[[], bool], take: Callable[[], Frame]) -> Frame:
        cond = self._cond
        with cond:
            while not ready():
                if self._closed:
                    raise EOFError("server closed the connection")
                if self._reading:
                    self._waiters += 1
                    cond.wait()
                    self._waiters -= 1
                else:
                    self._read_one()
            return take()

    def _route(self, frame: Frame) -> None:
        kind, body = frame[0], frame[1]
        if kind in _ANSWERS:
            call = self._calls.get(body[0])
            if call is not None:
                call.answers.append(frame)
                self._wake(call)
        elif kind == ipc.CANCEL:
            self._on_cancel(body)
        elif kind == self._diverted_kind:
            self._diverted.append(frame)
        else:
            self._commands.append(frame)

    @staticmethod
    def _wake(call: _Call) -> None:
        wake = call.wake
        if wake is not None:
            call.wake = None
            wake()


class BlsClient:
    """``pb_utils``' BLS and model-control calls, over the stub's channel."""

    def __init__(
        self,
        mux: FrameMux,
        send: Callable[[int, Any, ipc.Buffers | None], None],
        segments: shm_tensors.SegmentPool | None,
        instance_name: str,
    ) -> None:
        self._mux = mux
        self._send = send
        self.segments = segments
        self.instance = instance_name  # for its messages (the stub sets it again at INIT)
        self._ids = itertools.count(1)
        self._watching: dict[asyncio.AbstractEventLoop, int] = {}  # loop → its async calls
        self._watch_lock = threading.Lock()
        self.enabled = False  # exec is refused until initialize returned, and in finalize

    def reattach(self) -> None:
        """In a forked child (``stub_fork``): a new lock, no loop watching, and tensors
        inline (the child's link carries them; its parent moves them to shared memory)."""
        self._watching = {}
        self._watch_lock = threading.Lock()
        self.segments = None

    # -- inference ---------------------------------------------------------------------------
    def start(self, request: pb_utils.InferenceRequest, decoupled: bool) -> tuple[int, _Call]:
        """Send ``request`` to the server; its answers are awaited with ``next_response``."""
        if not self.enabled:
            raise pb_utils.TritonModelException(
                "BLS is only supported during the 'execute' function."
            )
        call_id = next(self._ids)
        out = shm_tensors.FrameTensors(self.segments)
        try:
            inputs = [(t.name(), out.pack(t._as_array())) for t in request.inputs()]
        except OSError as exc:  # shared memory is full: an error response, as Triton's
            out.rollback()
            raise _InputsFailed(f"unable to pass the inputs: {exc}") from None
        wire = (
            call_id,
            current_batch.get(),
            bool(decoupled),
            request.model_name(),
            int(request.model_version()),
            request.request_id(),
            request.correlation_id(),
            int(request.flags()),
            int(request.timeout()),
            inputs,
            list(request._requested_output_names),
            request.parameters(),
        )
        call = self._mux.register(call_id)
        try:
            self._send(ipc.BLS_REQUEST, wire, out.buffers)
        except ipc.FrameTooLarge as exc:  # over what the server accepts: nothing was sent
            self._mux.forget(call_id)
            out.rollback()
            raise _InputsFailed(f"unable to pass the request: {exc}") from None
        except OSError:  # the other end is gone (a forked child's parent: stub_fork)
            self._mux.forget(call_id)
            out.rollback()
            raise _InputsFailed("BLS request failed: the server closed the connection") from None
        return call_id, call

    def next_response(self, call_id: int, call: _Call) -> tuple[Any, bool]:
        """(the next ``pb_utils.InferenceResponse`` or None for a flag-only final, final)."""
        if call.done:
            raise StopIteration
        try:
            frame = self._mux.next_answer(call_id, call)
        except EOFError:
            return self._gone(call)
        return self._answered(call, frame)

    def _answered(self, call: _Call, frame: Frame) -> tuple[Any, bool]:
        _, body, buffers = frame
        _, payload, final = body
        call.done = bool(final)
        return (None if payload is None else self._response(payload, buffers)), call.done

    @staticmethod
    def _gone(call: _Call) -> tuple[Any, bool]:
        call.done = True
        return _error("BLS request failed: the server closed the connection"), True

    def _response(
        self, payload: shm_tensors.ResponseWire, buffers: ipc.Buffers
    ) -> pb_utils.InferenceResponse:
        tensors, message, extra = payload
        if message is not None:
            return _error(
                message, extra if isinstance(extra, int) else pb_utils.TritonError.INTERNAL
            )
        assert tensors is not None  # no error message: the server sent the outputs
        outputs = []
        for name, packed in tensors:
            array = shm_tensors.unpack(packed, buffers, self.segments)
            outputs.append(pb_utils.Tensor._wrap(name, array, _TYPE_CODE[packed[0]]))
        response = pb_utils.InferenceResponse(outputs)
        if extra:
            response._parameters = extra
        return response

    def exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        started = self._begin(request, decoupled)
        if not isinstance(started, tuple):
            return started  # an error response, or a decoupled call's iterator
        return self._single(*started)

    def _begin(self, request: pb_utils.InferenceRequest, decoupled: bool, wait: bool = True) -> Any:
        """Send the request: (call id, call) to wait on; for a decoupled call its
        ``ResponseIterator`` (unless ``wait`` is False: the caller waits for the first
        response itself); an error response if the inputs could not be sent."""
        try:
            call_id, call = self.start(request, decoupled)
        except _InputsFailed as exc:
            response = _error(str(exc))
            return ResponseIterator(self, 0, None, response) if decoupled else response
        if decoupled and wait:
            return ResponseIterator(self, call_id, call)
        return call_id, call

    def _single(self, call_id: int, call: _Call) -> pb_utils.InferenceResponse:
        """A non-decoupled call: its one response (a flag-only final may follow it)."""
        last = None
        while not call.done:
            response, _ = self.next_response(call_id, call)
            if response is not None:
                last = response
        return _single_answer(last)

    async def async_exec(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """Sent at once; awaited on the running loop (no thread), so many run at once. A
        decoupled call gives its ``ResponseIterator`` once the first response came, as
        Triton's (its ``Exec`` returns with the first response): a model that then iterates
        a child that answers once does not hold the loop."""
        started = self._begin(request, decoupled, wait=False)
        if not isinstance(started, tuple):
            return started
        call_id, call = started
        import asyncio  # imported by the loop that runs this (lazily in the stub: stub_loop)

        loop = asyncio.get_running_loop()
        self._watch(loop)
        try:
            if decoupled:
                response, final = await self._next_async(loop, call_id, call)
                return ResponseIterator(self, call_id, None if final else call, response, True)
            last = None
            while not call.done:
                response, _ = await self._next_async(loop, call_id, call)
                if response is not None:
                    last = response
            return _single_answer(last)
        except BaseException:  # cancelled: the answers still to come are dropped
            self._mux.forget(call_id)
            raise
        finally:
            self._unwatch(loop)

    async def _next_async(
        self, loop: asyncio.AbstractEventLoop, call_id: int, call: _Call
    ) -> tuple[Any, bool]:
        """``next_response`` awaited on ``loop``."""
        try:
            frame = await self._next_frame(loop, call_id, call)
        except EOFError:
            return self._gone(call)
        return self._answered(call, frame)

    async def _next_frame(
        self, loop: asyncio.AbstractEventLoop, call_id: int, call: _Call
    ) -> Frame:
        while True:
            arrived = loop.create_future()
            frame = self._mux.take_answer(call_id, call, _waker(loop, arrived))
            if frame is not None:
                return frame
            await arrived

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """While ``loop`` has a call out, it reads the frames that arrive (nobody else may)."""
        with self._watch_lock:
            count = self._watching.get(loop, 0)
            if not count:
                loop.add_reader(self._mux.fileno(), self._mux.poll)
            self._watching[loop] = count + 1

    def _unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._watch_lock:
            count = self._watching.pop(loop) - 1
            if count:
                self._watching[loop] = count
            elif not loop.is_closed():
                loop.remove_reader(self._mux.fileno())

    def cancel(self, call_id: int) -> None:
        self._send(ipc.BLS_CANCEL, call_id, None)

    # -- relayed calls (stub_fork: a forked child's, sent on by its parent) -----------------
    def relay(
        self, kind: int, body: tuple[Any, ...], buffers: ipc.Buffers | None
    ) -> tuple[int, _Call]:
        """Send ``kind`` with a call id of ours ahead of ``body``; its answers are awaited
        with ``relayed_answer``. ``FrameTooLarge``: nothing was sent."""
        call_id = next(self._ids)
        call = self._mux.register(call_id)
        try:
            self._send(kind, (call_id, *body), buffers)
        except BaseException:
            self._mux.forget(call_id)
            raise
        return call_id, call

    def relayed_answer(self, call_id: int, call: _Call) -> Frame:
        return self._mux.next_answer(call_id, call)

    def forget(self, call_id: int) -> None:
        self._mux.forget(call_id)

    def send_frame(self, kind: int, body: Any) -> None:
        self._send(kind, body, None)

    # -- model control ---------------------------------------------------------------------
    def control(self, action: str, args: list[Any]) -> Any:
        """Triton's ModelLoader: load / unload / ready, answered once the server is done."""
        call_id = next(self._ids)
        call = self._mux.register(call_id)
        try:
            self._send(ipc.BLS_CONTROL, (call_id, action, args), None)
        except ipc.FrameTooLarge as exc:
            self._mux.forget(call_id)
            raise pb_utils.TritonModelException(
                f"Failed to process the request for model '{self.instance}', message: {exc}"
            ) from None
        _, body, _ = self._mux.next_answer(call_id, call)
        ok, value = body[1]
        if not ok:
            raise pb_utils.TritonModelException(
                f"Failed to process the request for model '{self.instance}', message: {value}"
            )
        return value


class ResponseIterator:
    """The responses of a decoupled BLS call (Triton's ResponseIterator): iterating yields
    each response as it arrives, the last one too (which may have no outputs); iterating
    again after the end replays them. ``cancel()`` cancels the child request."""

    def __init__(
        self,
        client: BlsClient,
        call_id: int,
        call: _Call | None,
        first: Any = None,
        has_first: bool = False,
    ) -> None:
        """``call`` None: no more responses come. ``first`` (``has_first``, or when not
        None): a response that already came (None: a flag-only final)."""
        self._client, self._id, self._call = client, call_id, call
        self._seen: list[Any] = []
        if has_first or first is not None:
            self._seen.append(pb_utils.InferenceResponse() if first is None else first)
        self._index = 0
        self._finished = call is None

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._seen):
            self._index = 0
        return self

    def __next__(self) -> Any:
        if self._index < len(self._seen):  # one that came already (or a replay)
            self._index += 1
            return self._seen[self._index - 1]
        if self._finished:
            raise StopIteration
        assert self._call is not None
        response, final = self._client.next_response(self._id, self._call)
        if response is None:
            response = pb_utils.InferenceResponse()  # the flag-only final, as Triton gives it
        self._seen.append(response)
        self._index = len(self._seen)
        if final:
            self._finished = True
        return response

    def cancel(self) -> None:
        if not self._finished:
            self._client.cancel(self._id)


def _waker(loop: asyncio.AbstractEventLoop, arrived: asyncio.Future[None]) -> Callable[[], None]:
    """What resolves ``arrived`` from the thread that routes the answer: directly on the
    loop's own thread (its ``poll``), through ``call_soon_threadsafe`` from any other."""
    owner = threading.get_ident()  # the loop's thread: async_exec runs on it

    def wake() -> None:
        if threading.get_ident() == owner:
            _resolve(arrived)
        else:
            loop.call_soon_threadsafe(_resolve, arrived)

    return wake


def _resolve(arrived: asyncio.Future[None]) -> None:
    if not arrived.done():
        arrived.set_result(None)


def _single_answer(last: pb_utils.InferenceResponse | None) -> pb_utils.InferenceResponse:
    """A non-decoupled call's answer: its last response, or Triton's error if none came."""
    return last if last is not None else _error("Unexpected empty response.")


def _error(message: str, code: int = pb_utils.TritonError.INTERNAL) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
