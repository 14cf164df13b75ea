"""The segments the server lends a stub for a request's large inputs (issue 43,
``shm_tensors.InputSegments`` on the server, ``InputMaps`` in the stub): written once, mapped
by the stub, given back and written again; bounded however the stub behaves."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from tritium.backends.python import shm_tensors

pytestmark = pytest.mark.skipif(not shm_tensors.available(), reason="no /dev/shm")
MIN = shm_tensors.INPUT_MIN_BYTES


def _pair(
    stub_pid: int, cap: int = 128 << 20
) -> tuple[shm_tensors.InputSegments, shm_tensors.InputMaps]:
    names = shm_tensors.SegmentNames(os.getpid(), stub_pid)
    return shm_tensors.InputSegments(names, cap), shm_tensors.InputMaps(names)


def test_a_large_input_is_lent_mapped_given_back_and_written_again() -> None:
    server, stub = _pair(41001)
    buffers: list[object] = []
    big = np.arange(MIN // 4, dtype=np.float32)
    packed = shm_tensors.pack_input(big, buffers, server)
    assert not buffers and server.lent == 1
    name = packed[2][0]
    got = stub.unpack(packed, buffers)
    np.testing.assert_array_equal(got, big)
    assert stub.take_free() == []  # the model still holds it
    view = got[10:20]
    del got
    gc.collect()
    assert stub.take_free() == []  # a view of it still lives
    del view
    free = stub.take_free()
    assert free == [name]
    server.free(free)
    assert server.lent == 0
    again = shm_tensors.pack_input(big * 2, buffers, server)
    assert again[2][0] == name  # the same segment (and the stub's same mapping)
    np.testing.assert_array_equal(stub.unpack(again, buffers), big * 2)
    server.close()
    assert server.names.sweep() == 0  # close unlinked it


def test_small_inputs_and_bytes_below_the_threshold_go_inline() -> None:
    server, stub = _pair(41002)
    buffers: list[object] = []
    small = np.arange(100, dtype=np.int64)
    packed = shm_tensors.pack_input(small, buffers, server)
    assert isinstance(packed[2], int) and server.lent == 0
    np.testing.assert_array_equal(stub.unpack(packed, buffers), small)
    words = np.array([b"x" * 100] * (MIN // 100), dtype=object)  # over the threshold
    packed = shm_tensors.pack_input(words, buffers, server)
    assert not isinstance(packed[2], int)
    assert stub.unpack(packed, buffers).tolist() == words.tolist()
    assert len(stub.take_free()) == 1  # copied out as objects: given back at once
    server.close()


def test_a_stub_that_never_gives_back_is_held_to_the_cap() -> None:
    server, stub = _pair(41003, cap=4 * MIN)
    big = np.ones(MIN // 4, dtype=np.float32)
    held = []
    inline = 0
    for _ in range(10):
        buffers: list[object] = []
        packed = shm_tensors.pack_input(big, buffers, server)
        inline += bool(buffers)
        held.append(stub.unpack(packed, buffers))
    assert server.lent == 4 and server.total_bytes == 4 * MIN and inline == 6
    assert len(list(shm_tensors._DIR.glob(server.names.prefix + "*"))) == 4
    server.close()


def test_names_a_stub_makes_up_are_ignored() -> None:
    server, _ = _pair(41004)
    packed = shm_tensors.pack_input(np.ones(MIN, dtype=np.uint8), [], server)
    server.free(["../../etc/passwd", 7, None, server.names.prefix + "9-deadbeef"])
    server.free("not a list")
    assert server.lent == 1
    server.free([packed[2][0], packed[2][0]])  # twice: freed once
    assert server.lent == 0 and server.total_bytes == MIN
    server.close()


def test_a_segment_the_stub_unlinked_or_truncated_is_still_written_without_harm() -> None:
    server, stub = _pair(41005)
    big = np.arange(MIN // 4, dtype=np.float32)
    first = shm_tensors.pack_input(big, [], server)
    name = first[2][0]
    server.free([name])
    os.truncate(shm_tensors._DIR / name, 0)  # the model cut it: pwrite extends it again
    again = shm_tensors.pack_input(big, [], server)
    assert again[2][0] == name
    np.testing.assert_array_equal(stub.unpack(again, []), big)
    server.free([name])
    os.unlink(shm_tensors._DIR / name)  # gone: written through the server's descriptor
    third = shm_tensors.pack_input(big, [], server)
    assert third[2][0] == name
    server.close()


def test_a_grown_size_gets_a_segment_that_fits_and_old_free_ones_make_room() -> None:
    server, stub = _pair(41006, cap=4 * MIN)
    small = shm_tensors.pack_input(np.ones(MIN, dtype=np.uint8), [], server)
    server.free([small[2][0]])
    big = np.ones(4 * MIN, dtype=np.uint8)
    packed = shm_tensors.pack_input(big, [], server)  # the free 1 MiB one is dropped for it
    assert not isinstance(packed[2], int) and server.total_bytes == 4 * MIN
    assert not (shm_tensors._DIR / small[2][0]).exists()
    np.testing.assert_array_equal(stub.unpack(packed, []), big)
    server.close()


def test_inputs_of_a_request_not_run_are_given_back() -> None:
    server, stub = _pair(41007)
    packed = shm_tensors.pack_input(np.ones(MIN, dtype=np.uint8), [], server)
    stub.skip([("INPUT0", packed), ("SMALL", ("INT32", (1,), 0))])
    server.free(stub.take_free())
    assert server.lent == 0
    server.close()


def test_a_segment_that_comes_back_is_written_without_a_new_mapping(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The stub's outputs: a segment the server copied out and handed back (RELEASED) is
    written again through the mapping the stub kept (an mmap per output cost as much as the
    copy at 4 MiB); one unlinked for being over the bound loses its mapping too."""
    names = shm_tensors.SegmentNames(os.getpid(), 41008)
    stub = shm_tensors.SegmentPool(names)
    server = shm_tensors.SegmentPool(
        shm_tensors.SegmentNames(os.getpid(), 41008), peer_trusted=False
    )
    mapped = []
    real_map = shm_tensors._map
    monkeypatch.setattr(shm_tensors, "_map", lambda *a: mapped.append(a[2]) or real_map(*a))
    big = np.arange(MIN // 4, dtype=np.float32)
    for step in range(5):
        packed = shm_tensors.pack(big + step, [], stub)
        np.testing.assert_array_equal(
            shm_tensors.unpack(packed, [], server, keep=False), big + step
        )
        stub.adopt(server.take_returned())
    assert len(mapped) == 1  # made (and mapped) once, written five times
    stub.close()
    server.close()
    assert names.sweep() == 0


@pytest.mark.parametrize("vandalism", ["unlink", "truncate"])
def test_a_kept_mapping_of_a_segment_removed_or_cut_since_is_not_written(vandalism: str) -> None:
    """A segment of the stub's that was unlinked (or cut) after it came back is made anew on
    the next write, not written through the stale mapping (the server, which reads by name,
    would find nothing, or the stub would fault)."""
    names = shm_tensors.SegmentNames(os.getpid(), 41009)
    stub = shm_tensors.SegmentPool(names)
    server = shm_tensors.SegmentPool(
        shm_tensors.SegmentNames(os.getpid(), 41009), peer_trusted=False
    )
    big = np.arange(MIN // 4, dtype=np.float32)
    packed = shm_tensors.pack(big, [], stub)
    shm_tensors.unpack(packed, [], server, keep=False)
    stub.adopt(server.take_returned())
    path = shm_tensors._DIR / packed[2][0]
    os.unlink(path) if vandalism == "unlink" else os.truncate(path, 0)
    again = shm_tensors.pack(big + 1, [], stub)
    np.testing.assert_array_equal(shm_tensors.unpack(again, [], server, keep=False), big + 1)
    stub.close()
    server.close()
    names.sweep()
