"""What one gRPC connection may hold, and for how long, against hostile clients (issue 22,
findings 3 and 4), on the real server: silent sockets on the gRPC port at a low descriptor
limit (the listeners shed the connections idle longest, of both protocols), the preface and
idle timeouts, unfinished request messages and unread responses bounded per connection (the
server's RSS from /proc), stalled streams reset. Other clients (tritonclient, HTTP and gRPC)
are served throughout. Every wait is bounded; nothing is timed."""

from __future__ import annotations

import os
import re
import resource
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testkit.grpc_raw import (
    BIG_OUTPUT,
    DEADLINE_EXCEEDED,
    INFER,
    NO_ERROR,
    OK,
    RESOURCE_EXHAUSTED,
    STREAM,
    big_output_request,
    check_simple,
    fp32_output,
    fp32_request,
    simple_request,
    start_server,
    write_big_output,
)
from h2.settings import SettingCodes
from testkit.h2client import H2Client, grpc_message
from tritonclient.grpc import service_pb2 as pb

from tests.support.clients import add_sub_inputs, client
from testkit.server_process import ServerProcess

MIB = 1 << 20
CANCEL = 8  # RST_STREAM CANCEL (RFC 9113 §7)
WAIT_S = 30.0


@pytest.fixture(scope="module")
def repos(
    example_repo: Path, test_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[Path]:
    extra = tmp_path_factory.mktemp("bounds") / "repo"
    extra.mkdir()
    write_big_output(extra, delay_ms=2)  # the loop keeps up: RSS shows what the transport holds
    return [example_repo, test_repo, extra]


def _rss(proc: ServerProcess) -> int:
    """The server's resident memory now, in bytes (VmRSS)."""
    status = Path(f"/proc/{proc.proc.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def _served(proc: ServerProcess) -> None:
    """A new tritonclient client of each protocol gets a right ``simple`` answer."""
    for protocol in ("http", "grpc"):
        kwargs = {"connection_timeout": WAIT_S, "network_timeout": WAIT_S}
        c = client(protocol, proc.url(protocol), **(kwargs if protocol == "http" else {}))
        try:
            inputs, a, b = add_sub_inputs(protocol)
            timeout = {"client_timeout": WAIT_S} if protocol == "grpc" else {}
            result = c.infer("simple", inputs, **timeout)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        finally:
            c.close()


def _closed_by_server(sock: socket.socket, timeout: float = WAIT_S) -> bool:
    """Read (and drop) what the server sends until it closes the connection."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass  # a reset is a close too
    return True


def _closed_now(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (what it sent before is read and dropped)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


# -- finding 3: descriptors, preface, idle --------------------------------------------------


def test_idle_grpc_sockets_cannot_lock_out_http_or_grpc(repos: list[Path]) -> None:
    """With the server's descriptors all taken by silent sockets on the gRPC port (twice
    what is free, far longer timeouts than the test), a new HTTP and a new gRPC client are
    still served: the listeners shed the idle connections of both protocols."""
    proc = start_server(
        repos,
        ["simple"],
        *("--grpc-preface-timeout-secs=600", "--grpc-idle-timeout-secs=600"),
        "--http-keepalive-timeout-secs=600",
    )
    idle: list[socket.socket] = []
    try:
        pid = proc.proc.pid
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 40, old[1]))
        idle = [socket.create_connection(("127.0.0.1", proc.ports["grpc"])) for _ in range(80)]
        time.sleep(0.5)
        _served(proc)
        assert "idle gRPC connections" in proc.log_text()
        assert sum(_closed_now(s) for s in idle) > 0
    finally:
        for sock in idle:
            sock.close()
        proc.stop()


@pytest.fixture(scope="module")
def timeouts(repos: list[Path]) -> Iterator[ServerProcess]:
    proc = start_server(
        repos,
        ["simple", "identity_fp32", BIG_OUTPUT],
        *("--grpc-preface-timeout-secs=2", "--grpc-idle-timeout-secs=2"),
        "--grpc-stall-timeout-secs=2",
    )
    yield proc
    proc.stop()


@pytest.mark.parametrize("sent", [b"", b"PRI * HTTP/2.0\r\n"])
def test_silent_connection_is_closed_after_the_preface_timeout(
    timeouts: ServerProcess, sent: bytes
) -> None:
    """A client that sends nothing, or half the preface, is closed once the preface time is
    over; a connection that sent its preface is not (it answers after that time; an open
    stream keeps the idle timeout away)."""
    with H2Client(timeouts.grpc_url) as good:
        good.start_call(STREAM)
        with socket.create_connection(("127.0.0.1", timeouts.ports["grpc"])) as silent:
            silent.sendall(sent)
            assert _closed_by_server(silent)
        assert not good.closed and not good.goaways
        result = good.call(INFER, simple_request(4))
        assert result.status == OK, result.message
        check_simple(result.payloads()[0], 4)


def test_connection_without_streams_gets_goaway_after_the_idle_timeout(
    timeouts: ServerProcess,
) -> None:
    """After its call, a connection with no open stream gets GOAWAY(NO_ERROR) and is closed;
    one with an open ModelStreamInfer stream that sends nothing stays, and is served."""
    with H2Client(timeouts.grpc_url) as idle, H2Client(timeouts.grpc_url) as streaming:
        assert idle.call(INFER, simple_request()).status == OK
        sid = streaming.start_call(STREAM)
        assert idle.wait_for(lambda: idle.closed, WAIT_S), "the idle connection stayed open"
        assert [g.error_code for g in idle.goaways] == [NO_ERROR]
        assert not streaming.goaways and not streaming.closed
        streaming.send_data(sid, grpc_message(simple_request(7)), end_stream=True)
        result = streaming.streams[sid]
        assert streaming.wait_for(lambda: result.done, WAIT_S)
        assert result.status == OK, result.message
        response = pb.ModelStreamInferResponse.FromString(result.payloads()[0])
        assert response.error_message == ""


# -- finding 4: stalls ----------------------------------------------------------------------


def test_stalled_request_is_deadline_exceeded(timeouts: ServerProcess) -> None:
    """A unary call that stops sending mid-message, or never ends its stream after the
    message, ends DEADLINE_EXCEEDED once the stall time is over; the connection goes on."""
    message = grpc_message(fp32_request("identity_fp32", np.ones(1000, np.float32)))
    with H2Client(timeouts.grpc_url) as h2:
        half = h2.start_call(INFER)
        h2.send_data(half, message[: len(message) // 2])
        whole = h2.start_call(INFER)
        h2.send_data(whole, message)  # and no END_STREAM
        for sid in (half, whole):
            result = h2.streams[sid]
            assert h2.wait_for(lambda r=result: r.status is not None, WAIT_S)  # type: ignore[misc]
            assert result.status == DEADLINE_EXCEEDED, result.message
            assert "no request data" in result.message
        result = h2.call(INFER, simple_request(2))
        assert result.status == OK, result.message


def test_unread_response_is_reset_after_the_stall_timeout(timeouts: ServerProcess) -> None:
    """A client with a zero stream window never gets its 1 MiB answer: the stream is reset
    (CANCEL) once the stall time is over, and the connection serves a new call."""
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: 0}
    with H2Client(timeouts.grpc_url, settings=settings, auto_ack=False) as h2:
        sid = h2.call_async(INFER, big_output_request(MIB))
        result = h2.streams[sid]
        assert h2.wait_for(lambda: result.reset is not None, WAIT_S)
        assert result.reset == CANCEL
    _served(timeouts)


# -- finding 4: bytes held per connection ---------------------------------------------------

INPUT_BOUND, OUTPUT_BOUND = 32 * MIB, 16 * MIB


@pytest.fixture(scope="module")
def budgets(repos: list[Path]) -> Iterator[ServerProcess]:
    proc = start_server(
        repos,
        ["simple", "identity_fp32", BIG_OUTPUT],
        f"--http-max-input-size={64 * MIB}",
        f"--grpc-connection-input-bytes={INPUT_BOUND}",
        f"--grpc-connection-output-bytes={OUTPUT_BOUND}",
    )
    yield proc
    proc.stop()


def test_unfinished_messages_are_bounded_per_connection(budgets: ServerProcess) -> None:
    """12 unary messages of 16 MiB (192 MiB), each sent but for its last KiB on one
    connection: past the connection's 32 MiB the newest end RESOURCE_EXHAUSTED, the server's
    RSS grows by far less than what was sent, other clients are served, and the oldest call
    still completes when its message does."""
    values = np.arange(4 * MIB, dtype=np.float32)  # 16 MiB
    message = grpc_message(fp32_request("identity_fp32", values))
    before = _rss(budgets)
    with H2Client(budgets.grpc_url) as h2:
        h2.sock.settimeout(WAIT_S)
        sids = []
        for _ in range(12):
            sid = h2.start_call(INFER)
            sids.append(sid)
            h2.send_data(sid, message[:-1024])
        h2.quiet(0.5)
        growth = _rss(budgets) - before
        _served(budgets)
        ended = [s for s in sids if h2.streams[s].status == RESOURCE_EXHAUSTED]
        assert len(ended) >= 8, {s: h2.streams[s].status for s in sids}
        assert "unfinished request messages" in h2.streams[ended[0]].message
        assert h2.streams[sids[0]].status is None  # the oldest goes on
        h2.send_data(sids[0], message[-1024:], end_stream=True)
        result = h2.streams[sids[0]]
        assert h2.wait_for(lambda: result.done, WAIT_S)
        assert result.status == OK, result.message
        response = pb.ModelInferResponse.FromString(result.payloads()[0])
        np.testing.assert_array_equal(fp32_output(response), values)
    assert growth < 96 * MIB, f"RSS grew {growth / MIB:.0f} MiB for 192 MiB sent"


def test_unread_responses_are_bounded_per_connection(budgets: ServerProcess) -> None:
    """A client with a zero stream window asks 200 answers of 1 MiB and reads none: past the
    connection's 16 MiB the rest end RESOURCE_EXHAUSTED (and so does a new call), the RSS
    grows by far less than 200 MiB, other clients are served; once the client reads, the
    answers that were kept arrive whole."""
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: 0}
    before = _rss(budgets)
    with H2Client(budgets.grpc_url, settings=settings, auto_ack=False) as h2:
        sids = [h2.call_async(INFER, big_output_request(MIB)) for _ in range(200)]
        results = [h2.streams[s] for s in sids]
        assert h2.wait_for(lambda: sum(r.status is not None for r in results) >= 180, WAIT_S)
        h2.quiet(0.5)
        growth = _rss(budgets) - before
        _served(budgets)
        refused = [r for r in results if r.status is not None]
        assert {r.status for r in refused} == {RESOURCE_EXHAUSTED}
        assert "not reading" in refused[0].message
        late = h2.call_async(INFER, simple_request())
        assert h2.wait_for(lambda: h2.streams[late].status is not None, WAIT_S)
        assert h2.streams[late].status == RESOURCE_EXHAUSTED
        kept = [(s, r) for s, r in zip(sids, results, strict=True) if r.status is None]
        assert kept
        h2.auto_ack = True
        for sid, _ in kept:
            h2.grant(sid, 2 * MIB)
        assert h2.wait_for(lambda: all(r.done for _, r in kept), WAIT_S)
        for _, result in kept:
            assert result.status == OK, result.message
            answer = pb.ModelInferResponse.FromString(result.payloads()[0])
            assert answer.raw_output_contents[0] == bytes(MIB)
    assert growth < 96 * MIB, f"RSS grew {growth / MIB:.0f} MiB holding 200 MiB of answers"


def test_many_concurrent_calls_of_normal_size_are_never_refused(budgets: ServerProcess) -> None:
    """The bounds do not bite a client that reads: 48 concurrent 1 MiB calls (48 MiB each
    way, above both bounds) over tritonclient's gRPC client all succeed, intact."""
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(budgets.grpc_url)
    try:
        values = [np.full(MIB // 4, i, np.float32) for i in range(48)]
        results: dict[int, object] = {}

        def done(i: int) -> object:
            return lambda result, error: results.__setitem__(i, error or result)

        for i, array in enumerate(values):
            inp = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
            inp.set_data_from_numpy(array)
            c.async_infer("identity_fp32", [inp], done(i), client_timeout=WAIT_S * 2)
        deadline = time.monotonic() + WAIT_S * 2
        while len(results) < len(values) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(results) == len(values)
        for i, array in enumerate(values):
            result = results[i]
            assert hasattr(result, "as_numpy"), str(result)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)  # type: ignore[attr-defined]
    finally:
        c.close()


def test_declared_size_prefix_alone_holds_nothing(budgets: ServerProcess) -> None:
    """A message prefix declaring 64 MiB on many streams, with no body, costs nothing
    beyond the prefix: no call is refused for it and a normal call is served."""
    with H2Client(budgets.grpc_url) as h2:
        sids = [h2.start_call(INFER) for _ in range(50)]
        for sid in sids:
            h2.send_data(sid, b"\0" + struct.pack(">I", 64 * MIB))
        result = h2.call(INFER, simple_request(3))
        assert result.status == OK, result.message
        assert all(h2.streams[s].status is None for s in sids)
