"""The response cache (``--cache-config local,size=BYTES`` + ``response_cache { enable: true }``
in a model's config): identical requests are answered without executing the model.

The key hashes the model name and version, every input (name, datatype, shape, bytes) and the
requested outputs. Entries are evicted least-recently-used first to stay within the size.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from ..tensor_codec import raw_bytes
from ..request import InferenceRequest
from ..types import Tensor


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


def parse_cache_config(values: list[str]) -> int:
    """``--cache-config local,size=N`` (repeatable) → the local cache's size in bytes (0: no
    cache). Other caches (redis) are not supported."""
    size = 0
    for value in values:
        kind, _, setting = value.partition(",")
        key, _, number = setting.partition("=")
        if kind != "local":
            raise ValueError(f"unsupported cache '{kind}': tritium has the 'local' cache")
        if key != "size":
            raise ValueError(f"unsupported setting '{key}' for the local cache")
        size = int(number)
    return size
