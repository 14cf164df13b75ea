"""The OpenAI-compatible API's own families (frontends/openai): requests per route and
status, and, per model, the time to the first token and between tokens as the client sees
them (histograms, seconds). Recorded on the loop (a few integer operations), rendered on
scrape; ``--workers`` sums them over the workers like every counter and histogram."""

from __future__ import annotations

from typing import Final

from .latency import Histogram
from .stats import escape_label

REQUESTS: Final = "tritium_openai_requests_total"
FIRST_TOKEN: Final = "tritium_openai_time_to_first_token_seconds"
PER_TOKEN: Final = "tritium_openai_time_per_output_token_seconds"
NAMES: Final = (REQUESTS, FIRST_TOKEN, PER_TOKEN)
# vLLM's buckets for the same two measures (seconds)
FIRST_TOKEN_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
PER_TOKEN_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip


class OpenAIMetrics:
    """Counts and histograms of one server's OpenAI routes. Keys are bounded: a route is one
    of the table's, a status one the routes answer, a model one that was served."""

    __slots__ = ("requests", "first_token", "per_token")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}
        self.first_token: dict[str, Histogram] = {}
        self.per_token: dict[str, Histogram] = {}

    def answered(self, route: str, status: int) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def token(self, model: str, seconds: float, first: bool) -> None:
        """A token reached the client ``seconds`` after the request (``first``) or after
        the choice's previous token."""
        table, bounds = (
            (self.first_token, FIRST_TOKEN_BUCKETS)
            if first
            else (self.per_token, PER_TOKEN_BUCKETS)
        )
        histogram = table.get(model)
        if histogram is None:
            histogram = table[model] = Histogram(bounds)
        histogram.observe(seconds)

    def render(self, lines: list[str]) -> None:
        if self.requests:
            lines.append(f"# HELP {REQUESTS} Number of OpenAI API requests by route and status")
            lines.append(f"# TYPE {REQUESTS} counter")
            for (route, status), count in sorted(self.requests.items()):
                lines.append(f'{REQUESTS}{{code="{status}",route="{route}"}} {count}')
        _histograms(
            lines,
            FIRST_TOKEN,
            "Time from an OpenAI API request to its first token, in seconds",
            self.first_token,
        )
        _histograms(
            lines,
            PER_TOKEN,
            "Time between the tokens of an OpenAI API choice, in seconds",
            self.per_token,
        )


def _histograms(lines: list[str], name: str, help_text: str, table: dict[str, Histogram]) -> None:
    if not table:
        return
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for model, histogram in sorted(table.items()):
        labels = f'model="{escape_label(model)}"'
        running = 0
        for bound, count in zip(histogram.bounds, histogram.counts, strict=False):
            running += count
            lines.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {running}')
        running += histogram.counts[-1]
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {running}')
        lines.append(f"{name}_sum{{{labels}}} {histogram.total:.9g}")
        lines.append(f"{name}_count{{{labels}}} {running}")
