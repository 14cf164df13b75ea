"""System and CUDA shared memory over HTTP and gRPC, driven by tritonclient's own utilities.

Client regions are made with ``tritonclient.utils.shared_memory`` exactly as Triton's
``simple_{http,grpc}_shm_client.py`` / ``simple_*_shm_string_client.py`` examples do, then
registered with ``register_system_shared_memory`` and referenced from ``InferInput`` /
``InferRequestedOutput.set_shared_memory``. Expected values are computed with numpy.

Error messages are Triton's (reference/protocol.md §1.3, §3.10 and Triton's
shared_memory_manager.cc / infer handlers); only key phrases are checked, and the status code
only where Triton's is part of the contract. After every error a plain ``simple`` inference must
still succeed.

Every region name and key carries the protocol and a uuid; every client region is destroyed in
a ``finally`` (the ``regions`` fixture's teardown).
"""

from __future__ import annotations

import base64
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tests.support.clients import add_sub_inputs, assert_simple_works, client, make_input, module
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient import utils
from tritonclient.utils import InferenceServerException

DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
TENSOR_BYTES = 16 * 4  # one [1, 16] INT32 tensor of ``simple``
SHAPE = [1, 16]
PAGE = 4096  # Triton mmaps at the registered offset, so registered offsets must be page-aligned

GRPC_STATUS = {
    "400": "StatusCode.INVALID_ARGUMENT",
    "404": "StatusCode.NOT_FOUND",
    "500": "StatusCode.INTERNAL",
    "501": "StatusCode.UNIMPLEMENTED",
}


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidia0").exists()


# ------------------------------------------------------------------------------ servers


@pytest.fixture(scope="module")
def shm_server(example_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([example_repo], "--allow-client-shm=true")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def plain_server(example_repo: Path) -> Iterator[ServerProcess]:
    """Default flags: client shared memory is off, as in Triton ≥ 2.69."""
    proc = ServerProcess([example_repo])
    yield proc
    proc.stop()


@pytest.fixture
def triton(shm_server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = client(protocol, shm_server.url(protocol))
    yield c
    c.close()


# ------------------------------------------------------------------------------ regions


class Regions:
    """Client regions of one test: unique names/keys, registered through one client."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.handles: list[Any] = []
        self.registered: list[tuple[Any, str]] = []

    def names(self, tag: str) -> tuple[str, str]:
        unique = f"{tag}_{self.protocol}_{uuid.uuid4().hex[:12]}"
        return unique, f"/tritium_test_{unique}"

    def create(self, tag: str, byte_size: int) -> tuple[str, str, Any]:
        """A new client region; returns (region name, key, handle)."""
        name, key = self.names(tag)
        handle = shm.create_shared_memory_region(name, key, byte_size, create_only=True)
        self.handles.append(handle)
        return name, key, handle

    def register(self, c: Any, name: str, key: str, byte_size: int, offset: int = 0) -> None:
        c.register_system_shared_memory(name, key, byte_size, offset=offset)
        self.registered.append((c, name))

    def cleanup(self) -> None:
        try:
            for c, name in self.registered:
                try:
                    c.unregister_system_shared_memory(name)
                except Exception:  # noqa: BLE001 - best effort; the server may be gone
                    pass
        finally:
            errors = []
            for handle in self.handles:
                try:
                    shm.destroy_shared_memory_region(handle)
                except Exception as exc:  # noqa: BLE001 - collected and re-raised below
                    errors.append(exc)
            if errors:
                raise errors[0]


@pytest.fixture
def regions(protocol: str) -> Iterator[Regions]:
    r = Regions(protocol)
    try:
        yield r
    finally:
        r.cleanup()


def read(handle: Any, dtype: Any, shape: list[int], offset: int = 0) -> np.ndarray:
    """``get_contents_as_numpy``, copied so no view keeps the mapping from being closed."""
    return np.array(shm.get_contents_as_numpy(handle, dtype, shape, offset=offset), copy=True)


# ------------------------------------------------------------------------------ helpers


def shm_input(
    protocol: str,
    name: str,
    region: str,
    byte_size: int,
    offset: int = 0,
    shape: list[int] = SHAPE,
    datatype: str = "INT32",
) -> Any:
    inp = module(protocol).InferInput(name, list(shape), datatype)
    inp.set_shared_memory(region, byte_size, offset=offset)
    return inp


def shm_output(protocol: str, name: str, region: str, byte_size: int, offset: int = 0) -> Any:
    out = module(protocol).InferRequestedOutput(name)
    out.set_shared_memory(region, byte_size, offset=offset)
    return out


def output_meta(result: Any, protocol: str, name: str) -> tuple[str, list[int]]:
    out = result.get_output(name)
    assert out is not None, f"{name} missing from the response"
    if protocol == "http":
        return out["datatype"], [int(d) for d in out["shape"]]
    return out.datatype, [int(d) for d in out.shape]


def assert_no_data(result: Any, protocol: str, name: str) -> None:
    """A shm output carries no tensor data in the response (protocol.md §3.10)."""
    if protocol == "http":
        out = result.get_output(name)
        assert "data" not in out, out
        assert "binary_data_size" not in out.get("parameters", {}), out
        return
    response = result.get_response()
    index = [o.name for o in response.outputs].index(name)
    if index < len(response.raw_output_contents):
        assert response.raw_output_contents[index] == b""


def expect_error(
    protocol: str,
    call: Callable[[], Any],
    *phrases: str,
    http_status: str | None = None,
    grpc_status: str | None = None,
) -> InferenceServerException:
    """``call`` raises; every phrase is in the message; the status is checked when given."""
    with pytest.raises(InferenceServerException) as info:
        call()
    exc = info.value
    if http_status is not None:
        expected = http_status if protocol == "http" else (grpc_status or GRPC_STATUS[http_status])
        assert exc.status() == expected, f"status {exc.status()!r}: {exc}"
    message = exc.message() or ""
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r} (status {exc.status()})"
    return exc


def system_status(c: Any, protocol: str, name: str = "") -> dict[str, dict[str, Any]]:
    """Status as {name: {key, offset, byte_size}} from either protocol's payload."""
    status = c.get_system_shared_memory_status(name)
    if protocol == "http":
        assert isinstance(status, list), status
        regions = {}
        for r in status:
            for field in ("offset", "byte_size"):
                assert isinstance(r[field], int), r
            regions[r["name"]] = {
                "key": r["key"],
                "offset": r["offset"],
                "byte_size": r["byte_size"],
            }
        return regions
    regions = {}
    for region_name, r in status.regions.items():
        assert r.name == region_name, status
        regions[region_name] = {"key": r.key, "offset": r.offset, "byte_size": r.byte_size}
    return regions


def add_sub_data() -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(SHAPE)
    b = np.full(SHAPE, 7, dtype=np.int32) - np.arange(16, dtype=np.int32)[::-1].reshape(SHAPE)
    return a, b


# ------------------------------------------------------------------ numeric tensors through shm


def test_inputs_and_outputs_at_offsets(triton: Any, protocol: str, regions: Regions) -> None:
    """simple_*_shm_client: both inputs in one region (offsets 0 and 64), both outputs in
    another."""
    a, b = add_sub_data()
    in_name, in_key, in_handle = regions.create("in", 2 * TENSOR_BYTES)
    out_name, out_key, out_handle = regions.create("out", 2 * TENSOR_BYTES)
    shm.set_shared_memory_region(in_handle, [a])
    shm.set_shared_memory_region(in_handle, [b], offset=TENSOR_BYTES)
    regions.register(triton, in_name, in_key, 2 * TENSOR_BYTES)
    regions.register(triton, out_name, out_key, 2 * TENSOR_BYTES)

    inputs = [
        shm_input(protocol, "INPUT0", in_name, TENSOR_BYTES),
        shm_input(protocol, "INPUT1", in_name, TENSOR_BYTES, offset=TENSOR_BYTES),
    ]
    outputs = [
        shm_output(protocol, "OUTPUT0", out_name, TENSOR_BYTES),
        shm_output(protocol, "OUTPUT1", out_name, TENSOR_BYTES, offset=TENSOR_BYTES),
    ]
    result = triton.infer("simple", inputs, outputs=outputs)

    for name, expected, offset in (("OUTPUT0", a + b, 0), ("OUTPUT1", a - b, TENSOR_BYTES)):
        datatype, shape = output_meta(result, protocol, name)
        assert (datatype, shape) == ("INT32", SHAPE)
        assert_no_data(result, protocol, name)
        got = read(out_handle, utils.triton_to_np_dtype(datatype), shape, offset=offset)
        np.testing.assert_array_equal(got, expected)

    # The same registered regions serve a second request with new data.
    shm.set_shared_memory_region(in_handle, [b, a])
    triton.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read(out_handle, np.int32, SHAPE), b + a)
    np.testing.assert_array_equal(read(out_handle, np.int32, SHAPE, TENSOR_BYTES), b - a)


def test_registered_offset(triton: Any, protocol: str, regions: Regions) -> None:
    """Two regions over one key at page-aligned registered offsets; request offsets are
    relative to the registered region."""
    a, b = add_sub_data()
    in_name, key, handle = regions.create("base", 3 * PAGE)
    out_name = regions.names("outoff")[0]
    shm.set_shared_memory_region(handle, [a, b], offset=PAGE)
    regions.register(triton, in_name, key, 2 * TENSOR_BYTES, offset=PAGE)
    regions.register(triton, out_name, key, 2 * TENSOR_BYTES, offset=2 * PAGE)

    status = system_status(triton, protocol)
    assert status[in_name] == {"key": key, "offset": PAGE, "byte_size": 2 * TENSOR_BYTES}
    assert status[out_name] == {"key": key, "offset": 2 * PAGE, "byte_size": 2 * TENSOR_BYTES}

    inputs = [
        shm_input(protocol, "INPUT0", in_name, TENSOR_BYTES),
        shm_input(protocol, "INPUT1", in_name, TENSOR_BYTES, offset=TENSOR_BYTES),
    ]
    outputs = [
        shm_output(protocol, "OUTPUT0", out_name, TENSOR_BYTES, offset=TENSOR_BYTES),
        shm_output(protocol, "OUTPUT1", out_name, TENSOR_BYTES),
    ]
    triton.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(read(handle, np.int32, SHAPE, 2 * PAGE + TENSOR_BYTES), a + b)
    np.testing.assert_array_equal(read(handle, np.int32, SHAPE, 2 * PAGE), a - b)


def test_shm_input_with_normal_input(triton: Any, protocol: str, regions: Regions) -> None:
    a, b = add_sub_data()
    name, key, handle = regions.create("mixin", TENSOR_BYTES)
    shm.set_shared_memory_region(handle, [b])
    regions.register(triton, name, key, TENSOR_BYTES)

    inputs = [
        make_input(protocol, "INPUT0", a, "INT32"),
        shm_input(protocol, "INPUT1", name, TENSOR_BYTES),
    ]
    result = triton.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("in_shm", ["OUTPUT0", "OUTPUT1"])
def test_shm_output_with_normal_output(
    triton: Any, protocol: str, regions: Regions, in_shm: str
) -> None:
    """One output in shm, the other in the response (gRPC raw_output_contents stay aligned)."""
    a, b = add_sub_data()
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    normal = "OUTPUT1" if in_shm == "OUTPUT0" else "OUTPUT0"
    name, key, handle = regions.create("mixout", TENSOR_BYTES)
    regions.register(triton, name, key, TENSOR_BYTES)

    inputs = [
        make_input(protocol, "INPUT0", a, "INT32"),
        make_input(protocol, "INPUT1", b, "INT32"),
    ]
    outputs = [
        shm_output(protocol, "OUTPUT0", name, TENSOR_BYTES)
        if in_shm == "OUTPUT0"
        else module(protocol).InferRequestedOutput("OUTPUT0"),
        shm_output(protocol, "OUTPUT1", name, TENSOR_BYTES)
        if in_shm == "OUTPUT1"
        else module(protocol).InferRequestedOutput("OUTPUT1"),
    ]
    result = triton.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy(normal), expected[normal])
    assert_no_data(result, protocol, in_shm)
    assert output_meta(result, protocol, in_shm) == ("INT32", SHAPE)
    np.testing.assert_array_equal(read(handle, np.int32, SHAPE), expected[in_shm])


# ------------------------------------------------------------------ BYTES tensors through shm


def test_bytes_through_shm(triton: Any, protocol: str, regions: Regions) -> None:
    """simple_*_shm_string_client: serialized BYTES inputs at offsets in one region, outputs in
    their own regions (one exactly sized, one larger than needed)."""
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.full(16, 1000, dtype=np.int32) - 3 * in0

    def as_bytes(x: np.ndarray) -> np.ndarray:
        return np.array([str(v).encode() for v in x], dtype=np.object_)

    input0, input1 = as_bytes(in0).reshape(SHAPE), as_bytes(in1).reshape(SHAPE)
    expected_sum, expected_diff = (
        as_bytes(in0 + in1).reshape(SHAPE),
        as_bytes(in0 - in1).reshape(SHAPE),
    )

    ser0, ser1 = utils.serialize_byte_tensor(input0), utils.serialize_byte_tensor(input1)
    size0, size1 = utils.serialized_byte_size(ser0), utils.serialized_byte_size(ser1)
    out0_size = utils.serialized_byte_size(utils.serialize_byte_tensor(expected_sum))
    out1_size = utils.serialized_byte_size(utils.serialize_byte_tensor(expected_diff)) + 32

    in_name, in_key, in_handle = regions.create("strin", size0 + size1)
    out0_name, out0_key, out0_handle = regions.create("strout0", out0_size)
    out1_name, out1_key, out1_handle = regions.create("strout1", out1_size)
    shm.set_shared_memory_region(in_handle, [ser0])
    shm.set_shared_memory_region(in_handle, [ser1], offset=size0)
    regions.register(triton, in_name, in_key, size0 + size1)
    regions.register(triton, out0_name, out0_key, out0_size)
    regions.register(triton, out1_name, out1_key, out1_size)

    inputs = [
        shm_input(protocol, "INPUT0", in_name, size0, datatype="BYTES"),
        shm_input(protocol, "INPUT1", in_name, size1, offset=size0, datatype="BYTES"),
    ]
    outputs = [
        shm_output(protocol, "OUTPUT0", out0_name, out0_size),
        shm_output(protocol, "OUTPUT1", out1_name, out1_size),
    ]
    result = triton.infer("simple_string", inputs, outputs=outputs)
    for name, handle, expected in (
        ("OUTPUT0", out0_handle, expected_sum),
        ("OUTPUT1", out1_handle, expected_diff),
    ):
        datatype, shape = output_meta(result, protocol, name)
        assert (datatype, shape) == ("BYTES", SHAPE)
        assert_no_data(result, protocol, name)
        got = read(handle, np.object_, shape)
        assert got.tolist() == expected.tolist()


def test_bytes_variable_length_identity(triton: Any, protocol: str, regions: Regions) -> None:
    """simple_identity (BYTES [-1]): empty, binary and multi-byte elements round-trip via shm."""
    data = np.array(
        [[b"", b"\x00\xffbin", "h\u00e9llo \u4e16\u754c".encode(), b"x" * 300]], dtype=np.object_
    )
    serialized = utils.serialize_byte_tensor(data)
    size = utils.serialized_byte_size(serialized)
    in_name, in_key, in_handle = regions.create("idin", size)
    out_name, out_key, out_handle = regions.create("idout", size)
    shm.set_shared_memory_region(in_handle, [serialized])
    regions.register(triton, in_name, in_key, size)
    regions.register(triton, out_name, out_key, size)

    result = triton.infer(
        "simple_identity",
        [shm_input(protocol, "INPUT0", in_name, size, shape=list(data.shape), datatype="BYTES")],
        outputs=[shm_output(protocol, "OUTPUT0", out_name, size)],
    )
    assert output_meta(result, protocol, "OUTPUT0") == ("BYTES", list(data.shape))
    assert read(out_handle, np.object_, list(data.shape)).tolist() == data.tolist()


# ------------------------------------------------------------------------------ status


def test_status_unregister_one_and_all(triton: Any, protocol: str, regions: Regions) -> None:
    name1, key1, _ = regions.create("st1", 2 * PAGE)
    name2, key2, _ = regions.create("st2", TENSOR_BYTES)
    regions.register(triton, name1, key1, 128, offset=PAGE)
    regions.register(triton, name2, key2, TENSOR_BYTES)

    everything = system_status(triton, protocol)
    assert everything[name1] == {"key": key1, "offset": PAGE, "byte_size": 128}
    assert everything[name2] == {"key": key2, "offset": 0, "byte_size": TENSOR_BYTES}

    assert system_status(triton, protocol, name1) == {
        name1: {"key": key1, "offset": PAGE, "byte_size": 128}
    }

    triton.unregister_system_shared_memory(name1)
    after = system_status(triton, protocol)
    assert name1 not in after and name2 in after
    expect_error(
        protocol,
        lambda: triton.get_system_shared_memory_status(name1),
        f"Unable to find system shared memory region: '{name1}'",
    )  # the status code is checked in test_status_of_unknown_region
    # Unregistering a name that is not registered is not an error in Triton.
    triton.unregister_system_shared_memory(name1)

    triton.unregister_system_shared_memory()  # empty name: all
    assert system_status(triton, protocol) == {}
    assert_simple_works(triton, protocol)


def test_status_of_unknown_region(triton: Any, protocol: str, regions: Regions) -> None:
    name = regions.names("nosuch")[0]
    expect_error(
        protocol,
        lambda: triton.get_system_shared_memory_status(name),
        "Unable to find system shared memory region",
        name,
        http_status="404",
    )


# ------------------------------------------------------------------------------ errors


def test_register_same_name_twice(triton: Any, protocol: str, regions: Regions) -> None:
    name, key, _ = regions.create("dup", TENSOR_BYTES)
    _, other_key, _ = regions.create("dupother", TENSOR_BYTES)
    regions.register(triton, name, key, TENSOR_BYTES)
    expect_error(
        protocol,
        lambda: triton.register_system_shared_memory(name, other_key, TENSOR_BYTES),
        f"shared memory region '{name}' already in manager",
        http_status="400",
        grpc_status="StatusCode.ALREADY_EXISTS",
    )
    # The first registration is untouched.
    assert system_status(triton, protocol, name)[name]["key"] == key
    assert_simple_works(triton, protocol)


def test_register_bad_key(triton: Any, protocol: str, regions: Regions) -> None:
    name, key = regions.names("badkey")
    assert not Path("/dev/shm", key.lstrip("/")).exists()
    expect_error(
        protocol,
        lambda: triton.register_system_shared_memory(name, key, TENSOR_BYTES),
        "Unable to open shared memory region",
    )
    assert name not in system_status(triton, protocol)
    assert_simple_works(triton, protocol)


@pytest.mark.parametrize(
    ("offset", "byte_size"), [(0, 2 * TENSOR_BYTES), (PAGE, TENSOR_BYTES)], ids=["size", "offset"]
)
def test_register_beyond_object(
    triton: Any, protocol: str, regions: Regions, offset: int, byte_size: int
) -> None:
    """offset + byte_size past the end of the /dev/shm object."""
    name, key, _ = regions.create("toobig", TENSOR_BYTES)
    expect_error(
        protocol,
        lambda: triton.register_system_shared_memory(name, key, byte_size, offset=offset),
        f"failed to register shared memory region '{name}': invalid args",  # Triton's words
        http_status="400",
    )
    assert name not in system_status(triton, protocol)
    assert_simple_works(triton, protocol)


def test_input_unknown_region(triton: Any, protocol: str, regions: Regions) -> None:
    name = regions.names("unknownin")[0]
    inputs = [
        shm_input(protocol, "INPUT0", name, TENSOR_BYTES),
        make_input(protocol, "INPUT1", np.ones(SHAPE, dtype=np.int32), "INT32"),
    ]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        f"Unable to find shared memory region: '{name}'",
    )
    assert_simple_works(triton, protocol)


def test_output_unknown_region(triton: Any, protocol: str, regions: Regions) -> None:
    name = regions.names("unknownout")[0]
    inputs, _, _ = add_sub_inputs(protocol)
    expect_error(
        protocol,
        lambda: triton.infer(
            "simple", inputs, outputs=[shm_output(protocol, "OUTPUT0", name, TENSOR_BYTES)]
        ),
        f"Unable to find shared memory region: '{name}'",
    )
    assert_simple_works(triton, protocol)


@pytest.mark.parametrize("byte_size", [TENSOR_BYTES - 4, 2 * TENSOR_BYTES])
def test_input_byte_size_mismatch(
    triton: Any, protocol: str, regions: Regions, byte_size: int
) -> None:
    name, key, handle = regions.create("mismatch", 2 * TENSOR_BYTES)
    shm.set_shared_memory_region(handle, [np.ones((2, 16), dtype=np.int32)])
    regions.register(triton, name, key, 2 * TENSOR_BYTES)
    inputs = [
        shm_input(protocol, "INPUT0", name, byte_size),
        make_input(protocol, "INPUT1", np.ones(SHAPE, dtype=np.int32), "INT32"),
    ]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "byte size mismatch",
        "INPUT0",
        http_status="400",
    )
    assert_simple_works(triton, protocol)


def test_output_region_too_small(triton: Any, protocol: str, regions: Regions) -> None:
    name, key, _ = regions.create("small", TENSOR_BYTES)
    regions.register(triton, name, key, TENSOR_BYTES)
    inputs, _, _ = add_sub_inputs(protocol)
    expect_error(
        protocol,
        lambda: triton.infer(
            "simple", inputs, outputs=[shm_output(protocol, "OUTPUT0", name, TENSOR_BYTES // 2)]
        ),
        "OUTPUT0",
        "should be at least",
    )
    assert_simple_works(triton, protocol)


@pytest.mark.parametrize("tensor", ["input", "output"])
@pytest.mark.parametrize(
    ("offset", "phrase"),
    [
        (2 * TENSOR_BYTES, "Invalid offset for shared memory region"),
        (TENSOR_BYTES + 32, "Invalid offset + byte size for shared memory region"),
    ],
    ids=["offset-past-end", "offset-plus-size-past-end"],
)
def test_offset_out_of_range(
    triton: Any, protocol: str, regions: Regions, tensor: str, offset: int, phrase: str
) -> None:
    name, key, _ = regions.create("range", 2 * TENSOR_BYTES)
    regions.register(triton, name, key, 2 * TENSOR_BYTES)
    if tensor == "input":
        inputs = [
            shm_input(protocol, "INPUT0", name, TENSOR_BYTES, offset=offset),
            make_input(protocol, "INPUT1", np.ones(SHAPE, dtype=np.int32), "INT32"),
        ]
        outputs = None
    else:
        inputs, _, _ = add_sub_inputs(protocol)
        outputs = [shm_output(protocol, "OUTPUT0", name, TENSOR_BYTES, offset=offset)]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs, outputs=outputs),
        phrase,
        name,
        http_status="400",
    )
    assert_simple_works(triton, protocol)


# ------------------------------------------------------------------ unregister and lifetime


def test_unregister_then_use_fails(triton: Any, protocol: str, regions: Regions) -> None:
    a, b = add_sub_data()
    name, key, handle = regions.create("unreg", 2 * TENSOR_BYTES)
    shm.set_shared_memory_region(handle, [a, b])
    regions.register(triton, name, key, 2 * TENSOR_BYTES)
    inputs = [
        shm_input(protocol, "INPUT0", name, TENSOR_BYTES),
        shm_input(protocol, "INPUT1", name, TENSOR_BYTES, offset=TENSOR_BYTES),
    ]
    first = triton.infer("simple", inputs)
    triton.unregister_system_shared_memory(name)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT1"), a - b)

    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        f"Unable to find shared memory region: '{name}'",
    )
    assert_simple_works(triton, protocol)

    # The name is free again: re-registering it works and serves requests.
    regions.register(triton, name, key, 2 * TENSOR_BYTES)
    again = triton.infer("simple", inputs)
    np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), a + b)


def test_server_never_unlinks_client_region(example_repo: Path, protocol: str) -> None:
    """protocol.md §0.6: after the server stops, the client's region still exists and the
    client's destroy_shared_memory_region succeeds."""
    unique = f"keep_{protocol}_{uuid.uuid4().hex[:12]}"
    key = f"/tritium_test_{unique}"
    path = Path("/dev/shm", key.lstrip("/"))
    a, b = add_sub_data()
    handle = shm.create_shared_memory_region(unique, key, 3 * TENSOR_BYTES, create_only=True)
    destroyed = False
    try:
        shm.set_shared_memory_region(handle, [a, b])
        server = ServerProcess([example_repo], "--allow-client-shm=true")
        try:
            c = client(protocol, server.url(protocol))
            try:
                c.register_system_shared_memory(unique, key, 3 * TENSOR_BYTES)
                c.infer(
                    "simple",
                    [
                        shm_input(protocol, "INPUT0", unique, TENSOR_BYTES),
                        shm_input(protocol, "INPUT1", unique, TENSOR_BYTES, offset=TENSOR_BYTES),
                    ],
                    outputs=[
                        shm_output(protocol, "OUTPUT0", unique, TENSOR_BYTES, 2 * TENSOR_BYTES)
                    ],
                )
            finally:
                c.close()
        finally:
            server.stop()
        assert path.exists(), "the server unlinked the client's region on exit"
        np.testing.assert_array_equal(read(handle, np.int32, SHAPE, 2 * TENSOR_BYTES), a + b)
        shm.destroy_shared_memory_region(handle)  # must not raise FileNotFoundError
        destroyed = True
        assert not path.exists()
    finally:
        if not destroyed:
            try:
                shm.destroy_shared_memory_region(handle)
            except FileNotFoundError:
                pass


# ------------------------------------------------------------------ client shm disabled (default)


@pytest.fixture
def plain(plain_server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = client(protocol, plain_server.url(protocol))
    yield c
    c.close()


def test_disabled_register(plain: Any, protocol: str, regions: Regions) -> None:
    name, key, _ = regions.create("off", TENSOR_BYTES)
    expect_error(
        protocol,
        lambda: plain.register_system_shared_memory(name, key, TENSOR_BYTES),
        DISABLED,
        http_status="501",
    )
    assert_simple_works(plain, protocol)


def test_disabled_input_and_output(plain: Any, protocol: str, regions: Regions) -> None:
    name = regions.names("offuse")[0]
    inputs = [
        shm_input(protocol, "INPUT0", name, TENSOR_BYTES),
        make_input(protocol, "INPUT1", np.ones(SHAPE, dtype=np.int32), "INT32"),
    ]
    expect_error(protocol, lambda: plain.infer("simple", inputs), DISABLED, http_status="501")
    normal, _, _ = add_sub_inputs(protocol)
    expect_error(
        protocol,
        lambda: plain.infer(
            "simple", normal, outputs=[shm_output(protocol, "OUTPUT0", name, TENSOR_BYTES)]
        ),
        DISABLED,
        http_status="501",
    )
    assert_simple_works(plain, protocol)


def test_disabled_unregister(plain: Any, protocol: str, regions: Regions) -> None:
    """Like register, Triton refuses unregistering (one region or all, system or CUDA) while
    client shared memory is disabled."""
    name = regions.names("offunreg")[0]
    calls = {
        "system one": lambda: plain.unregister_system_shared_memory(name),
        "system all": lambda: plain.unregister_system_shared_memory(),
        "cuda one": lambda: plain.unregister_cuda_shared_memory(name),
        "cuda all": lambda: plain.unregister_cuda_shared_memory(),
    }
    for call in calls.values():
        expect_error(protocol, call, DISABLED, http_status="501")
    fake_handle = base64.b64encode(bytes(64)).decode()
    expect_error(
        protocol,
        lambda: plain.register_cuda_shared_memory(name, fake_handle, 0, TENSOR_BYTES),
        DISABLED,
        http_status="501",
    )
    assert_simple_works(plain, protocol)


def test_disabled_status(plain: Any, protocol: str, regions: Regions) -> None:
    """While client shared memory is disabled no shm route answers OK, status included
    (Triton still answers status; tritium refuses it like register and unregister)."""
    name = regions.names("offstatus")[0]
    calls = {
        "system all": plain.get_system_shared_memory_status,
        "system one": lambda: plain.get_system_shared_memory_status(name),
        "cuda all": plain.get_cuda_shared_memory_status,
        "cuda one": lambda: plain.get_cuda_shared_memory_status(name),
    }
    for call in calls.values():
        expect_error(protocol, call, DISABLED, http_status="501")
    assert_simple_works(plain, protocol)


# ------------------------------------------------------------------ CUDA shared memory


def cuda_status(c: Any, protocol: str) -> dict[str, Any]:
    status = c.get_cuda_shared_memory_status()
    if protocol == "http":
        assert isinstance(status, list), status
        return {r["name"]: r for r in status}
    return dict(status.regions)


def test_cuda_status_and_unregister_all_empty(triton: Any, protocol: str) -> None:
    assert cuda_status(triton, protocol) == {}
    triton.unregister_cuda_shared_memory()
    assert cuda_status(triton, protocol) == {}


@pytest.mark.skipif(has_gpu(), reason="a GPU is present: CUDA shm must really register here")
def test_cuda_register_not_supported(triton: Any, protocol: str, regions: Regions) -> None:
    name = regions.names("cuda")[0]
    fake_handle = base64.b64encode(bytes(64)).decode()  # a cudaIpcMemHandle_t is 64 bytes
    with pytest.raises(InferenceServerException) as info:
        triton.register_cuda_shared_memory(name, fake_handle, 0, TENSOR_BYTES)
    exc = info.value
    # Triton's GPU build without a GPU: INVALID_ARG "failed to register shared memory region:
    # invalid args" (qa/L0_grpc python_grpc_aio_test matches that); tritium says why.
    message = exc.message() or ""
    assert message.startswith("failed to register shared memory region: invalid args"), message
    assert "not supported" in message, message
    assert exc.status() == ("400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT")
    assert cuda_status(triton, protocol) == {}
    assert name not in system_status(triton, protocol)
    assert_simple_works(triton, protocol)


# ------------------------------------------------------------------ unregister while in use


@pytest.fixture(scope="module")
def slow_shm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("slowshm") / "repo", ["slow"])
    proc = ServerProcess([repo], "--allow-client-shm=true")
    yield proc
    proc.stop()


def test_a_region_in_use_cannot_be_unregistered(
    slow_shm_server: ServerProcess, protocol: str, regions: Regions
) -> None:
    """Triton's: while a request reads from a region and writes into it, unregistering that
    region fails (INTERNAL, "currently in use"), by name or all at once (which still
    unregisters the free ones); the request gets correct data; afterwards it unregisters."""
    c = client(protocol, slow_shm_server.url(protocol))
    name, key, handle = regions.create("inflight", 64)
    free_name, free_key, _ = regions.create("idle", 64)
    data = np.arange(8, dtype=np.float32) * 1.5
    shm.set_shared_memory_region(handle, [data])
    regions.register(c, name, key, 64)
    regions.register(c, free_name, free_key, 64)
    inputs = [shm_input(protocol, "INPUT0", name, 32, shape=[8], datatype="FP32")]
    outputs = [shm_output(protocol, "OUTPUT0", name, 32, offset=32)]
    outcome: dict[str, Any] = {}

    def run() -> None:  # a client of its own: the HTTP client stays on its thread
        try:
            own = client(protocol, slow_shm_server.url(protocol))
            outcome["result"] = own.infer("slow", inputs, outputs=outputs)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.2)  # the model sleeps 0.5 s: the request is in flight now
    other = client(protocol, slow_shm_server.url(protocol))
    with pytest.raises(InferenceServerException) as one:
        other.unregister_system_shared_memory(name)
    with pytest.raises(InferenceServerException) as every:
        other.unregister_system_shared_memory()
    worker.join(30)
    assert "error" not in outcome, outcome.get("error")
    in_use = f"Cannot unregister shared memory region '{name}', it is currently in use."
    assert in_use in str(one.value)
    listed = f"Failed to unregister the following system shared memory regions: {name} ,"
    assert listed in str(every.value)
    for error in (one.value, every.value):
        assert error.status() in ("500", "StatusCode.INTERNAL")
    status = system_status(other, protocol)
    assert name in status and free_name not in status
    np.testing.assert_array_equal(read(handle, np.float32, [8], offset=32), data)
    other.unregister_system_shared_memory(name)  # the request is over: it goes now
    with pytest.raises(InferenceServerException) as info:
        c.infer("slow", inputs, outputs=outputs)
    assert "Unable to find shared memory region" in str(info.value)
