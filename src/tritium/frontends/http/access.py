"""Access control at the HTTP dispatch point: each path's Triton API group, the policy's
verdict turned into Triton's (and RFC 6750's) answers, and the audit record.

Refusals: Triton's restricted API → 403 "This API is restricted, expecting header '<key>'";
no or unknown bearer token → 401 with ``WWW-Authenticate: Bearer``; a token without the
group → 403; the client's in-flight bound → 429. Every body is Triton's ``{"error": ...}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from ...access.policy import AccessControl, ApiGroup, Refusal, RefusalKind, Verdict
from ...access.audit import AuditEvent
from ...errors import ServerError
from .messages import HttpRequest, HttpResponse, HttpStreamResponse, orjson_error

Result = HttpResponse | Awaitable[HttpResponse | HttpStreamResponse]
Route = Callable[[HttpRequest], Result]

_STATUS = {
    RefusalKind.RESTRICTED: 403,
    RefusalKind.UNAUTHENTICATED: 401,
    RefusalKind.FORBIDDEN: 403,
    RefusalKind.TOO_MANY_REQUESTS: 429,
}
_MODEL_GROUPS = {
    "": (ApiGroup.METADATA, "model_metadata"),
    "ready": (ApiGroup.HEALTH, "model_ready"),
    "config": (ApiGroup.MODEL_CONFIG, "model_config"),
    "infer": (ApiGroup.INFERENCE, "infer"),
    "generate": (ApiGroup.INFERENCE, "generate"),
    "generate_stream": (ApiGroup.INFERENCE, "generate_stream"),
    "stats": (ApiGroup.STATISTICS, "model_statistics"),
    "trace/setting": (ApiGroup.TRACE, "trace_setting"),
}


@dataclass(frozen=True, slots=True)
class HttpApi:
    """What a request asks for: its API group (None: no route, answered 404), a fixed action
    name, the model or region it names, and whether it changes the server (audited)."""

    group: ApiGroup | None
    action: str
    target: str = ""
    control: bool = False


_UNKNOWN = HttpApi(None, "unknown")


def http_api(method: str, path: str) -> HttpApi:
    """The API a path belongs to, split exactly as HttpApp routes it."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "v1":
        return _openai_api(parts[1:])
    if parts[0] != "v2":
        return _UNKNOWN
    if len(parts) == 1:
        return HttpApi(ApiGroup.METADATA, "server_metadata")
    head, rest = parts[1], parts[2:]
    if head == "health":
        return HttpApi(ApiGroup.HEALTH, "server_health")
    if head == "models" and rest:
        return _model_api(method, rest)
    if head == "repository":
        return _repository_api(rest)
    if head in ("systemsharedmemory", "cudasharedmemory"):
        return _shm_api(head.removesuffix("sharedmemory"), rest)
    if head == "trace":
        return HttpApi(ApiGroup.TRACE, "trace_setting", "", method == "POST")
    if head == "logging":
        return HttpApi(ApiGroup.LOGGING, "log_settings", "", method == "POST")
    return _UNKNOWN


def _openai_api(rest: list[str]) -> HttpApi:
    """The OpenAI-compatible routes (frontends/openai/app.py:OpenAIRoutes.routes); the
    completions name their model in the body, not the path."""
    if rest == ["models"]:
        return HttpApi(ApiGroup.METADATA, "openai_models")
    if len(rest) == 2 and rest[0] == "models":
        return HttpApi(ApiGroup.METADATA, "openai_models", unquote(rest[1]))
    if rest == ["completions"]:
        return HttpApi(ApiGroup.INFERENCE, "openai_completions")
    if rest == ["chat", "completions"]:
        return HttpApi(ApiGroup.INFERENCE, "openai_chat_completions")
    if rest == ["embeddings"]:
        return HttpApi(ApiGroup.INFERENCE, "openai_embeddings")
    return _UNKNOWN


def _model_api(method: str, rest: list[str]) -> HttpApi:
    if rest == ["stats"]:
        return HttpApi(ApiGroup.STATISTICS, "model_statistics")
    name, rest = unquote(rest[0]), rest[1:]
    if len(rest) >= 2 and rest[0] == "versions":
        rest = rest[2:]
    found = _MODEL_GROUPS.get("/".join(rest))
    if found is None:
        return HttpApi(None, "unknown", name)
    group, action = found
    return HttpApi(group, action, name, group is ApiGroup.TRACE and method == "POST")


def _repository_api(rest: list[str]) -> HttpApi:
    if len(rest) in (2, 4) and rest[-1] in ("index", "load", "unload"):
        rest = rest[1:]  # /v2/repository/{repo}/...: a repository name (see HttpApp)
    if len(rest) == 3 and rest[0] == "models" and rest[2] in ("load", "unload"):
        return HttpApi(ApiGroup.MODEL_REPOSITORY, rest[2], unquote(rest[1]), True)
    return HttpApi(ApiGroup.MODEL_REPOSITORY, "repository_index")


def _shm_api(kind: str, rest: list[str]) -> HttpApi:
    region = ""
    if len(rest) == 3 and rest[0] == "region":
        region, rest = unquote(rest[1]), rest[2:]
    action = rest[0] if len(rest) == 1 else ""
    if action in ("register", "unregister"):
        return HttpApi(ApiGroup.SHARED_MEMORY, f"{kind}_shm_{action}", region, True)
    return HttpApi(ApiGroup.SHARED_MEMORY, f"{kind}_shm_status", region)


def _header_lookup(headers: dict[bytes, bytes]) -> Callable[[str], str | None]:
    def lookup(name: str) -> str | None:
        value = headers.get(name.encode("latin-1"))
        return None if value is None else value.decode("utf-8", "surrogateescape")

    return lookup


def refusal_response(refusal: Refusal) -> HttpResponse:
    headers: list[tuple[bytes, bytes]] = []
    if refusal.kind is RefusalKind.UNAUTHENTICATED:
        challenge = b"Bearer" if "required" in refusal.message else b'Bearer error="invalid_token"'
        headers.append((b"WWW-Authenticate", challenge))
    elif refusal.kind is RefusalKind.FORBIDDEN:
        headers.append((b"WWW-Authenticate", b'Bearer error="insufficient_scope"'))
    return HttpResponse(_STATUS[refusal.kind], [orjson_error(refusal.message)], headers=headers)


class HttpGuard:
    """Admits or refuses each request before it is routed, holds the client's in-flight slot
    until the answer is complete (a streamed one included) and audits control actions."""

    def __init__(self, access: AccessControl) -> None:
        self._policy = access.http
        self._audit = access.audit

    def __call__(self, request: HttpRequest, route: Route) -> Result:
        api = http_api(request.method, request.path)
        verdict = self._policy.admit(api.group, _header_lookup(request.headers), request.peer)
        if verdict.refusal is not None:
            self._record(request, api, verdict, "refused", verdict.refusal)
            return refusal_response(verdict.refusal)
        request.identity, request.api_key = verdict.identity, verdict.key
        try:
            result = route(request)
        except BaseException as exc:  # rendered by the request cycle; audited here
            self._policy.release(verdict)
            if api.control:
                self._record(request, api, verdict, "error", _exception_text(exc))
            raise
        if isinstance(result, HttpResponse):
            self._policy.release(verdict)
            self._outcome(request, api, verdict, result)
            return result
        if verdict.client is None and not (api.control and self._audit is not None):
            return result
        return self._finish(request, api, verdict, result)

    async def _finish(
        self,
        request: HttpRequest,
        api: HttpApi,
        verdict: Verdict,
        result: Awaitable[HttpResponse | HttpStreamResponse],
    ) -> HttpResponse | HttpStreamResponse:
        handed_over = False
        try:
            response = await result
            if isinstance(response, HttpStreamResponse) and verdict.client is not None:
                response.chunks = _Releasing(response.chunks, lambda: self._policy.release(verdict))
                handed_over = True
            else:
                self._outcome(request, api, verdict, response)
            return response
        except BaseException as exc:
            if api.control:
                self._record(request, api, verdict, "error", _exception_text(exc))
            raise
        finally:
            if not handed_over:
                self._policy.release(verdict)

    def _outcome(self, request: HttpRequest, api: HttpApi, verdict: Verdict, response: Any) -> None:
        if not api.control or not isinstance(response, HttpResponse):
            return
        if response.status == 200:
            self._record(request, api, verdict, "ok")
        else:
            self._record(request, api, verdict, "error", _error_text(response))

    def _record(
        self,
        request: HttpRequest,
        api: HttpApi,
        verdict: Verdict,
        outcome: str,
        detail: Refusal | str = "",
    ) -> None:
        if self._audit is None:
            return
        refusal = detail if isinstance(detail, Refusal) else None
        self._audit.record(
            AuditEvent(
                "http",
                request.peer,
                verdict.identity,
                api.action,
                api.target,
                outcome,
                refusal.message if refusal is not None else str(detail),
                refusal.kind.value if refusal is not None else "",
            )
        )


def _exception_text(exc: BaseException) -> str:
    """What the client is told of a handler's exception (a ServerError's own message)."""
    return exc.message if isinstance(exc, ServerError) else f"{type(exc).__name__}: {exc}"


def _error_text(response: HttpResponse) -> str:
    try:
        doc = orjson.loads(b"".join(bytes(p) for p in response.body))
        return str(doc["error"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"HTTP {response.status}"


class _Releasing:
    """A streamed answer's chunks; the in-flight slot is released when they end, fail or
    are closed (the connection went away), whichever comes first."""

    def __init__(self, chunks: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        self._chunks = chunks
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> _Releasing:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._chunks.__anext__()
        except BaseException:
            self._done()
            raise

    async def aclose(self) -> None:
        self._done()
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()

    def _done(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
