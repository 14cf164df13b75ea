"""The OpenAI routes of the HTTP listener (docs/openai.md): each handler is decode → the one
inference call (``Inference.prepare`` + ``submit``, once per choice: job.py) → encode,
answered at once or as server-sent events. Every refusal is OpenAI's error document
(errors.py); a client that goes away cancels its requests (the request cycle cancels the task
or closes the stream). Each choice's inference has its ``InferenceCall`` (api/call.py): its
trace when the tracer samples it, its access-log line when the log is on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar
from uuid import uuid4

import orjson

from ...api import InferenceCall
from ...errors import ServerError
from ...server import InferenceServer
from ...types import ClientRequest, InferenceResponse, Tensor
from ..http.messages import HttpRequest, HttpResponse, HttpStreamResponse, Result, body_length
from ..http.routes import ApiGroup, Route
from ..tensors import decode_off_loop
from .errors import OpenAIError, as_openai, error_response, model_not_found
from .embeddings import EmbeddingModel, document, parse_embeddings
from .formats import ModelFormat
from .job import OPENAI, Job, answer, events
from .schema import parse_body

Read = TypeVar("Read")

OWNER: Final = "tritium"
# An OpenAI error's status as the access log's (Triton's error kinds)
_KIND_OF_STATUS: Final = {404: "NOT_FOUND", 500: "INTERNAL", 503: "UNAVAILABLE"}


class OpenAIRoutes:
    """The ``/v1`` routes over one server."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self._metrics = server.openai_metrics  # requests per route, token times
        self.created = int(time.time())  # what /v1/models says of every model
        # model name -> its format, with the spec it was read from (a reload makes a new one)
        self._formats: dict[str, tuple[object, ModelFormat]] = {}
        self._embedders: dict[str, tuple[object, EmbeddingModel]] = {}

    def routes(self) -> list[Route]:
        g = ApiGroup
        return [
            Route("GET", "/v1/models", self._models, g.METADATA),
            Route("GET", "/v1/models/{model}", self._model, g.METADATA),
            Route("POST", "/v1/completions", self._completions, g.INFERENCE),
            Route("POST", "/v1/chat/completions", self._chat, g.INFERENCE),
            Route("POST", "/v1/embeddings", self._embeddings, g.INFERENCE),
        ]

    @staticmethod
    def refusal(target: str, message: str, too_large: bool) -> HttpResponse | None:
        """A refused body of a request to ``target`` (HttpApp.refusal): OpenAI's error for
        the ``/v1/`` routes, 413 when it is too large; None for every other path."""
        if not target.startswith("/v1/"):
            return None
        return error_response(OpenAIError(message, None, None, 413 if too_large else 400))

    # -- models --------------------------------------------------------------------------------
    def _models(self, request: HttpRequest) -> HttpResponse:
        names = sorted({m["name"] for m in self.server.repository_index(True)})
        data = [self._model_doc(name) for name in names]
        self._metrics.answered("models", 200)
        return HttpResponse(200, [orjson.dumps({"object": "list", "data": data})])

    def _model(self, request: HttpRequest) -> HttpResponse:
        name = request.params["model"]
        try:
            self._lookup(name)
            response = HttpResponse(200, [orjson.dumps(self._model_doc(name))])
        except Exception as exc:
            response = error_response(exc)
        self._metrics.answered("model", response.status)
        return response

    def _model_doc(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": OWNER}

    def _lookup(self, name: str) -> ModelFormat:
        """The ready model's formats (read once per loaded config)."""
        return _per_config(self.server, self._formats, name, ModelFormat)

    def _embedding_model(self, name: str) -> EmbeddingModel:
        """The ready model's embedding contract (read once per loaded config)."""
        return _per_config(self.server, self._embedders, name, EmbeddingModel)

    # -- completions ---------------------------------------------------------------------------
    def _completions(self, request: HttpRequest) -> Any:
        return self._counted("completions", self._generate(request, False))

    def _chat(self, request: HttpRequest) -> Any:
        return self._counted("chat_completions", self._generate(request, True))

    async def _counted(self, route: str, answer: Coroutine[Any, Any, Result]) -> Result:
        """The answer, counted by route and status (a stream by its 200)."""
        result = await answer
        self._metrics.answered(route, result.status)
        return result

    async def _generate(self, request: HttpRequest, chat: bool) -> Result:
        started = time.perf_counter()
        size = len(request.body)  # a large body is read and rendered off the loop
        try:
            gen = await decode_off_loop(size, parse_body, request.body, chat)
        except Exception as exc:
            return _failed([self._call(request, 0, False)], exc)
        calls = [self._call(request, i, gen.stream, gen.model) for i in range(gen.n)]
        try:
            model = self._lookup(gen.model)
            inputs = await decode_off_loop(size, model.tensors, gen)
            job = Job(self.server.inference, gen, model, inputs, calls)
        except Exception as exc:
            return _failed(calls, exc)
        job.metrics, job.started = self._metrics, started
        if gen.stream:
            for call in calls:
                call.outcome("SUCCESS", 200)
            return HttpStreamResponse(_logged_events(job, calls))
        return await _answered(job, calls)

    # -- embeddings ----------------------------------------------------------------------------
    def _embeddings(self, request: HttpRequest) -> Any:
        return self._counted("embeddings", self._embed(request))

    async def _embed(self, request: HttpRequest) -> HttpResponse:
        size = len(request.body)  # a large body is read off the loop
        try:
            asked = await decode_off_loop(size, parse_embeddings, request.body)
        except Exception as exc:
            return _failed([self._call(request, 0, False)], exc)
        calls = [self._call(request, i, False, asked.model) for i in range(len(asked.texts))]
        try:
            model = self._embedding_model(asked.model)
            inputs = [model.tensors(asked, text) for text in asked.texts]
            responses = await self._infer_all(asked.model, inputs, calls)
        except asyncio.CancelledError:  # the client went away: nothing is answered
            for call in calls:
                call.failed("CANCELLED", None)
            raise
        except Exception as exc:
            return _failed(calls, exc)
        body = orjson.dumps(document(asked, model, responses))
        _succeeded(calls, len(body))
        return HttpResponse(200, [body])

    async def _infer_all(
        self, model: str, inputs: list[tuple[Tensor, ...]], calls: Sequence[InferenceCall]
    ) -> list[InferenceResponse]:
        """One inference per text, at once; the first failure cancels the others."""
        inference = self.server.inference
        prefix = "emb-" + uuid4().hex
        tasks = []
        for i, (tensors, call) in enumerate(zip(inputs, calls, strict=True)):
            client = ClientRequest(model, -1, f"{prefix}-{i}", tensors)
            call.asked(model, "", client.id)
            tasks.append(asyncio.ensure_future(inference.infer(client, call)))
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    def _call(
        self, request: HttpRequest, index: int, stream: bool, model: str = ""
    ) -> InferenceCall:
        """Choice ``index``'s call (the request's bytes on the first one's line)."""
        size = len(request.body) if index == 0 else 0
        identity = (request.identity, request.api_key)
        call = self.server.inference.call(OPENAI, request.peer, size, identity, stream)
        call.asked(model, "")
        headers = request.headers
        parent, state = _header(headers, b"traceparent"), _header(headers, b"tracestate")
        call.sample(model, parent, state, request.received)
        return call


def _kind(exc: BaseException) -> str:
    """An error as the access log's status (Triton's error kinds)."""
    if isinstance(exc, ServerError):
        return exc.kind.value
    return _KIND_OF_STATUS.get(as_openai(exc).status, "INVALID_ARG")


def _failed(calls: Sequence[InferenceCall], exc: BaseException) -> HttpResponse:
    """The error's answer; every call's trace ends and its line is written with it."""
    response = error_response(exc)
    calls[0].count(body_length(response.body))
    kind = _kind(exc)
    for call in calls:
        call.failed(kind, response.status)
    return response


async def _answered(job: Job, calls: Sequence[InferenceCall]) -> HttpResponse:
    try:
        doc = await answer(job)
    except asyncio.CancelledError:  # the client went away: nothing is answered
        for call in calls:
            call.failed("CANCELLED", None)
        raise
    except Exception as exc:
        return _failed(calls, exc)
    _succeeded(calls, len(doc))
    return HttpResponse(200, [doc])


def _succeeded(calls: Sequence[InferenceCall], size: int) -> None:
    """A whole answer of ``size`` bytes is out: every call's line says so (its trace ends:
    a choice cut at a stop sequence had no final response)."""
    calls[0].count(size)
    for call in calls:
        call.outcome("SUCCESS", 200)
        call.sent(0, 0)
        call.logged()


async def _logged_events(job: Job, calls: Sequence[InferenceCall]) -> AsyncIterator[bytes]:
    """``events``, counted into the first call's line; every line is written when they end
    (a failed response's kind on each), or with CANCELLED when the client went away."""
    first = calls[0]
    chunks = events(job)
    try:
        async for chunk in chunks:
            first.count(len(chunk))
            yield chunk
    except BaseException:
        for call in calls:
            call.outcome("CANCELLED", 200)
        raise
    finally:
        job.cancel()  # at once (closing ``chunks`` below does it too)
        await chunks.aclose()
        error = job.error
        for call in calls:
            if error is not None:
                call.first_error(_kind(error))
            call.sent(0, 0)
            call.logged()


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


def _per_config(
    server: InferenceServer,
    cache: dict[str, tuple[object, Read]],
    name: str,
    read: Callable[[Any], Read],
) -> Read:
    """What ``read`` makes of the ready version's config, made again only when the model
    was loaded anew (its spec object changed); an unknown model is OpenAI's 404."""
    try:
        spec = server.inference.model(name, -1).spec
    except ServerError:
        raise model_not_found(name) from None
    known = cache.get(name)
    if known is not None and known[0] is spec:
        return known[1]
    found = read(spec)
    cache[name] = (spec, found)
    return found
