"""The OpenAI routes of the HTTP listener (docs/openai.md): each handler is decode → the one
inference call (``Inference.prepare`` + ``submit``, once per choice) → encode, answered at once
or as server-sent events. Every refusal is OpenAI's error document (errors.py); a client
that goes away cancels its requests (the request cycle cancels the task or the stream)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Final
from uuid import uuid4

import orjson

from ...api import Door, Inference
from ...errors import ServerError
from ...server import InferenceRequest, InferenceServer, ResponseSender
from ...types import ClientRequest, InferenceResponse, Tensor
from ..http.messages import HttpRequest, HttpResponse, HttpStreamResponse, Result
from ..http.routes import ApiGroup, Route
from ..tensors import decode_off_loop
from .choice import Choice
from .errors import OpenAIError, error_event, error_response, model_not_found
from .formats import ModelFormat
from .schema import Generation, parse_body

# The OpenAI door of the inference call: decoupled models stream; no trace stamps of its own.
OPENAI: Final = Door("http", None, ("HTTP_RECV_START", "HTTP_RECV_END"), ("", ""))
DONE: Final = b"data: [DONE]\n\n"
OWNER: Final = "tritium"


class OpenAIRoutes:
    """The ``/v1`` routes over one server."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.created = int(time.time())  # what /v1/models says of every model
        # model name -> its format, with the spec it was read from (a reload makes a new one)
        self._formats: dict[str, tuple[object, ModelFormat]] = {}

    def routes(self) -> list[Route]:
        g = ApiGroup
        return [
            Route("GET", "/v1/models", self._models, g.METADATA),
            Route("GET", "/v1/models/{model}", self._model, g.METADATA),
            Route("POST", "/v1/completions", self._completions, g.INFERENCE),
            Route("POST", "/v1/chat/completions", self._chat, g.INFERENCE),
        ]

    @staticmethod
    def refusal(target: str, message: str, too_large: bool) -> HttpResponse | None:
        """A refused body of a request to ``target`` (HttpApp.refusal): OpenAI's error for
        the ``/v1/`` routes, 413 when it is too large; None for every other path."""
        if not target.startswith("/v1/"):
            return None
        error = OpenAIError(message, None, None, 413 if too_large else 400)
        return error_response(error)

    # -- models --------------------------------------------------------------------------------
    def _models(self, request: HttpRequest) -> HttpResponse:
        names = sorted({m["name"] for m in self.server.repository_index(True)})
        data = [self._model_doc(name) for name in names]
        return HttpResponse(200, [orjson.dumps({"object": "list", "data": data})])

    def _model(self, request: HttpRequest) -> HttpResponse:
        name = request.params["model"]
        try:
            self._lookup(name)
        except Exception as exc:
            return error_response(exc)
        return HttpResponse(200, [orjson.dumps(self._model_doc(name))])

    def _model_doc(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": OWNER}

    def _lookup(self, name: str) -> ModelFormat:
        """The ready model's format (read once per loaded config)."""
        try:
            spec = self.server.inference.model(name, -1).spec
        except ServerError:
            raise model_not_found(name) from None
        known = self._formats.get(name)
        if known is not None and known[0] is spec:
            return known[1]
        found = ModelFormat(spec)
        self._formats[name] = (spec, found)
        return found

    # -- completions ---------------------------------------------------------------------------
    def _completions(self, request: HttpRequest) -> Any:
        return self._generate(request, False)

    def _chat(self, request: HttpRequest) -> Any:
        return self._generate(request, True)

    async def _generate(self, request: HttpRequest, chat: bool) -> Result:
        try:
            size = len(request.body)  # a large body is read and rendered off the loop
            gen = await decode_off_loop(size, parse_body, request.body, chat)
            model = self._lookup(gen.model)
            inputs = await decode_off_loop(size, model.tensors, gen)
            job = Job(self.server.inference, gen, model, inputs)
        except Exception as exc:
            return error_response(exc)
        if gen.stream:
            return HttpStreamResponse(_events(job))
        try:
            return await _answer(job)
        except Exception as exc:
            return error_response(exc)


class Job:
    """One completion's requests, one per choice, their responses merged into one queue (in
    the order they come) and read by ``events``; ``cancel`` ends the ones still running."""

    def __init__(
        self, inference: Inference, gen: Generation, model: ModelFormat, inputs: tuple[Tensor, ...]
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
        try:
            for i in range(gen.n):
                client = ClientRequest(gen.model, -1, f"{self.id}-{i}", inputs)
                started = inference.prepare(client, OPENAI)
                inference.submit(started, ResponseSender(partial(self._on_response, i)))
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
                    raise response.error
                text = choice.feed(response)
                if text:
                    yield choice, text
                if choice.stopped():  # at a stop sequence the server applies
                    self._requests[index].cancel()
                    final = True
            if final:
                rest = choice.end()
                if rest:
                    yield choice, rest
                live -= 1
                yield choice, None

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


async def _answer(job: Job) -> HttpResponse:
    texts: list[list[str]] = [[] for _ in job.choices]
    try:
        async for choice, text in job.events():
            if text is not None:
                texts[choice.index].append(text)
    finally:
        job.cancel()
    doc = job.document(["".join(parts) for parts in texts])
    return HttpResponse(200, [orjson.dumps(doc)])


async def _events(job: Job) -> AsyncIterator[bytes]:
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
