"""The Python backend's frames: the hot path (``pack_array`` of a small native array, the
one-pass ``frame``) gives what the general path gives, for every kind of tensor."""

from __future__ import annotations

import numpy as np
import pytest

from tritium.backends.python import ipc

ARRAYS = [
    np.arange(16, dtype=np.int32).reshape(1, 16),
    np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
    np.zeros((0, 4), dtype=np.float64),  # empty
    np.array([True, False]),
    np.arange(40000, dtype=np.int64),  # large: not copied into bytes
    np.array([b"ab", b"", b"xyz"], dtype=object),
    np.float16(1.5) * np.ones((2, 2), dtype=np.float16),
]


def _round_trip(array: np.ndarray) -> np.ndarray:
    buffers: ipc.Buffers = []
    packed = ipc.pack_array(array, buffers)
    data = b"".join(bytes(p) for p in ipc.frame(ipc.EXECUTE, [packed], buffers))
    ((kind, body, received),) = ipc.FrameReader().feed(data)
    assert kind == ipc.EXECUTE
    return ipc.unpack_array(body[0], received)


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_arrays_survive_the_frame(array: np.ndarray) -> None:
    back = _round_trip(array)
    assert back.shape == array.shape
    assert back.dtype == array.dtype
    assert np.array_equal(back, array)


def test_received_arrays_are_writable_views_of_the_frame() -> None:
    back = _round_trip(np.arange(4, dtype=np.int32))
    back[0] = 7  # models may write into their inputs, as before
    assert back[0] == 7


@pytest.mark.parametrize("array", [np.array([1 + 2j]), np.arange(3, dtype=">i4")])
def test_unsupported_dtypes_are_refused(array: np.ndarray) -> None:
    with pytest.raises(TypeError):
        ipc.pack_array(array, [])


@pytest.mark.parametrize("buffers", [None, [], [b"abc", memoryview(b"defg")]])
def test_frame_is_join_of_encode(buffers: ipc.Buffers | None) -> None:
    one = b"".join(bytes(p) for p in ipc.frame(ipc.REPLY, (True, "x"), buffers))
    two = b"".join(bytes(p) for p in ipc.join(ipc.encode(ipc.REPLY, (True, "x"), buffers)))
    assert one == two


def test_large_frames_keep_their_buffers_apart() -> None:
    big = memoryview(bytes(1 << 17))
    parts = ipc.frame(ipc.EXECUTE, None, [big])
    assert len(parts) == 3 and parts[2] is big  # written as it is, not copied
