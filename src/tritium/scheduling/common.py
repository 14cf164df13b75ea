"""What both schedulers do around an execution, and as their instance set changes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from ..backends.base import ModelInstance, send_error
from ..errors import cancelled, internal
from ..request import InferenceRequest
from .rate_limiter import Gate


async def guarded(
    execution: Awaitable[None], requests: list[InferenceRequest], version: str
) -> bool:
    """Await an execution; if it fails (a backend bug) or is cancelled (shutdown), its
    requests get an error instead of waiting forever. Returns whether it completed."""
    try:
        await execution
    except asyncio.CancelledError:
        for request in requests:
            send_error(request, version, internal("the request was cancelled"))
        raise
    except Exception as exc:
        for request in requests:
            send_error(request, version, internal(f"{type(exc).__name__}: {exc}"))
        return False
    return True


def runnable(requests: Iterable[InferenceRequest], version: str) -> list[InferenceRequest]:
    """The requests whose client is still there; the others are answered CANCELLED."""
    kept = []
    for request in requests:
        if request.cancelled:
            send_error(request, version, cancelled("the request was cancelled"))
        else:
            kept.append(request)
    return kept


async def limited(gate: Gate, start: Callable[[], Awaitable[None]]) -> None:
    """An execution under the rate limiter: wait until ``gate`` grants the instance its
    resources, ``start`` the execution (which marks its requests executing: the wait counts
    as queue time, as in Triton), and give the resources back when it ends, however."""
    waiter = gate.acquire()
    if waiter is not None:
        try:
            await waiter
        except asyncio.CancelledError:
            gate.withdraw()
            raise
    try:
        await start()
    finally:
        gate.release()


def leaving(
    idle: list[ModelInstance], pending: dict[int, asyncio.Future[None]], instance: ModelInstance
) -> asyncio.Future[None] | None:
    """An instance-group update removes ``instance``: out of ``idle`` at once if it is
    there (None), else a future that ``rest`` resolves when its execution is done."""
    for index in range(len(idle)):
        if idle[index] is instance:
            del idle[index]
            return None
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pending[id(instance)] = done
    return done


def rest(
    idle: list[ModelInstance], leaving: dict[int, asyncio.Future[None]], instance: ModelInstance
) -> None:
    """``instance`` has nothing more to run: idle again, or, if an instance-group update
    removes it, gone (the update waiting on it goes on)."""
    done = leaving.pop(id(instance), None) if leaving else None
    if done is None:
        idle.append(instance)
    elif not done.done():
        done.set_result(None)
