"""A Python model's large inputs reach its stub through shared-memory segments the server
lends it (issue 43: ``shm_tensors.InputSegments`` / ``InputMaps``), small ones inline; every
size class and data type arrives intact, over HTTP, gRPC and client system shared memory; a
stub that hoards, truncates or unlinks its segments hurts only itself; and the segments are
reused, not multiplied, over many requests (/dev/shm does not grow)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.support.clients import client, make_input
from tests.support.models import IDENTITY_MODELS, build_test_repository
from testkit.server_process import ServerProcess
from tritium.backends.python.shm_tensors import INPUT_MIN_BYTES

_DEV_SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not _DEV_SHM.is_dir(), reason="no /dev/shm: tensors go inline")

_FP32_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {out_type} dims: [ -1 ] }} ]
"""
# What lies under the model's input array: "mmap" (a lent segment) or the frame's buffer.
_BACKING_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            base = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            while isinstance(base, (np.ndarray, memoryview)):
                base = base.obj if isinstance(base, memoryview) else base.base
            kind = np.array([type(base).__name__.encode()], dtype=object)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", kind)]))
        return out
"""
# A model that misbehaves with the segments of its pair (request parameter "mode"): keeps
# every input forever ("hoard"), or truncates / unlinks every segment file of its pair.
_VANDAL_PY = """\
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils

HOARD = []


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            mode = json.loads(request.parameters()).get("mode", "")
            copy = np.array(array)
            if mode == "hoard":
                HOARD.append(array)
            elif mode in ("truncate", "unlink"):
                prefix = "tritium-bls-%d." % os.getppid()
                for name in os.listdir("/dev/shm"):
                    mine = name.startswith(prefix) and "-%d-" % os.getpid() in name
                    if mine and not name.endswith(".lock"):
                        path = os.path.join("/dev/shm", name)
                        if mode == "truncate":
                            os.truncate(path, 0)
                        else:
                            os.unlink(path)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", copy)]))
        return out
"""
_MODELS = [*IDENTITY_MODELS.values()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("inseg") / "repo", _MODELS)
    for name, source, out_type in (
        ("input_backing", _BACKING_PY, "TYPE_STRING"),
        ("input_vandal", _VANDAL_PY, "TYPE_FP32"),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_FP32_CONFIG.format(name=name, out_type=out_type))
        (repo / name / "1" / "model.py").write_text(source)
    proc = ServerProcess([repo], "--allow-client-shm=true", "--http-max-input-size", str(64 << 20))
    yield proc
    proc.stop()


def _infer(
    server: ServerProcess, protocol: str, model: str, data: np.ndarray, dt: str, **kw: Any
) -> Any:
    with client(protocol, server.url(protocol)) as c:
        return c.infer(model, [make_input(protocol, "INPUT0", data, dt)], **kw)


def _segments(server: ServerProcess) -> dict[str, int]:
    prefix = f"tritium-bls-{server.proc.pid}."
    found = {}
    for path in _DEV_SHM.glob(prefix + "*"):
        if not path.name.endswith(".lock"):
            try:
                found[path.name] = path.stat().st_size
            except FileNotFoundError:
                pass
    return found


_SIZES = [1024, INPUT_MIN_BYTES - 4, INPUT_MIN_BYTES, 4 * INPUT_MIN_BYTES + 4]


@pytest.mark.parametrize("nbytes", _SIZES)
def test_large_inputs_reach_the_model_in_a_segment_small_ones_inline(
    server: ServerProcess, protocol: str, nbytes: int
) -> None:
    """Before issue 43 every input went through the socket (a bytearray under the array)."""
    data = np.zeros(nbytes // 4, dtype=np.float32)
    result = _infer(server, protocol, "input_backing", data, "FP32")
    backing = result.as_numpy("OUTPUT0")[0]
    assert backing == (b"mmap" if nbytes >= INPUT_MIN_BYTES else b"bytearray")


@pytest.mark.parametrize("nbytes", _SIZES)
@pytest.mark.parametrize("datatype", sorted(IDENTITY_MODELS))
def test_every_datatype_and_size_arrives_intact(
    server: ServerProcess, protocol: str, datatype: str, nbytes: int
) -> None:
    data = _data(datatype, nbytes)
    result = _infer(server, protocol, IDENTITY_MODELS[datatype], data, datatype)
    out = result.as_numpy("OUTPUT0")
    if datatype == "BF16":
        out = out.view(ml_dtypes.bfloat16) if out.dtype != ml_dtypes.bfloat16 else out
    assert out.shape == data.shape
    assert out.tobytes() == data.tobytes() if datatype != "BYTES" else out.tolist() == data.tolist()


def _data(datatype: str, nbytes: int) -> np.ndarray:
    rng = np.random.default_rng(nbytes)
    if datatype == "BYTES":  # 4 length bytes and 8 of text each
        count = max(nbytes // 12, 1)
        return np.array([b"s%07d" % i for i in range(count)], dtype=object)
    if datatype == "BOOL":
        return rng.integers(0, 2, nbytes).astype(bool)
    if datatype == "BF16":
        return rng.random(nbytes // 2, dtype=np.float32).astype(ml_dtypes.bfloat16)
    dtype = np.dtype(
        {"FP16": "float16", "FP32": "float32", "FP64": "float64"}.get(datatype, datatype.lower())
    )
    raw = rng.integers(0, 256, (nbytes // dtype.itemsize) * dtype.itemsize, dtype=np.uint8)
    array = raw.view(dtype)
    return np.nan_to_num(array) if dtype.kind == "f" else array


def test_inputs_from_client_shared_memory_arrive_intact(server: ServerProcess) -> None:
    """A client's system shared-memory region in and out (the copy into the lent segment
    is taken from the view of the client's region)."""
    data = np.arange(3 * INPUT_MIN_BYTES // 4, dtype=np.float32)
    tag = f"tritium_inseg_{uuid.uuid4().hex[:12]}"
    c = httpclient.InferenceServerClient(server.http_url)
    handles = []
    try:
        for role in ("in", "out"):
            handles.append(
                shm.create_shared_memory_region(f"{tag}_{role}", f"/{tag}_{role}", data.nbytes)
            )
            c.register_system_shared_memory(f"{tag}_{role}", f"/{tag}_{role}", data.nbytes)
        shm.set_shared_memory_region(handles[0], [data])
        inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_shared_memory(f"{tag}_in", data.nbytes)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(f"{tag}_out", data.nbytes)
        for step in range(5):
            data[0] = step
            shm.set_shared_memory_region(handles[0], [data])
            c.infer("identity_fp32", [inp], outputs=[out])
            got = shm.get_contents_as_numpy(handles[1], np.float32, list(data.shape))
            np.testing.assert_array_equal(got, data)
    finally:
        for role, handle in zip(("in", "out"), handles, strict=False):
            c.unregister_system_shared_memory(f"{tag}_{role}")
            shm.destroy_shared_memory_region(handle)
        c.close()


def test_segments_are_reused_not_multiplied(server: ServerProcess) -> None:
    """Requests of 1 to 4 MiB: the lent segments come back and are written again, so once
    each size has been seen, 150 more requests add no segment to /dev/shm."""
    sizes = [INPUT_MIN_BYTES, 2 * INPUT_MIN_BYTES, 4 * INPUT_MIN_BYTES]
    with httpclient.InferenceServerClient(server.http_url) as c:
        for i in range(180):
            if i == 30:
                warm = _segments(server)
            data = np.full(sizes[i % 3] // 4, i, dtype=np.float32)
            inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
            inp.set_data_from_numpy(data)
            result = c.infer("identity_fp32", [inp])
            assert result.as_numpy("OUTPUT0")[-1] == i
    after = _segments(server)
    print(f"{len(warm)} then {len(after)} segments, {sum(after.values())} bytes")
    assert set(after) <= set(warm)
    assert sum(after.values()) <= sum(warm.values())


def _serves(server: ServerProcess) -> None:
    """The server still answers a well-behaved model, with a large input."""
    data = np.arange(2 * INPUT_MIN_BYTES // 4, dtype=np.float32)
    result = _infer(server, "http", "identity_fp32", data, "FP32")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_a_stub_that_hoards_its_inputs_does_not_grow_dev_shm(server: ServerProcess) -> None:
    """A model keeping every input forever never gives a segment back: past the server's
    bound on lent bytes (128 MiB per stub) its inputs go inline, and /dev/shm stops growing."""
    data = np.arange(4 * INPUT_MIN_BYTES // 4, dtype=np.float32)
    first = sum(_segments(server).values())
    for i in range(48):  # 192 MiB of inputs, over the bound
        if i == 40:
            bounded = _segments(server)
        result = _infer(server, "http", "input_vandal", data, "FP32", parameters={"mode": "hoard"})
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    after = _segments(server)
    grown = sum(after.values()) - first
    print(f"hoarding grew /dev/shm by {grown >> 20} MiB")
    assert grown <= (128 + 16) * INPUT_MIN_BYTES  # the lent bound, and its outputs' segments
    assert set(after) <= set(bounded)  # the last 8 requests' inputs went inline


@pytest.mark.parametrize("mode", ["truncate", "unlink"])
def test_a_stub_that_vandalises_its_segments_hurts_only_itself(
    server: ServerProcess, mode: str
) -> None:
    """Truncated (the stub's own mapping then faults: it dies and is restarted) or unlinked
    (the server writes through its descriptors; the stub cannot map the next one) segments:
    the server keeps serving everyone, and the model itself comes back."""
    data = np.arange(2 * INPUT_MIN_BYTES // 4, dtype=np.float32)
    for _ in range(3):
        try:
            _infer(server, "http", "input_vandal", data, "FP32", parameters={"mode": mode})
        except Exception as exc:  # its own requests may fail: it broke its own segments
            print(f"{mode}: {exc}")
        _serves(server)
    deadline = time.monotonic() + 60
    while True:  # a stub killed by its own SIGBUS is restarted: the model answers again
        try:
            result = _infer(server, "http", "input_vandal", data, "FP32")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert os.path.exists(f"/proc/{server.proc.pid}")
