"""The response cache: keys, LRU eviction by size, the --cache-config syntax."""

from __future__ import annotations

import numpy as np
import pytest

from tritium.extensions.cache import ResponseCache, cache_key, parse_cache_config
from tritium.request import InferenceRequest
from tritium.types import ClientRequest, DataType, RequestedOutput, Tensor


def _request(values: list[int], outputs: tuple[str, ...] = ()) -> InferenceRequest:
    data = np.array(values, dtype=np.int32)
    inputs = (Tensor("IN", DataType.INT32, data.shape, data),)
    requested = tuple(RequestedOutput(o) for o in outputs)
    return InferenceRequest(ClientRequest("m", 1, inputs=inputs, outputs=requested))


def _outputs(nbytes: int) -> list[Tensor]:
    data = np.zeros(nbytes, dtype=np.uint8)
    return [Tensor("OUT", DataType.UINT8, data.shape, data)]


def test_keys_follow_inputs_and_requested_outputs() -> None:
    assert cache_key(_request([1, 2])) == cache_key(_request([1, 2]))
    assert cache_key(_request([1, 2])) != cache_key(_request([1, 3]))
    assert cache_key(_request([1, 2])) != cache_key(_request([1, 2], ("OUT",)))


def test_least_recently_used_is_evicted_first() -> None:
    cache = ResponseCache(capacity=3 * (100 + 64))
    for key in (b"a", b"b", b"c"):
        cache.put(key, _outputs(100))
    assert cache.get(b"a") is not None  # a becomes the most recently used
    cache.put(b"d", _outputs(100))
    assert cache.get(b"b") is None and cache.get(b"a") is not None
    assert len(cache) == 3 and cache.used <= cache.capacity


def test_entries_larger_than_the_cache_are_not_stored() -> None:
    cache = ResponseCache(capacity=50)
    cache.put(b"big", _outputs(100))
    assert cache.get(b"big") is None and cache.used == 0


def test_cache_config_syntax() -> None:
    assert parse_cache_config([]).size == 0
    assert parse_cache_config(["local,size=1048576"]).size == 1048576
    for bad in (["memcached,size=1"], ["local,size=big"], ["local,count=1"], ["local"]):
        with pytest.raises(ValueError):
            parse_cache_config(bad)
    with pytest.raises(ValueError, match="only one cache"):
        parse_cache_config(["local,size=1", "redis,host=x", "redis,port=1"])
