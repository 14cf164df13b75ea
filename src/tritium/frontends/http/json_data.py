"""Large JSON request bodies without one long orjson call.

orjson parses 60 MiB in one C call that holds the GIL for seconds, and builds a Python object
per number (1 GiB for a 60 MiB array). For a large body, each input's ``"data": [...]`` array
is cut out of the document before it is parsed: a numpy scan over windows of the text finds
where the array ends (brackets outside strings, with JSON's escapes) and a comma outside
strings in each window. The rest of the document is parsed as usual, with a unique token
where each array was; the arrays are then parsed window by window (each piece, wrapped in the
brackets open at its ends, is itself valid JSON exactly when the whole array is) and turned
into numpy chunks. Every step is short, so a decode on a worker thread lets the event loop run.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from ...errors import invalid_arg

SPAN_MIN = 1 << 14  # "data" arrays at least this long are cut out
SKELETON_MAX = 1 << 20  # JSON left once they are (whitespace aside): one orjson call


def skeleton_size(text: bytes) -> int:
    """What one orjson call has to parse: the bytes that are not JSON whitespace (a body
    padded with spaces is valid JSON, and orjson skips spaces fast)."""
    return len(text) - sum(text.count(c) for c in (b" ", b"\n", b"\r", b"\t"))


WINDOW = 1 << 17  # bytes scanned, and parsed, per step
_QUOTE, _BACKSLASH, _OPEN, _CLOSE, _COMMA = b'"\\[],'
_WHITESPACE = b" \t\r\n"


class Span:
    """A ``data`` array cut out of the document: its text, and (offset, depth) of the commas
    where it is cut into pieces. (A plain class: mypyc cannot build a dataclass with a
    ``memoryview`` field.)"""

    __slots__ = ("cuts", "text")

    def __init__(self, text: memoryview, cuts: list[tuple[int, int]]) -> None:
        self.text = text
        self.cuts = cuts


def split_document(body: bytes) -> tuple[bytes, dict[str, Span]]:
    """``body`` with each large ``data`` array replaced by a token string, and the arrays."""
    data = np.frombuffer(body, dtype=np.uint8)
    prefix = "\\u0000data-" + secrets.token_hex(8)
    pieces: list[bytes | memoryview] = []
    spans: dict[str, Span] = {}
    view = memoryview(body)
    done = 0
    for start in _data_arrays(body, done):
        if start < done:
            continue
        scanned = _scan_array(data, start)
        if scanned is None or scanned[0] - start < SPAN_MIN:
            continue
        end, cuts = scanned
        token = f"{prefix}-{len(spans)}"
        spans[token.replace("\\u0000", "\x00")] = Span(view[start:end], cuts)
        pieces += [view[done:start], b'"' + token.encode() + b'"']
        done = end
    if not spans:
        return body, spans  # nothing cut out: no copy
    pieces.append(view[done:])
    return b"".join(pieces), spans


def _data_arrays(body: bytes, start: int) -> Any:
    """Offsets of the ``[`` after each ``"data":`` key (not escaped), in order."""
    pos = body.find(b'"data"', start)
    while pos >= 0:
        after = pos + 6
        if not _escaped(body, pos):
            colon = _skip_space(body, after)
            if colon < len(body) and body[colon] == 0x3A:  # ':'
                bracket = _skip_space(body, colon + 1)
                if bracket < len(body) and body[bracket] == _OPEN:
                    yield bracket
        pos = body.find(b'"data"', after)


def _escaped(body: bytes, pos: int) -> bool:
    run = 0
    while pos - run - 1 >= 0 and body[pos - run - 1] == _BACKSLASH:
        run += 1
    return run % 2 == 1


def _skip_space(body: bytes, pos: int) -> int:
    while pos < len(body) and body[pos] in _WHITESPACE:
        pos += 1
    return pos


def _scan_array(data: np.ndarray, start: int) -> tuple[int, list[tuple[int, int]]] | None:
    """End of the array whose ``[`` is at ``start`` (just after its ``]``), and one cut per
    window: (offset from ``start`` of a comma outside strings, bracket depth there). None when
    the text ends first (orjson then reports the error)."""
    pos, depth, in_string, run = start + 1, 1, False, 0
    cuts: list[tuple[int, int]] = []
    while pos < len(data):
        window = data[pos : pos + WINDOW]
        quotes, run = _real_quotes(window, run)
        toggles = np.zeros(len(window), dtype=np.int8)
        toggles[quotes] = 1
        inside = (np.cumsum(toggles, dtype=np.int32) + in_string) & 1
        outside = inside == 0
        opens = (window == _OPEN) & outside
        closes = (window == _CLOSE) & outside
        level = depth + np.cumsum(opens, dtype=np.int32) - np.cumsum(closes, dtype=np.int32)
        ends = np.flatnonzero(closes & (level == 0))
        limit = int(ends[0]) if ends.size else len(window)
        commas = np.flatnonzero((window[:limit] == _COMMA) & outside[:limit])
        if commas.size:
            comma = int(commas[-1])
            cuts.append((pos + comma - start, int(level[comma])))
        if ends.size:
            return pos + limit + 1, cuts
        depth, in_string = int(level[-1]), bool(inside[-1])
        pos += len(window)
    return None


def _real_quotes(window: np.ndarray, run: int) -> tuple[np.ndarray, int]:
    """Offsets of the quotes that open or close a string (not escaped by an odd run of
    backslashes; ``run`` backslashes ended the previous window), and the run at this end."""
    quotes = np.flatnonzero(window == _QUOTE)
    backslash = window == _BACKSLASH
    if not run and not backslash.any():
        return quotes, 0
    index = np.arange(len(window))
    last_other = np.maximum.accumulate(np.where(backslash, -1, index))  # last non-backslash
    before = quotes - 1
    reach = last_other[np.maximum(before, 0)]
    runs = before - reach + np.where(reach < 0, run, 0)  # backslashes just before each quote
    runs = np.where(before < 0, run, runs)
    end_run = len(window) - 1 - int(last_other[-1]) + (run if last_other[-1] < 0 else 0)
    return quotes[runs % 2 == 0], end_run


def span_values(
    span: Span,
    convert: Callable[[list[Any], bytes], np.ndarray],
    count: int,
    dtype: Any,
    name: str,
) -> np.ndarray:
    """The ``count`` values of a cut-out array, flattened, converted piece by piece by
    ``convert`` (given the piece's values and its text) into one array, so no Python object
    outlives its piece."""
    text = span.text
    if count > len(text) // 2 + 1:  # an element takes two bytes at least ("0,")
        raise invalid_arg(
            f"input '{name}' got unexpected elements count (at most {len(text) // 2 + 1}), "
            f"expected {count}"
        )
    out = np.empty(count, dtype=dtype)
    total, prev, prev_depth = 0, 1, 1
    for cut, depth in [*span.cuts, (len(text) - 1, 1)]:
        piece = bytes(text[prev:cut])
        if not piece.strip(b" \t\r\n") and (span.cuts or cut != len(text) - 1):
            raise _bad_json(name, "empty element")
        try:
            values = orjson.loads(b"[" * prev_depth + piece + b"]" * depth)
        except orjson.JSONDecodeError as exc:
            raise _bad_json(name, str(exc)) from None
        flat = flatten(values)
        if total + len(flat) > count:
            raise invalid_arg(
                f"input '{name}' got unexpected elements count (more than {count}), "
                f"expected {count}"
            )
        out[total : total + len(flat)] = convert(flat, piece)
        total += len(flat)
        prev, prev_depth = cut + 1, depth
    if total != count:
        raise invalid_arg(f"input '{name}' got unexpected elements count {total}, expected {count}")
    return out


def flatten(data: Any) -> list[Any]:
    """Nested JSON arrays as one list, in order (Triton reads ``data`` the same way)."""
    if not isinstance(data, list):
        return [data]
    if data and isinstance(data[0], list):
        out: list[Any] = []
        for sub in data:
            out.extend(flatten(sub))
        return out
    return data


def _bad_json(name: str, why: str) -> Exception:
    return invalid_arg(f"failed to parse the request JSON buffer: 'data' of input '{name}': {why}")
