"""When a crashed stub is restarted, and what its model version reports meanwhile.

Pure policy with an injected clock (seconds, monotonic): the backend asks ``CrashHistory``
how long to wait before restarting a stub that died, or whether to give up, and reports each
instance's ups and downs to ``VersionHealth``, which turns them into the version's state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """``max_restarts`` restarts per instance within ``window_s`` (0: never restart, as
    Triton); the first after ``first_delay_s``, each next one twice as late, at most
    ``max_delay_s``."""

    max_restarts: int = 5
    window_s: float = 60.0
    first_delay_s: float = 0.1
    max_delay_s: float = 5.0


class CrashHistory:
    """The crashes of one instance within the policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self._policy = policy
        self._times: deque[float] = deque()

    def crashed(self, now: float) -> float | None:
        """Record a crash at ``now``; the delay before restarting, or None: do not restart
        (it crashed more than ``max_restarts`` times within the window)."""
        policy = self._policy
        times = self._times
        times.append(now)
        while times and times[0] <= now - policy.window_s:
            times.popleft()
        count = len(times)
        if count > policy.max_restarts:
            return None
        return min(policy.first_delay_s * 2.0 ** (count - 1), policy.max_delay_s)

    def recent(self) -> int:
        """Crashes counted in the window at the last ``crashed`` call."""
        return len(self._times)


class VersionHealth:
    """Which instances of one model version are down and why. The version is UNAVAILABLE
    (``on_down(reason)``) while any instance is down, READY again (``on_up()``) once none is."""

    def __init__(self, on_down: Callable[[str], None], on_up: Callable[[], None] | None) -> None:
        self._on_down = on_down
        self._on_up = on_up
        self._down: dict[str, str] = {}

    def down(self, instance: str, reason: str) -> None:
        self._down[instance] = reason
        self._on_down("; ".join(self._down.values()))

    def up(self, instance: str) -> None:
        if self._down.pop(instance, None) is None:
            return
        if self._down:
            self._on_down("; ".join(self._down.values()))
        elif self._on_up is not None:
            self._on_up()
