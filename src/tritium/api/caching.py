"""The response cache's side of the inference call: answering a request from the local cache
or from Redis (``extensions/cache.py``, ``extensions/redis_cache.py``), and the statistics of
each lookup."""

from __future__ import annotations

import logging
import time

from ..errors import unavailable
from ..extensions.cache import ResponseCache, cache_key
from ..extensions.redis_cache import RedisResponseCache
from ..request import InferenceRequest, ServedModel
from ..types import InferenceResponse

log = logging.getLogger("tritium")


def from_cache(cache: ResponseCache, model: ServedModel, request: InferenceRequest) -> bool:
    """Answer from the response cache when the same request was answered before;
    otherwise remember the key, so the response is stored when it comes."""
    started = time.perf_counter_ns()
    key = cache_key(request)
    outputs = cache.get(key)
    stats = model.stats
    if outputs is None:
        stats.cache_lookup(False, time.perf_counter_ns() - started)
        request.cache_key = key
        return False
    stats.cache_lookup(True, time.perf_counter_ns() - started)
    request.cached = True
    response = InferenceResponse(request.model_name, model.version_str, request.id, list(outputs))
    assert request.sender is not None
    request.sender.send(response, True)
    return True


async def answer_remote(
    cache: RedisResponseCache, model: ServedModel, request: InferenceRequest
) -> None:
    """Look the request up in Redis (bounded; a failure is a miss): the cached answer, or the
    model's scheduler."""
    started = time.perf_counter_ns()
    key = cache_key(request)
    outputs = await cache.get(key, request)
    model.stats.cache_lookup(outputs is not None, time.perf_counter_ns() - started)
    assert request.sender is not None
    if outputs is not None:
        request.cached = True
        response = InferenceResponse(request.model_name, model.version_str, request.id, outputs)
        request.sender.send(response, True)
        return
    request.cache_key = key
    try:
        model.submit(request)
    except Exception as exc:  # e.g. the version went away while Redis answered
        log.warning("request for %s after a cache miss: %s", request.model_name, exc)
        request.sender.send(
            InferenceResponse(
                request.model_name, model.version_str, request.id,
                error=unavailable(f"model '{request.model_name}' is not available"),
            ),
            True,
        )  # fmt: skip
