"""The rate limiter's verbose resource map, in Triton's words (core src/rate_limiter.cc,
ResourceManager::ParseAndValidateResources), which Triton's QA greps for."""

from __future__ import annotations

from tritium.logs.settings import escape_message
from tritium.scheduling.rate_limiter import resource_map
from tritium.scheduling.rate_policy import GLOBAL


def test_devices_and_names_in_order_global_first_empty_devices_left_out() -> None:
    limits = {1: {"B": 2, "A": 5}, GLOBAL: {"G": 7}, 0: {}}
    assert resource_map(limits) == (
        "\nMax Resource Map===>\n"
        "\tDevice: GLOBAL\n\t\tResource: G\t Count: 7\n"
        "\tDevice: 1\n\t\tResource: A\t Count: 5\n\t\tResource: B\t Count: 2\n"
    )
    assert resource_map({}) == "\nMax Resource Map===>\n"


def test_escaped_as_triton_writes_it() -> None:
    escaped = escape_message(resource_map({0: {"R1": 3}}))
    assert r"\tDevice: 0\n\t\tResource: R1\t Count: 3\n" in escaped
