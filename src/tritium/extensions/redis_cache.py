"""The shared response cache in Redis (``--cache-config redis,host=…,port=…``): the same keys as
the local cache (``cache.py:cache_key``), so every tritium pointing at one Redis answers from
the entries any of them stored.

A Redis that is down, slow or full costs a miss, never a failed or hung inference: every call
is bounded (``connect_timeout``, ``socket_timeout``, ``wait_timeout`` for a pooled connection,
and an overall deadline of their sum), a failure opens a circuit (``CircuitBreaker``) that
sends every lookup straight to the model for ``circuit_cooldown`` ms, then one call tries
Redis again. The client is redis-py's asyncio client, imported only when configured: nothing
blocks the event loop.

What Redis sends back is untrusted. A value is read with ``GETRANGE`` up to the request's
bound (``cache_check.expected``: the largest entry the model's config lets its outputs make,
at most ``max_entry_bytes``): the first ``FIRST_READ`` bytes in one call, which is the whole
of most entries; a longer one is measured with ``STRLEN`` before the rest is read, so a value
over the bound is refused without being read. ``decode_entry`` checks every count, name,
datatype and shape against the bytes before building a tensor, and ``cache_check.mismatch``
the outputs against what the request asks for; anything wrong is a miss, logged at most once
a minute. Entries are stored with ``ttl`` seconds to live when it is set (``SET ... EX``).

Entry layout (little-endian): ``TRC1``, u16 tensor count, then per tensor u16 name length,
name (UTF-8), u8 datatype length, datatype (Triton's wire name), u8 rank, rank × i64 dims, u64
data length, the data (Triton's wire bytes: raw row-major, BYTES length-prefixed)."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..options import RedisCacheOptions
from ..request import InferenceRequest
from ..tensor_codec import bytes_array, raw_bytes
from ..types import DataType, Tensor
from .cache_check import RateLimitedWarning, expected, mismatch

log = logging.getLogger("tritium.cache")

MAGIC = b"TRC1"
KEY_PREFIX = b"tritium:cache:v1:"
MAX_TENSORS = 1024
MAX_RANK = 64
MAX_PUTS_IN_FLIGHT = 64  # more stores than this waiting on Redis: the new ones are dropped
FIRST_READ = 64 << 10  # a lookup's first GETRANGE: a longer entry is measured before it is read
_WARN_EVERY_S = 60.0  # an ignored entry or an unstored response: one warning a minute at most
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")


class BadEntry(ValueError):
    """A value in Redis that is not an entry tritium wrote (a miss)."""


def redis_key(key: bytes) -> bytes:
    return KEY_PREFIX + key.hex().encode()


def encode_entry(outputs: list[Tensor]) -> bytes:
    parts = [MAGIC, _U16.pack(len(outputs))]
    for tensor in outputs:
        name = tensor.name.encode()
        wire = tensor.datatype.wire.encode()
        data = bytes(raw_bytes(tensor.data, tensor.datatype))
        parts += [_U16.pack(len(name)), name, _U8.pack(len(wire)), wire]
        parts += [_U8.pack(len(tensor.shape)), struct.pack(f"<{len(tensor.shape)}q", *tensor.shape)]
        parts += [_U64.pack(len(data)), data]
    return b"".join(parts)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.view = memoryview(buf)
        self.at = 0

    def take(self, count: int) -> memoryview:
        if count < 0 or self.at + count > len(self.view):
            raise BadEntry("truncated entry")
        piece = self.view[self.at : self.at + count]
        self.at += count
        return piece

    def unpack(self, layout: struct.Struct) -> int:
        (value,) = layout.unpack(self.take(layout.size))
        return int(value)


def decode_entry(buf: bytes) -> list[Tensor]:
    """The outputs of an entry; ``BadEntry`` for anything that is not a well-formed one."""
    reader = _Reader(buf)
    if bytes(reader.take(len(MAGIC))) != MAGIC:
        raise BadEntry("not a tritium cache entry")
    count = reader.unpack(_U16)
    if count > MAX_TENSORS:
        raise BadEntry("too many tensors")
    outputs = [_tensor(reader) for _ in range(count)]
    if reader.at != len(reader.view):
        raise BadEntry("trailing bytes")
    return outputs


def _tensor(reader: _Reader) -> Tensor:
    try:
        name = bytes(reader.take(reader.unpack(_U16))).decode()
        datatype = DataType.from_wire(bytes(reader.take(reader.unpack(_U8))).decode())
    except UnicodeDecodeError:
        raise BadEntry("a name is not UTF-8") from None
    if datatype is None:
        raise BadEntry("unknown datatype")
    rank = reader.unpack(_U8)
    if rank > MAX_RANK:
        raise BadEntry("rank too large")
    shape = struct.unpack(f"<{rank}q", reader.take(8 * rank))
    if any(dim < 0 for dim in shape):
        raise BadEntry("negative dimension")
    data = reader.take(reader.unpack(_U64))
    return Tensor(name, datatype, shape, _array(datatype, shape, data))


def _array(datatype: DataType, shape: tuple[int, ...], data: memoryview) -> np.ndarray:
    elements = 1
    for dim in shape:
        elements *= dim
        if elements > len(data):  # every element takes at least one byte
            raise BadEntry("shape does not match the data")
    if datatype is DataType.BYTES:
        try:
            items = bytes_array(bytes(data), "cached", expected=elements)
        except Exception:  # tensor_codec refuses malformed BYTES with a ServerError
            raise BadEntry("malformed BYTES data") from None
        return items.reshape(shape)
    if elements * datatype.size != len(data):
        raise BadEntry("shape does not match the data")
    return np.frombuffer(bytes(data), dtype=datatype.dtype).reshape(shape)


class CircuitBreaker:
    """Closed: Redis is called. A failure opens it for ``cooldown_s``: calls are skipped (a
    miss). After the cool-down one call goes through (half-open); its success closes the
    circuit, its failure opens it again. Pure: the clock is passed in."""

    def __init__(self, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.open_until: float | None = None
        self.trying = False
        self.openings = 0

    def allow(self) -> bool:
        if self.open_until is None:
            return True
        if self.trying or self.clock() < self.open_until:
            return False
        self.trying = True
        return True

    def succeeded(self) -> bool:
        """True when this closed an open circuit."""
        reopened = self.open_until is not None
        self.open_until = None
        self.trying = False
        return reopened

    def abandoned(self) -> None:
        """The call allowed went away without an answer (cancelled): another may try."""
        self.trying = False

    def failed(self) -> bool:
        """True when this opened a closed circuit."""
        opened = self.open_until is None
        self.open_until = self.clock() + self.cooldown_s
        self.trying = False
        self.openings += int(opened)
        return opened


class RedisResponseCache:
    """Lookups and stores in Redis, each bounded; failures are misses and open the circuit."""

    def __init__(self, options: RedisCacheOptions) -> None:
        self.options = options
        self.circuit = CircuitBreaker(options.cooldown_ms / 1000)
        self.deadline_s = (
            options.connect_timeout_ms + options.socket_timeout_ms + options.wait_timeout_ms
        ) / 1000
        self._client = _client(options)
        self._puts: set[asyncio.Task[None]] = set()
        self._ignored = RateLimitedWarning(log, _WARN_EVERY_S)
        self._unstored = RateLimitedWarning(log, _WARN_EVERY_S)

    async def start(self) -> None:
        """One PING at start: a Redis that does not answer is logged (lookups will miss until
        it does), the server starts anyway."""
        if await self._call(self._client.ping()) is None:
            log.warning(
                "Redis cache at %s:%d does not answer; requests miss the cache until it does",
                self.options.host,
                self.options.port,
            )
        else:
            log.info("Redis cache at %s:%d connected", self.options.host, self.options.port)

    async def get(self, key: bytes, request: InferenceRequest) -> list[Tensor] | None:
        """The stored outputs for ``key``; None on a miss, a failure, or an entry that is
        malformed, too large or not what ``request`` asks for."""
        expect = expected(request, self.options.max_entry_bytes)
        try:
            value = await self._read(redis_key(key), expect.max_bytes)
            if value is None:
                return None
            outputs = decode_entry(value)
            reason = mismatch(outputs, expect)
            if reason:
                raise BadEntry(f"its outputs do not match the request: {reason}")
            return outputs
        except (BadEntry, ValueError, struct.error) as exc:
            self._ignored.warn("Redis cache: ignoring the entry for %s: %s", key.hex(), exc)
            return None

    async def _read(self, name: bytes, bound: int) -> bytes | None:
        """The value under ``name`` if it is at most ``bound`` bytes; None when there is none
        (or Redis failed); ``BadEntry`` when it is longer, read no further than the bound."""
        first = min(bound, FIRST_READ)
        head = await self._call(self._client.getrange(name, 0, first))  # first + 1 at most
        if not head or not isinstance(head, bytes):
            return None
        if len(head) <= first:
            return head
        if bound > first:  # a long entry: measured before the rest is read
            length = await self._call(self._client.strlen(name))
            if not isinstance(length, int):
                return None
            if length <= bound:
                rest = await self._call(self._client.getrange(name, len(head), bound))
                if not isinstance(rest, bytes):
                    return None
                head += rest
                if len(head) <= bound:
                    return head
        raise BadEntry(f"larger than the {bound} bytes this request's outputs can take")

    def put(self, key: bytes, request: InferenceRequest, outputs: list[Tensor]) -> None:
        """Store in the background (bounded, never awaited by the request); outputs that are
        not what a lookup of this request would accept are not stored."""
        if len(self._puts) >= MAX_PUTS_IN_FLIGHT or self.circuit.open_until is not None:
            return
        expect = expected(request, self.options.max_entry_bytes)
        reason = mismatch(outputs, expect)
        if reason:
            self._unstored.warn(
                "Redis cache: not storing a response of '%s': %s (the model's config says "
                "otherwise)", request.model_name, reason,
            )  # fmt: skip
            return
        value = encode_entry(outputs)
        if len(value) > expect.max_bytes:
            return
        task = asyncio.get_running_loop().create_task(self._put(key, value))
        self._puts.add(task)
        task.add_done_callback(self._puts.discard)

    async def _put(self, key: bytes, value: bytes) -> None:
        ttl = self.options.ttl
        await self._call(self._client.set(redis_key(key), value, ex=ttl if ttl else None))

    async def _call(self, command: Any) -> Any:
        """Await one Redis command within the deadline when the circuit allows it; None for
        a failure (and the circuit opens)."""
        if not self.circuit.allow():
            command.close()
            return None
        try:
            result = await asyncio.wait_for(command, self.deadline_s)
        except asyncio.CancelledError:
            self.circuit.abandoned()
            raise
        except Exception as exc:  # redis-py's errors, timeouts, a reset connection
            if self.circuit.failed():
                log.warning(
                    "Redis cache unavailable (%s: %s); misses for %.1f s, then retried",
                    type(exc).__name__,
                    exc,
                    self.circuit.cooldown_s,
                )
            return None
        if self.circuit.succeeded():
            log.info("Redis cache answers again")
        return result

    async def close(self) -> None:
        for task in list(self._puts):
            task.cancel()
        try:
            await asyncio.wait_for(self._client.aclose(), self.deadline_s)
        except Exception:  # closing a connection to a Redis that is gone
            pass


def _client(options: RedisCacheOptions) -> Any:
    """redis-py's asyncio client over a bounded, blocking pool; no retries (a failure is a
    miss, retried after the cool-down)."""
    try:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
    except ImportError:
        raise RuntimeError(
            "the redis cache needs the 'redis' package: pip install 'tritium[redis]'"
        ) from None
    connection: dict[str, Any] = {
        "host": options.host,
        "port": options.port,
        "db": options.db,
        "username": options.user or None,
        "password": options.password or None,
        "socket_connect_timeout": options.connect_timeout_ms / 1000,
        "socket_timeout": options.socket_timeout_ms / 1000,
        "retry": Retry(NoBackoff(), 0),
    }
    if options.tls_enabled:
        connection.update(
            connection_class=aioredis.SSLConnection,
            ssl_certfile=options.cert or None,
            ssl_keyfile=options.key or None,
            ssl_ca_certs=options.cacert or None,
            ssl_ca_path=options.cacert_dir or None,
        )
    pool = aioredis.BlockingConnectionPool(
        max_connections=options.pool_size, timeout=options.wait_timeout_ms / 1000, **connection
    )
    return aioredis.Redis(connection_pool=pool)
