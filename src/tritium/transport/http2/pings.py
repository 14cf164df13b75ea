"""HTTP/2 PINGs as grpc core treats them (pure logic, clock passed in).

``PingPolicy`` is the server's abuse policy for pings it receives: a ping sooner than
allowed after the previous one is a strike (the allowance is ``interval`` seconds — the
gRPC front-end's ``--grpc-http2-min-recv-ping-interval-without-data`` — while calls are
active or ``permit_idle`` (``--grpc-keepalive-permit-without-calls``) is set, two hours
otherwise), and more than ``max_strikes`` (``--grpc-http2-max-ping-strikes``) strikes (0: no
limit) end the connection with GOAWAY
ENHANCE_YOUR_CALM "too_many_pings". Pings that come with data are never strikes: headers or
DATA either way reset the count, as clients ping to measure bandwidth while answers flow
(received DATA only with a payload: an empty DATA frame excuses nothing, or PING + empty DATA
would flood unchecked).
It also counts our own keepalive pings since data was last sent (at most
``max_unanswered``: ``--grpc-http2-max-pings-without-data``).
"""

from __future__ import annotations

NO_CALLS_INTERVAL = 7200.0  # seconds: grpc core's allowance when no call is active


class PingPolicy:
    __slots__ = ("_interval", "_permit_idle", "_max_strikes", "_max_unanswered", "_strikes",
                 "_last", "sent_without_data")  # fmt: skip

    def __init__(
        self, interval: float, permit_idle: bool, max_strikes: int, max_unanswered: int
    ) -> None:
        self._interval = interval
        self._permit_idle = permit_idle
        self._max_strikes = max_strikes
        self._max_unanswered = max_unanswered
        self._strikes = 0
        self._last: float | None = None
        self.sent_without_data = 0

    def received(self, now: float, calls_active: bool) -> bool:
        """A ping arrived at ``now``: True when it is one strike too many."""
        interval = self._interval if calls_active or self._permit_idle else NO_CALLS_INTERVAL
        last, self._last = self._last, now
        if last is not None and now - last < interval:
            self._strikes += 1
            return 0 < self._max_strikes < self._strikes
        return False

    def data(self) -> None:
        """Headers or DATA went either way: the pings so far were not abuse."""
        self._last = None
        self._strikes = 0

    def sent_data(self) -> None:
        self.data()
        self.sent_without_data = 0

    def may_send_keepalive(self, calls_active: bool) -> bool:
        """grpc core stops pinging an idle peer after that many pings without data."""
        limit = self._max_unanswered
        return limit <= 0 or self.sent_without_data < limit or calls_active
