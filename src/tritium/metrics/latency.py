"""Latency distributions recorded on the request path: Prometheus summaries over a sliding
window and fixed-bucket histograms (Triton's ``*_summary_us`` families and
``nv_inference_first_response_histogram_ms``).

Only built when ``--metrics-config`` asks for them; recording is a few integer operations on
the loop (no locks), and the quantiles are computed when ``/metrics`` is scraped. Clocks are
passed in (nanoseconds, monotonic), so the window arithmetic is unit-tested on a fake clock.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque

# prometheus-cpp's Summary defaults, which Triton keeps: a 60 s window in 5 age buckets.
MAX_AGE_NS = 60 * 1_000_000_000
AGE_BUCKETS = 5
_EXACT_BITS = 8  # values below 2**8 are kept exactly; above, cells < 0.8 % wide


def _key(value: int) -> int:
    """A value's sketch cell: order-preserving, exact below 256, then 128 cells per power of
    two (so a cell's values differ by less than 1/128 of the smallest one)."""
    if value < 1 << _EXACT_BITS:
        return value if value > 0 else 0
    shift = value.bit_length() - _EXACT_BITS
    return (shift << _EXACT_BITS) | (value >> shift)


class SlidingSummary:
    """A Prometheus summary as prometheus-cpp keeps it: ``_count`` and ``_sum`` since start,
    quantiles over the observations of the last ``max_age`` (its TimeWindowQuantiles: the
    window advances in ``age_buckets`` steps, so it spans between (n-1)/n and all of
    ``max_age``).

    Each window step keeps a sparse sketch (cell -> [count, sum]) instead of prometheus-cpp's
    CKMS stream: the rank of a quantile is exact and its value is the mean of the values in
    that cell, so within 0.8 % of the true one (exact below 256 and whenever the cell's values
    are equal); any configured rank error is met. Memory is bounded by the number of cells,
    not by the request rate."""

    __slots__ = ("count", "total", "_quantiles", "_step_ns", "_steps", "_start_ns", "_index")

    def __init__(
        self,
        quantiles: tuple[tuple[float, float], ...],
        now_ns: int,
        max_age_ns: int = MAX_AGE_NS,
        age_buckets: int = AGE_BUCKETS,
    ) -> None:
        self.count = 0
        self.total = 0
        self._quantiles = tuple(q for q, _ in quantiles)
        self._step_ns = max(1, max_age_ns // age_buckets)
        self._start_ns = now_ns
        self._index = 0
        self._steps: deque[tuple[int, dict[int, list[int]]]] = deque([(0, {})], maxlen=age_buckets)

    def observe(self, value: int, now_ns: int) -> None:
        self.count += 1
        self.total += value
        index = (now_ns - self._start_ns) // self._step_ns
        if index != self._index:
            self._advance(index)
        cells = self._steps[-1][1]
        key = _key(value)
        cell = cells.get(key)
        if cell is None:
            cells[key] = [1, value]
        else:
            cell[0] += 1
            cell[1] += value

    def _advance(self, index: int) -> None:
        if index > self._index:  # a clock that went back stays in the current step
            self._index = index
            self._steps.append((index, {}))  # the deque drops the oldest step

    def quantiles(self, now_ns: int) -> list[tuple[float, float]]:
        """(quantile, value) over the window; NaN values when it holds no observation."""
        merged = self.window(now_ns)
        return list(zip(self._quantiles, _ranks(merged, self._quantiles), strict=True))

    @property
    def quantile_points(self) -> tuple[float, ...]:
        return self._quantiles

    def window(self, now_ns: int) -> dict[int, list[int]]:
        """The sketch of the window's observations (cell -> [count, sum]): the sketches of
        several processes merge by adding their cells (``--workers``)."""
        self._advance((now_ns - self._start_ns) // self._step_ns)
        oldest = self._index - self._steps.maxlen + 1  # type: ignore[operator]
        merged: dict[int, list[int]] = {}
        for index, cells in self._steps:
            if index >= oldest:
                for key, (count, total) in cells.items():
                    cell = merged.setdefault(key, [0, 0])
                    cell[0] += count
                    cell[1] += total
        return merged


def quantiles_of(cells: dict[int, list[int]], quantiles: tuple[float, ...]) -> list[float]:
    """The values at ``quantiles`` of a window sketch (``SlidingSummary.window``, merged)."""
    return _ranks(cells, quantiles)


def _ranks(cells: dict[int, list[int]], quantiles: tuple[float, ...]) -> list[float]:
    """The value at each quantile's rank (the cell holding the ceil(q * n)-th smallest
    observation; the mean of that cell's values)."""
    n = sum(count for count, _ in cells.values())
    if n == 0:
        return [math.nan] * len(quantiles)
    ordered = [cells[key] for key in sorted(cells)]
    values: list[float] = []
    for q in quantiles:
        target = max(1, math.ceil(q * n - 1e-9))  # 1e-9: 0.9 * 10 is 9.000000000000002
        seen = 0
        for cell in ordered:
            seen += cell[0]
            if seen >= target:
                break
        values.append(cell[1] / cell[0])
    return values


class Histogram:
    """A Prometheus histogram with fixed upper bounds (``le``); ``counts[i]`` is the number of
    observations in bucket i alone (the last one is +Inf); rendering accumulates them."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)
