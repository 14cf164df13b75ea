"""The HTTP route table and the one error table: every route has a Triton API group, paths
match as Triton's, and every error kind has a status."""

from __future__ import annotations

from typing import Any

import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.frontends.http.app import HttpApp
from tritium.frontends.http.errors import STATUS, render_error
from tritium.frontends.http.messages import HttpResponse
from tritium.frontends.http.routes import MATCHED_MAX, ApiGroup, Route, Router
from tritium.frontends.http.access import http_api
from tritium.options import HttpOptions, ServerOptions
from tritium.server import InferenceServer


def _router() -> Router:
    # A server with no repository, never started: the routes only, no handler is called.
    return HttpApp(InferenceServer(ServerOptions())).router


@pytest.mark.parametrize(
    ("method", "path", "group", "params"),
    [
        ("GET", "/v2", ApiGroup.METADATA, {}),
        ("GET", "/v2/health/live", ApiGroup.HEALTH, {}),
        ("GET", "/v2/health/ready?x=1", ApiGroup.HEALTH, {}),
        ("GET", "/v2/models/stats", ApiGroup.STATISTICS, {}),
        ("GET", "/v2/models/m%2Fx", ApiGroup.METADATA, {"model": "m/x"}),
        ("GET", "/v2/models/m/versions/3", ApiGroup.METADATA, {"model": "m", "version": "3"}),
        ("GET", "/v2/models/m/ready", ApiGroup.HEALTH, {"model": "m"}),
        ("GET", "/v2/models/m/config", ApiGroup.MODEL_CONFIG, {"model": "m"}),
        (
            "GET",
            "/v2/models/m/versions/1/stats",
            ApiGroup.STATISTICS,
            {"model": "m", "version": "1"},
        ),
        ("POST", "/v2/models/m/infer", ApiGroup.INFERENCE, {"model": "m"}),
        (
            "POST",
            "/v2/models/m/versions/2/infer",
            ApiGroup.INFERENCE,
            {"model": "m", "version": "2"},
        ),
        ("POST", "/v2/models/m/generate", ApiGroup.INFERENCE, {"model": "m"}),
        ("POST", "/v2/models/m/generate_stream", ApiGroup.INFERENCE, {"model": "m"}),
        ("POST", "/v2/repository/index", ApiGroup.MODEL_REPOSITORY, {}),
        ("POST", "/v2/repository/models/m/load", ApiGroup.MODEL_REPOSITORY, {"model": "m"}),
        ("POST", "/v2/repository/models/m/unload", ApiGroup.MODEL_REPOSITORY, {"model": "m"}),
        ("GET", "/v2/systemsharedmemory/status", ApiGroup.SHARED_MEMORY, {"rest": "status"}),
        (
            "POST",
            "/v2/cudasharedmemory/region/r/register",
            ApiGroup.SHARED_MEMORY,
            {"rest": "region/r/register"},
        ),
        ("GET", "/v1/models", ApiGroup.METADATA, {}),
        ("GET", "/v1/models/m%2Fx", ApiGroup.METADATA, {"model": "m/x"}),
        ("POST", "/v1/completions", ApiGroup.INFERENCE, {}),
        ("POST", "/v1/chat/completions", ApiGroup.INFERENCE, {}),
        ("POST", "/v1/embeddings", ApiGroup.INFERENCE, {}),
    ],
)
def test_routes_and_their_groups(method: str, path: str, group: ApiGroup, params: Any) -> None:
    found = _router().match(method, path)
    assert isinstance(found, tuple), found
    route, captured = found
    assert route.group is group and captured == params
    assert http_api(method, path).group is group  # the access guard sees the same group


def test_openai_false_drops_the_v1_routes() -> None:
    options = ServerOptions(http=HttpOptions(openai=False))
    router = HttpApp(InferenceServer(options)).router
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]:
        found = router.match(method, path)
        assert isinstance(found, HttpResponse) and found.status == 404


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/", 404),
        ("GET", "/v3/health/live", 404),
        ("GET", "/v2/models/m/versions/x/ready", 404),
        ("GET", "/v2/models/m/versions/²/ready", 404),  # only ASCII digits are versions
        ("GET", "/v2/models/m/versions/١", 404),
        ("GET", "/v2/repository/models/m/nope", 404),
        ("GET", "/v2/models/m/infer", 405),
        ("POST", "/v2/health/live", 405),
        ("DELETE", "/v2/models/m", 405),
        ("PUT", "/v2", 405),
        ("GET", "/v1/completions", 405),
        ("GET", "/v1/embeddings", 405),
        ("POST", "/v1/files", 404),
    ],
)
def test_no_route(method: str, path: str, status: int) -> None:
    found = _router().match(method, path)
    assert isinstance(found, HttpResponse) and found.status == status


def test_every_route_has_a_group_and_a_handler() -> None:
    routes = _router().routes
    assert len({(r.method, r.pattern) for r in routes}) == len(routes)
    assert all(isinstance(r.group, ApiGroup) and callable(r.handler) for r in routes)


def test_first_route_in_table_order_wins() -> None:
    router = Router(
        [
            Route("GET", "/a/b", lambda r: HttpResponse(201), ApiGroup.HEALTH),
            Route("GET", "/a/{x}", lambda r: HttpResponse(202), ApiGroup.METADATA),
        ]
    )
    found = router.match("GET", "/a/b")
    assert isinstance(found, tuple) and found[0].group is ApiGroup.HEALTH


def test_a_path_matched_again_gives_the_same_route_and_its_own_captures() -> None:
    router = _router()
    first = router.match("POST", "/v2/models/m%2Fx/versions/2/infer")
    assert isinstance(first, tuple)
    first[1]["model"] = "changed by the first request's handler"
    again = router.match("POST", "/v2/models/m%2Fx/versions/2/infer")
    assert isinstance(again, tuple) and again[0] is first[0]
    assert again[1] == {"model": "m/x", "version": "2"}
    # The same path with another method is matched on its own (405 here, never remembered).
    refused = router.match("GET", "/v2/models/m%2Fx/versions/2/infer")
    assert isinstance(refused, HttpResponse) and refused.status == 405


def test_the_paths_remembered_are_bounded() -> None:
    router = _router()
    for index in range(3 * MATCHED_MAX):  # a client naming a new model on every request
        found = router.match("POST", f"/v2/models/m{index}/infer")
        assert isinstance(found, tuple) and found[1] == {"model": f"m{index}"}
        assert isinstance(router.match("GET", f"/nothing/{index}"), HttpResponse)
    assert 0 < len(router._matched) <= MATCHED_MAX


def test_every_error_kind_has_a_status() -> None:
    assert set(STATUS) == set(ErrorKind)
    for kind, status in STATUS.items():
        response = render_error(ServerError(kind, "why"))
        assert response.status == status and response.body == [b'{"error":"why"}']
    assert render_error(ServerError(ErrorKind.INVALID_ARG, "x")).status == 400


def test_a_bug_is_500() -> None:
    response = render_error(RuntimeError("oops"))
    assert response.status == 500 and b"RuntimeError: oops" in response.body[0]
