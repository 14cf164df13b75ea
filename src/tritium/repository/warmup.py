"""Model warm-up: run a version's ``model_warmup`` samples on every one of its instances
before the version is READY (Triton's ``TritonModelInstance::WarmUp``).

The sample requests go straight to each instance's ``execute``, as Triton hands them to the
backend without a scheduler: no queue, no batcher delay, no sequence slot. They have no
statistics (``request.stats`` stays None and ``InferenceRequest.finish`` is never called), so
inference statistics and metrics count only client requests. Instances warm up in parallel;
on each, the samples run in config order, each ``count`` times, one execution at a time. The
first sample that answers an error ends the warm-up with Triton's reason,
"failed to run warmup sample '<name>': <error>; ", and the load fails.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np

from ..backends.base import ModelInstance
from ..config.spec import ModelSpec
from ..config.warmup import WarmupSample, sample_tensors, warmup_samples
from ..errors import ServerError, invalid_arg
from ..request import InferenceRequest, ResponseSender
from ..types import ClientRequest, InferenceResponse, Tensor
from ..logs.settings import about_model

log = logging.getLogger("tritium")


async def warm_up(
    spec: ModelSpec, instances: list[ModelInstance], model_dir: Path | None, version: int
) -> None:
    """Warm up every instance; on any failure close them all and raise (INVALID_ARG, as
    Triton) with the reason."""
    try:
        samples = warmup_samples(spec, model_dir)
        if samples:
            results = await asyncio.gather(
                *(_warm_instance(spec, i, samples, model_dir, version) for i in instances),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
    except BaseException:
        await asyncio.gather(*(i.close() for i in instances), return_exceptions=True)
        raise


async def _warm_instance(
    spec: ModelSpec,
    instance: ModelInstance,
    samples: tuple[WarmupSample, ...],
    model_dir: Path | None,
    version: int,
) -> None:
    rng = np.random.default_rng()
    batched = spec.max_batch_size > 0
    for sample in samples:
        tensors = await asyncio.to_thread(sample_tensors, sample, model_dir, batched, rng)
        for iteration in range(1, sample.count + 1):
            log.debug(
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                spec.name,
                getattr(instance, "name", "?"),
                sample.name,
                iteration,
                extra=about_model(spec.name),
            )
            errors = await _run(spec, instance, sample, tensors, version)
            if errors:
                raise invalid_arg(
                    f"failed to run warmup sample '{sample.name}': "
                    + "".join(f"{e}; " for e in errors)
                )


async def _run(
    spec: ModelSpec,
    instance: ModelInstance,
    sample: WarmupSample,
    tensors: list[Tensor],
    version: int,
) -> list[str]:
    """One execution of ``sample``'s batch on ``instance``: the error texts it answered."""
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    requests, finals = [], []
    for _ in range(sample.batch_size):
        done: asyncio.Future[None] = loop.create_future()
        request = _request(spec, tensors, version, _collector(errors, done))
        requests.append(request)
        finals.append(done)
    try:
        await instance.execute(requests)
    except Exception as exc:  # an instance answers through the senders; this is a bug's net
        for request in requests:
            assert request.sender is not None
            if not request.sender.finished:
                request.fail(str(version), exc)
    await asyncio.gather(*finals)
    return errors


def _request(
    spec: ModelSpec, tensors: list[Tensor], version: int, sender: ResponseSender
) -> InferenceRequest:
    client = ClientRequest(spec.name, version, inputs=tuple(tensors))
    request = InferenceRequest(client)
    request.model_version = version
    request.decoupled = spec.decoupled
    sender.bind(request, _settled)
    return request


def _collector(errors: list[str], done: asyncio.Future[None]) -> ResponseSender:
    """A sender that keeps every error a sample request answered and resolves ``done`` at
    its final response (the response itself is dropped: warm-up checks no output)."""
    seen: list[Exception] = []

    def callback(response: InferenceResponse | None, final: bool) -> None:
        if response is not None and response.error is not None:
            seen.append(response.error)
            errors.append(_text(response.error))
        if final:
            error = sender.error
            if error is not None and not any(error is e for e in seen):
                errors.append(_text(error))  # "the model sent no response"
            if not done.done():
                done.set_result(None)

    sender = ResponseSender(callback)
    return sender


def _settled(request: InferenceRequest, error: Exception | None, last: object) -> None:
    """A warm-up request has no statistics, cache or shared memory to settle."""


def _text(error: Exception) -> str:
    return error.message if isinstance(error, ServerError) else str(error)
