"""The HTTP/REST API: the route table and its handlers; each handler is decode → server call →
encode. A handler raises ``ServerError`` and the one renderer (errors.py) answers it."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final
from urllib.parse import unquote

import orjson

from ...access.policy import AccessControl
from ...errors import invalid_arg, unsupported
from ...api import Door, InferenceCall, ResponseStream
from ...server import (
    FinalAnswer,
    InferenceRequest,
    InferenceServer,
    ResponseSender,
    TraceManager,
    check_load_keys,
    http_update,
)
from ...types import ClientRequest, InferenceResponse
from ...transport.http1.inflate import BodyRejected
from ..grpc.metadata import compile_forward_pattern, forwarded_parameters
from ..openai.app import OpenAIRoutes
from .access import HttpGuard
from ..tensors import OFFLOAD_BYTES, decode_off_loop
from .cors import cors_policy
from .codec import OutputPlan, decode_request, encode_response
from .errors import render_error, triton_status
from .generate import build_request, generate_once, logged_chunks, sse_chunks
from .messages import (
    HttpRequest,
    HttpResponse,
    HttpStreamResponse,
    PendingResponse,
    Result,
    orjson_error,
)
from .routes import ANY_METHOD, NOT_ALLOWED, NOT_FOUND, ApiGroup, Route, Router

log = logging.getLogger("tritium")

_JSON: Final = b"application/json"
_OCTET: Final = b"application/octet-stream"
_DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"
# The HTTP door of the inference call: its refusal of decoupled models, its trace stamps.
HTTP: Final = Door(
    "http", _DECOUPLED, ("HTTP_RECV_START", "HTTP_RECV_END"), ("HTTP_SEND_START", "HTTP_SEND_END")
)
GENERATE: Final = Door("http", None, HTTP.received, HTTP.sent)  # decoupled models stream


def _json(doc: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, [orjson.dumps(doc)])


async def _answered(done: Awaitable[None]) -> HttpResponse:
    await done
    return _EMPTY_OK


_NOT_FOUND = NOT_FOUND
_EMPTY_OK = HttpResponse(200, [], None)
_EMPTY_BAD = HttpResponse(400, [], None)
_MODEL = "/v2/models/{model}"
_VERSION = "/v2/models/{model}/versions/{version}"


class HttpApp:
    """Maps (method, path) to the server facade through the route table."""

    def __init__(
        self,
        server: InferenceServer,
        access: AccessControl | None = None,
        forward_pattern: str | None = None,
        openai_only: bool = False,
    ) -> None:
        """``forward_pattern``: the header forward pattern when not the server's (an
        in-process server's ``tritonfrontend.KServeHttp`` brings its own); ``openai_only``:
        the app of ``--openai-port``'s listener (the OpenAI-compatible routes only)."""
        self.server = server
        # --openai: the OpenAI-compatible routes (frontends/openai) on this listener, unless
        # --openai-port gives them one of their own (``openai_only``: that listener's app)
        http = server.options.http if server is not None else None
        on = http is not None and http.openai and (openai_only or http.openai_port < 0)
        self._openai = OpenAIRoutes(server) if on else None
        routes = self._openai.routes() if openai_only and self._openai else self._routes()
        self.router = Router(routes)
        self.render_error = render_error
        # Access control and audit (tritium.access), only when a feature asks for it.
        self._guard = HttpGuard(access) if access is not None and access.guards_http else None
        # --http-header-forward-pattern: matching request headers become string parameters.
        if forward_pattern is None:
            forward_pattern = server.options.http.header_forward_pattern if server else ""
        self._forward = compile_forward_pattern(forward_pattern)
        # --http-cors-*: browsers' preflights answered here, the origin's headers added to
        # every answer by the request cycle (HttpConnection reads this attribute).
        self.cors = cors_policy(server.options) if server is not None else None

    @property
    def tracer(self) -> TraceManager:
        """The server's TraceManager: each connection reads it (HTTP_RECV_* while tracing)."""
        return self.server.tracer

    def __call__(self, request: HttpRequest) -> HttpResponse | PendingResponse | Awaitable[Result]:
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose >= 1 (changeable at run time)
            log.debug("HTTP request: %s %s", request.method, request.path)
        cors = self.cors
        if cors is not None and cors.is_preflight(request.method, request.headers):
            return cors.preflight(request.headers)  # before the guard: it has no credentials
        if self._guard is not None:
            return self._guard(request, self._awaited_route)
        return self._route(request)

    def refusal(self, reason: BodyRejected) -> HttpResponse | None:
        """A body the transport refused (its size, its encoding), answered in the format of
        the door it was sent to: an OpenAI route's in OpenAI's (413 for its size); None:
        Triton's 400."""
        if self._openai is None:
            return None
        return self._openai.refusal(reason.target, reason.message, reason.too_large)

    def _awaited_route(self, request: HttpRequest) -> HttpResponse | Coroutine[Any, Any, Result]:
        """``_route`` for the access guard, which awaits what a route returns: never a
        PendingResponse (``_infer_route`` makes none while a guard is on)."""
        result = self._route(request)
        assert not isinstance(result, PendingResponse)
        return result

    def _route(
        self, request: HttpRequest
    ) -> HttpResponse | PendingResponse | Coroutine[Any, Any, Result]:
        found = self.router.match(request.method, request.path)
        if isinstance(found, HttpResponse):
            return found
        route, request.params = found
        return route.handler(request)

    def _routes(self) -> list[Route]:
        g = ApiGroup
        routes = [
            Route("GET", "/v2", lambda r: _json(self.server.metadata()), g.METADATA),
            Route("GET", "/v2/health/live", lambda r: self._health("live"), g.HEALTH),
            Route("GET", "/v2/health/ready", lambda r: self._health("ready"), g.HEALTH),
            Route("GET", "/v2/models/stats", self._all_stats, g.STATISTICS),
            Route("GET", "/v2/logging", self._logging, g.LOGGING),
            Route("POST", "/v2/logging", self._logging, g.LOGGING),
            Route("POST", "/v2/repository/index", self._index, g.MODEL_REPOSITORY),
            Route("POST", "/v2/repository/models/{model}/load", self._load, g.MODEL_REPOSITORY),
            Route("POST", "/v2/repository/models/{model}/unload", self._unload, g.MODEL_REPOSITORY),
            *self._named_repository_routes(),
            Route(ANY_METHOD, "/v2/systemsharedmemory/{rest*}", self._system_shm, g.SHARED_MEMORY),
            Route(ANY_METHOD, "/v2/cudasharedmemory/{rest*}", self._cuda_shm, g.SHARED_MEMORY),
            Route("GET", "/v2/trace/setting", self._trace, g.TRACE),
            Route("POST", "/v2/trace/setting", self._trace, g.TRACE),
            Route("GET", _MODEL + "/trace/setting", self._trace, g.TRACE),
            Route("POST", _MODEL + "/trace/setting", self._trace, g.TRACE),
        ]
        for base in (_MODEL, _VERSION):  # every model route, with and without a version
            routes += [
                Route("POST", base + "/infer", self._infer_route, g.INFERENCE),
                Route("GET", base, self._model_metadata, g.METADATA),
                Route("GET", base + "/ready", self._model_ready, g.HEALTH),
                Route("GET", base + "/config", self._model_config, g.MODEL_CONFIG),
                Route("GET", base + "/stats", self._model_stats, g.STATISTICS),
                Route("POST", base + "/generate", self._generate_once, g.INFERENCE),
                Route("POST", base + "/generate_stream", self._generate_stream, g.INFERENCE),
            ]
        if self._openai is not None:
            routes += self._openai.routes()
        return routes

    def _named_repository_routes(self) -> list[Route]:
        """``/v2/repository/{repo}/...`` as Triton answers it (http_server.cc): the index
        ignores the repository name; load and unload refuse one (UNSUPPORTED)."""
        group = ApiGroup.MODEL_REPOSITORY
        base = "/v2/repository/{repo}"
        return [
            Route("POST", base + "/index", self._index, group),
            Route("POST", base + "/models/{model}/load", _named_repository, group),
            Route("POST", base + "/models/{model}/unload", _named_repository, group),
        ]

    @staticmethod
    def _expect(request: HttpRequest, method: str) -> HttpResponse | None:
        return None if request.method == method else NOT_ALLOWED

    def _health(self, which: str) -> HttpResponse:
        ok = self.server.is_live() if which == "live" else self.server.is_ready()
        return _EMPTY_OK if ok else _EMPTY_BAD

    def _model_metadata(self, request: HttpRequest) -> HttpResponse:
        params = request.params
        return _json(self.server.model_metadata(params["model"], params.get("version", "")))

    def _model_config(self, request: HttpRequest) -> HttpResponse:
        params = request.params
        return _json(self.server.model_config_json(params["model"], params.get("version", "")))

    async def _all_stats(self, request: HttpRequest) -> HttpResponse:
        return _json(await self.server.statistics_total())

    async def _model_stats(self, request: HttpRequest) -> HttpResponse:
        params = request.params
        return _json(await self.server.statistics_total(params["model"], params.get("version", "")))

    async def _logging(self, request: HttpRequest) -> HttpResponse:
        """The logging extension: GET reads, POST changes what it names (an empty body
        nothing) and reads; Triton's checks in ``http_update``."""
        if request.method == "POST" and request.body.strip():
            update = http_update(_parse_json(request.body))
            return _json(await self.server.update_log_settings_total(update))
        return _json(self.server.log_settings())

    def _infer_route(self, request: HttpRequest) -> PendingResponse | Coroutine[Any, Any, Result]:
        params = request.params
        name, version = params["model"], params.get("version", "")
        # untraced and unlogged, small, and no guard awaiting the route: without a task
        if self.server.inference.inline() and self._guard is None:
            if len(request.body) <= OFFLOAD_BYTES:
                return self._infer_now(request, name, version)
        return self._infer(request, name, version)

    def _infer_now(self, request: HttpRequest, name: str, version: str) -> PendingResponse:
        """``_infer`` without a task, as gRPC's ``model_infer_now``: a small request that is
        neither traced nor access-logged is decoded here and submitted, and the server's
        response callback answers it (``_HttpAnswer``). Errors before scheduling raise."""
        inference = self.server.inference
        client, plan = self._decode_now(request, name, version)
        started = inference.prepare(client, HTTP)
        pending = PendingResponse()
        pending.on_cancel = started.cancel
        inference.submit(started, ResponseSender(_HttpAnswer(started, pending, plan)))
        return pending

    def _decode_now(
        self, request: HttpRequest, name: str, version: str
    ) -> tuple[ClientRequest, OutputPlan]:
        header_length = _header_length(request)
        if header_length == 0:  # a raw binary request: the body is the one input's bytes
            client = self.server.inference.raw_request(name, _version(version), request.body)
            plan = OutputPlan(binary_default=True)  # Triton answers it in binary
        else:
            client, plan = decode_request(request.body, header_length, name, _version(version))
        if self._forward is not None:
            client = self._forwarded(client, request)
        return client, plan

    def _call(self, request: HttpRequest, door: Door = HTTP, stream: bool = False) -> InferenceCall:
        """An inference's call (its trace and access-log line), the model as asked."""
        call = self.server.inference.call(
            door, request.peer, len(request.body), (request.identity, request.api_key), stream
        )
        params = request.params  # the model as asked, until the server resolves it
        call.asked(params["model"], params.get("version", ""))
        return call

    async def _logged(self, call: InferenceCall, run: Callable[[], Awaitable[Result]]) -> Result:
        """An inference's answer for its access-log line: an error is answered here when the
        line is on (as the request cycle would render it), so that the line has its status
        and size; a streamed answer's line is written when its chunks end."""
        if call.entry is None:
            return await run()
        try:
            response = await run()
        except asyncio.CancelledError:  # the client went away: nothing is answered
            call.failed("CANCELLED", None)
            raise
        except Exception as exc:
            response = self.render_error(exc)
            call.outcome(triton_status(exc), response.status)
        if call.entry is not None:
            call.entry.code = response.status
        if isinstance(response, HttpStreamResponse):
            response.chunks = logged_chunks(response.chunks, call)
            return response
        call.count(sum(memoryview(part).nbytes for part in response.body))
        call.logged()
        return response

    async def _trace(self, request: HttpRequest) -> HttpResponse:
        """The trace extension: GET reads a setting, POST changes it and reads it."""
        update = _trace_update(request.body) if request.method == "POST" else None
        shown = await self.server.trace_setting_total(request.params.get("model", ""), update)
        return _json({k: v if k == "trace_level" else v[-1] for k, v in shown.items()})

    async def _load(self, request: HttpRequest) -> HttpResponse:
        """The repository extension's load; ``file:`` contents arrive base64-encoded."""
        params = _control_parameters(request.body)
        check_load_keys(params)
        files = {
            k: _base64(k, _load_string(k, v)) for k, v in params.items() if k.startswith("file:")
        }
        config = _load_string("config", params["config"]) if "config" in params else None
        await self.server.load_model(request.params["model"], config, files)
        return _EMPTY_OK

    async def _unload(self, request: HttpRequest) -> HttpResponse:
        params = _control_parameters(request.body)
        dependents = params.get("unload_dependents") is True
        await self.server.unload_model(request.params["model"], dependents)
        return _EMPTY_OK

    def _system_shm(self, request: HttpRequest) -> HttpResponse | Coroutine[Any, Any, HttpResponse]:
        return self._shm_route(request, False, _rest(request))

    def _cuda_shm(self, request: HttpRequest) -> HttpResponse | Coroutine[Any, Any, HttpResponse]:
        return self._shm_route(request, True, _rest(request))

    def _shm_route(
        self, request: HttpRequest, cuda: bool, rest: list[str]
    ) -> HttpResponse | Coroutine[Any, Any, HttpResponse]:
        """``[region/{r}/](status|register|unregister)`` of the shared-memory extension."""
        region = ""
        if len(rest) == 3 and rest[0] == "region":
            region, rest = unquote(rest[1]), rest[2:]
        if len(rest) != 1 or (rest[0] == "register" and not region):
            return _NOT_FOUND
        action = rest[0]
        if action == "status":
            status = self.server.cuda_shm_status if cuda else self.server.system_shm_status
            return self._expect(request, "GET") or _json(status(region))
        if bad := self._expect(request, "POST"):
            return bad
        if action == "unregister":
            if cuda:
                self.server.unregister_cuda_shm(region)
                return _EMPTY_OK
            return _answered(self.server.unregister_system_shm_total(region))
        if action != "register":
            return _NOT_FOUND
        if cuda:
            self.server.register_cuda_shm(region)
        try:
            doc = orjson.loads(request.body)
            key, offset, size = str(doc["key"]), int(doc.get("offset", 0)), int(doc["byte_size"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return HttpResponse(
                400, [orjson_error(f"failed to parse the shared memory registration: {exc}")]
            )
        return _answered(self.server.register_system_shm_total(region, key, offset, size))

    async def _model_ready(self, request: HttpRequest) -> HttpResponse:
        params = request.params
        ready = await self.server.model_ready(params["model"], params.get("version", ""))
        return _EMPTY_OK if ready else HttpResponse(400, [b'{"error":"Model version not ready"}'])

    def _index(self, request: HttpRequest) -> HttpResponse:
        ready: object = False  # what the client sent: checked before use (compiled code
        # would raise TypeError assigning a non-bool to a variable inferred as bool)
        if request.body.strip():
            doc = _parse_json(request.body)
            ready = doc.get("ready", False) if isinstance(doc, dict) else False
            if not isinstance(ready, bool):
                raise invalid_arg("Invalid value for 'ready': expected a boolean")
        return _json(self.server.repository_index(ready is True))

    def _generate_once(self, request: HttpRequest) -> Coroutine[Any, Any, Result]:
        call = self._call(request, GENERATE)
        return self._logged(call, lambda: self._answer_once(request, call))

    async def _answer_once(self, request: HttpRequest, call: InferenceCall) -> HttpResponse:
        return _json(await generate_once(self._generate(request, call)))

    def _generate_stream(self, request: HttpRequest) -> Coroutine[Any, Any, Result]:
        call = self._call(request, GENERATE, stream=True)
        return self._logged(call, lambda: self._answer_stream(request, call))

    async def _answer_stream(self, request: HttpRequest, call: InferenceCall) -> HttpStreamResponse:
        return HttpStreamResponse(sse_chunks(self._generate(request, call), call))

    def _generate(self, request: HttpRequest, call: InferenceCall) -> ResponseStream:
        params = request.params
        name, version = params["model"], params.get("version", "")
        inference = build_request(self.server, name, version, request.body)
        call.asked(name, version, inference.id)
        return self.server.inference.stream(inference, call)

    def _infer(self, request: HttpRequest, name: str, version: str) -> Coroutine[Any, Any, Result]:
        call = self._call(request)
        return self._logged(call, lambda: self._infer_traced(request, name, version, call))

    async def _infer_traced(
        self, request: HttpRequest, name: str, version: str, call: InferenceCall
    ) -> HttpResponse:
        """An inference in its task. When the call is traced, the trace gets the read times
        and ends once the response is written (HTTP_SEND_*) or the request failed."""
        headers = request.headers
        parent, state = _header(headers, b"traceparent"), _header(headers, b"tracestate")
        call.sample(name, parent, state, request.received)
        try:
            header_length = _header_length(request)
            if header_length == 0:  # a raw binary request: the body is the one input's bytes
                client = self.server.inference.raw_request(name, _version(version), request.body)
                plan = OutputPlan(binary_default=True)  # Triton answers it in binary
            else:
                client, plan = await decode_off_loop(
                    len(request.body),
                    decode_request,
                    request.body,
                    header_length,
                    name,
                    _version(version),
                )
            if self._forward is not None:
                client = self._forwarded(client, request)
            call.asked(name, version, client.id)
            response = await self.server.inference.infer(client, call)
            call.responded()
            answer = _answer(response, plan)
        except BaseException:
            call.sent(0, 0)
            raise
        if call.trace is not None:
            answer.on_sent = call.sent
        return answer

    def _forwarded(self, inference: ClientRequest, request: HttpRequest) -> ClientRequest:
        """The request with the headers the pattern finds as parameters, by the rules of the
        gRPC front-end (grpc/metadata.py:forwarded_parameters: never names the server reads as
        request options); a header's value wins over a parameter of the same name, as in
        Triton, where forwarded headers are appended after the request's own."""
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.items()]
        found = forwarded_parameters(self._forward, headers)
        if not found:
            return inference
        return inference.with_parameters({**inference.parameters, **found})


def _named_repository(request: HttpRequest) -> HttpResponse:
    raise unsupported("'repository_name' specification is not supported")


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


def _header_length(request: HttpRequest) -> int | None:
    """The binary extension's Inference-Header-Content-Length (None: a JSON body)."""
    header = request.headers.get(b"inference-header-content-length")
    if header is None:
        return None
    try:
        return int(header)
    except ValueError:
        raise invalid_arg("Inference-Header-Content-Length must be an integer") from None


class _HttpAnswer(FinalAnswer):
    """The response callback of ``HttpApp._infer_now``: the encoded answer, or the error to
    render, goes to the request cycle's ``PendingResponse``."""

    __slots__ = ("_pending", "_plan")

    def __init__(
        self, request: InferenceRequest, pending: PendingResponse, plan: OutputPlan
    ) -> None:
        self.request = request
        self._pending = pending
        self._plan = plan

    def answer(self, response: InferenceResponse) -> None:
        if response.error is not None:
            self._pending.resolve(response.error)
            return
        try:
            encoded = _answer(response, self._plan)
        except Exception as exc:  # rendered as _infer's errors are
            self._pending.resolve(exc)
            return
        self._pending.resolve(encoded)


def _answer(response: InferenceResponse, plan: OutputPlan) -> HttpResponse:
    head, parts, json_length = encode_response(response, plan)
    if json_length < 0:
        return HttpResponse(200, [head], _JSON, compressible=True)
    return HttpResponse(
        200,
        [head, *parts],
        _OCTET,
        [(b"Inference-Header-Content-Length", b"%d" % json_length)],
        compressible=True,
    )


_TRACE_KEYS = ("trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency")


def _trace_update(body: bytes | bytearray) -> dict[str, list[str] | None]:
    """A trace-setting POST body (empty: no change) as setting name -> values (None:
    clear). ``trace_level`` is an array of strings, the others strings, as Triton reads them;
    other keys are ignored, as Triton does."""
    doc = _parse_json(body) if body.strip() else {}
    if not isinstance(doc, dict):
        raise invalid_arg("trace setting request must be a JSON object")
    update: dict[str, list[str] | None] = {}
    for key in _TRACE_KEYS:
        if key not in doc:
            continue
        value = doc[key]
        if value is None:
            update[key] = None
        elif key == "trace_level":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise invalid_arg("'trace_level' must be an array of strings")
            update[key] = value
        elif isinstance(value, str):
            update[key] = [value]
        else:
            raise invalid_arg(f"'{key}' must be a string")
    return update


def _version(text: str) -> int:
    return int(text) if text else -1


def _rest(request: HttpRequest) -> list[str]:
    rest = request.params["rest"]
    return rest.split("/") if rest else []


def _parse_json(body: bytes | bytearray) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None


def _control_parameters(body: bytes | bytearray) -> dict[str, Any]:
    """The ``parameters`` object of a load/unload request (an empty body has none)."""
    params: Any = {}
    if body.strip():
        doc = _parse_json(body)
        params = doc.get("parameters", {}) if isinstance(doc, dict) else {}
    if not isinstance(params, dict):  # null and [] too, as Triton's reader refuses them
        raise invalid_arg("attempt to get members for non-object")
    return params


def _load_string(key: str, value: Any) -> str:
    """A load parameter's value, which must be a JSON string (Triton's load handler reads every
    one with MemberAsString: a number, true or null is no file content and no config)."""
    if not isinstance(value, str):
        raise invalid_arg(
            f"Unable to parse load parameter '{key}': attempt to access JSON non-string as string"
        )
    return value


def _base64(key: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise invalid_arg(f"file override '{key}' is not valid base64") from None
