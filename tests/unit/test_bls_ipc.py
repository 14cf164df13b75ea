"""BLS plumbing without a server: the stub's frame multiplexer (several threads reading one
socket) and large tensors through shared-memory segments (the server's side never maps them,
so a model truncating its segments cannot hurt the server)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading

import numpy as np
import pytest

from tritium.backends.python import bls_host, ipc, pb_utils, shm_tensors
from tritium.backends.python.bls_client import BlsClient, FrameMux


@pytest.fixture
def pair():  # type: ignore[no-untyped-def]
    server, stub = socket.socketpair()
    yield ipc.BlockingChannel(server), ipc.BlockingChannel(stub)
    server.close()
    stub.close()


def test_answers_reach_their_callers_whoever_reads(pair) -> None:  # type: ignore[no-untyped-def]
    """Two threads wait for their own calls while the main loop waits for commands; frames
    arrive in any order and each lands with its owner."""
    server, stub = pair
    cancels: list[tuple[int, int]] = []
    mux = FrameMux(stub, lambda key: cancels.append(tuple(key)))
    calls = {i: mux.register(i) for i in (1, 2)}
    got: dict[int, list[object]] = {1: [], 2: []}

    def wait(call_id: int) -> None:
        while True:
            _, body, _ = mux.next_answer(call_id, calls[call_id])
            got[call_id].append(body[1])
            if body[2]:
                return

    threads = [threading.Thread(target=wait, args=(i,)) for i in (1, 2)]
    for thread in threads:
        thread.start()
    server.send(ipc.BLS_RESPONSE, (2, "b0", False))
    server.send(ipc.CANCEL, (7, 0))
    server.send(ipc.EXECUTE, "work")
    server.send(ipc.BLS_RESPONSE, (1, "a0", True))
    server.send(ipc.BLS_RESPONSE, (2, None, True))
    kind, body, _ = mux.next_command()
    for thread in threads:
        thread.join(10)
    assert (kind, body) == (ipc.EXECUTE, "work")
    assert got == {1: ["a0"], 2: ["b0", None]}
    assert cancels == [(7, 0)]


def test_poll_routes_without_waiting(pair) -> None:  # type: ignore[no-untyped-def]
    server, stub = pair
    cancels: list[object] = []
    mux = FrameMux(stub, cancels.append)
    mux.poll()  # nothing arrived: returns at once
    server.send(ipc.CANCEL, (1, 0))
    server.send(ipc.IS_READY, None)
    mux.poll()
    assert cancels == [(1, 0)]
    assert mux.next_command()[0] == ipc.IS_READY


def test_a_diverted_command_reaches_its_thread_while_the_main_loop_is_busy(pair) -> None:  # type: ignore[no-untyped-def]
    """IS_READY diverted to a helper thread: the helper reads the socket itself (nobody
    else is reading: the main loop is busy) and leaves the other commands queued."""
    server, stub = pair
    mux = FrameMux(stub, lambda key: None)
    mux.divert(ipc.IS_READY)
    got: list[object] = []
    helper = threading.Thread(target=lambda: got.append(mux.next_diverted()[1]))
    helper.start()
    server.send(ipc.EXECUTE, "queued")
    server.send(ipc.IS_READY, "ready?")
    helper.join(10)
    assert got == ["ready?"]
    assert mux.next_command()[1] == "queued"


def test_a_closed_server_ends_every_wait(pair) -> None:  # type: ignore[no-untyped-def]
    server, stub = pair
    mux = FrameMux(stub, lambda key: None)
    call = mux.register(1)
    server._sock.close()
    with pytest.raises(EOFError):
        mux.next_answer(1, call)
    with pytest.raises(EOFError):
        mux.next_command()


def test_an_async_waiter_is_woken_by_whichever_thread_routes_its_answer(pair) -> None:  # type: ignore[no-untyped-def]
    """``take_answer`` arms a wake-up when nothing has arrived; a thread reading for its own
    call routes the other call's answer and calls it (no thread waits for the armed call)."""
    server, stub = pair
    mux = FrameMux(stub, lambda key: None)
    mine, theirs = mux.register(1), mux.register(2)
    woken = threading.Event()
    assert mux.take_answer(2, theirs, woken.set) is None
    reader = threading.Thread(target=mux.next_answer, args=(1, mine))
    reader.start()
    server.send(ipc.BLS_RESPONSE, (2, "for the waiter", True))
    server.send(ipc.BLS_RESPONSE, (1, "for the reader", True))
    reader.join(10)
    assert woken.wait(10)
    frame = mux.take_answer(2, theirs, lambda: None)
    assert frame is not None and frame[1] == (2, "for the waiter", True)
    assert mux._calls == {}  # both finals ended their registrations


def test_frames_that_came_in_one_read_are_all_routed(pair) -> None:  # type: ignore[no-untyped-def]
    """A reader routes every frame its read brought in: a frame left in the buffer would make
    the socket look idle, and an async waiter for it would never be woken."""
    server, stub = pair
    mux = FrameMux(stub, lambda key: None)
    first, second = mux.register(1), mux.register(2)
    woken = threading.Event()
    assert mux.take_answer(2, second, woken.set) is None
    both = [
        *ipc.frame(ipc.BLS_RESPONSE, (1, "a", True)),
        *ipc.frame(ipc.BLS_RESPONSE, (2, "b", True)),
    ]
    server._sock.sendall(b"".join(both))
    assert mux.next_answer(1, first)[1] == (1, "a", True)
    assert woken.is_set() and not stub.buffered()
    assert mux.take_answer(2, second, lambda: None) is not None


def test_a_closed_server_wakes_the_async_waiters(pair) -> None:  # type: ignore[no-untyped-def]
    server, stub = pair
    mux = FrameMux(stub, lambda key: None)
    call = mux.register(1)
    woken = threading.Event()
    assert mux.take_answer(1, call, woken.set) is None
    server._sock.close()
    mux.poll()
    assert woken.is_set()
    with pytest.raises(EOFError):
        mux.take_answer(1, call, lambda: None)


def _bls_client(stub: ipc.BlockingChannel) -> tuple[FrameMux, BlsClient]:
    mux = FrameMux(stub, lambda key: None)
    segments = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), 54321))
    client = BlsClient(mux, stub.send, segments, "parent_0_0")
    client.enabled = True
    return mux, client


def test_async_exec_waits_on_the_loop_without_a_thread(pair) -> None:  # type: ignore[no-untyped-def]
    """Many ``async_exec`` calls at once: each is sent at once and answered through the loop's
    own reads of the socket; no thread is started for them."""
    server, stub = pair
    mux, client = _bls_client(stub)

    async def run() -> list[object]:
        request = pb_utils.InferenceRequest(
            model_name="child", inputs=[], requested_output_names=[]
        )
        calls = [asyncio.ensure_future(client.async_exec(request, False)) for _ in range(5)]
        await asyncio.sleep(0)  # every call sent
        threads = threading.active_count()
        ids = [server.recv()[1][0] for _ in calls]
        for call_id in reversed(ids):  # answered in another order than sent
            server.send(ipc.BLS_RESPONSE, (call_id, ([], None, f'{{"id": {call_id}}}'), True))
        responses = await asyncio.wait_for(asyncio.gather(*calls), 10)
        assert threading.active_count() == threads
        return [r.parameters() for r in responses]

    answers = asyncio.run(run())
    assert answers == [f'{{"id": {i}}}' for i in range(1, 6)]
    assert mux._calls == {}


def test_a_decoupled_async_exec_gives_its_iterator_once_the_first_response_came(pair) -> None:  # type: ignore[no-untyped-def]
    """As Triton's: ``await async_exec(decoupled=True)`` returns with the first response
    (iterating it then needs no wait); the rest are read as the iterator goes on."""
    server, stub = pair
    mux, client = _bls_client(stub)
    request = pb_utils.InferenceRequest(model_name="child", inputs=[], requested_output_names=[])

    async def first() -> tuple[int, object]:
        call = asyncio.ensure_future(client.async_exec(request, True))
        await asyncio.sleep(0)
        call_id = server.recv()[1][0]
        await asyncio.sleep(0.01)
        assert not call.done()  # no response yet: still waiting, on the loop
        server.send(ipc.BLS_RESPONSE, (call_id, ([], None, '{"n": 1}'), False))
        return call_id, await asyncio.wait_for(call, 10)

    call_id, responses = asyncio.run(first())
    server.send(ipc.BLS_RESPONSE, (call_id, ([], None, '{"n": 2}'), False))
    server.send(ipc.BLS_RESPONSE, (call_id, None, True))  # the flag-only final
    seen = [r.parameters() for r in responses]  # type: ignore[attr-defined]
    assert seen == ['{"n": 1}', '{"n": 2}', "{}"]
    assert [r.parameters() for r in responses] == seen  # iterated again: the same ones
    assert mux._calls == {}


def test_a_cancelled_async_exec_drops_the_answers_still_to_come(pair) -> None:  # type: ignore[no-untyped-def]
    server, stub = pair
    mux, client = _bls_client(stub)

    async def run() -> None:
        request = pb_utils.InferenceRequest(
            model_name="child", inputs=[], requested_output_names=[]
        )
        call = asyncio.ensure_future(client.async_exec(request, False))
        await asyncio.sleep(0)
        call_id = server.recv()[1][0]
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert mux._calls == {}
        server.send(ipc.BLS_RESPONSE, (call_id, ([], None, None), True))
        server.send(ipc.IS_READY, None)
        assert mux.next_command()[0] == ipc.IS_READY  # the late answer was read and dropped
        assert mux._calls == {}

    asyncio.run(run())


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_large_tensors_go_through_a_segment_small_ones_inline() -> None:
    stub = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), 12345))
    server = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), 12345))
    buffers: list[object] = []
    small = np.arange(10, dtype=np.int32)
    big = np.arange(shm_tensors.SHM_MIN_BYTES // 4, dtype=np.float32)
    packed_small = shm_tensors.pack(small, buffers, stub)
    packed_big = shm_tensors.pack(big, buffers, stub)
    assert isinstance(packed_small[2], int) and len(buffers) == 1
    name, nbytes = packed_big[2]
    assert stub.names.owns(name) and nbytes == big.nbytes
    out = shm_tensors.unpack(packed_big, buffers, server)
    np.testing.assert_array_equal(out, big)
    np.testing.assert_array_equal(shm_tensors.unpack(packed_small, buffers, server), small)
    # Once the server's view is gone, the segment is the server's to write the answer into.
    del out
    answer = np.full(shm_tensors.SHM_MIN_BYTES // 8, 3, dtype=np.float64)
    packed = shm_tensors.pack(answer, [], server)
    assert packed[2][0] == name  # the same (warm) segment, not a new one
    np.testing.assert_array_equal(shm_tensors.unpack(packed, [], stub), answer)
    server.close()
    stub.close()
    assert stub.names.sweep() == 0  # every segment came back to a pool, unlinked by close


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_a_segment_of_another_pair_is_refused_and_leftovers_are_swept() -> None:
    mine = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), 111))
    other = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), 222))
    big = np.zeros(shm_tensors.SHM_MIN_BYTES, dtype=np.uint8)
    packed = shm_tensors.pack(big, [], other)
    for bad in (packed, ("UINT8", (4,), ("../etc/passwd", 4)), ("UINT8", (4,), ("x", "y"))):
        with pytest.raises(ValueError, match="not its peer's"):
            shm_tensors.unpack(bad, [], mine)
    assert other.names.sweep() == 1
    assert other.names.sweep() == 0


def test_version_strings_follow_tritons_model_loader() -> None:
    bls_host._check_version("")
    bls_host._check_version("3")
    with pytest.raises(ValueError, match=r"'abc' \(details: stol\), version should be"):
        bls_host._check_version("abc")
    with pytest.raises(ValueError, match="'-1', version should be an integral value > 0"):
        bls_host._check_version("-1")


# -- the server's side of the segments: never mapped, so a model may only hurt itself ----------


def _pools(stub_pid: int) -> tuple[shm_tensors.SegmentPool, shm_tensors.SegmentPool]:
    """A stub's pool and the server's (which does not trust the stub) for one pair."""
    stub = shm_tensors.SegmentPool(shm_tensors.SegmentNames(os.getpid(), stub_pid))
    server_names = shm_tensors.SegmentNames(os.getpid(), stub_pid)
    return stub, shm_tensors.SegmentPool(server_names, peer_trusted=False)


def _truncate(name: str) -> None:
    os.truncate(f"/dev/shm/{name}", 0)


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_the_server_copies_what_it_reads_so_a_later_truncation_is_harmless() -> None:
    stub, server = _pools(31001)
    big = np.arange(shm_tensors.SHM_MIN_BYTES // 4, dtype=np.float32)
    packed = shm_tensors.pack(big, [], stub)
    got = shm_tensors.unpack(packed, [], server)
    _truncate(packed[2][0])  # the model truncates the segment after the server took it
    np.testing.assert_array_equal(got, big)  # the server's own memory: no SIGBUS
    packed = shm_tensors.pack(big, [], stub)
    _truncate(packed[2][0])  # ... or before
    with pytest.raises(ValueError, match="it was truncated"):
        shm_tensors.unpack(packed, [], server)
    server.close()
    stub.close()
    assert stub.names.sweep() == 1  # the truncated one nobody took back


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_the_server_writes_into_a_truncated_free_segment_without_faulting() -> None:
    stub, server = _pools(31002)
    big = np.ones(shm_tensors.SHM_MIN_BYTES, dtype=np.uint8)
    packed = shm_tensors.pack(big, [], stub)
    shm_tensors.unpack(packed, [], server)  # the segment is the server's to write into now
    _truncate(packed[2][0])  # the model truncates it meanwhile
    answer = np.full(shm_tensors.SHM_MIN_BYTES // 8, 7, dtype=np.float64)
    back = shm_tensors.pack(answer, [], server)  # pwrite: it extends the file, never faults
    assert back[2][0] == packed[2][0]
    np.testing.assert_array_equal(shm_tensors.unpack(back, [], stub), answer)
    server.close()
    stub.close()


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_a_segment_cut_between_its_size_and_its_mapping_is_a_clear_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The stub maps what the server wrote, and the segments it makes; a model thread that
    truncates a segment after the stub read or set its size and before it mapped it (a race
    a test's model hit) gives the segment's error, not mmap's own "mmap length is greater
    than file size"."""
    stub, server = _pools(31004)
    answer = np.full(shm_tensors.SHM_MIN_BYTES // 8, 5, dtype=np.float64)
    packed = shm_tensors.pack(answer, [], server)
    real_fstat = os.fstat

    def fstat_then_cut(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        os.ftruncate(fd, 0)  # the model, right after the size was read
        return result

    monkeypatch.setattr(shm_tensors.os, "fstat", fstat_then_cut)
    with pytest.raises(ValueError, match="was truncated while it was mapped"):
        shm_tensors.unpack(packed, [], stub)
    monkeypatch.undo()
    real_ftruncate = os.ftruncate

    def size_then_cut(fd: int, length: int) -> None:
        real_ftruncate(fd, length)
        real_ftruncate(fd, 0)  # the model, right after the segment was sized

    monkeypatch.setattr(shm_tensors.os, "ftruncate", size_then_cut)
    big = np.ones(shm_tensors.SHM_MIN_BYTES, dtype=np.uint8)
    with pytest.raises(ValueError, match="was truncated while it was mapped"):
        shm_tensors.pack(big, [], stub)  # a new segment, cut before it was mapped
    monkeypatch.undo()
    server.close()
    stub.close()
    stub.names.sweep()


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_output_segments_go_back_to_the_stub_that_wrote_them() -> None:
    stub, server = _pools(31003)
    out = shm_tensors.FrameTensors(stub)
    packed = out.pack(np.zeros(shm_tensors.SHM_MIN_BYTES, dtype=np.uint8))
    name = packed[2][0]
    shm_tensors.unpack(packed, out.buffers, server, keep=False)
    assert server.take_returned() == [name]
    assert server.take_returned() == []
    stub.adopt([name, "tritium-bls-not-ours"])
    again = shm_tensors.FrameTensors(stub).pack(np.ones(shm_tensors.SHM_MIN_BYTES, np.uint8))
    assert again[2][0] == name  # reused, not a new segment
    server.discard(name)  # an output nobody asked for goes back unread too
    assert server.take_returned() == [name]
    server.close()
    stub.close()
    assert stub.names.sweep() == 1


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_a_frame_carries_its_tensors_inline_only_up_to_the_bound() -> None:
    stub, _ = _pools(31004)
    out = shm_tensors.FrameTensors(stub)
    piece = np.zeros(shm_tensors.SHM_MIN_BYTES // 2, dtype=np.uint8)
    packed = [out.pack(piece) for _ in range(2 * ipc.MAX_INLINE_BYTES // piece.nbytes)]
    inline = [p for p in packed if isinstance(p[2], int)]
    assert len(inline) == ipc.MAX_INLINE_BYTES // piece.nbytes
    assert sum(len(b) if isinstance(b, bytes) else b.nbytes for b in out.buffers) == out.inline
    assert out.inline <= ipc.MAX_INLINE_BYTES and len(out.written) == len(packed) - len(inline)
    out.rollback()  # not sent after all: its segments are gone
    assert out.buffers == [] and stub.names.sweep() == 0
    stub.close()


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_only_segments_of_dead_servers_are_swept() -> None:
    dead = _a_dead_pid()
    shm = "/dev/shm/"
    names = {
        "dead": f"tritium-bls-{dead}-{dead}-0-deadbeef",
        "live": f"tritium-bls-{os.getpid()}-{dead}-0-cafef00d",
        "other": f"tritium-bls-{dead}-x-unit",
        "link": f"tritium-bls-{dead}-{dead}-1-0badf00d",
    }
    for key, name in names.items():
        if key == "link":
            os.symlink(shm + names["live"], shm + name)
        else:
            with open(shm + name, "wb") as f:
                f.write(b"left")
    try:
        assert shm_tensors.sweep_dead_servers() >= 1
        assert not os.path.exists(shm + names["dead"])
        assert all(os.path.lexists(shm + names[k]) for k in ("live", "other", "link"))
    finally:
        for name in names.values():
            if os.path.lexists(shm + name):
                os.unlink(shm + name)


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_a_server_whose_lock_is_held_is_alive_whatever_its_pid() -> None:
    """A server in another pid namespace sharing /dev/shm: its pid does not run here, but
    it holds its lock, so its segments stay; once the lock is free they go, with the lock."""
    import fcntl

    other = _a_dead_pid()
    shm = "/dev/shm/"
    segment = f"{shm}tritium-bls-{other}-{other}-0-feedf00d"
    lock = f"{shm}tritium-bls-{other}.lock"
    with open(segment, "wb") as f:
        f.write(b"in use")
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shm_tensors.sweep_dead_servers()
        assert os.path.exists(segment) and os.path.exists(lock)
        os.close(holder)  # that server ends
        holder = -1
        assert shm_tensors.sweep_dead_servers() >= 2
        assert not os.path.exists(segment) and not os.path.exists(lock)
        # This process's own lock is held all along (the sweep took it).
        assert shm_tensors._lock_path(os.getpid(), shm_tensors.server_token()).exists()
    finally:
        if holder >= 0:
            os.close(holder)
        for path in (segment, lock):
            if os.path.lexists(path):
                os.unlink(path)


def _a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_servers_of_the_same_pids_in_two_pid_namespaces_keep_their_segments_apart() -> None:
    """Two servers with the same pid, each with a stub of the same pid (pid namespaces
    sharing /dev/shm): their tokens keep the names apart, so one's sweep of its stub's
    segments (the stub died) leaves the other's in flight, and neither reads the other's."""
    here = shm_tensors.SegmentNames(os.getpid(), 4242, shm_tensors.server_token())
    there = shm_tensors.SegmentNames(os.getpid(), 4242, "0badcafe")
    mine = shm_tensors.SegmentPool(here)
    theirs = shm_tensors.SegmentPool(there)
    data = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: a segment
    name, nbytes = mine.write(data, data.nbytes)
    other, _ = theirs.write(data, data.nbytes)
    assert here.owns(name) and not there.owns(name) and not here.owns(other)
    assert there.sweep() == 1  # the other server's stub died
    assert os.path.exists(f"/dev/shm/{name}")
    np.testing.assert_array_equal(mine.read(name, nbytes).view(np.float32), data)
    mine.close()
    theirs.close()
    assert here.sweep() == 0  # read back into its pool, unlinked by close
    with pytest.raises(ValueError):
        shm_tensors.SegmentNames(1, 2, "../x")


@pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
def test_a_server_of_my_pid_with_another_token_is_told_apart_by_its_lock() -> None:
    """Another server of this very pid (another pid namespace): while it holds its lock its
    segments stay; once it ends they go, with its lock; this server's own stay throughout."""
    import fcntl

    shm = "/dev/shm/"
    pid = os.getpid()
    theirs = f"{shm}tritium-bls-{pid}.0badcafe-77-0-feedf00d"
    lock = f"{shm}tritium-bls-{pid}.0badcafe.lock"
    mine = f"{shm}tritium-bls-{pid}.{shm_tensors.server_token()}-77-0-cafef00d"
    for path in (theirs, mine):
        with open(path, "wb") as f:
            f.write(b"in use")
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shm_tensors.sweep_dead_servers()
        assert os.path.exists(theirs) and os.path.exists(lock) and os.path.exists(mine)
        os.close(holder)
        holder = -1
        assert shm_tensors.sweep_dead_servers() >= 2
        assert not os.path.exists(theirs) and not os.path.exists(lock)
        assert os.path.exists(mine)
    finally:
        if holder >= 0:
            os.close(holder)
        for path in (theirs, lock, mine):
            if os.path.lexists(path):
                os.unlink(path)
