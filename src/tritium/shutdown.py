"""The server's stop after the listeners closed (Triton's ``InferenceServer::Stop``, its lines
and its order): in-flight inferences finish, then every model is unloaded, each phase within
what is left of ``--exit-timeout-secs``."""

from __future__ import annotations

import asyncio
import logging

from .api import Inference
from .countdown import ExitCountdown
from .repository.control import ModelControl
from .repository.manager import ModelRepositoryManager

log = logging.getLogger("tritium")

# At shutdown, models get at least this long to finalize once in-flight requests are done
# (or the exit timeout ran out), before their instances are killed.
_FINALIZE_GRACE_S = 1.0


async def drain(
    inference: Inference,
    repository: ModelRepositoryManager,
    control: ModelControl,
    countdown: ExitCountdown,
) -> None:
    """Wait for the inferences in flight (logging Triton's countdown lines), then unload every
    model, waiting for the live models and the model-control requests in flight."""
    log.info("Waiting for in-flight requests to complete.")
    if not await countdown.wait(
        lambda: len(inference.inflight_by), lambda left, n: _inflight_line(inference, left, n), True
    ):
        log.warning("%d requests still in flight at shutdown timeout", inference.inflight)
    log.info("All models are stopped, unloading models")
    unload = asyncio.ensure_future(unload_all(repository, control, countdown))

    def live_line(left: int, count: int) -> str:
        return (
            f"Timeout {left}: Found {repository.live_models()} live models and "
            f"{control.in_flight()} in-flight non-inference requests"
        )

    await countdown.wait(
        lambda: repository.live_models() + control.in_flight() + (not unload.done()),
        live_line,
        True,
    )
    await unload


def _inflight_line(inference: Inference, left: int, count: int) -> str:
    lines = [f"Timeout {left}: Found {count} model versions that have in-flight inferences"]
    for (name, version), n in sorted(inference.inflight_by.items()):
        lines.append(f"Model '{name}' (version {version}) has {n} in-flight inferences")
    return "\n".join(lines)


async def unload_all(
    repository: ModelRepositoryManager, control: ModelControl, countdown: ExitCountdown
) -> None:
    """Loads and unloads clients asked for finish (within the timeout; then they are
    cancelled), then every model is unloaded, those just loaded included."""
    await control.stop(countdown.remaining())
    remaining = max(countdown.remaining(), _FINALIZE_GRACE_S)
    await repository.unload_all(timeout=remaining)
