"""What a request's entry in the shared (Redis) cache must look like, from the request and its
model's config: which outputs (the requested ones, else every configured one), each one's
datatype and shape (config ``dims``, ``-1`` any size, the request's batch size in front when
the model batches), and the largest entry such outputs can make — the bound of a read: a
model whose outputs all have fixed dims and a fixed-size datatype has an exact one, so a
hostile value of any size costs reading a few bytes more than the answer.

An entry that does not match is never served (a miss), and a response that does not match
is never stored; Redis is not trusted (``redis_cache.py``). The local cache holds only this
process's own responses and is not checked."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..request import InferenceRequest
from ..types import DataType, Tensor

# An entry's bytes besides the data (redis_cache.py's layout): the magic and the count, and
# per tensor the lengths, name, datatype, rank and dims.
ENTRY_HEAD = 4 + 2
_TENSOR_HEAD = 2 + 1 + 1 + 8


class Expected:
    """``outputs``: name -> (datatype, dims with -1 for any size), or None for a name the
    config does not describe (anything goes); ``max_bytes``: the largest entry possible."""

    __slots__ = ("outputs", "max_bytes")

    def __init__(
        self, outputs: dict[str, tuple[DataType, tuple[int, ...]] | None], max_bytes: int
    ) -> None:
        self.outputs = outputs
        self.max_bytes = max_bytes


def expected(request: InferenceRequest, limit: int) -> Expected:
    """What ``request``'s entry must be; ``limit``: the bound when the config sets none
    (``max_entry_bytes``)."""
    model = request.model
    assert model is not None  # resolved before the cache is consulted
    config = model.outputs
    names = [o.name for o in request.outputs] if request.outputs else list(config)
    batch = (request.batch_size,) if model.max_batch_size > 0 else ()
    outputs: dict[str, tuple[DataType, tuple[int, ...]] | None] = {}
    total = ENTRY_HEAD
    for name in names:
        io = config.get(name)
        if io is None:
            outputs[name] = None
            total = limit
            continue
        datatype, dims = io[0], batch + io[1]
        outputs[name] = (datatype, dims)
        total += _TENSOR_HEAD + len(name.encode()) + len(datatype.wire) + 8 * len(dims)
        total += _data_bound(datatype, dims, limit)
    return Expected(outputs, min(total, limit))


def _data_bound(datatype: DataType, dims: tuple[int, ...], limit: int) -> int:
    if datatype is DataType.BYTES or any(d < 0 for d in dims):
        return limit
    size = datatype.size
    for dim in dims:
        size *= dim
    return size


def mismatch(outputs: list[Tensor], expect: Expected) -> str:
    """Why ``outputs`` are not what the request asks for ('' when they are)."""
    wanted = expect.outputs
    if len(outputs) != len(wanted):
        return f"{len(outputs)} outputs where {len(wanted)} are expected"
    seen: set[str] = set()
    for tensor in outputs:
        name = tensor.name
        if name not in wanted or name in seen:
            return f"unexpected output '{name[:64]}'"
        seen.add(name)
        form = wanted[name]
        if form is None:
            continue
        datatype, dims = form
        if tensor.datatype is not datatype:
            return f"output '{name}' is {tensor.datatype.wire}, not {datatype.wire}"
        if not _fits(tensor.shape, dims):
            return f"output '{name}' has shape {list(tensor.shape)}, not {list(dims)}"
    return ""


def _fits(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(want in (-1, got) for want, got in zip(dims, shape, strict=True))


class RateLimitedWarning:
    """A warning logged at most once per ``every_s`` seconds, saying how many were not."""

    def __init__(
        self, log: logging.Logger, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.log = log
        self.every_s = every_s
        self.clock = clock
        self.next_at = 0.0
        self.held = 0

    def warn(self, message: str, *args: object) -> None:
        now = self.clock()
        if now < self.next_at:
            self.held += 1
            return
        held, self.held, self.next_at = self.held, 0, now + self.every_s
        suffix = f" ({held} more like it not logged)" if held else ""
        self.log.warning(message + suffix, *args, stacklevel=2)  # the caller's line
