"""The PyTorch backend (TorchScript ``model.pt``) over the real server, HTTP and gRPC with the
official clients: every data type Triton's PyTorch backend maps (BYTES as List[str]), the
three ways inputs reach forward() (``INPUT__<i>``, forward()'s argument names, one
Dict[str, Tensor]), max_batch_size 0 and > 0, a dynamic batch that really forms (the
statistics say so), instances that run apart or share their weights, Triton's parameters, and
every load error with its reason; and a server whose Python cannot import torch names the
extra to install."""

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

torch_models = pytest.importorskip("tests.support.torch_models")

from tests.support.clients import client, index_rows, make_input  # noqa: E402
from testkit.server_process import ServerProcess  # noqa: E402

TYPES = torch_models.TYPES
BATCH_MODEL = torch_models.BATCH_MODEL


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pytorch") / "repo"
    torch_models.build(root, torch_models.good_models())
    torch_models.build(root, torch_models.bad_models())
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


def _type_input(protocol: str, index: int, wire: str) -> tuple[Any, np.ndarray]:
    if wire == "BYTES":
        array = np.array([b"ab", b"tritium", b""], dtype=object)
    elif wire == "BOOL":
        array = np.array([True, False, True])
    else:
        dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(wire)
        array = np.array([1, 2, 3], dtype=dtype or np.dtype(wire.lower()))
    return make_input(protocol, f"INPUT__{index}", array, wire), array


def test_every_data_type(served: ServerProcess, protocol: str) -> None:
    """pt_types: max_batch_size 0, one input per data type named INPUT__<i>; numbers come
    back plus one, booleans negated, strings upper-cased, each with its own datatype."""
    pairs = [_type_input(protocol, i, wire) for i, (_, wire) in enumerate(TYPES)]
    result = _infer(served, protocol, "pt_types", [p[0] for p in pairs])
    for index, ((_, wire), (_, sent)) in enumerate(zip(TYPES, pairs, strict=True)):
        got = result.as_numpy(f"OUTPUT__{index}")
        if wire == "BYTES":
            assert got.tolist() == [v.upper() for v in sent.tolist()]
        elif wire == "BOOL":
            assert got.tolist() == (~sent).tolist()
        else:
            assert got.dtype == sent.dtype, wire
            np.testing.assert_array_equal(got, sent + 1)


def test_forward_argument_names_with_a_batch(served: ServerProcess, protocol: str) -> None:
    """pt_add_sub (platform pytorch_libtorch): inputs named as forward()'s arguments, outputs
    in config order; a request of batch 3."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 2, dtype=np.float32)
    inputs = [make_input(protocol, "INPUT0", a, "FP32"), make_input(protocol, "INPUT1", b, "FP32")]
    result = _infer(served, protocol, "pt_add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_dictionary_input(served: ServerProcess, protocol: str) -> None:
    a = np.array([1, 2, 3], dtype=np.float32)
    b = np.array([4, 5, 6], dtype=np.float32)
    inputs = [make_input(protocol, "A", a, "FP32"), make_input(protocol, "B", b, "FP32")]
    result = _infer(served, protocol, "pt_dict", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a * b)


def test_default_model_filename_names_the_file(served: ServerProcess, protocol: str) -> None:
    x = np.array([1, 2, 3], dtype=np.float32)
    result = _infer(
        served, protocol, "pt_named_file", [make_input(protocol, "INPUT__0", x, "FP32")]
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * 2)


def _error(served: ServerProcess, protocol: str, model: str, x: np.ndarray) -> str:
    with pytest.raises(InferenceServerException) as caught:
        _infer(served, protocol, model, [make_input(protocol, "INPUT__0", x, "FP32")])
    return str(caught.value)


def test_an_error_in_forward_fails_the_request_and_the_model_serves_on(
    served: ServerProcess, protocol: str
) -> None:
    message = _error(served, protocol, "pt_raises", np.array([-1, 2], dtype=np.float32))
    assert "PyTorch execute failure: " in message and "negative input" in message, message
    x = np.array([1, 2], dtype=np.float32)
    result = _infer(served, protocol, "pt_raises", [make_input(protocol, "INPUT__0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x)


def test_an_output_of_another_datatype_than_configured_fails(
    served: ServerProcess, protocol: str
) -> None:
    message = _error(served, protocol, "pt_wrong_output_type", np.ones(2, dtype=np.float32))
    assert (
        "configuration expects datatype TYPE_INT64 for output 'OUTPUT__0', model provides "
        "TYPE_FP32" in message
    ), message


def test_metadata_reports_the_platform(served: ServerProcess, protocol: str) -> None:
    c = client(protocol, served.url(protocol))
    try:
        meta = c.get_model_metadata("pt_add_sub")
    finally:
        c.close()
    platform = meta["platform"] if protocol == "http" else meta.platform
    assert platform == "pytorch_libtorch"


def _aio(protocol: str) -> Any:
    return httpaio if protocol == "http" else grpcaio


async def _batch_sizes(protocol: str, c: Any) -> dict[int, int]:
    stats = await c.get_inference_statistics(BATCH_MODEL)
    if protocol == "http":
        rows = stats["model_stats"][0].get("batch_stats", [])
        return {int(r["batch_size"]): int(r["compute_infer"]["count"]) for r in rows}
    return {b.batch_size: b.compute_infer.count for b in stats.model_stats[0].batch_stats}


def test_a_dynamic_batch_forms_and_splits(served: ServerProcess, protocol: str) -> None:
    """Four concurrent requests of batch 1 run as one execution of batch 4 (statistics), and
    each gets its own rows back."""
    module = _aio(protocol)
    count = torch_models.BATCH_PREFERRED

    async def one(c: Any, k: int) -> Any:
        a = np.full((1, 4), k, dtype=np.float32)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            inp = module.InferInput(name, [1, 4], "FP32")
            inp.set_data_from_numpy(a)
            inputs.append(inp)
        return await c.infer(BATCH_MODEL, inputs)

    async def main() -> tuple[list[Any], dict[int, int]]:
        c = module.InferenceServerClient(served.url(protocol))
        try:
            before = await _batch_sizes(protocol, c)
            results = await asyncio.wait_for(asyncio.gather(*(one(c, k) for k in range(count))), 60)
            after = await _batch_sizes(protocol, c)
        finally:
            await c.close()
        return results, {
            n: after[n] - before.get(n, 0) for n in after if after[n] != before.get(n, 0)
        }

    results, grown = asyncio.run(main())
    for k, result in enumerate(results):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2 * k))
    assert grown == {count: 1}, grown


def test_implicit_state_across_a_sequence(served: ServerProcess, protocol: str) -> None:
    """pt_running_sum: the server feeds INPUT_STATE__1 the OUTPUT_STATE__1 of the previous
    step of the same sequence (zeros at START); two sequences interleaved keep apart."""
    c = client(protocol, served.url(protocol))
    rows = np.arange(1, 13, dtype=np.float32).reshape(3, 1, 4)
    totals: dict[int, np.ndarray] = {}
    try:
        for step, row in enumerate(rows):
            for seq, scale in ((41, 1.0), (42, 10.0)):
                result = c.infer(
                    "pt_running_sum",
                    [make_input(protocol, "INPUT__0", row * scale, "FP32")],
                    sequence_id=seq,
                    sequence_start=step == 0,
                    sequence_end=step == len(rows) - 1,
                )
                totals[seq] = result.as_numpy("OUTPUT__0")
    finally:
        c.close()
    np.testing.assert_array_equal(totals[41], rows.sum(axis=0))
    np.testing.assert_array_equal(totals[42], rows.sum(axis=0) * 10)


def _counts(served: ServerProcess, protocol: str, model: str, requests: int) -> list[int]:
    module = _aio(protocol)

    async def one(c: Any) -> int:
        inp = module.InferInput("INPUT__0", [1], "FP32")
        inp.set_data_from_numpy(np.ones(1, dtype=np.float32))
        return int((await c.infer(model, [inp])).as_numpy("OUTPUT__0")[0])

    async def main() -> list[int]:
        c = module.InferenceServerClient(served.url(protocol))
        try:
            return list(
                await asyncio.wait_for(asyncio.gather(*(one(c) for _ in range(requests))), 60)
            )
        finally:
            await c.close()

    return asyncio.run(main())


def _executions(served: ServerProcess, model: str) -> int:
    c = client("http", served.http_url)
    try:
        return int(c.get_inference_statistics(model)["model_stats"][0]["execution_count"])
    finally:
        c.close()


def test_instances_each_run_their_own_module(served: ServerProcess, protocol: str) -> None:
    """pt_counter has two instances, each with its own module counting its executions: with
    concurrent requests both run, so the highest count is below the model's executions."""
    counts = _counts(served, protocol, "pt_counter", 12)
    assert max(counts) < _executions(served, "pt_counter"), counts


def test_weight_sharing_gives_the_instances_one_module(
    served: ServerProcess, protocol: str
) -> None:
    """ENABLE_WEIGHT_SHARING: both instances of pt_counter_shared run one module, which counts
    every execution of the model."""
    counts = _counts(served, protocol, "pt_counter_shared", 12)
    assert max(counts) == _executions(served, "pt_counter_shared"), counts
    assert len(set(counts)) == len(counts), counts


def _modes(served: ServerProcess, protocol: str, model: str) -> list[int]:
    inp = make_input(protocol, "INPUT__0", np.ones(2, dtype=np.float32), "FP32")
    return list(_infer(served, protocol, model, [inp]).as_numpy("OUTPUT__0"))


def test_inference_mode_is_the_default(served: ServerProcess, protocol: str) -> None:
    """forward() runs with gradients off, in inference mode ([grad enabled, inference])."""
    assert _modes(served, protocol, "pt_modes") == [0, 1]


def test_parameters_apply(served: ServerProcess, protocol: str) -> None:
    """pt_modes_grad sets every parameter: INFERENCE_MODE false runs under no_grad (no
    inference tensors); the thread count is applied and logged; the GPU-only ones warn."""
    assert _modes(served, protocol, "pt_modes_grad") == [0, 0]
    log = served.log_text()
    assert "Intra op thread count is set to 1 for model 'pt_modes_grad'" in log
    assert "Inter op thread count is set to 1 for model 'pt_modes_grad'" in log
    for key in ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING"):
        assert f"field 'parameters.{key}': accepted but ignored" in log, log[-3000:]


def test_pytorch_2_parameter_names_load(served: ServerProcess, protocol: str) -> None:
    """NUM_THREADS / NUM_INTEROP_THREADS set the thread counts (logged as Triton logs
    INTRA_OP_THREAD_COUNT); TORCH_COMPILE_OPTIONAL_PARAMETERS loads with a warning."""
    assert _modes(served, protocol, "pt_pt2_names") == [0, 1]
    log = served.log_text()
    assert "Intra op thread count is set to 1 for model 'pt_pt2_names'" in log
    assert "Inter op thread count is set to 1 for model 'pt_pt2_names'" in log
    assert (
        "field 'parameters.TORCH_COMPILE_OPTIONAL_PARAMETERS': accepted but ignored: "
        "torch.compile options" in log
    ), log[-3000:]


LOAD_ERRORS = {
    "pt_bad_count": "unable to load model 'pt_bad_count', configuration expects 2 inputs, "
    "model provides 1",
    "pt_bad_type": "unsupported datatype TYPE_UINT32 for input 'INPUT__0' for model 'pt_bad_type'",
    "pt_bad_string_dims": "Triton only supports 1 dimensional List of String as input for "
    "'INPUT__0' for model 'pt_bad_string_dims'",
    "pt_bad_index": "input 'INPUT__3' is forward() argument 3, but the model takes 1 inputs",
    "pt_bad_argument": "An input of type 'IntType' was detected in the model ('n')",
    "pt_bad_no_file": "unable to find '",
    "pt_bad_not_torchscript": "failed to load model 'pt_bad_not_torchscript': ",
    "pt_bad_aoti": 'AOT Inductor packages (platform "torch_aoti", model.pt2) are not supported',
    "pt_bad_runtime": 'the PyTorch 2 Python runtime (backend pytorch with runtime "model.py") '
    "is not served",
    "pt_bad_bool": "failed to convert 'maybe' to boolean value for parameter 'INFERENCE_MODE'",
    "pt_bad_no_inputs": "unable to load model 'pt_bad_no_inputs', configuration expects 0 "
    "inputs, model provides 1",
}


def _rows(proc: ServerProcess, protocol: str) -> dict[str, Any]:
    return index_rows(proc.url(protocol), protocol)


def test_every_load_error_names_its_reason(served: ServerProcess, protocol: str) -> None:
    rows = _rows(served, protocol)
    assert sorted(LOAD_ERRORS) == sorted(torch_models.bad_models())
    for name, reason in LOAD_ERRORS.items():
        assert rows[name]["state"] == "UNAVAILABLE", rows[name]
        assert reason in rows[name]["reason"], rows[name]
    good = torch_models.good_models()
    assert all(rows[name]["state"] == "READY" for name in good), rows


def test_auto_complete_is_skipped_with_triton_warning(served: ServerProcess) -> None:
    assert (
        "skipping model configuration auto-complete for 'pt_types': not supported for "
        "pytorch backend" in served.log_text()
    )


@pytest.fixture(scope="module")
def without_torch(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose Python cannot import torch: a ``torch`` package first on its path that
    fails to import as a missing one does (the other models still serve)."""
    shadow = tmp_path_factory.mktemp("no_torch")
    (shadow / "torch").mkdir()
    (shadow / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    small = tmp_path_factory.mktemp("no_torch_repo")
    text, model = torch_models.good_models()["pt_dict"]
    torch_models.write_model(small, "pt_dict", text, model)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))
        proc = ServerProcess([small], "--exit-on-error=false")
    yield proc
    proc.stop()


def test_a_missing_extra_is_named(without_torch: ServerProcess, protocol: str) -> None:
    row = _rows(without_torch, protocol)["pt_dict"]
    assert row["state"] == "UNAVAILABLE", row
    assert "backend 'pytorch' is not available: No module named 'torch'" in row["reason"], row
    assert "pip install 'tritium[pytorch]'" in row["reason"], row
