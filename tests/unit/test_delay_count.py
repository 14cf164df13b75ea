"""TRITONSERVER_DELAY_SCHEDULER's value as Triton reads it (atoi): the leading integer."""

from __future__ import annotations

from tritium.options import delay_count


def test_delay_count_reads_the_leading_integer_as_atoi() -> None:
    assert [delay_count(v) for v in ("6", " 3", "+2", "4x", "12 requests")] == [6, 3, 2, 4, 12]
    assert [delay_count(v) for v in (None, "", "x", "-1", "0")] == [0, 0, 0, 0, 0]
