"""One completion's inferences, one per choice, and the documents that answer it (the
whole answer, or its server-sent events)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from functools import partial
from typing import Any, Final
from uuid import uuid4

import orjson

from ...api import Door, Inference, InferenceCall
from ...server import InferenceRequest, OpenAIMetrics, ResponseSender
from ...types import ClientRequest, InferenceResponse, Tensor
from .choice import Choice
from .errors import error_event
from .formats import ModelFormat
from .schema import Generation

# The OpenAI door of the inference call: decoupled models stream; the HTTP receive stamps.
OPENAI: Final = Door(
    "http", None, ("HTTP_RECV_START", "HTTP_RECV_END"), ("HTTP_SEND_START", "HTTP_SEND_END")
)
DONE: Final = b"data: [DONE]\n\n"


class Job:
    """One completion's requests, one per choice, their responses merged into one queue (in
    the order they come) and read by ``events``; ``cancel`` ends the ones still running."""

    def __init__(
        self,
        inference: Inference,
        gen: Generation,
        model: ModelFormat,
        inputs: tuple[Tensor, ...],
        calls: Sequence[InferenceCall],
    ) -> None:
        self.gen = gen
        self.id = ("chatcmpl-" if gen.chat else "cmpl-") + uuid4().hex
        self.created = int(time.time())
        self.counts_tokens = model.counts_tokens
        stops = () if model.takes_stop else gen.stop
        prefix = gen.prompt if gen.echo and not model.takes_echo else ""
        self.choices = [Choice(i, stops, gen.max_tokens, prefix) for i in range(gen.n)]
        self._queue: asyncio.Queue[tuple[int, InferenceResponse | None, bool]] = asyncio.Queue()
        self._requests: list[InferenceRequest] = []
        self.error: Exception | None = None  # the response error that ended it
        # --metrics: the client-side token times (set by the route; None: not recorded)
        self.metrics: OpenAIMetrics | None = None
        self.started = time.perf_counter()  # the route sets the request's arrival
        self._last = [0.0] * gen.n  # each choice's last token (perf_counter; 0: none yet)
        try:
            for i, call in enumerate(calls):
                client = ClientRequest(gen.model, -1, f"{self.id}-{i}", inputs)
                call.asked(gen.model, "", client.id)
                started = inference.prepare(client, call)
                callback = call.traced(partial(self._on_response, i))
                inference.submit(started, ResponseSender(callback))
                self._requests.append(started)
        except BaseException:
            self.cancel()
            raise

    def _on_response(self, index: int, response: InferenceResponse | None, final: bool) -> None:
        self._queue.put_nowait((index, response, final))

    def cancel(self) -> None:
        for request in self._requests:
            request.cancel()

    async def events(self) -> AsyncIterator[tuple[Choice, str | None]]:
        """``(choice, text)`` as each choice's text comes, ``(choice, None)`` when it ends;
        a failed response raises its error."""
        live = len(self.choices)
        while live:
            index, response, final = await self._queue.get()
            choice = self.choices[index]
            if choice.done:
                continue  # cut at a stop sequence: the rest is not read
            if response is not None:
                if response.error is not None:
                    self.error = response.error
                    raise response.error
                text = choice.feed(response)
                if text:
                    self._timed(index)
                    yield choice, text
                if choice.stopped():  # at a stop sequence the server applies
                    self._requests[index].cancel()
                    final = True
            if final:
                rest = choice.end()
                if rest:
                    self._timed(index)
                    yield choice, rest
                live -= 1
                yield choice, None

    def _timed(self, index: int) -> None:
        """A token of choice ``index`` goes out: the first of the request, or the next of
        its choice (OpenAIMetrics)."""
        metrics = self.metrics
        if metrics is None:
            return
        now = time.perf_counter()
        last = self._last
        if not any(last):
            metrics.token(self.gen.model, now - self.started, True)
        elif last[index]:
            metrics.token(self.gen.model, now - last[index], False)
        last[index] = now

    def usage(self) -> dict[str, int] | None:
        if not self.counts_tokens:
            return None
        prompt = self.choices[0].prompt_tokens or 0
        completion = sum(c.completion_tokens for c in self.choices)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def document(self, texts: list[str]) -> dict[str, Any]:
        """The whole answer (no stream)."""
        choices: list[dict[str, Any]] = []
        for choice, text in zip(self.choices, texts, strict=True):
            doc: dict[str, Any] = {"index": choice.index}
            if self.gen.chat:
                doc["message"] = {"role": "assistant", "content": text}
            else:
                doc["text"] = text
            doc["logprobs"] = None
            doc["finish_reason"] = choice.finish_reason()
            choices.append(doc)
        kind = "chat.completion" if self.gen.chat else "text_completion"
        return self._head(kind, choices, self.usage())

    def chunk(self, index: int, text: str | None, delta: dict[str, str] | None = None) -> bytes:
        """One event: ``text`` of choice ``index`` (None: its end, with its finish reason)."""
        finish = None if text is not None else self.choices[index].finish_reason()
        doc: dict[str, Any] = {"index": index}
        if self.gen.chat:
            if delta is None:
                delta = {} if text is None else {"content": text}
            doc["delta"] = delta
        else:
            doc["text"] = text or ""
        doc["logprobs"] = None
        doc["finish_reason"] = finish
        return self._event(self._head(self._chunk_kind, [doc], None, self.gen.include_usage))

    def usage_chunk(self) -> bytes:
        return self._event(self._head(self._chunk_kind, [], self.usage()))

    @property
    def _chunk_kind(self) -> str:
        return "chat.completion.chunk" if self.gen.chat else "text_completion"

    def _head(
        self, kind: str, choices: list[dict[str, Any]], usage: object, with_usage: bool = True
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.gen.model,
            "choices": choices,
        }
        if with_usage:
            doc["usage"] = usage
        return doc

    @staticmethod
    def _event(doc: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(doc) + b"\n\n"


async def answer(job: Job) -> bytes:
    """The whole answer's document (no stream); a failed response raises its error.
    Leaving early (the client went away) cancels the requests."""
    texts: list[list[str]] = [[] for _ in job.choices]
    try:
        async for choice, text in job.events():
            if text is not None:
                texts[choice.index].append(text)
    finally:
        job.cancel()
    return orjson.dumps(job.document(["".join(parts) for parts in texts]))


async def events(job: Job) -> AsyncGenerator[bytes, None]:
    """The server-sent events of a streamed completion, ``data: [DONE]`` last; an error
    after the 200 went out is one error event. Closing it (the client went away) cancels
    the requests."""
    try:
        if job.gen.chat:  # the first event of each choice gives its role
            for choice in job.choices:
                yield job.chunk(choice.index, "", {"role": "assistant", "content": ""})
        async for choice, text in job.events():
            yield job.chunk(choice.index, text)
        if job.gen.include_usage:
            yield job.usage_chunk()
    except Exception as exc:
        yield error_event(exc)
    finally:
        job.cancel()
    yield DONE
