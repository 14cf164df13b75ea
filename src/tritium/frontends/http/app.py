"""Routes of the HTTP/REST API; each handler is decode → server call → encode."""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable
from typing import Any
from urllib.parse import unquote

import orjson

from ...errors import ServerError, invalid_arg
from ...server import InferenceServer
from .codec import decode_request, encode_response
from .errors import STATUS
from .generate import GenerateStream, build_request, generate_once, sse_chunks
from .protocol import HttpRequest, HttpResponse, HttpStreamResponse, orjson_error

log = logging.getLogger("tritium")

_JSON = b"application/json"
_OCTET = b"application/octet-stream"
_DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"
_MODEL_ACTIONS = {"ready", "config", "infer", "generate", "generate_stream", "stats"}


def _json(doc: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, [orjson.dumps(doc)])


def _error(exc: ServerError) -> HttpResponse:
    return HttpResponse(STATUS[exc.kind], [orjson_error(exc.message)])


_NOT_FOUND = HttpResponse(404, [b'{"error":"Not Found"}'])
_NOT_ALLOWED = HttpResponse(405, [b'{"error":"Method Not Allowed"}'])
_EMPTY_OK = HttpResponse(200, [], None)
_EMPTY_BAD = HttpResponse(400, [], None)


class HttpApp:
    """Maps (method, path) to the server facade."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        path = request.path.split("?", 1)[0]
        parts = path.strip("/").split("/")
        try:
            if not parts or parts[0] != "v2":
                return _NOT_FOUND
            if len(parts) == 1:
                return self._expect(request, "GET") or _json(self.server.metadata())
            head = parts[1]
            if head == "health" and len(parts) == 3 and parts[2] in ("live", "ready"):
                return self._expect(request, "GET") or self._health(parts[2])
            if head == "models" and parts[2:] == ["stats"]:
                return self._expect(request, "GET") or _json(self.server.statistics())
            if head == "models" and len(parts) >= 3:
                return self._model_route(request, [unquote(p) for p in parts[2:]])
            if head == "repository" and parts[2:] == ["index"]:
                return self._expect(request, "POST") or self._index(request)
            if head == "repository" and len(parts) == 5 and parts[2] == "models":
                if parts[4] not in ("load", "unload"):
                    return _NOT_FOUND
                return self._expect(request, "POST") or self._control(
                    request, unquote(parts[3]), parts[4]
                )
            if head in ("systemsharedmemory", "cudasharedmemory"):
                return self._shm_route(request, head == "cudasharedmemory", parts[2:])
        except ServerError as exc:
            return _error(exc)
        return _NOT_FOUND

    @staticmethod
    def _expect(request: HttpRequest, method: str) -> HttpResponse | None:
        return None if request.method == method else _NOT_ALLOWED

    def _health(self, which: str) -> HttpResponse:
        ok = self.server.is_live() if which == "live" else self.server.is_ready()
        return _EMPTY_OK if ok else _EMPTY_BAD

    def _model_route(
        self, request: HttpRequest, rest: list[str]
    ) -> HttpResponse | Awaitable[HttpResponse]:
        name, rest = rest[0], rest[1:]
        version = ""
        if len(rest) >= 2 and rest[0] == "versions":
            if not rest[1].isdigit():
                return _NOT_FOUND
            version, rest = rest[1], rest[2:]
        if not rest:
            return self._expect(request, "GET") or _json(self.server.model_metadata(name, version))
        if len(rest) != 1 or rest[0] not in _MODEL_ACTIONS:
            return _NOT_FOUND
        action = rest[0]
        if action == "infer":
            return self._expect(request, "POST") or self._infer(request, name, version)
        if action.startswith("generate"):
            return self._expect(request, "POST") or self._generate(request, name, version, action)
        if bad := self._expect(request, "GET"):
            return bad
        if action == "config":
            return _json(self.server.model_config_json(name, version))
        if action == "stats":
            return _json(self.server.statistics(name, version))
        return self._model_ready(name, version)

    async def _control(self, request: HttpRequest, name: str, action: str) -> HttpResponse:
        """The repository extension's load/unload; ``file:`` contents arrive base64-encoded."""
        try:
            params: Any = {}
            if request.body.strip():
                doc = orjson.loads(request.body)
                params = (doc.get("parameters") or {}) if isinstance(doc, dict) else {}
            if not isinstance(params, dict):
                raise invalid_arg("'parameters' must be a JSON object")
            if action == "unload":
                await self.server.unload_model(name, params.get("unload_dependents") is True)
                return _EMPTY_OK
            files = {k: _base64(k, v) for k, v in params.items() if k.startswith("file:")}
            config = params.get("config")
            await self.server.load_model(name, None if config is None else str(config), files)
        except orjson.JSONDecodeError as exc:
            return HttpResponse(
                400, [orjson_error(f"failed to parse the request JSON buffer: {exc}")]
            )
        except ServerError as exc:
            return _error(exc)
        return _EMPTY_OK

    def _shm_route(self, request: HttpRequest, cuda: bool, rest: list[str]) -> HttpResponse:
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
            if not cuda:
                self.server.unregister_system_shm(region)
            return _EMPTY_OK
        if action != "register":
            return _NOT_FOUND
        if cuda:
            self.server.register_cuda_shm(region)
        try:
            doc = orjson.loads(request.body)
            self.server.register_system_shm(
                region, str(doc["key"]), int(doc.get("offset", 0)), int(doc["byte_size"])
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return HttpResponse(
                400, [orjson_error(f"failed to parse the shared memory registration: {exc}")]
            )
        return _EMPTY_OK

    async def _model_ready(self, name: str, version: str) -> HttpResponse:
        try:
            ready = await self.server.model_ready(name, version)
        except ServerError as exc:
            return _error(exc)
        return _EMPTY_OK if ready else HttpResponse(400, [b'{"error":"Model version not ready"}'])

    def _index(self, request: HttpRequest) -> HttpResponse:
        ready = False
        if request.body.strip():
            try:
                doc = orjson.loads(request.body)
            except orjson.JSONDecodeError as exc:
                return HttpResponse(
                    400, [orjson_error(f"failed to parse the request JSON buffer: {exc}")]
                )
            ready = bool(doc.get("ready", False)) if isinstance(doc, dict) else False
        return _json(self.server.repository_index(ready))

    async def _generate(
        self, request: HttpRequest, name: str, version: str, action: str
    ) -> HttpResponse | HttpStreamResponse:
        try:
            inference = build_request(self.server, name, version, request.body)
            stream = GenerateStream(inference)
            self.server.stream(inference, stream)
            if action == "generate_stream":
                return HttpStreamResponse(sse_chunks(stream))
            return _json(await generate_once(stream))
        except ServerError as exc:
            return _error(exc)

    async def _infer(self, request: HttpRequest, name: str, version: str) -> HttpResponse:
        from ..tensors import decode_off_loop  # here: this body is all this change touches

        try:
            header = request.headers.get(b"inference-header-content-length")
            header_length = None
            if header is not None:
                try:
                    header_length = int(header)
                except ValueError:
                    return HttpResponse(
                        400,
                        [orjson_error("Inference-Header-Content-Length must be an integer")],
                    )
            inference, plan = await decode_off_loop(
                len(request.body),
                decode_request,
                request.body,
                header_length,
                name,
                _version(version),
            )
            response = await self.server.infer(inference, _DECOUPLED)
            head, parts, json_length = encode_response(response, plan)
        except ServerError as exc:
            return _error(exc)
        if json_length < 0:
            return HttpResponse(200, [head], _JSON)
        return HttpResponse(
            200,
            [head, *parts],
            _OCTET,
            [(b"Inference-Header-Content-Length", b"%d" % json_length)],
        )


def _version(text: str) -> int:
    return int(text) if text else -1


def _base64(key: str, value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise invalid_arg(f"file override '{key}' is not valid base64") from None
