"""The response cache: keys, LRU eviction by size, time to live, the --cache-config syntax."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tritium.extensions.cache import ResponseCache, cache_key, parse_cache_config
from tritium.request import InferenceRequest
from tritium.types import ClientRequest, DataType, RequestedOutput, Tensor


def _request(
    values: list[int], outputs: tuple[str, ...] = (), parameters: dict[str, Any] | None = None
) -> InferenceRequest:
    data = np.array(values, dtype=np.int32)
    inputs = (Tensor("IN", DataType.INT32, data.shape, data),)
    requested = tuple(RequestedOutput(o) for o in outputs)
    client = ClientRequest("m", 1, inputs=inputs, outputs=requested)
    return InferenceRequest(client, parameters=parameters)


def _outputs(nbytes: int) -> list[Tensor]:
    data = np.zeros(nbytes, dtype=np.uint8)
    return [Tensor("OUT", DataType.UINT8, data.shape, data)]


def test_keys_follow_inputs_and_requested_outputs() -> None:
    assert cache_key(_request([1, 2])) == cache_key(_request([1, 2]))
    assert cache_key(_request([1, 2])) != cache_key(_request([1, 3]))
    assert cache_key(_request([1, 2])) != cache_key(_request([1, 2], ("OUT",)))


def test_keys_follow_the_model_s_parameters() -> None:
    """A Python model reads the request's parameters: they are part of the key, in one
    canonical form (key order does not matter; 1, 1.0, true and "1" differ)."""
    assert cache_key(_request([1], parameters={"scale": 100})) != cache_key(
        _request([1], parameters={"scale": 1})
    )
    assert cache_key(_request([1], parameters={"scale": 1})) != cache_key(_request([1]))
    same = [{"a": 1, "b": {"x": 1, "y": 2}}, {"b": {"y": 2, "x": 1}, "a": 1}]
    assert len({cache_key(_request([1], parameters=p)) for p in same}) == 1
    kinds = [{"v": 1}, {"v": 1.0}, {"v": True}, {"v": "1"}, {"v": None}, {"v": [1]}]
    assert len({cache_key(_request([1], parameters=p)) for p in kinds}) == len(kinds)


def test_entries_expire_after_the_ttl() -> None:
    now = [100.0]
    cache = ResponseCache(capacity=10_000, ttl_s=30, clock=lambda: now[0])
    cache.put(b"a", _outputs(10))
    now[0] += 29.9
    assert cache.get(b"a") is not None
    now[0] += 0.1
    assert cache.get(b"a") is None and len(cache) == 0 and cache.used == 0
    cache.put(b"a", _outputs(10))  # stored again: lives another 30 s
    assert cache.get(b"a") is not None


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
    chosen = parse_cache_config(["local,size=4096", "local,ttl=60"])
    assert (chosen.size, chosen.ttl) == (4096, 60)
    with pytest.raises(ValueError, match="ttl needs its size"):
        parse_cache_config(["local,ttl=60"])
    with pytest.raises(ValueError, match="number of seconds"):
        parse_cache_config(["local,size=1", "local,ttl=1h"])
    for bad in (["memcached,size=1"], ["local,size=big"], ["local,count=1"], ["local"]):
        with pytest.raises(ValueError):
            parse_cache_config(bad)
    with pytest.raises(ValueError, match="only one cache"):
        parse_cache_config(["local,size=1", "redis,host=x", "redis,port=1"])
