"""Ensembles (``platform: "ensemble"``) over the real server, both protocols.

The example ensembles (``image_classifier``, ``two_tower``, ``cascade``) answer what their
composing models compute, checked against numpy references of the same weights (and Pillow
for the image decoding); only the ensemble's own outputs come back; independent steps run at
the same time; a failing step fails the request with Triton's "in ensemble '<E>', " followed
by the step's own error and nothing else; concurrent ensemble requests are batched by a
composing model's dynamic batcher; a decoupled first step streams one ensemble response per
response it sends; an ensemble may be a step of another; and in explicit model control an
ensemble loads its composing models, goes down with one of them and comes back with it.

The test ensembles are built by tests/support/ensemble_models.py. Expected values are computed here
from the inputs sent; nothing is timed against a speed.
"""

from __future__ import annotations

import asyncio
import io
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from build_models import composing_reference
from tests.support.clients import client, make_input, module
from tests.support.ensemble_models import WINDOW_SLEEP_S, build_ensemble_repository
from PIL import Image
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

WAIT_S = 30.0  # upper bound of any single wait for an answer
EXPLICIT = "--model-control-mode=explicit"
FINAL = "triton_final_response"
DECOUPLED = {
    "http": "HTTP end point doesn't support models with decoupled transaction policy",
    "grpc": "ModelInfer RPC doesn't support models with decoupled transaction policy",
}
STATUS = {  # error kind -> (HTTP status, gRPC status)
    "INVALID_ARG": ("400", "StatusCode.INVALID_ARGUMENT"),
    "INTERNAL": ("500", "StatusCode.INTERNAL"),
    "UNIMPLEMENTED": ("501", "StatusCode.UNIMPLEMENTED"),
}


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ensemble_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_ensemble_repository(tmp_path_factory.mktemp("ensembles") / "repo")


@pytest.fixture(scope="module")
def srv(example_repo: Path, ensemble_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([example_repo, ensemble_repo])
    try:
        proc.wait_live(60.0, endpoint="ready")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def c(srv: ServerProcess, protocol: str) -> Iterator[Any]:
    conn = client(protocol, srv.url(protocol))
    yield conn
    conn.close()


# ----------------------------------------------------------------------------------- helpers
def infer(c: Any, protocol: str, model: str, inputs: dict[str, tuple], **kw: Any) -> Any:
    """``inputs``: {name: (array, datatype)}; ``outputs``: requested output names."""
    outputs = kw.pop("outputs", None)
    if outputs is not None:
        kw["outputs"] = [module(protocol).InferRequestedOutput(n) for n in outputs]
    tensors = [make_input(protocol, n, a, dt) for n, (a, dt) in inputs.items()]
    return c.infer(model, tensors, **kw)


def output_names(result: Any, protocol: str) -> list[str]:
    response = result.get_response()
    if protocol == "http":
        return [o["name"] for o in response["outputs"]]
    return [o.name for o in response.outputs]


def expect_error(protocol: str, kind: str, call: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kw)
    assert info.value.status() == STATUS[kind][protocol == "grpc"], str(info.value)
    return info.value.message()


def config(c: Any, protocol: str, model: str) -> dict[str, Any]:
    if protocol == "http":
        return c.get_model_config(model)
    return c.get_model_config(model, as_json=True)["config"]


def int32_pair(batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)
    return a, rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)


# ------------------------------------------------------------------ image_classifier example
def _image_bytes() -> dict[str, bytes]:
    """A PNG (RGB), a JPEG (RGB) and a grayscale PNG, none of them 64x64."""
    y, x = np.mgrid[0:48, 0:80]
    rgb = np.stack([x * 3, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    rng = np.random.default_rng(5)
    photo = rng.integers(0, 256, (72, 40, 3), dtype=np.uint8)
    gray = ((x * y) % 251).astype(np.uint8)
    images = {}
    for name, array, fmt in (("png", rgb, "PNG"), ("jpeg", photo, "JPEG"), ("gray", gray, "PNG")):
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format=fmt)
        images[name] = buffer.getvalue()
    return images


def _expected_labels(images: list[bytes], labels: list[str]) -> list[list[tuple[float, int]]]:
    """Per image the top 3 (probability, index), decoded and normalized as documented."""
    mean = np.array([0.485, 0.456, 0.406])
    std = np.array([0.229, 0.224, 0.225])
    pixels = []
    for data in images:
        with Image.open(io.BytesIO(data)) as image:
            rgb = np.asarray(image.convert("RGB").resize((64, 64), Image.BILINEAR), np.float64)
        pixels.append(((rgb / 255.0 - mean) / std).transpose(2, 0, 1))
    probabilities = composing_reference("classifier", np.stack(pixels).astype(np.float32))
    expected = []
    for row in probabilities:
        order = np.argsort(-row, kind="stable")
        assert row[order[2]] - row[order[3]] > 1e-5, "top 3 too close to call"
        assert min(np.diff(-row[order[:3]])) > 1e-5, "top 3 order too close to call"
        expected.append([(float(row[i]), int(i)) for i in order[:3]])
    assert len(labels) == probabilities.shape[1]
    return expected


def _check_labels(got: np.ndarray, expected: list[list[tuple[float, int]]], labels: list[str]):
    assert got.shape == (len(expected), 3) and got.dtype == np.object_
    for row, want in zip(got, expected, strict=True):
        for entry, (probability, index) in zip(row, want, strict=True):
            text, idx, label = entry.decode().split(":")
            assert (int(idx), label) == (index, labels[index]), entry
            assert len(text.split(".")[1]) == 6, f"not %.6f: {entry!r}"
            assert abs(float(text) - probability) < 2e-6, (entry, probability)


def test_image_classifier(c: Any, protocol: str, example_repo: Path) -> None:
    labels = (example_repo / "postprocess" / "labels.txt").read_text().split()
    images = _image_bytes()
    batch = list(images.values())
    expected = _expected_labels(batch, labels)
    result = infer(
        c,
        protocol,
        "image_classifier",
        {"IMAGE": (np.array([[b] for b in batch], object), "BYTES")},
    )
    _check_labels(result.as_numpy("LABELS"), expected, labels)
    assert output_names(result, protocol) == ["LABELS"]
    for data, want in zip(batch, expected, strict=True):  # one image per request, too
        one = infer(
            c, protocol, "image_classifier", {"IMAGE": (np.array([[data]], object), "BYTES")}
        )
        _check_labels(one.as_numpy("LABELS"), [want], labels)


def test_image_classifier_bad_image_names_the_step(c: Any, protocol: str) -> None:
    garbage = np.array([[b"not an image"]], dtype=np.object_)
    message = expect_error(
        protocol,
        "INVALID_ARG",
        infer,
        c,
        protocol,
        "image_classifier",
        {"IMAGE": (garbage, "BYTES")},
    )
    assert message.startswith("in ensemble 'image_classifier', preprocess: IMAGE[0]"), message
    assert "IMAGE[0]" in message and "not a JPEG or PNG image" in message


# --------------------------------------------------------------------- two_tower and cascade
def _two_tower_expected(user: np.ndarray, item: np.ndarray) -> np.ndarray:
    return composing_reference(
        "tower_join",
        composing_reference("user_tower", user),
        composing_reference("item_tower", item),
    )


def test_two_tower(c: Any, protocol: str) -> None:
    rng = np.random.default_rng(3)
    user = rng.standard_normal((5, 16), dtype=np.float32)
    item = rng.standard_normal((5, 16), dtype=np.float32)
    result = infer(
        c, protocol, "two_tower", {"USER_FEATURES": (user, "FP32"), "ITEM_FEATURES": (item, "FP32")}
    )
    want = _two_tower_expected(user, item)
    score = result.as_numpy("SCORE")
    assert score.dtype == np.float32 and score.shape == (5, 1)
    np.testing.assert_allclose(score, want, rtol=1e-5, atol=1e-5)
    assert output_names(result, protocol) == ["SCORE"]


def _cascade_candidates(rows: int, positive: bool, seed: int) -> np.ndarray:
    """``rows`` candidates whose cheap scores are clearly away from 0 and of either sign
    (``positive``), or all clearly below 0 (not ``positive``)."""
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal((400, 16), dtype=np.float32)
    scores = composing_reference("cheap_scorer", pool)
    keep = (scores < -0.05) if not positive else (np.abs(scores) > 0.05)
    chosen = pool[keep][:rows]
    assert len(chosen) == rows
    return chosen


def _cascade_expected(candidates: np.ndarray, threshold: float, max_keep: int):
    scores = composing_reference("cheap_scorer", candidates)
    above = np.flatnonzero(scores > threshold)
    order = above[np.argsort(-scores[above], kind="stable")][:max_keep]
    gaps = np.diff(-scores[above][np.argsort(-scores[above])])
    assert gaps.size == 0 or gaps.min() > 1e-4, "scores too close to order reliably"
    if order.size:
        relevance = composing_reference("expensive_ranker", candidates[order])
    else:
        relevance = np.zeros(0)
    return order.astype(np.int64), relevance


@pytest.mark.parametrize("case", ["some_pass", "none_pass", "no_rows"])
def test_cascade(c: Any, protocol: str, case: str) -> None:
    params = config(c, protocol, "select_candidates")["parameters"]
    threshold = float(params["THRESHOLD"]["string_value"])
    max_keep = int(params["MAX_KEEP"]["string_value"])
    candidates = {
        "some_pass": _cascade_candidates(12, True, 1),
        "none_pass": _cascade_candidates(6, False, 2),
        "no_rows": np.zeros((0, 16), np.float32),
    }[case]
    indices, relevance = _cascade_expected(candidates, threshold, max_keep)
    if case == "some_pass":
        assert indices.size == max_keep, "the case must select more than it keeps"
    else:
        assert indices.size == 0
    result = infer(c, protocol, "cascade", {"CANDIDATES": (candidates, "FP32")})
    got_indices, got_relevance = result.as_numpy("INDICES"), result.as_numpy("RELEVANCE")
    assert got_indices.dtype == np.int64 and got_relevance.dtype == np.float32
    assert got_indices.shape == indices.shape and got_relevance.shape == indices.shape
    np.testing.assert_array_equal(got_indices, indices)
    np.testing.assert_allclose(got_relevance, relevance, rtol=1e-5, atol=1e-5)
    assert sorted(output_names(result, protocol)) == ["INDICES", "RELEVANCE"]


def test_the_three_patterns_through_the_asyncio_clients(
    srv: ServerProcess, protocol: str, example_repo: Path
) -> None:
    """image_classifier, two_tower and cascade at once, several requests each, through
    tritonclient's asyncio clients; every answer checked against its own reference."""
    aio = httpaio if protocol == "http" else grpcaio
    labels = (example_repo / "postprocess" / "labels.txt").read_text().split()
    images = list(_image_bytes().values())
    rng = np.random.default_rng(8)
    towers = [rng.standard_normal((2, 16), dtype=np.float32) for _ in range(6)]
    candidates = [_cascade_candidates(12, True, seed) for seed in (1, 3, 4)]

    def tensor(name: str, array: np.ndarray, datatype: str) -> Any:
        inp = aio.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        return inp

    async def main() -> tuple[list, list, list, dict]:
        conn = aio.InferenceServerClient(srv.url(protocol))
        try:
            kw = {"as_json": True} if protocol == "grpc" else {}
            params = await conn.get_model_config("select_candidates", **kw)
            params = (params["config"] if protocol == "grpc" else params)["parameters"]
            image_calls = [
                conn.infer(
                    "image_classifier",
                    [tensor("IMAGE", np.array([[data]], object), "BYTES")],
                )
                for data in images
            ]
            tower_calls = [
                conn.infer(
                    "two_tower",
                    [tensor("USER_FEATURES", u, "FP32"), tensor("ITEM_FEATURES", u[::-1], "FP32")],
                )
                for u in towers
            ]
            cascade_calls = [
                conn.infer("cascade", [tensor("CANDIDATES", cand, "FP32")]) for cand in candidates
            ]
            everything = await asyncio.gather(*image_calls, *tower_calls, *cascade_calls)
            a, b = len(image_calls), len(image_calls) + len(tower_calls)
            return everything[:a], everything[a:b], everything[b:], params
        finally:
            await conn.close()

    image_results, tower_results, cascade_results, params = asyncio.run(
        asyncio.wait_for(main(), WAIT_S)
    )
    for data, result in zip(images, image_results, strict=True):
        _check_labels(result.as_numpy("LABELS"), _expected_labels([data], labels), labels)
    for user, result in zip(towers, tower_results, strict=True):
        want = _two_tower_expected(user, user[::-1])
        np.testing.assert_allclose(result.as_numpy("SCORE"), want, rtol=1e-5, atol=1e-5)
    threshold = float(params["THRESHOLD"]["string_value"])
    max_keep = int(params["MAX_KEEP"]["string_value"])
    for cand, result in zip(candidates, cascade_results, strict=True):
        indices, relevance = _cascade_expected(cand, threshold, max_keep)
        np.testing.assert_array_equal(result.as_numpy("INDICES"), indices)
        np.testing.assert_allclose(result.as_numpy("RELEVANCE"), relevance, rtol=1e-5, atol=1e-5)


def test_metadata_and_config(c: Any, protocol: str) -> None:
    kw = {"as_json": True} if protocol == "grpc" else {}
    meta = c.get_model_metadata("image_classifier", **kw)
    assert meta["platform"] == "ensemble" and meta["versions"] == ["1"]
    io_of = {
        k: [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta[k]]
        for k in ("inputs", "outputs")
    }
    assert io_of == {
        "inputs": [("IMAGE", "BYTES", [-1, 1])],
        "outputs": [("LABELS", "BYTES", [-1, 3])],
    }
    cfg = config(c, protocol, "image_classifier")
    assert cfg["name"] == "image_classifier" and cfg["platform"] == "ensemble"
    assert int(cfg["max_batch_size"]) == 8
    steps = cfg["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["preprocess", "classifier", "postprocess"]
    assert steps[1]["input_map"] == {"PIXELS": "pixels"}
    assert steps[1]["output_map"] == {"PROBABILITIES": "probabilities"}
    assert [(t["name"], t["data_type"]) for t in cfg["input"]] == [("IMAGE", "TYPE_STRING")]
    assert not cfg.get("model_transaction_policy", {}).get("decoupled", False)
    assert c.is_model_ready("image_classifier")


# --------------------------------------------------------------------- intermediate tensors
def test_only_ensemble_outputs_are_returned(c: Any, protocol: str) -> None:
    a, b = int32_pair(2, 7)
    inputs = {"A": (a, "INT32"), "B": (b, "INT32")}
    both = infer(c, protocol, "sum_diff", inputs)
    assert sorted(output_names(both, protocol)) == ["DIFF", "SUM"]
    np.testing.assert_array_equal(both.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(both.as_numpy("DIFF"), a - b)
    for name, want in (("SUM", a + b), ("DIFF", a - b)):
        one = infer(c, protocol, "sum_diff", inputs, outputs=[name])
        assert output_names(one, protocol) == [name]
        np.testing.assert_array_equal(one.as_numpy(name), want)


@pytest.mark.parametrize(
    ("model", "tensor", "inputs"),
    [
        ("image_classifier", "pixels", {"IMAGE": (np.array([[b"x"]], object), "BYTES")}),
        ("image_classifier", "probabilities", {"IMAGE": (np.array([[b"x"]], object), "BYTES")}),
        ("cascade", "scores", {"CANDIDATES": (np.zeros((1, 16), np.float32), "FP32")}),
    ],
)
def test_intermediate_tensor_cannot_be_requested(
    c: Any, protocol: str, model: str, tensor: str, inputs: dict[str, tuple]
) -> None:
    message = expect_error(
        protocol, "INVALID_ARG", infer, c, protocol, model, inputs, outputs=[tensor]
    )
    assert message == f"unexpected inference output '{tensor}' for model '{model}'"


# ------------------------------------------------------------------------- parallel steps
def test_independent_steps_overlap(c: Any, protocol: str) -> None:
    result = infer(c, protocol, "parallel_windows", {"X": (np.ones(1, np.float32), "FP32")})
    (start_a, end_a), (start_b, end_b) = result.as_numpy("WINDOW_A"), result.as_numpy("WINDOW_B")
    assert start_a < end_a and start_b < end_b
    assert start_a < end_b and start_b < end_a, (
        f"steps ran one after the other: a [{start_a}, {end_a}], b [{start_b}, {end_b}]"
    )


# ---------------------------------------------------------------------------- failing step
def test_failing_step_fails_the_request(c: Any, protocol: str) -> None:
    data = {"INPUT0": (np.arange(3, dtype=np.float32), "FP32")}
    message = expect_error(protocol, "INTERNAL", infer, c, protocol, "failing_chain", data)
    # Triton (EnsembleContext::FinishEnsemble): "in ensemble 'E', " + the step's own error,
    # exactly what the composing model answers when asked directly.
    own = expect_error(protocol, "INTERNAL", infer, c, protocol, "raises", data)
    assert "boom from model" in own
    assert message == f"in ensemble 'failing_chain', {own}"
    # The server keeps serving: the ensemble's good first step alone, and another ensemble.
    a, b = int32_pair(1, 11)
    result = infer(c, protocol, "sum_diff", {"A": (a, "INT32"), "B": (b, "INT32")})
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    copy = infer(c, protocol, "identity_fp32", data)
    np.testing.assert_array_equal(copy.as_numpy("OUTPUT0"), data["INPUT0"][0])
    assert c.is_server_live() and c.is_model_ready("failing_chain")


def _response_parameters(result: Any, protocol: str) -> dict[str, Any]:
    response = result.get_response()
    if protocol == "http":
        return dict(response.get("parameters", {}))
    values = {}
    for key, value in response.parameters.items():
        values[key] = getattr(value, value.WhichOneof("parameter_choice"))
    return values


def test_answers_carry_the_sequence_parameters(c: Any, protocol: str) -> None:
    # Triton's ensemble answers carry sequence_id/sequence_start/sequence_end as the
    # request gave them (qa/L0_simple_ensemble test_ensemble_sequence_flags reads them).
    a, b = int32_pair(3, 4)
    data = {"A": (a, "INT32"), "B": (b, "INT32")}
    plain = _response_parameters(infer(c, protocol, "sum_diff", data), protocol)
    assert plain == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    first = infer(c, protocol, "sum_diff", data, sequence_id=7, sequence_start=True)
    params = _response_parameters(first, protocol)
    assert params == {"sequence_id": 7, "sequence_start": True, "sequence_end": False}
    last = infer(c, protocol, "sum_diff", data, sequence_id="s-1", sequence_end=True)
    params = _response_parameters(last, protocol)
    assert params == {"sequence_id": "s-1", "sequence_start": False, "sequence_end": True}


def test_a_tensor_a_step_did_not_produce_is_left_out(c: Any, protocol: str) -> None:
    # Triton: a step's missing output is an empty placeholder; the next step runs without it
    # (its input is optional) and the ensemble's answer leaves it out.
    data = {"INPUT0": (np.array([2.5], dtype=np.float32), "FP32")}
    result = infer(c, protocol, "optional_chain", data, outputs=["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data["INPUT0"][0])
    both = infer(c, protocol, "optional_chain", data)
    assert both.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(both.as_numpy("OUTPUT0"), data["INPUT0"][0])
    # A config without "name:" is named after its directory, in errors too.
    bad = {"INPUT1": (np.array([-1.0], dtype=np.float32), "FP32")}
    message = expect_error(protocol, "INTERNAL", infer, c, protocol, "optional_chain", bad)
    own = expect_error(protocol, "INTERNAL", infer, c, protocol, "optional_echo", bad)
    assert message == f"in ensemble 'optional_chain', {own}"


# ----------------------------------------------------------------------------- cancellation
def test_a_client_that_goes_away_stops_the_later_steps(srv: ServerProcess, protocol: str) -> None:
    """slow_chain = window_a (sleeps) -> stamp. The client gives up while window_a runs:
    window_a finishes, but stamp never runs and the ensemble counts no success."""
    aio = httpaio if protocol == "http" else grpcaio
    kw = {"as_json": True} if protocol == "grpc" else {}

    async def main() -> tuple[list[dict], list[dict]]:
        conn = aio.InferenceServerClient(srv.url(protocol))
        try:

            async def stats() -> list[dict]:
                models = ("window_a", "stamp", "slow_chain")
                return [_parse_stats(await conn.get_inference_statistics(m, **kw)) for m in models]

            before = await stats()
            inp = aio.InferInput("X", [1], "FP32")
            inp.set_data_from_numpy(np.ones(1, np.float32))
            call = asyncio.ensure_future(conn.infer("slow_chain", [inp]))
            await asyncio.sleep(WINDOW_SLEEP_S / 4)  # window_a is running now
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            deadline = time.monotonic() + WAIT_S
            after = await stats()
            while after[0]["inference_count"] == before[0]["inference_count"]:
                assert time.monotonic() < deadline, "window_a never finished"
                await asyncio.sleep(0.05)
                after = await stats()
            await asyncio.sleep(0.3)  # time enough for a wrongly started stamp to show
            after = await stats()
            return before, after
        finally:
            await conn.close()

    (w0, s0, e0), (w1, s1, e1) = asyncio.run(asyncio.wait_for(main(), WAIT_S))
    assert w1["inference_count"] == w0["inference_count"] + 1
    assert s1["inference_count"] == s0["inference_count"], "stamp ran for a cancelled request"
    assert e1["success"] == e0["success"]
    assert e1["fail"] == e0["fail"] + 1  # counted as a cancelled request once it ended
    # A request that stays gets its answer through both steps.
    conn = client(protocol, srv.url(protocol))
    try:
        result = infer(conn, protocol, "slow_chain", {"X": (np.ones(1, np.float32), "FP32")})
    finally:
        conn.close()
    start, end = result.as_numpy("STAMP")
    assert start < end


# -------------------------------------------------------- batching inside a composing model
def test_concurrent_requests_batch_in_a_composing_model(srv: ServerProcess, protocol: str) -> None:
    n = 24
    aio = httpaio if protocol == "http" else grpcaio
    sent = [np.full((1, 4), i, dtype=np.float32) + np.arange(4, dtype=np.float32) for i in range(n)]

    async def one(conn: Any, x: np.ndarray) -> np.ndarray:
        inp = aio.InferInput("X", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        return (await conn.infer("batched_affine", [inp])).as_numpy("Y")

    async def main() -> tuple[list[np.ndarray], dict, dict, dict, dict]:
        conn = aio.InferenceServerClient(srv.url(protocol))
        try:
            kw = {"as_json": True} if protocol == "grpc" else {}

            async def read(model: str) -> dict:
                return await conn.get_inference_statistics(model, **kw)

            before = (await read("batched_affine"), await read("batch_affine"))
            results = await asyncio.gather(*(one(conn, x) for x in sent))
            after = (await read("batched_affine"), await read("batch_affine"))
            return list(results), *before, *after
        finally:
            await conn.close()

    results, ens0, comp0, ens1, comp1 = asyncio.run(asyncio.wait_for(main(), WAIT_S))
    for x, y in zip(sent, results, strict=True):
        np.testing.assert_array_equal(y, x * 2 + 1)
    ens0, comp0, ens1, comp1 = (_parse_stats(s) for s in (ens0, comp0, ens1, comp1))
    assert ens1["success"] - ens0["success"] == n
    assert comp1["inference_count"] - comp0["inference_count"] == n
    executions = comp1["execution_count"] - comp0["execution_count"]
    assert 0 < executions < n, f"{n} ensemble requests took {executions} executions"
    grown = {s: k - comp0["batches"].get(s, 0) for s, k in comp1["batches"].items()}
    assert any(size > 1 and count > 0 for size, count in grown.items()), comp1["batches"]


def _parse_stats(raw: dict[str, Any]) -> dict[str, Any]:
    (entry,) = raw["model_stats"]
    return {
        "inference_count": int(entry.get("inference_count", 0)),
        "execution_count": int(entry.get("execution_count", 0)),
        "success": int(entry["inference_stats"]["success"].get("count", 0)),
        "fail": int(entry["inference_stats"]["fail"].get("count", 0)),
        "batches": {
            int(b["batch_size"]): int(b["compute_infer"].get("count", 0))
            for b in entry.get("batch_stats", [])
        },
    }


# -------------------------------------------------------------------- decoupled first step
class _Responses:
    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def until_final(self, ids: set[str]) -> dict[str, list[Any]]:
        got: dict[str, list[Any]] = {i: [] for i in ids}
        pending = set(ids)
        deadline = time.monotonic() + WAIT_S
        while pending:
            try:
                result, error = self.items.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                pytest.fail(f"no final response for {sorted(pending)} within {WAIT_S}s")
            assert error is None, str(error)
            response = result.get_response()
            assert response.id in pending, f"unexpected response for {response.id!r}"
            got[response.id].append(result)
            if response.parameters[FINAL].bool_param:
                pending.discard(response.id)
        return got


def _check_squares(results: list[Any], n: int) -> None:
    """``n`` data responses with exactly INDEX = [i] and SQUARE = [i*i], i = 0..n-1 in any
    order (each flow finishes its second step on its own)."""
    assert len(results) == n, [r.get_response() for r in results]
    seen = []
    for result in results:
        index, square = result.as_numpy("INDEX"), result.as_numpy("SQUARE")
        assert index.dtype == np.int32 and index.shape == (1,) and square.shape == (1,)
        np.testing.assert_array_equal(square, index * index)
        seen.append(int(index[0]))
        assert sorted(o.name for o in result.get_response().outputs) == ["INDEX", "SQUARE"]
    assert sorted(seen) == list(range(n))


def test_decoupled_step_streams_through_the_ensemble(srv: ServerProcess) -> None:
    counts = {"five": 5, "one": 1, "zero": 0}
    conn = grpcclient.InferenceServerClient(srv.grpc_url)
    responses = _Responses()
    conn.start_stream(responses)
    try:
        for rid, n in counts.items():
            inputs = [make_input("grpc", "N", np.array([n], np.int32), "INT32")]
            conn.async_stream_infer(
                "streamed_squares", inputs, request_id=rid, enable_empty_final_response=True
            )
        got = responses.until_final(set(counts))
    finally:
        conn.stop_stream(cancel_requests=True)
        conn.close()
    for rid, n in counts.items():
        *data, final = got[rid]
        for result in data:
            response = result.get_response()
            assert response.model_name == "streamed_squares" and response.model_version == "1"
            assert response.parameters[FINAL].bool_param is False
        _check_squares(data, n)
        empty = final.get_response()
        assert empty.id == rid and len(empty.outputs) == 0, empty


def test_decoupled_ensemble_with_aio_stream_infer(srv: ServerProcess) -> None:
    counts = {"a": 3, "b": 4}

    async def requests() -> Any:
        for rid, n in counts.items():
            tensor = grpcaio.InferInput("N", [1], "INT32")
            tensor.set_data_from_numpy(np.array([n], np.int32))
            yield {"model_name": "streamed_squares", "inputs": [tensor], "request_id": rid}

    async def main() -> dict[str, list[Any]]:
        got: dict[str, list[Any]] = {rid: [] for rid in counts}
        async with grpcaio.InferenceServerClient(srv.grpc_url) as conn:
            async for result, error in conn.stream_infer(requests(), stream_timeout=WAIT_S):
                assert error is None, str(error)
                got[result.get_response().id].append(result)
        return got

    got = asyncio.run(asyncio.wait_for(main(), WAIT_S))
    for rid, n in counts.items():
        _check_squares(got[rid], n)


def test_decoupled_ensemble_refuses_unary_infer(c: Any, protocol: str) -> None:
    cfg = config(c, protocol, "streamed_squares")
    assert cfg["model_transaction_policy"]["decoupled"] is True
    data = {"N": (np.array([2], np.int32), "INT32")}
    message = expect_error(protocol, "UNIMPLEMENTED", infer, c, protocol, "streamed_squares", data)
    assert message == DECOUPLED[protocol]


# ------------------------------------------------------------------------- nested ensemble
def test_nested_ensemble(c: Any, protocol: str) -> None:
    a, b = int32_pair(3, 13)
    result = infer(c, protocol, "nested_sum_diff", {"A": (a, "INT32"), "B": (b, "INT32")})
    s, d = a + b, a - b  # the inner ensemble, then add_sub_python over its outputs
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), s + d)
    np.testing.assert_array_equal(result.as_numpy("TWICE_B"), s - d)
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * a)
    assert sorted(output_names(result, protocol)) == ["TWICE_A", "TWICE_B"]


# ------------------------------------------------------------ explicit model control
@pytest.fixture
def explicit(example_repo: Path, ensemble_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([example_repo, ensemble_repo], EXPLICIT)
    yield proc
    proc.stop()


def _ready(c: Any, *names: str) -> dict[str, bool]:
    return {name: bool(c.is_model_ready(name)) for name in names}


def _two_tower_works(c: Any, protocol: str) -> None:
    user = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    item = np.linspace(1, -2, 16, dtype=np.float32).reshape(1, 16)
    result = infer(
        c, protocol, "two_tower", {"USER_FEATURES": (user, "FP32"), "ITEM_FEATURES": (item, "FP32")}
    )
    want = _two_tower_expected(user, item)
    np.testing.assert_allclose(result.as_numpy("SCORE"), want, rtol=1e-5, atol=1e-5)


def test_explicit_ensemble_loads_and_follows_its_composing_models(
    explicit: ServerProcess, protocol: str
) -> None:
    parts = ("user_tower", "item_tower", "tower_join")
    conn = client(protocol, explicit.url(protocol))
    try:
        assert _ready(conn, "two_tower", *parts) == dict.fromkeys(("two_tower", *parts), False)
        conn.load_model("two_tower")
        assert _ready(conn, "two_tower", *parts) == dict.fromkeys(("two_tower", *parts), True)
        assert not conn.is_model_ready("image_classifier")  # only what two_tower needs
        _two_tower_works(conn, protocol)

        conn.unload_model("tower_join")
        assert _ready(conn, "two_tower", *parts) == {
            "two_tower": False,
            "user_tower": True,
            "item_tower": True,
            "tower_join": False,
        }
        with pytest.raises(InferenceServerException):
            _two_tower_works(conn, protocol)

        conn.load_model("tower_join")  # the ensemble is reloaded with it
        assert _ready(conn, "two_tower", *parts) == dict.fromkeys(("two_tower", *parts), True)
        _two_tower_works(conn, protocol)
    finally:
        conn.close()


def test_explicit_nested_ensemble_chain(explicit: ServerProcess, protocol: str) -> None:
    chain = ("nested_sum_diff", "sum_diff", "add_sub_python")
    conn = client(protocol, explicit.url(protocol))
    a, b = int32_pair(1, 17)
    data = {"A": (a, "INT32"), "B": (b, "INT32")}
    try:
        conn.load_model("nested_sum_diff")  # loads the inner ensemble and its model
        assert _ready(conn, *chain) == dict.fromkeys(chain, True)
        conn.unload_model("add_sub_python")  # both ensembles go with it
        assert _ready(conn, *chain) == dict.fromkeys(chain, False)
        conn.load_model("add_sub_python")  # and both come back
        assert _ready(conn, *chain) == dict.fromkeys(chain, True)
        result = infer(conn, protocol, "nested_sum_diff", data)
        np.testing.assert_array_equal(result.as_numpy("TWICE_B"), 2 * b)
    finally:
        conn.close()


def test_explicit_reloading_an_ensemble_reloads_its_unloaded_composing_models(
    explicit: ServerProcess, protocol: str
) -> None:
    models = ("two_tower", "user_tower", "item_tower", "tower_join")
    conn = client(protocol, explicit.url(protocol))
    try:
        conn.load_model("two_tower")
        conn.unload_model("two_tower", unload_dependents=True)
        assert _ready(conn, *models) == dict.fromkeys(models, False)
        conn.load_model("two_tower")  # tritium: "... depends on 'item_tower' ... unloaded"
        assert _ready(conn, *models) == dict.fromkeys(models, True)
        _two_tower_works(conn, protocol)
    finally:
        conn.close()
