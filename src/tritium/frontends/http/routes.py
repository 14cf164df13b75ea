"""The route table: method + path pattern → handler, each route tagged with its Triton API
group (what ``--http-restricted-api`` restricts), and the matcher that finds one.

A pattern is a path whose segments are literals or ``{name}`` captures; ``{version}`` matches
ASCII digits only (Triton's versions), and a last ``{rest*}`` capture takes every remaining
segment (its handler reads them). Captured segments are percent-decoded."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from urllib.parse import unquote

from .messages import Handler, HttpResponse


class ApiGroup(enum.Enum):
    """Triton's API groups, as ``--http-restricted-api`` names them."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


ANY_METHOD = "*"  # the handler checks the method itself


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    group: ApiGroup
    _segments: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_segments", tuple(self.pattern.strip("/").split("/")))

    @property
    def tail(self) -> bool:
        """Whether the last capture takes the remaining segments."""
        return self._segments[-1].endswith("*}")

    @property
    def size(self) -> int:
        return len(self._segments)

    def match(self, parts: list[str]) -> dict[str, str] | None:
        """The captures when ``parts`` (the path's segments) fit the pattern, else None."""
        params: dict[str, str] = {}
        for index, expected in enumerate(self._segments):
            if expected[0] != "{":
                if parts[index] != expected:
                    return None
                continue
            name = expected[1:-1]
            if name.endswith("*"):
                params[name[:-1]] = "/".join(parts[index:])
                return params
            value = parts[index]
            if name == "version" and not (value.isascii() and value.isdigit()):
                return None
            params[name] = unquote(value) if "%" in value else value
        return params


NOT_FOUND = HttpResponse(404, [b'{"error":"Not Found"}'])
NOT_ALLOWED = HttpResponse(405, [b'{"error":"Method Not Allowed"}'])


class Router:
    """Finds the route of a request: 404 when no pattern fits, 405 when one fits but not
    for this method. Routes are tried in table order among those of the path's length."""

    __slots__ = ("routes", "_by_size", "_tails")

    def __init__(self, routes: list[Route]) -> None:
        self.routes = tuple(routes)
        self._by_size: dict[int, list[Route]] = {}
        self._tails: list[Route] = []
        for route in routes:
            if route.tail:
                self._tails.append(route)
            else:
                self._by_size.setdefault(route.size, []).append(route)

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | HttpResponse:
        parts = path.split("?", 1)[0].strip("/").split("/")
        fits_path = False
        for route in self._by_size.get(len(parts), ()):
            params = route.match(parts)
            if params is None:
                continue
            if route.method == method:
                return route, params
            fits_path = True
        for route in self._tails:
            if len(parts) >= route.size - 1:
                params = route.match(parts + [""] * (route.size - len(parts)))
                if params is not None and route.method in (method, ANY_METHOD):
                    return route, params
        return NOT_ALLOWED if fits_path else NOT_FOUND
