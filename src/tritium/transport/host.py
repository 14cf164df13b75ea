"""What a transport's connections use of the server around them, declared here and provided
from above (``frontends/memory.py:MemoryBudget``, ``loop_spin.py:ClientPace``), so that the
transports import nothing of tritium.

``Budget`` and ``Pace`` are called on every call: mypyc traits, which the compiled build calls
natively (through the trait's vtable, as a native class's method), not by name as a Protocol's.
The rest are Protocols: a connection uses them once in its life or on a rare event."""

from __future__ import annotations

import asyncio
from typing import Protocol

from mypy_extensions import trait


class Holder(Protocol):
    """A connection that charges the budget."""

    def budget_held(self) -> int:
        """The bytes this connection has charged now."""
        ...

    def relieve(self, need: int) -> int:
        """Drop what this connection holds, the largest first, until ``need`` bytes are
        freed (or all are); the bytes freed."""
        ...


@trait
class Budget:
    """The server's one bound on the bytes its connections hold for their clients."""

    limit: int

    def join(self, holder: Holder) -> None:
        raise NotImplementedError

    def leave(self, holder: Holder) -> None:
        raise NotImplementedError

    def charge(self, size: int) -> None:
        """``size`` bytes more (less, when negative) are held."""
        raise NotImplementedError

    def over(self) -> bool:
        """Whether more than the limit is held: new calls are refused."""
        raise NotImplementedError

    def relieve_soon(self) -> None:
        """Relieve the largest holders on the loop's next turn."""
        raise NotImplementedError


@trait
class Pace:
    """One client connection's pace (whether to spin the loop for its next request)."""

    def request_began(self) -> int:
        """A request's first bytes came; the time (perf_counter ns)."""
        raise NotImplementedError

    def went_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The last answer is out."""
        raise NotImplementedError


class Idle(Protocol):
    """A connection the listeners may shed when the process runs out of descriptors."""

    kind: str  # what the log calls it

    def idle_since(self) -> float | None: ...

    def shed(self) -> None: ...


class Pool(Protocol):
    """The server's live connections of every listener."""

    def add(self, conn: Idle) -> None: ...

    def discard(self, conn: Idle) -> None: ...


class Notices(Protocol):
    """The log lines of events a client can cause at will, on a budget of lines."""

    def admit(self, kind: str, now: float) -> str | None:
        """None: no line for this event of ``kind``; else write one, ending with the text
        returned (how many of its kind got none since the last)."""
        ...

    def unexpected(self, what: str, exc: BaseException) -> None:
        """A bug (the connection or call ends, the server goes on): logged on a budget."""
        ...
