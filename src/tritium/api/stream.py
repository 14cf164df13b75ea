"""An inference's responses as an async iterator (``Inference.stream``). Apart from
inference.py because mypyc does not compile async generators: this module stays interpreted
(see mypyc_modules.txt)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..request import InferenceRequest
from ..types import InferenceResponse


class ResponseStream:
    """The responses of one inference as they come (``Inference.stream``). Iterating it
    yields each response and raises a failed one's error (``ServerError``); ``responses``
    yields them all, errors included. Leaving either early cancels the request."""

    def __init__(self) -> None:
        self.request: InferenceRequest | None = None  # the server's, once started (to cancel)
        self._queue: asyncio.Queue[tuple[InferenceResponse | None, bool]] = asyncio.Queue()

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        self._queue.put_nowait((response, final))

    def __aiter__(self) -> AsyncIterator[InferenceResponse]:
        return self._raising()

    async def _raising(self) -> AsyncIterator[InferenceResponse]:
        async for response in self.responses():
            if response.error is not None:
                raise response.error
            yield response

    async def responses(self) -> AsyncIterator[InferenceResponse]:
        try:
            while True:
                response, final = await self._queue.get()
                if response is not None:
                    yield response
                if final:
                    return
        finally:  # the caller went away (or we are done): drop work that has not started
            if self.request is not None:
                self.request.cancel()
