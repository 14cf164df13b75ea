"""The response cache (``--cache-config local,size=BYTES`` or ``--cache-config redis,…`` +
``response_cache { enable: true }`` in a model's config): identical requests are answered
without executing the model. The local cache lives here; the Redis one, which shares entries
between servers under the same keys, in ``redis_cache.py``.

The key hashes the model's generation (``repository/generation.py``: a digest of its config
and files, so a reload with new code, even at the same version, never meets the old answers),
its name and version, the request's own parameters (a Python model reads them; Triton's key
leaves them out), every input (name, datatype, shape, bytes) and the requested outputs.
Entries are evicted least-recently-used first to stay within the size, and, with
``local,ttl=<seconds>``, expire that long after they were stored.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from ..options import RedisCacheOptions
from ..request import InferenceRequest
from ..tensor_codec import raw_bytes
from ..types import Tensor
from .redis_options import redis_options


def cache_key(request: InferenceRequest) -> bytes:
    digest = hashlib.blake2b(digest_size=20)
    model = request.model
    if model is not None:
        digest.update(model.generation)
    digest.update(f"{request.model_name}\0{request.model_version}\0".encode())
    if request.parameters:
        digest.update(_parameters(request.parameters))
    for tensor in sorted(request.inputs, key=lambda t: t.name):
        digest.update(f"{tensor.name}\0{tensor.datatype.wire}\0{tensor.shape}\0".encode())
        digest.update(raw_bytes(tensor.data, tensor.datatype))
    for name in sorted(o.name for o in request.outputs):
        digest.update(f"out\0{name}\0".encode())
    return digest.digest()


def _parameters(parameters: dict[str, object]) -> bytes:
    """The model's parameters in one canonical form: keys sorted (nested ones too), and 1,
    1.0, true and "1" told apart; a value JSON cannot hold is written as its repr. Prefixed
    by its length, so it cannot run into the inputs' part of the key."""
    text = orjson.dumps(parameters, default=repr, option=orjson.OPT_SORT_KEYS)
    return b"params\0%d\0" % len(text) + text


def _size(outputs: list[Tensor]) -> int:
    total = 0
    for tensor in outputs:
        data = tensor.data
        total += data.nbytes if data.dtype.kind != "O" else sum(len(v) for v in data.flat) + 8
    return total + 64 * len(outputs)


class ResponseCache:
    """``ttl_s`` > 0: an entry older than that is a miss (and dropped); ``clock``: monotonic
    seconds, passed in for the tests."""

    def __init__(
        self, capacity: int, ttl_s: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.capacity = capacity
        self.used = 0
        self.ttl_s = ttl_s
        self._clock = clock
        # key -> (outputs, size, expiry in the clock's seconds; 0.0: none)
        self._entries: OrderedDict[bytes, tuple[list[Tensor], int, float]] = OrderedDict()

    def get(self, key: bytes) -> list[Tensor] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[2] and self._clock() >= entry[2]:
            del self._entries[key]
            self.used -= entry[1]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, outputs: list[Tensor]) -> None:
        size = _size(outputs)
        if size > self.capacity or key in self._entries:
            return
        while self.used + size > self.capacity:
            _, (_, evicted, _) = self._entries.popitem(last=False)
            self.used -= evicted
        expiry = self._clock() + self.ttl_s if self.ttl_s else 0.0
        self._entries[key] = (outputs, size, expiry)
        self.used += size

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """What ``--cache-config`` chose: the local cache's size (0: none) and its entries' time to
    live in seconds (0: none), or the Redis cache."""

    size: int = 0
    redis: RedisCacheOptions | None = None
    ttl: int = 0


def parse_cache_config(values: list[str]) -> CacheSettings:
    """``--cache-config <cache>,<key>=<value>`` (repeatable, as Triton: the settings of one
    cache accumulate) → the local cache (``local,size=N``) or the Redis cache
    (``redis,host=…``, ``extensions/redis_cache.py:redis_options``). One cache at a time."""
    settings: dict[str, dict[str, str]] = {}
    for value in values:
        kind, comma, setting = value.partition(",")
        key, equals, text = setting.partition("=")
        if kind not in ("local", "redis"):
            raise ValueError(
                f"unsupported cache '{kind}': tritium has the 'local' and 'redis' caches"
            )
        if not (comma and equals and key):
            raise ValueError(f"'{value}' is not <cache>,<key>=<value>")
        settings.setdefault(kind, {})[key] = text
    if len(settings) > 1:
        raise ValueError("only one cache can be configured: 'local' or 'redis', not both")
    if "redis" in settings:
        return CacheSettings(redis=redis_options(settings["redis"], os.environ))
    local = settings.get("local", {})
    for key in local:
        if key not in ("size", "ttl"):
            raise ValueError(f"unsupported setting '{key}' for the local cache (known: size, ttl)")
    size = _number(local.get("size", "0"), "the local cache's size must be a number of bytes")
    ttl = _number(local.get("ttl", "0"), "the local cache's ttl must be a number of seconds")
    if ttl and not size:
        raise ValueError("the local cache's ttl needs its size: local,size=<bytes>")
    return CacheSettings(size=size, ttl=ttl)


def _number(text: str, what: str) -> int:
    if not text.isdigit() or len(text) > 15:
        raise ValueError(f"{what}, not '{text}'")
    return int(text)
