"""Where a field sits in a config.pbtxt: the line of a field path, read from the text format's
tokens (comments, quoted strings, nesting), not by searching the text, so a field name that
also appears in a comment, inside a string or in another message earlier is not mistaken for
the field.

``occurrences`` lists every field written, in order, as ``Occurrence(path, line, value,
entry)``: the dotted path (``instance_group.kind``; a map's entries are ``parameters.key`` and
``parameters.value.string_value``), the line of its name, its scalar value (a string
unescaped; None for a message or a list) and the messages it is inside. ``field_line`` answers
the question a load error asks (see its rules). Pure; the text has already been parsed by
protobuf, so the tokenizer may be lenient.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf import text_encoding  # type: ignore[attr-defined]  # (not in the stubs)

__all__ = ["Occurrence", "field_line", "occurrences"]

_TOKEN = re.compile(
    r"""(?P<newline>\n)
      | (?P<space>[ \t\r\f\v]+)
      | (?P<comment>\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)
      | (?P<punct>[{}\[\]<>:,;])
      | (?P<word>[^\s{}\[\]<>:,;#"']+)""",
    re.VERBOSE,
)
_OPEN, _CLOSE = ("{", "<"), ("}", ">")
_NAMING = ("key", "name")  # the fields that identify a map entry or a named entry


@dataclass(frozen=True, slots=True)
class Occurrence:
    path: str
    line: int
    value: str | None
    entry: tuple[int, ...]  # ids of the messages it is inside, outermost first


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "string", "punct" or "word"
    text: str
    line: int


@dataclass(slots=True)
class _Frame:
    is_list: bool
    path: str  # a message: its fields' prefix ("" or "a.b."); a list: the field's path
    entry: tuple[int, ...]


def _tokens(text: str) -> list[_Token]:
    tokens, line = [], 1
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or ""
        if kind == "newline":
            line += 1
        elif kind in ("string", "punct", "word"):
            tokens.append(_Token(kind, match.group(), line))
    return tokens


def _unquote(token: str) -> str:
    body = token[1:-1] if len(token) >= 2 and token[-1] == token[0] else token[1:]
    try:
        unescaped: bytes = text_encoding.CUnescape(body)
        return unescaped.decode("utf-8", "replace")
    except ValueError:  # an escape protobuf would have refused: compare it as written
        return body


class _Reader:
    """One pass over the tokens with an explicit stack (no recursion, whatever the nesting)."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.out: list[Occurrence] = []
        self.stack = [_Frame(False, "", ())]
        self.ids = 0

    def run(self) -> list[Occurrence]:
        i = 0
        while i < len(self.tokens):
            i = self._list_item(i) if self.stack[-1].is_list else self._field(i)
        return self.out

    def _field(self, i: int) -> int:
        """A message's next field: its name, an optional ':' and its value."""
        token, frame = self.tokens[i], self.stack[-1]
        if token.text in _CLOSE and len(self.stack) > 1:
            self.stack.pop()
            return i + 1
        if token.kind != "word":
            return i + 1  # a separator (or what protobuf would not have parsed)
        path, line = frame.path + token.text, token.line
        i += 1
        if i < len(self.tokens) and self.tokens[i].text == ":":
            i += 1
        if i >= len(self.tokens):
            return i
        value = self.tokens[i]
        if value.text in _OPEN or value.text == "[":
            self.out.append(Occurrence(path, line, None, frame.entry))
            self._open(value, path, frame.entry)
            return i + 1
        return self._scalar(i, path, line, frame.entry)

    def _list_item(self, i: int) -> int:
        token, frame = self.tokens[i], self.stack[-1]
        if token.text == "]":
            self.stack.pop()
            return i + 1
        if token.text in _OPEN:
            self._open(token, frame.path, frame.entry)
            return i + 1
        if token.kind == "punct":
            return i + 1
        return self._scalar(i, frame.path, token.line, frame.entry)

    def _open(self, token: _Token, path: str, entry: tuple[int, ...]) -> None:
        if token.text == "[":
            self.stack.append(_Frame(True, path, entry))
        else:
            self.ids += 1
            self.stack.append(_Frame(False, path + ".", (*entry, self.ids)))

    def _scalar(self, i: int, path: str, line: int, entry: tuple[int, ...]) -> int:
        token = self.tokens[i]
        if token.kind == "punct":
            return i  # no value after all: read the token as what it is
        if token.kind == "word":
            self.out.append(Occurrence(path, line, token.text, entry))
            return i + 1
        parts = []  # adjacent strings are one value ("a" "b" is "ab")
        while i < len(self.tokens) and self.tokens[i].kind == "string":
            parts.append(_unquote(self.tokens[i].text))
            i += 1
        self.out.append(Occurrence(path, line, "".join(parts), entry))
        return i


def occurrences(text: str) -> list[Occurrence]:
    return _Reader(text).run()


def field_line(text: str, field: str, anchor: str = "") -> int:
    """The 1-based line a problem with ``field`` (a dotted path) is at, 0 if it is not written.

    With an ``anchor`` (what identifies the entry: a sub-field's name such as ``count``, or a
    value such as ``KIND_GPU`` or ``"INPUT0"``, quotes optional): the line of
    ``<field>.<anchor>``; else of the first value equal to the anchor under ``field`` or its
    closest ancestor (a ``key`` or ``name`` before any other), or of ``field`` itself within
    that value's entry when it is written there. Otherwise: the first ``field``, else its
    closest written ancestor."""
    found = occurrences(text)
    if anchor:
        line = _anchored(found, field, anchor)
        if line:
            return line
    for scope in _scopes(field):
        for item in found:
            if item.path == scope:
                return item.line
    return 0


def _anchored(found: list[Occurrence], field: str, anchor: str) -> int:
    for item in found:
        if item.path == f"{field}.{anchor}":
            return item.line
    value = anchor[1:-1] if len(anchor) >= 2 and anchor[0] == anchor[-1] == '"' else anchor
    for scope in _scopes(field):
        matches = [
            item
            for item in found
            if item.value == value and (item.path == scope or item.path.startswith(scope + "."))
        ]
        if matches:  # what names an entry (a map's key, a tensor's name) before other values
            named = [m for m in matches if m.path.rsplit(".", 1)[-1] in _NAMING]
            return _within(found, field, (named or matches)[0])
    return 0


def _within(found: list[Occurrence], field: str, match: Occurrence) -> int:
    """``field``'s line inside the entry of ``match`` (the message the value is in), or the
    value's own line."""
    for item in found:
        if item.path == field and item.entry[: len(match.entry)] == match.entry:
            return item.line
    return match.line


def _scopes(field: str) -> list[str]:
    """``a.b.c``, ``a.b``, ``a``: the field, then its ancestors, closest first."""
    parts = field.split(".")
    return [".".join(parts[:end]) for end in range(len(parts), 0, -1)]
