"""logs/budget.py: client-caused events get a bounded number of log lines per window, and the
first line after some were left out counts them; unexpected errors get one traceback per kind
and window (ErrorDigest)."""

import logging

import pytest

from tritium.frontends.grpc.errors import status_of
from tritium.transport.grpc.status import StatusCode
from tritium.frontends.http.errors import render_error
from tritium.frontends.http.protocol import render_internal
from tritium.logs.budget import UNEXPECTED_ERRORS, ErrorDigest, LineBudget, left_out_text


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


# ------------------------------------------------------- unexpected errors (issue 44 item 1)


def _raised(kind: type[Exception] = RuntimeError, text: str = "boom") -> Exception:
    try:
        raise kind(text)
    except Exception as exc:
        return exc


def _failure_at(line: int) -> Exception:
    """An exception raised from a different line for each ``line`` (another kind of error)."""
    namespace: dict[str, object] = {}
    exec(compile("\n" * line + "def f():\n    raise ValueError('x')\n", "<t>", "exec"), namespace)
    try:
        namespace["f"]()  # type: ignore[operator]
    except ValueError as exc:
        return exc
    raise AssertionError("not raised")


def test_the_first_error_of_a_kind_is_logged_with_its_traceback_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    digest = ErrorDigest(logging.getLogger("tritium.test.digest"), window=60.0)
    with caplog.at_level(logging.ERROR, "tritium.test.digest"):
        for second in range(100):
            digest.report("unhandled error in HTTP handler", _raised(), now=float(second) / 10)
    assert len(caplog.records) == 1
    assert caplog.records[0].exc_info is not None
    assert caplog.records[0].getMessage() == "unhandled error in HTTP handler"
    caplog.clear()
    with caplog.at_level(logging.ERROR, "tritium.test.digest"):
        digest.report("unhandled error in HTTP handler", _raised(), now=75.0)
    (record,) = caplog.records
    assert record.exc_info is not None
    assert record.getMessage() == (
        "unhandled error in HTTP handler (99 more unexpected errors like this in the 75 s "
        "before, not logged)"
    )


def test_each_kind_of_error_gets_its_own_first_traceback(caplog: pytest.LogCaptureFixture) -> None:
    digest = ErrorDigest(logging.getLogger("tritium.test.kinds"))
    with caplog.at_level(logging.ERROR, "tritium.test.kinds"):
        for _ in range(3):
            digest.report("a", _raised(RuntimeError), now=1.0)
            digest.report("b", _raised(KeyError), now=1.0)
            digest.report("c", _failure_at(5), now=1.0)
            digest.report("d", _failure_at(9), now=1.0)
    assert [r.getMessage() for r in caplog.records] == ["a", "b", "c", "d"]


def test_the_kinds_told_apart_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    digest = ErrorDigest(logging.getLogger("tritium.test.bound"), kinds=4)
    with caplog.at_level(logging.ERROR, "tritium.test.bound"):
        for line in range(50):
            digest.report(f"kind {line}", _failure_at(line), now=1.0)
    # four kinds of their own, then the fifth opens the shared entry and the rest are counted
    assert [r.getMessage() for r in caplog.records] == [f"kind {i}" for i in range(5)]
    assert len(digest._seen) == 5


def test_http_and_grpc_500s_share_the_digest(caplog: pytest.LogCaptureFixture) -> None:
    """A handler bug that a client repeats 100 times, over HTTP and gRPC, logs its traceback
    once, not 300 times (each was logged in full before)."""
    UNEXPECTED_ERRORS._seen.clear()
    with caplog.at_level(logging.ERROR, "tritium"):
        for _ in range(100):
            exc = _raised(TypeError, "argument of type 'int' is not iterable")
            assert render_error(exc).status == 500
            assert render_internal(exc).status == 500
            assert status_of(exc)[0] == StatusCode.INTERNAL
    assert len([r for r in caplog.records if r.exc_info]) == 1
