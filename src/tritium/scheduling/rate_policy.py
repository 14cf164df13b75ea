"""The rate limiter's policy (Triton's ``--rate-limit=execution_count``): pure and
synchronous, with no clock at all, so it is unit-tested directly; ``rate_limiter.py`` drives it.

Triton's semantics (core src/rate_limiter.cc, server docs/user_guide/rate_limiter.md):

- an instance lists resources in ``instance_group.rate_limiter.resources``; it may execute
  only while it holds them all; they are taken when it starts and given back when it ends;
- a resource is per device (the instance's device; a CPU instance's is 0) unless it is
  ``global: true``, in which case one pool serves every device; one name may not be both;
- how many of each exist: by default the most any registered instance needs (so every
  instance can run); ``--rate-limit-resource=name:count[:device]`` sets them instead (a
  device-less one applies to every device), and once any is given, a resource that is not
  given has a count of 0; a count below what an instance needs fails its load;
- instances waiting for their resources are served in order of ``executions * priority``
  (priority 0 counts as 1; lower first), ties in arrival order; the first in that order that
  does not fit blocks the others (so a large request is not starved by small ones).

Triton attempts one allocation per event; this policy allocates as many waiting instances
as fit, in the same order, which keeps the order and never leaves a resource idle.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import invalid_arg

GLOBAL = -2  # Triton's GLOBAL_RESOURCE_KEY: the one pool of a global resource
PER_DEVICE = -1  # Triton's PER_DEVICE_RESOURCE_KEY: a --rate-limit-resource without device

# device -> resource name -> count
Counts = dict[int, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Resource:
    name: str
    count: int
    is_global: bool = False


@dataclass(frozen=True, slots=True)
class InstanceLimits:
    """One instance's ``rate_limiter`` and the device it runs on."""

    resources: tuple[Resource, ...] = ()
    priority: int = 0
    device: int = 0

    @classmethod
    def from_group(cls, group: Any, device: int = 0) -> InstanceLimits:
        """From an ``instance_group`` message (its ``rate_limiter``)."""
        limiter = group.rate_limiter
        resources = tuple(
            Resource(r.name, r.count, getattr(r, "global")) for r in limiter.resources
        )
        return cls(resources, limiter.priority, device)


def explicit_counts(entries: Iterable[tuple[str, int, int]]) -> Counts:
    """``--rate-limit-resource`` values (name, count, device; device -1: every device) as
    counts; a resource given twice for the same device keeps the smaller count (Triton)."""
    counts: Counts = {}
    for name, count, device in entries:
        per = counts.setdefault(device if device >= 0 else PER_DEVICE, {})
        per[name] = min(per.get(name, count), count)
    return counts


class ResourcePool:
    """Triton's ResourceManager: what each instance needs, how many exist, what is taken."""

    def __init__(self, explicit: Counts | None = None) -> None:
        self._explicit = explicit or {}
        self._needs: dict[Hashable, Counts] = {}
        self._limits: Counts = {}
        self._taken: Counts = {}

    @property
    def limits(self) -> Mapping[int, Mapping[str, int]]:
        return self._limits

    def add(self, key: Hashable, limits: InstanceLimits) -> None:
        """Register an instance; raises INVALID_ARG (Triton's texts) when the counts cannot
        serve it, and then leaves the pool as it was."""
        needs: Counts = {}
        for resource in limits.resources:
            device = GLOBAL if resource.is_global else limits.device
            needs.setdefault(device, {})[resource.name] = resource.count
        self._needs[key] = needs
        try:
            self._limits = self._compute()
        except Exception:
            del self._needs[key]
            self._limits = self._compute()
            raise

    def remove(self, key: Hashable) -> None:
        if self._needs.pop(key, None) is not None:
            self._limits = self._compute()

    def fits(self, key: Hashable) -> bool:
        for device, needs in self._needs.get(key, {}).items():
            limits = self._limits.get(device, {})
            taken = self._taken.get(device, {})
            for name, count in needs.items():
                if taken.get(name, 0) + count > limits.get(name, 0):
                    return False
        return True

    def take(self, key: Hashable, sign: int = 1) -> None:
        """Allocate (sign 1) or give back (sign -1) what ``key`` needs."""
        for device, needs in self._needs.get(key, {}).items():
            taken = self._taken.setdefault(device, {})
            for name, count in needs.items():
                taken[name] = taken.get(name, 0) + sign * count

    def _compute(self) -> Counts:
        """The counts: the most any instance needs, or the explicit ones (checked)."""
        limits: Counts = {}
        for needs in self._needs.values():
            for device, per in needs.items():
                current = limits.setdefault(device, {})
                for name, count in per.items():
                    current[name] = max(current.get(name, 0), count)
        if self._explicit:
            for device, per in limits.items():
                for name, needed in per.items():
                    per[name] = self._explicit_count(device, name, needed)
        _check_global(limits)
        return limits

    def _explicit_count(self, device: int, name: str, needed: int) -> int:
        if device == GLOBAL:  # any device's value counts for a global resource
            given = [c for per in self._explicit.values() for n, c in per.items() if n == name]
        else:
            given = [
                per[name]
                for per in (self._explicit.get(device, {}), self._explicit.get(PER_DEVICE, {}))
                if name in per
            ]
        count = max(given, default=0)
        if count < needed:
            raise invalid_arg(
                f'Resource count for "{name}" is limited to {count} which will prevent '
                "scheduling of one or more model instances, the minimum required count is "
                f"{needed}"
            )
        return count


def _check_global(limits: Counts) -> None:
    for name in limits.get(GLOBAL, {}):
        for device, per in limits.items():
            if device != GLOBAL and name in per:
                raise invalid_arg(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )


class RateLimitPolicy:
    """Which waiting instance runs next. Keys are any hashable the driver chooses."""

    def __init__(self, pool: ResourcePool) -> None:
        self._pool = pool
        self._priority: dict[Hashable, int] = {}
        self._executions: dict[Hashable, int] = {}
        self._staged: dict[Hashable, int] = {}  # waiting key -> arrival number
        self._arrivals = 0

    def register(self, key: Hashable, limits: InstanceLimits) -> None:
        self._pool.add(key, limits)  # raises before anything is kept
        self._priority[key] = max(limits.priority, 1)
        self._executions[key] = 0

    def unregister(self, key: Hashable) -> list[Hashable]:
        """Forget an instance; returns the keys its departure lets run (lower counts may
        apply, and a blocked head may have been this one)."""
        self._staged.pop(key, None)
        self._pool.remove(key)
        self._priority.pop(key, None)
        self._executions.pop(key, None)
        return self._allocate()

    def try_take(self, key: Hashable) -> bool:
        """Allocate at once if nothing waits and the resources are free (the inline path)."""
        if self._staged or not self._pool.fits(key):
            return False
        self._pool.take(key)
        return True

    def stage(self, key: Hashable) -> list[Hashable]:
        """``key`` wants to execute; returns the keys allocated now (maybe ``key`` itself)."""
        self._arrivals += 1
        self._staged[key] = self._arrivals
        return self._allocate()

    def withdraw(self, key: Hashable) -> bool:
        """Stop waiting (unload, cancellation); False when ``key`` is not waiting."""
        return self._staged.pop(key, None) is not None

    def release(self, key: Hashable) -> list[Hashable]:
        """An execution ended: give its resources back; returns the keys allocated now."""
        self._pool.take(key, -1)
        if key in self._executions:
            self._executions[key] += 1
        return self._allocate()

    def waiting(self) -> int:
        return len(self._staged)

    @property
    def limits(self) -> Mapping[int, Mapping[str, int]]:
        return self._pool.limits

    def _allocate(self) -> list[Hashable]:
        allocated = []
        while self._staged:
            key = min(self._staged, key=self._order)
            if not self._pool.fits(key):
                break
            del self._staged[key]
            self._pool.take(key)
            allocated.append(key)
        return allocated

    def _order(self, key: Hashable) -> tuple[int, int]:
        return (self._executions.get(key, 0) * self._priority.get(key, 1), self._staged[key])
