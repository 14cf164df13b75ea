"""The server's one memory budget across connections (issue 44, S3), on the real server with
``--connection-memory-bytes`` at 32 MiB and per-connection bounds far above it: clients
advertising a zero window and asking answers of 1 MiB they never read. Past the budget a new
call is refused RESOURCE_EXHAUSTED and the largest holders are reset; however many such
connections, the server's RSS stays near the budget (read from /proc: a memory bound, not a
timing); tritonclient's gRPC client is served afterwards. Every wait is bounded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from h2.settings import SettingCodes
from testkit.grpc_raw import (
    BIG_OUTPUT,
    INFER,
    RESOURCE_EXHAUSTED,
    big_output_request,
    simple_request,
    start_server,
    write_big_output,
)
from testkit.h2client import H2Client, StreamResult
from tritonclient.utils import InferenceServerException

from tests.support.clients import add_sub_inputs, client
from testkit.server_process import ServerProcess

MIB = 1 << 20
BUDGET = 32 * MIB
ENHANCE_YOUR_CALM = 11
WAIT_S = 60.0
ZERO_WINDOW = {SettingCodes.INITIAL_WINDOW_SIZE: 0}


@pytest.fixture(scope="module")
def budget_server(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("budget") / "repo"
    repo.mkdir()
    write_big_output(repo, delay_ms=2)
    proc = start_server(
        [example_repo, repo],
        ["simple", BIG_OUTPUT],
        f"--connection-memory-bytes={BUDGET}",
        f"--grpc-connection-output-bytes={1 << 30}",  # only the server's budget bounds them
        "--grpc-stall-timeout-secs=600",  # nothing is reset for a stall during the test
    )
    yield proc
    proc.stop()


def _rss(proc: ServerProcess) -> int:
    status = Path(f"/proc/{proc.proc.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def _answered(result: StreamResult) -> bool:
    """The server answered (its headers came; the 1 MiB waits for the window) or ended it."""
    return result.headers is not None or result.reset is not None or result.status is not None


def _tritonclient_served(proc: ServerProcess, refusals: int = 0) -> None:
    """tritonclient's gRPC client gets a right answer, after at most ``refusals`` calls
    refused RESOURCE_EXHAUSTED (each refusal resets the largest holders)."""
    c = client("grpc", proc.grpc_url)
    try:
        inputs, a, b = add_sub_inputs("grpc")
        for attempt in range(refusals + 1):
            try:
                result = c.infer("simple", inputs, client_timeout=WAIT_S)
                break
            except InferenceServerException as exc:
                if attempt == refusals or "RESOURCE_EXHAUSTED" not in str(exc):
                    raise
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        c.close()


def test_new_call_past_the_budget_is_refused_and_the_largest_holder_reset(
    budget_server: ServerProcess,
) -> None:
    """36 answers of 1 MiB kept for one client that reads nothing (past the 32 MiB budget,
    under the quarter more that resets by itself): a new call from another client is refused
    RESOURCE_EXHAUSTED, naming the flag; that refusal resets the holder's calls down to 7/8
    of the budget (RST_STREAM ENHANCE_YOUR_CALM), and the next call is served."""
    with H2Client(budget_server.grpc_url, settings=ZERO_WINDOW, auto_ack=False) as hog:
        sids = [hog.call_async(INFER, big_output_request(MIB)) for _ in range(36)]
        results = [hog.streams[s] for s in sids]
        assert hog.wait_for(lambda: all(_answered(r) for r in results), WAIT_S)
        assert all(r.reset is None and r.status is None for r in results)  # all 36 kept
        with H2Client(budget_server.grpc_url) as other:
            refused = other.call(INFER, simple_request(1), timeout=WAIT_S)
            assert refused.status == RESOURCE_EXHAUSTED, refused.message
            assert refused.trailers_only
            assert "connection-memory-bytes" in refused.message
            assert hog.wait_for(lambda: sum(r.reset is not None for r in results) >= 8, WAIT_S)
            assert {r.reset for r in results if r.reset is not None} == {ENHANCE_YOUR_CALM}
            served = other.call(INFER, simple_request(2), timeout=WAIT_S)
            assert served.status == 0, served.message
    _tritonclient_served(budget_server)


def test_zero_window_connections_hold_about_the_budget_whatever_their_number(
    budget_server: ServerProcess,
) -> None:
    """4 connections with a zero window ask 100 answers of 1 MiB each (400 MiB, within each
    connection's bound): the server's RSS grows by a small multiple of the 32 MiB budget, not
    by 400 MiB; the largest holders' streams are reset; tritonclient is served meanwhile
    (after one refusal at most: a refusal resets the holders) and afterwards."""
    before = _rss(budget_server)
    hogs = [
        H2Client(budget_server.grpc_url, settings=ZERO_WINDOW, auto_ack=False) for _ in range(4)
    ]
    try:
        results = []
        for hog in hogs:
            sids = [hog.call_async(INFER, big_output_request(MIB)) for _ in range(100)]
            results.append([hog.streams[s] for s in sids])
        peak = before
        for hog, mine in zip(hogs, results, strict=True):
            assert hog.wait_for(lambda m=mine: all(_answered(r) for r in m), WAIT_S)  # type: ignore[misc]
            peak = max(peak, _rss(budget_server))
        _tritonclient_served(budget_server, refusals=1)
        for hog in hogs:
            hog.quiet(0.5)  # the resets sent since
        everything = [r for mine in results for r in mine]
        reset = [r for r in everything if r.reset is not None]
        kept = [r for r in everything if r.reset is None and r.status is None]
        print(f"{len(reset)} of 400 streams reset, {len(kept)} kept")
        assert len(reset) >= 300, f"{len(reset)} of 400 reset"
        assert {r.reset for r in reset} == {ENHANCE_YOUR_CALM}
        assert len(kept) <= 64  # about 1.25 x the budget waits for the clients, not 400 MiB
    finally:
        for hog in hogs:
            hog.close()
    _tritonclient_served(budget_server)
    growth = peak - before
    print(f"RSS {before / MIB:.0f} MiB -> peak {peak / MIB:.0f} MiB for 400 MiB of answers")
    assert growth < 160 * MIB, f"RSS grew {growth / MIB:.0f} MiB holding 400 MiB of answers"
