"""The response cache (``--cache-config local,size=BYTES`` or ``--cache-config redis,…`` +
``response_cache { enable: true }`` in a model's config): identical requests are answered
without executing the model. The local cache lives here; the Redis one, which shares entries
between servers under the same keys, in ``redis_cache.py``.

The key hashes the model name and version, every input (name, datatype, shape, bytes) and the
requested outputs. Entries are evicted least-recently-used first to stay within the size.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass

from ..options import RedisCacheOptions
from ..request import InferenceRequest
from ..tensor_codec import raw_bytes
from ..types import Tensor
from .redis_options import redis_options


def cache_key(request: InferenceRequest) -> bytes:
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{request.model_name}\0{request.model_version}\0".encode())
    for tensor in sorted(request.inputs, key=lambda t: t.name):
        digest.update(f"{tensor.name}\0{tensor.datatype.wire}\0{tensor.shape}\0".encode())
        digest.update(raw_bytes(tensor.data, tensor.datatype))
    for name in sorted(o.name for o in request.outputs):
        digest.update(f"out\0{name}\0".encode())
    return digest.digest()


def _size(outputs: list[Tensor]) -> int:
    total = 0
    for tensor in outputs:
        data = tensor.data
        total += data.nbytes if data.dtype.kind != "O" else sum(len(v) for v in data.flat) + 8
    return total + 64 * len(outputs)


class ResponseCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._entries: OrderedDict[bytes, tuple[list[Tensor], int]] = OrderedDict()

    def get(self, key: bytes) -> list[Tensor] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, outputs: list[Tensor]) -> None:
        size = _size(outputs)
        if size > self.capacity or key in self._entries:
            return
        while self.used + size > self.capacity:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.used -= evicted
        self._entries[key] = (outputs, size)
        self.used += size

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """What ``--cache-config`` chose: the local cache's size (0: none) or the Redis cache."""

    size: int = 0
    redis: RedisCacheOptions | None = None


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
    return CacheSettings(size=_local_size(settings.get("local", {})))


def _local_size(settings: dict[str, str]) -> int:
    for key in settings:
        if key != "size":
            raise ValueError(f"unsupported setting '{key}' for the local cache")
    text = settings.get("size", "0")
    if not text.isdigit():
        raise ValueError(f"the local cache's size must be a number of bytes, not '{text}'")
    return int(text)
