"""The server-wide rate limiter (``--rate-limit=execution_count``): a thin async driver
around ``RateLimitPolicy``. Each model instance gets a ``Gate`` when its model loads; every
scheduler passes through its instance's gate around each execution (``admitted`` in
``common.py``), so models sharing a resource never run at once beyond its count.

With ``--rate-limit=off`` (Triton's default) there is no limiter and no gates: the
``rate_limiter`` settings are accepted and have no effect, as in Triton.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence

from .rate_policy import GLOBAL, InstanceLimits, RateLimitPolicy, ResourcePool, explicit_counts

log = logging.getLogger("tritium")


class Gate:
    """One instance's passage through the limiter: acquire before an execution, release
    after. One execution at a time per gate (an instance runs one execution at a time)."""

    __slots__ = ("_limiter", "_waiter")

    def __init__(self, limiter: RateLimiter) -> None:
        self._limiter = limiter
        self._waiter: asyncio.Future[None] | None = None

    def try_acquire(self) -> bool:
        """Take the resources now if that needs no waiting (the scheduler's inline path)."""
        return self._limiter.policy.try_take(self)

    def acquire(self) -> asyncio.Future[None] | None:
        """None when granted at once; else a future resolved when granted."""
        allocated = self._limiter.policy.stage(self)
        granted_now = self in allocated
        self._limiter.grant(k for k in allocated if k is not self)
        if granted_now:
            return None
        self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def withdraw(self) -> None:
        """The wait was abandoned (cancellation): leave the queue, or give back a grant
        that came meanwhile."""
        self._waiter = None
        if not self._limiter.policy.withdraw(self):
            self.release()

    def release(self) -> None:
        self._limiter.grant(self._limiter.policy.release(self))

    def granted(self) -> None:
        """The limiter allocated this gate's resources. A waiter cancelled meanwhile is
        still held: its coroutine's ``withdraw`` gives the grant back."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class RateLimiter:
    """One per server, shared by every model; lives on the event loop (no locks)."""

    def __init__(self, resources: Iterable[tuple[str, int, int]] = ()) -> None:
        self.policy = RateLimitPolicy(ResourcePool(explicit_counts(resources)))

    def gates(self, owner: str, limits: Sequence[InstanceLimits]) -> list[Gate]:
        """Register a model version's instances (in order); raises INVALID_ARG with
        Triton's text when the resource counts cannot serve them (the load fails)."""
        gates: list[Gate] = []
        try:
            for instance_limits in limits:
                gate = Gate(self)
                self.policy.register(gate, instance_limits)
                gates.append(gate)
                self._log_resources()
        except Exception:
            self.close(gates)
            raise
        log.debug("rate limiter: %s registered; resources %s", owner, self.describe())
        return gates

    def close(self, gates: Sequence[Gate]) -> None:
        """A model version unloaded (or an instance update removed some): its instances
        leave the limiter."""
        for gate in gates:
            self.grant(self.policy.unregister(gate))
            self._log_resources()

    def _log_resources(self) -> None:
        """Triton's verbose (level 1) resource map, after each instance joins or leaves."""
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", resource_map(self.policy.limits))

    def grant(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            assert isinstance(key, Gate)
            key.granted()

    def describe(self) -> str:
        """The resource counts, as Triton's verbose "Max Resource Map" lists them."""
        limits = self.policy.limits
        parts: list[str] = []
        for device, per in sorted(limits.items()):
            where = "GLOBAL" if device == GLOBAL else f"device {device}"
            parts.extend(f"{name}={count} ({where})" for name, count in sorted(per.items()))
        return ", ".join(parts) or "none"


def resource_map(limits: Mapping[int, Mapping[str, int]]) -> str:
    """The counts as Triton's ``ResourceManager::ParseAndValidateResources`` logs them at
    verbose level 1 after each instance is added or removed (core src/rate_limiter.cc):
    devices in order (GLOBAL first), names in order, a device with none left out. Its
    newlines and tabs come out escaped as Triton's do (``\\t Count: 3``)."""
    text = "\nMax Resource Map===>\n"
    for device, per in sorted(limits.items()):
        if not per:
            continue
        text += f"\tDevice: {'GLOBAL' if device == GLOBAL else device}\n"
        text += "".join(f"\t\tResource: {n}\t Count: {c}\n" for n, c in sorted(per.items()))
    return text
