"""logs/budget.py: client-caused events get a bounded number of log lines per window, and the
first line after some were left out counts them."""

from tritium.logs.budget import LineBudget, left_out_text


def test_a_burst_is_written_then_lines_are_left_out_until_the_window_ends() -> None:
    budget = LineBudget(burst=3, window=60.0)
    assert [budget.admit(0.0) for _ in range(3)] == [0, 0, 0]
    assert [budget.admit(1.0) for _ in range(5)] == [None] * 5
    # A new window: the first line written counts the five left out, the next none.
    assert budget.admit(60.0) == 5
    assert budget.admit(60.5) == 0


def test_events_spread_out_are_all_written() -> None:
    budget = LineBudget(burst=2, window=10.0)
    assert [budget.admit(t * 6.0) for t in range(10)] == [0] * 10


def test_the_suffix_says_how_many_were_not_logged() -> None:
    assert left_out_text(0) == ""
    assert left_out_text(7) == " (7 more like this not logged)"
