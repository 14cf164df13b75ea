"""The OpenVINO backend (``backend: "openvino"``, IR ``model.xml`` + ``model.bin`` or ONNX read
by OpenVINO) over the real server, HTTP and gRPC with the official clients: every data type
Triton's OpenVINO backend maps, max_batch_size 0 and > 0, a dynamic batch that really forms
(statistics), instances on their own streams, Triton's parameters, auto-complete, every load
error with its reason; and a server whose Python cannot import openvino names the extra."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

ov_models = pytest.importorskip("tests.support.openvino_models")

from tests.support.clients import client, index_rows, make_input  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

TYPES = ov_models.TYPES
BATCH_MODEL = ov_models.BATCH_MODEL


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ov_cache")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    root = tmp_path_factory.mktemp("openvino") / "repo"
    ov_models.build(root, {**ov_models.good_models(), **ov_models.bad_models()}, cache)
    return root


@pytest.fixture(scope="module")
def served(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo], "--exit-on-error=false", start_timeout=120)
    yield proc
    proc.stop()


def _infer(proc: ServerProcess, protocol: str, model: str, inputs: list[Any]) -> Any:
    c = client(protocol, proc.url(protocol))
    try:
        return c.infer(model, inputs)
    finally:
        c.close()


def _doubled(proc: ServerProcess, protocol: str, model: str, array: np.ndarray) -> np.ndarray:
    wire = "FP16" if array.dtype == np.float16 else "FP32"
    result = _infer(proc, protocol, model, [make_input(protocol, "INPUT0", array, wire)])
    out: np.ndarray = result.as_numpy("OUTPUT0")
    return out


def test_every_data_type(served: ServerProcess, protocol: str) -> None:
    """ov_types: max_batch_size 0, one input per type; numbers plus one, booleans negated,
    each with its own datatype."""
    inputs, sent = [], []
    for index, (_, wire, _) in enumerate(TYPES):
        if wire == "BOOL":
            array = np.array([True, False, True])
        else:
            dtype = {"FP16": np.float16, "FP32": np.float32}.get(wire) or np.dtype(wire.lower())
            array = np.array([1, 2, 3], dtype=dtype)
        inputs.append(make_input(protocol, f"INPUT_{index}", array, wire))
        sent.append(array)
    result = _infer(served, protocol, "ov_types", inputs)
    for index, (_, wire, _) in enumerate(TYPES):
        got = result.as_numpy(f"OUTPUT_{index}")
        if wire == "BOOL":
            assert got.tolist() == (~sent[index]).tolist()
        else:
            assert got.dtype == sent[index].dtype, wire
            np.testing.assert_array_equal(got, sent[index] + 1)


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("ov_static_batch1", (3, 4)),  # a batch-1 IR takes any batch up to max_batch_size
        ("ov_no_batch", (2, 4)),  # max_batch_size 0: the model's own shape
        ("ov_onnx", (5, 4)),  # default_model_filename: model.onnx, read by OpenVINO
        ("ov_reshaped", (2, 7)),  # RESHAPE_IO_LAYERS: dims [-1] take any width
        ("ov_tuned", (2, 4)),
        ("ov_throughput", (2, 4)),
        ("ov_cached", (2, 4)),
        ("ov_auto", (2, 4)),
    ],
)
def test_models_answer(served: ServerProcess, protocol: str, model: str, shape: Any) -> None:
    array = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(_doubled(served, protocol, model, array), array * 2)


def test_configured_type_is_converted(served: ServerProcess, protocol: str) -> None:
    """An FP16 config on an FP32 model: OpenVINO converts both ways, as in Triton."""
    array = np.array([[1.5, 2, 3, 4]], dtype=np.float16)
    got = _doubled(served, protocol, "ov_converted", array)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, array * 2)


def test_fixed_batch_needs_full_batches(served: ServerProcess, protocol: str) -> None:
    """SKIP_OV_DYNAMIC_BATCHSIZE fixes the batch at max_batch_size: a smaller batch fails
    with Triton's message; a full one runs."""
    full = np.ones((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(_doubled(served, protocol, "ov_fixed_batch", full), full * 2)
    with pytest.raises(InferenceServerException, match="expected requests with batch size '4'"):
        _doubled(served, protocol, "ov_fixed_batch", np.ones((2, 4), dtype=np.float32))


def test_batch_padding(served: ServerProcess, protocol: str) -> None:
    """ENABLE_BATCH_PADDING: a batch of 2 is padded to 4 and only its rows come back."""
    array = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = _doubled(served, protocol, "ov_padded", array)
    assert got.shape == (2, 4)
    np.testing.assert_array_equal(got, array * 2)


def test_parameters_apply(served: ServerProcess, cache: Path) -> None:
    """The compile properties reach OpenVINO: ov_tuned one stream and thread, ov_batching one
    stream and one thread per instance (the default), ov_cached writes OpenVINO's cache."""
    log = served.log_text()
    tuned = "model 'ov_tuned' compiled for CPU: NUM_STREAMS=1, INFERENCE_NUM_THREADS=1, "
    assert tuned + "PERFORMANCE_HINT=LATENCY, INFERENCE_PRECISION_HINT=f32" in log, log[-3000:]
    instances = ov_models.INSTANCES
    assert (
        f"model '{BATCH_MODEL}' compiled for CPU: NUM_STREAMS={instances}, "
        f"INFERENCE_NUM_THREADS={instances}"
    ) in log
    assert any(cache.iterdir())
    assert "model 'ov_throughput' compiled for CPU: " in log  # TARGET_DEVICE, upper-cased
    # HINT_BF16: OpenVINO takes bfloat16 where the CPU has it (else it keeps float32).
    import openvino as ov

    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    precision = "bf16" if has_bf16 else "f32"
    assert f"PERFORMANCE_HINT=THROUGHPUT, INFERENCE_PRECISION_HINT={precision}" in log


def _aio(protocol: str) -> Any:
    return httpaio if protocol == "http" else grpcaio


async def _batch_sizes(protocol: str, c: Any) -> dict[int, int]:
    stats = await c.get_inference_statistics(BATCH_MODEL)
    if protocol == "http":
        rows = stats["model_stats"][0].get("batch_stats", [])
        return {int(r["batch_size"]): int(r["compute_infer"]["count"]) for r in rows}
    return {b.batch_size: b.compute_infer.count for b in stats.model_stats[0].batch_stats}


def _concurrent(
    proc: ServerProcess, protocol: str, rows: list[int]
) -> tuple[list[Any], dict[int, int]]:
    module = _aio(protocol)

    async def one(c: Any, k: int, n: int) -> Any:
        inp = module.InferInput("INPUT0", [n, 4], "FP32")
        inp.set_data_from_numpy(np.full((n, 4), k, dtype=np.float32))
        return await c.infer(BATCH_MODEL, [inp])

    async def main() -> tuple[list[Any], dict[int, int]]:
        c = module.InferenceServerClient(proc.url(protocol))
        try:
            before = await _batch_sizes(protocol, c)
            calls = (one(c, k, n) for k, n in enumerate(rows))
            results = await asyncio.wait_for(asyncio.gather(*calls), 60)
            after = await _batch_sizes(protocol, c)
        finally:
            await c.close()
        return results, {
            n: after[n] - before.get(n, 0) for n in after if after[n] != before.get(n, 0)
        }

    return asyncio.run(main())


def test_a_dynamic_batch_forms_and_splits(served: ServerProcess, protocol: str) -> None:
    """Four concurrent requests of batch 1 run as one execution of batch 4 (statistics),
    each getting its own rows back."""
    results, grown = _concurrent(served, protocol, [1] * ov_models.BATCH_PREFERRED)
    for k, result in enumerate(results):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2 * k))
    assert grown == {ov_models.BATCH_PREFERRED: 1}, grown


def test_instances_run_batches_side_by_side(served: ServerProcess, protocol: str) -> None:
    """Two full preferred batches at once: each instance runs one (its own infer request on
    its own stream), and each request gets its rows."""
    preferred = ov_models.BATCH_PREFERRED
    results, grown = _concurrent(served, protocol, [preferred, preferred])
    for k, result in enumerate(results):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((preferred, 4), 2 * k))
    assert grown == {preferred: 2}, grown


def test_auto_complete_fills_the_config(served: ServerProcess, protocol: str) -> None:
    """ov_auto has no inputs, outputs or max_batch_size: its N layout allows batching, so
    max_batch_size is the default (4) with dynamic batching, and the tensors are the model's."""
    c = client(protocol, served.url(protocol))
    try:
        if protocol == "http":
            config = c.get_model_config("ov_auto")
        else:
            config = c.get_model_config("ov_auto", as_json=True)["config"]
    finally:
        c.close()
    assert int(config["max_batch_size"]) == 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4])
    ]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0"]


LOAD_ERRORS = {
    "ov_bad_name": "unexpected inference input 'IN', allowed inputs are: INPUT0",
    "ov_bad_output": "unexpected inference output 'OUT', allowed outputs are: OUTPUT0",
    "ov_bad_count": "unable to load model 'ov_bad_count', configuration expects 2 inputs, "
    "model provides 1",
    "ov_bad_type": "unsupported datatype TYPE_FP64 for input 'INPUT0' for model 'ov_bad_type'",
    "ov_bad_dims": "model 'ov_bad_dims', tensor 'INPUT0': the model expects 2 dimensions "
    "(shape [-1,4]) but the model configuration specifies 2 dimensions",
    "ov_bad_rank": "model 'ov_bad_rank', tensor 'INPUT0': the model expects 2 dimensions "
    "(shape [-1,4]) but the model configuration specifies 3 dimensions",
    "ov_bad_streams": "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, "
    "got many",
    "ov_bad_hint": "expected the parameter 'PERFORMANCE_HINT' to be "
    "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast",
    "ov_bad_threads": "expected the parameter 'INFERENCE_NUM_THREADS' to be a non-negative "
    "number, got -2",
    "ov_bad_compile_threads": "Unsupported property COMPILATION_NUM_THREADS by CPU plugin",
    "ov_bad_bf16": "expected the parameter 'HINT_BF16' to be YES, got no",
    "ov_bad_gpu": "specifies KIND_GPU, but no GPUs are available",
    "ov_bad_extension": "loading custom CPU extensions",
    "ov_bad_device": "openvino error in loading model",
    "ov_bad_no_file": "unable to find '",
    "ov_bad_not_ir": "openvino error in reading model",
}


def _rows(proc: ServerProcess, protocol: str) -> dict[str, Any]:
    return index_rows(proc.url(protocol), protocol)


def test_every_load_error_names_its_reason(served: ServerProcess, protocol: str) -> None:
    rows = _rows(served, protocol)
    assert sorted(LOAD_ERRORS) == sorted(ov_models.bad_models())
    for name, reason in LOAD_ERRORS.items():
        assert rows[name]["state"] == "UNAVAILABLE", rows[name]
        assert reason in rows[name]["reason"], rows[name]
    assert all(rows[name]["state"] == "READY" for name in ov_models.good_models()), rows


@pytest.fixture(scope="module")
def without_openvino(
    tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> Iterator[ServerProcess]:
    """A server whose Python cannot import openvino: an ``openvino`` package first on its
    path that fails to import as a missing one does."""
    shadow = tmp_path_factory.mktemp("no_openvino")
    (shadow / "openvino").mkdir()
    (shadow / "openvino" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'openvino'\", name='openvino')\n"
    )
    small = tmp_path_factory.mktemp("no_openvino_repo")
    ov_models.write_model(small, "ov_no_batch", ov_models.good_models()["ov_no_batch"], cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))
        proc = ServerProcess([small], "--exit-on-error=false")
    yield proc
    proc.stop()


def test_a_missing_extra_is_named(without_openvino: ServerProcess, protocol: str) -> None:
    row = _rows(without_openvino, protocol)["ov_no_batch"]
    assert row["state"] == "UNAVAILABLE", row
    assert "backend 'openvino' is not available: No module named 'openvino'" in row["reason"]
    assert "pip install 'tritium[openvino]'" in row["reason"], row
