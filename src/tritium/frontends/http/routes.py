"""The route table: method + path pattern → handler, each route tagged with its Triton API
group (what ``--http-restricted-api`` restricts), and the matcher that finds one.

A pattern is a path whose segments are literals or ``{name}`` captures; ``{version}`` matches
ASCII digits only (Triton's versions), and a last ``{rest*}`` capture takes every remaining
segment (its handler reads them). Captured segments are percent-decoded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

from ...access.policy import ApiGroup
from .messages import Handler, HttpResponse

__all__ = ["ANY_METHOD", "NOT_ALLOWED", "NOT_FOUND", "ApiGroup", "Route", "Router"]


ANY_METHOD = "*"  # the handler checks the method itself


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    group: ApiGroup
    # The pattern, compiled: (index, literal) pairs, then (index, name) captures.
    _literals: tuple[tuple[int, str], ...] = field(init=False, repr=False, compare=False)
    _captures: tuple[tuple[int, str], ...] = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)  # segments in the pattern

    def __post_init__(self) -> None:
        segments = self.pattern.strip("/").split("/")
        literals = tuple((i, s) for i, s in enumerate(segments) if not s.startswith("{"))
        captures = tuple((i, s[1:-1]) for i, s in enumerate(segments) if s.startswith("{"))
        object.__setattr__(self, "_literals", literals)
        object.__setattr__(self, "_captures", captures)
        object.__setattr__(self, "size", len(segments))

    @property
    def tail(self) -> bool:
        """Whether the last capture takes the remaining segments."""
        return self.pattern.endswith("*}")

    @property
    def last(self) -> str | None:
        """The last segment when it is a literal (the router's index key)."""
        last = self.pattern.rsplit("/", 1)[-1]
        return None if last.startswith("{") else last

    def match(self, parts: list[str]) -> dict[str, str] | None:
        """The captures when ``parts`` (the path's segments) fit the pattern, else None."""
        for index, literal in self._literals:
            if parts[index] != literal:
                return None
        params: dict[str, str] = {}
        for index, name in self._captures:
            if name[-1] == "*":
                params[name[:-1]] = "/".join(parts[index:])
                break
            value = parts[index]
            if name == "version" and not (value.isascii() and value.isdigit()):
                return None
            params[name] = unquote(value) if "%" in value else value
        return params


NOT_FOUND = HttpResponse(404, [b'{"error":"Not Found"}'])
NOT_ALLOWED = HttpResponse(405, [b'{"error":"Method Not Allowed"}'])


# Paths the router remembers, with their route and captures (a client's paths: bounded, and
# forgotten all at once when full).
MATCHED_MAX: Final = 256


class Router:
    """Finds the route of a request: 404 when no pattern fits, 405 when one fits but not
    for this method. Routes are tried in table order among those of the path's length. A
    path matched before (the same model's inferences, over and over) is found by one lookup:
    the matching itself (split, compare, percent-decode) is most of a request's routing."""

    __slots__ = ("routes", "_index", "_tails", "_matched")

    def __init__(self, routes: list[Route]) -> None:
        self.routes = tuple(routes)
        # By (segment count, last segment if literal else None): few candidates per path.
        self._index: dict[tuple[int, str | None], list[Route]] = {}
        self._tails: list[Route] = []
        for route in routes:
            if route.tail:
                self._tails.append(route)
            else:
                self._index.setdefault((route.size, route.last), []).append(route)
        self._matched: dict[tuple[str, str], tuple[Route, dict[str, str]]] = {}

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | HttpResponse:
        key = (method, path)
        known = self._matched.get(key)
        if known is not None:
            return known[0], dict(known[1])  # the request's own copy of the captures
        found = self._match(method, path)
        if not isinstance(found, HttpResponse):
            if len(self._matched) >= MATCHED_MAX:
                self._matched.clear()
            self._matched[key] = (found[0], dict(found[1]))
        return found

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | HttpResponse:
        parts = path.split("?", 1)[0].strip("/").split("/")
        size = len(parts)
        index = self._index
        fits_path = False
        for key in ((size, parts[-1]), (size, None)):
            for route in index.get(key, ()):
                params = route.match(parts)
                if params is None:
                    continue
                if route.method == method:
                    return route, params
                fits_path = True
        for route in self._tails:
            if size >= route.size - 1:
                params = route.match(parts + [""] * (route.size - size))
                if params is not None and route.method in (method, ANY_METHOD):
                    return route, params
        return NOT_ALLOWED if fits_path else NOT_FOUND
