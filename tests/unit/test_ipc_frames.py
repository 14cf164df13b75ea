"""The Python backend's frames: the hot path (``pack_array`` of a small native array, the
one-pass ``frame``) gives what the general path gives, for every kind of tensor; and the
server refuses what no stub sends (bounds, payloads marshal would choke on)."""

from __future__ import annotations

import marshal
import socket

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


@pytest.mark.parametrize("size", [0, 15, 17, 64])
def test_a_tensor_whose_bytes_do_not_fit_its_shape_is_refused(size: int) -> None:
    # A stub's frame is not trusted: 16 INT32 values are 64 bytes, no more, no fewer.
    with pytest.raises((ValueError, TypeError)):
        ipc.unpack_array(("INT32", (4, 4), 0), [bytearray(size * 4 if size != 64 else 65)])


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


# -- what the server accepts from a stub (issue 22: a model may only hurt itself) -------------


def _frame_bytes(kind: int, body: object, buffers: ipc.Buffers | None = None) -> bytes:
    return b"".join(bytes(p) for p in ipc.frame(kind, body, buffers))


def _head(plen: int, lens: list[int]) -> bytes:
    return ipc._HEAD.pack(plen, len(lens)) + b"".join(n.to_bytes(8, "little") for n in lens)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff" * 8, "4294967295-byte payload"),
        (_head(16, [2 << 30]), "2147483648 bytes of buffers"),
        (ipc._HEAD.pack(1, ipc.MAX_BUFFERS + 1), "buffers, more than"),
    ],
    ids=["garbage", "2-GiB-buffer", "too-many-buffers"],
)
def test_a_head_over_the_bounds_is_refused_before_its_body(data: bytes, why: str) -> None:
    reader = ipc.FrameReader()
    assert reader.feed(data) == []
    assert reader.error is not None and why in reader.error
    assert reader.feed(_frame_bytes(ipc.REPLY, (True, None))) == []  # nothing more is read


def test_frames_before_a_malformed_one_are_kept() -> None:
    reader = ipc.FrameReader()
    frames = reader.feed(_frame_bytes(ipc.REPLY, (True, "x")) + b"\xff" * 8)
    assert [(kind, body) for kind, body, _ in frames] == [(ipc.REPLY, (True, "x"))]
    assert reader.error is not None


@pytest.mark.parametrize(
    "payload",
    [
        b"(\xff\xff\xff\x7f",  # a tuple of 2**31 - 1 items, in 5 bytes
        b")\x02(\xff\xff\xff\x0f",  # the same, nested
        marshal.dumps((1, compile("1", "model.py", "eval"))),  # a code object
        b")\x03N",  # a tuple that ends early
        b"\x01",  # no such type
    ],
    ids=["huge-tuple", "nested-huge-tuple", "code", "short", "unknown-type"],
)
def test_a_payload_marshal_would_choke_on_is_refused(payload: bytes) -> None:
    reader = ipc.FrameReader()
    assert reader.feed(_head(len(payload), []) + payload) == []
    assert reader.error is not None and "payload" in reader.error


_REPEATED = "a string the payload holds twice" * 3
_SEGMENT = ("tritium-bls-1-2-0-abcdef01", 64)
_CONFIG = {
    "name": "m(odel)",
    "dims": [1, -1],
    "big": 2**70,
    "f": 1.5e300,
    "neg": -(2**90),
    "none": None,
    "bytes": b"\x28\x63",
    "u": "h\xe9llo",
}
_LOGS = [(1, "model.py:3", _REPEATED), (2, "model.py:4", _REPEATED)] * 50
PAYLOADS = [
    (ipc.EXEC_DONE, [(3, None, [([("OUTPUT0", ("FP32", (16,), 0))], None, None)], (0,))]),
    (ipc.RESPONSE, (3, 0, ([("OUT", ("INT32", (1, 16), _SEGMENT))], None, '{"a": 1}'), True)),
    (ipc.REPLY, (True, _CONFIG)),
    (ipc.OBSERVE, (_LOGS, {1: [None, 2.0]})),
    (ipc.BLS_CONTROL, (1, "load", ["m", "", {"file:1/model.py": b"(" * 300}])),
    (ipc.BLS_REQUEST, tuple(range(300))),  # a tuple of more than 255 items
    (ipc.CALL, (7, frozenset({1, 2}), {3, 4}, 1j, ..., float("inf"))),
]


@pytest.mark.parametrize("body", PAYLOADS, ids=lambda p: str(p[0]))
def test_what_stubs_send_is_accepted(body: tuple[int, object]) -> None:
    kind, value = body
    payload = marshal.dumps((kind, value))
    ipc.check_payload(payload, 0, len(payload))  # the slow path, run on every payload here
    ((got_kind, got, _),) = ipc.FrameReader().feed(_frame_bytes(kind, value))
    assert (got_kind, got) == (kind, value)


def test_a_stub_does_not_send_what_the_server_would_refuse() -> None:
    server, stub = socket.socketpair()
    try:
        channel = ipc.BlockingChannel(stub)
        big = [bytes(1 << 20)] * (ipc.MAX_INLINE_BYTES // (1 << 20) + 1)
        with pytest.raises(ipc.FrameTooLarge, match="outside shared memory"):
            channel.send(ipc.RESPONSE, (1, 0, None, True), big)
        with pytest.raises(ipc.FrameTooLarge, match="metadata"):
            channel.send(ipc.REPLY, (True, "x" * (ipc.MAX_PAYLOAD_BYTES + 1)))
        channel.send(ipc.REPLY, (True, "fits"))  # nothing of the refused frames went out
        server.settimeout(5)
        ((kind, body, _),) = ipc.FrameReader().feed(server.recv(1 << 16))
        assert (kind, body) == (ipc.REPLY, (True, "fits"))
    finally:
        server.close()
        stub.close()
