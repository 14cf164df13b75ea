"""``InferenceResponse`` and the iterators over a request's responses: ``ResponseIterator``
(a plain thread waits) and ``AsyncResponseIterator`` (the caller's event loop awaits).

A request's responses cross from the server's loop as raw items (tritium's response and its
final flag) into the iterator's sink; they become ``InferenceResponse`` objects (tensor
conversion included) in the caller's thread, when taken."""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ..request import InferenceRequest as _CoreRequest
from ..types import InferenceResponse as _CoreResponse
from ._errors import TritonError, triton_error
from ._loop import AsyncSink, ServerLoop, ThreadSink
from ._tensor import Tensor

if TYPE_CHECKING:
    from ._model import Model
    from ._request import InferenceRequest


@dataclass
class InferenceResponse:
    """One response: its outputs (``Tensor`` by name), its error, and whether it is the
    request's last (``final``)."""

    model: Model
    request_id: str | None = None
    parameters: dict[str, str | int | bool] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    error: TritonError | None = None
    classification_label: str | None = None
    final: bool = False


class _Accepted:
    """The request was scheduled (a blocking ``infer`` returns on it)."""


class _Refused:
    """The request was refused before scheduling: ``error`` raises."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


ACCEPTED: Final = _Accepted()
Item = tuple[_CoreResponse | None, bool] | _Accepted | _Refused


class Handle:
    """A request in flight as the server's loop sees it: its responses go to ``sink``; the
    server's request is kept to cancel it."""

    __slots__ = ("sink", "request", "cancelled", "announce")

    def __init__(self, sink: ThreadSink[Item] | AsyncSink[Item], announce: bool) -> None:
        self.sink = sink
        self.request: _CoreRequest | None = None
        self.cancelled = False
        self.announce = announce  # put ACCEPTED once scheduled (a blocking caller waits)

    def __call__(self, response: _CoreResponse | None, final: bool) -> None:
        self.sink.put((response, final))

    def started(self, request: _CoreRequest) -> None:
        self.request = request
        if self.cancelled:
            request.cancel()
        if self.announce:
            self.sink.put(ACCEPTED)

    def refused(self, error: BaseException) -> None:
        self.sink.put(_Refused(error))

    def cancel(self) -> None:  # on the server's loop
        self.cancelled = True
        if self.request is not None:
            self.request.cancel()


def convert(model: Model, item: tuple[_CoreResponse | None, bool]) -> InferenceResponse:
    """The caller's response for tritium's (an error's ``args`` end with the response, as
    Triton's do)."""
    response, final = item
    if response is None:
        return InferenceResponse(model, final=final)
    outputs = {t.name: Tensor._from_values(t.datatype, t.shape, t.data) for t in response.outputs}
    parameters = dict(response.parameters)
    version = int(response.model_version) if response.model_version else model.version
    served = model._served(response.model_name, version)
    result = InferenceResponse(served, response.id or None, parameters, outputs, None, None, final)
    if response.error is not None:
        result.error = triton_error(response.error)
        result.error.args += (result,)
    return result


class _Iterator:
    def __init__(
        self, model: Model, loop: ServerLoop, handle: Handle, raise_on_error: bool
    ) -> None:
        self._model = model
        self._loop = loop
        self._handle = handle
        self._raise_on_error = raise_on_error
        self._complete = False

    def cancel(self) -> None:
        """Cancel the request: a queued one is dropped, a running model is told
        (``is_cancelled()``); the iterator ends with a CANCELLED error response."""
        if not self._complete:
            try:
                self._loop.soon(self._handle.cancel)
            except TritonError:  # the server has stopped: the request is over
                pass

    def _taken(self, response: InferenceResponse) -> InferenceResponse:
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response


class ResponseIterator(_Iterator):
    """The responses of a request, in a plain thread (``Model.infer``)."""

    def __init__(
        self,
        model: Model,
        loop: ServerLoop,
        handle: Handle,
        request: InferenceRequest,
        raise_on_error: bool = True,
    ) -> None:
        super().__init__(model, loop, handle, raise_on_error)
        assert isinstance(handle.sink, ThreadSink)
        self._sink: ThreadSink[Item] = handle.sink
        self._stash: list[Item] = []
        self._converted: queue.SimpleQueue[InferenceResponse] | None = None
        self._user_queue = request.response_queue

    def _wait_accepted(self) -> None:
        """Wait until the server scheduled the request (its refusal raises here)."""
        while True:
            item = self._sink.get()
            if isinstance(item, _Refused):
                raise triton_error(item.error) from None
            if item is ACCEPTED:
                break
            self._stash.append(item)
        if self._user_queue is not None:  # as Triton: a thread fills the caller's queue
            self._converted = queue.SimpleQueue()
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._converted is not None and self._user_queue is not None
        final = False
        while not final:
            response = self._next_raw()
            self._converted.put(response)
            self._user_queue.put_nowait(response)
            final = response.final

    def _next_raw(self) -> InferenceResponse:
        item = self._stash.pop(0) if self._stash else self._sink.get()
        assert isinstance(item, tuple)
        return convert(self._model, item)

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        if self._converted is not None:
            return self._taken(self._converted.get())
        return self._taken(self._next_raw())


class AsyncResponseIterator(_Iterator):
    """The responses of a request, on the caller's event loop (``Model.async_infer``).
    A refusal before scheduling raises at the first ``__anext__``."""

    def __init__(
        self,
        model: Model,
        loop: ServerLoop,
        handle: Handle,
        request: InferenceRequest,
        raise_on_error: bool = True,
    ) -> None:
        super().__init__(model, loop, handle, raise_on_error)
        assert isinstance(handle.sink, AsyncSink)
        self._sink: AsyncSink[Item] = handle.sink
        self._converted: asyncio.Queue[InferenceResponse | _Refused] | None = None
        self._pump: asyncio.Task[None] | None = None
        user = request.response_queue
        if user is not None:  # as Triton: a task on the caller's loop fills its queue
            self._converted = asyncio.Queue()
            self._pump = asyncio.get_running_loop().create_task(self._fill(user))

    async def _fill(self, user: Any) -> None:
        assert self._converted is not None
        final = False
        while not final:
            try:
                response = await self._next_raw()
            except TritonError as exc:
                self._converted.put_nowait(_Refused(exc))
                return
            self._converted.put_nowait(response)
            user.put_nowait(response)
            final = response.final

    async def _next_raw(self) -> InferenceResponse:
        item = await self._sink.get()
        if isinstance(item, _Refused):
            raise triton_error(item.error) from None
        assert isinstance(item, tuple)
        return convert(self._model, item)

    def __aiter__(self) -> AsyncResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        if self._converted is None:
            return self._taken(await self._next_raw())
        got = await self._converted.get()
        if isinstance(got, _Refused):
            self._complete = True
            raise triton_error(got.error)
        return self._taken(got)
