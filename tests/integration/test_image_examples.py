"""Triton's image examples against the example repository: what ``image_client.py``,
``grpc_image_client.py`` and ``ensemble_image_client.py`` (triton-inference-server/client,
src/python/examples) send and check, reproduced step by step with tritonclient and grpcio.

Each client reads the model's metadata and config and checks the contract (one input, one
FP32 vector output, three image dims, NCHW or NHWC), preprocesses images with Pillow, asks for
the top classes with the classification extension and splits every answer into
``score:index:label``. The models have random weights (examples/image_models.py), so the
classes are checked against the model's own raw output (same request without classes) and
against the numpy reference of the weights, not against what the images show.
"""

from __future__ import annotations

import queue
import struct
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.model_config_pb2 as mc
from tests.support.clients import client, module
from image_models import DENSENET_LABELS, INCEPTION_LABELS, densenet_reference
from PIL import Image
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

CLASSES = 3
LABELS = {"densenet_onnx": DENSENET_LABELS, "inception_classifier": INCEPTION_LABELS}
# (model, batch size, scaling) as the examples' docs run them; densenet_onnx does not batch
# (Triton's config: max_batch_size 0), so batch 2 goes to the Inception classifier.
RUNS = [("densenet_onnx", 1, "INCEPTION"), ("inception_classifier", 2, "INCEPTION")]
WAIT_S = 60.0


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two test images of different sizes and formats, sorted by name as the clients sort."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    paths = []
    for name, size in (("a.jpg", (180, 240)), ("b.png", (300, 200))):
        pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name)
        paths.append(folder / name)
    return paths


@pytest.fixture
def c(server: ServerProcess, protocol: str) -> Any:
    conn = client(protocol, server.url(protocol))
    yield conn
    conn.close()


# ------------------------------------------------------------- what the clients do, step by step


def parse_model(c: Any, protocol: str, model: str) -> tuple[Any, ...]:
    """image_client.py's ``parse_model`` on the metadata and config the server returns."""
    if protocol == "grpc":
        meta, config = c.get_model_metadata(model), c.get_model_config(model).config
        inputs = [(i.name, i.datatype, list(i.shape)) for i in meta.inputs]
        outputs = [(o.name, o.datatype, list(o.shape)) for o in meta.outputs]
        max_batch, fmt, config_inputs = config.max_batch_size, config.input[0].format, config.input
    else:
        meta, config = c.get_model_metadata(model), c.get_model_config(model)
        inputs = [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]]
        outputs = [(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]]
        max_batch, config_inputs = config["max_batch_size"], config["input"]
        fmt = mc.ModelInput.Format.Value(config["input"][0]["format"])
    assert len(inputs) == 1 and len(outputs) == 1 and len(config_inputs) == 1
    (input_name, dtype, shape), (output_name, output_type, output_shape) = inputs[0], outputs[0]
    assert output_type == "FP32"
    assert sum(d > 1 for d in output_shape[(1 if max_batch > 0 else 0) :]) <= 1  # a vector
    batch_dim = 1 if max_batch > 0 else 0
    assert len(shape) == 3 + batch_dim
    assert fmt in (mc.ModelInput.FORMAT_NCHW, mc.ModelInput.FORMAT_NHWC)
    dims = shape[batch_dim:]
    chw = dims if fmt == mc.ModelInput.FORMAT_NCHW else [dims[2], dims[0], dims[1]]
    return max_batch, input_name, output_name, *chw, fmt, dtype


def preprocess(path: Path, fmt: int, dtype: str, chw: tuple[int, int, int], scaling: str) -> Any:
    """image_client.py's ``preprocess``: resize (bilinear), scale, order the channels."""
    c, h, w = chw
    img = Image.open(path)
    resized = np.array(img.convert("L" if c == 1 else "RGB").resize((w, h), Image.BILINEAR))
    if resized.ndim == 2:
        resized = resized[:, :, np.newaxis]
    typed = resized.astype(triton_to_np_dtype(dtype))
    if scaling == "INCEPTION":
        scaled = (typed / 127.5) - 1
    elif scaling == "VGG":
        scaled = typed - np.asarray((123, 117, 104), dtype=typed.dtype)
    else:
        scaled = typed
    return np.transpose(scaled, (2, 0, 1)) if fmt == mc.ModelInput.FORMAT_NCHW else scaled


def split_classes(result: Any) -> list[str]:
    """The clients' parsing of one classification entry: ``score:index:label``."""
    text = "".join(chr(x) for x in result) if isinstance(result, bytes) else result
    parts = text.split(":")
    assert len(parts) == 3, text
    return parts


def batches(data: list[Any], batch_size: int) -> list[list[int]]:
    """image_client.py's loop: batches of image indices, wrapping around, until every image
    has been sent once."""
    out, index, last = [], 0, False
    while not last:
        batch = []
        for _ in range(batch_size):
            batch.append(index)
            index = (index + 1) % len(data)
            last = last or index == 0
        out.append(batch)
    return out


# ------------------------------------------------------------------ checking the answers


def expected_classes(raw: np.ndarray, labels: tuple[str, ...]) -> list[list[str]]:
    """Top CLASSES of each row of the model's raw output, as Triton formats them."""
    rows = raw.reshape(raw.shape[0], -1) if raw.ndim > 1 else raw.reshape(1, -1)
    out = []
    for row in rows:
        order = sorted(range(row.size), key=lambda i: (-row[i], i))[:CLASSES]
        out.append([f"{float(row[i]):f}:{i}:{labels[i]}" for i in order])
    return out


def check_response(array: np.ndarray, batch: int, batching: bool, expected: list[Any]) -> None:
    """image_client.py's ``postprocess`` checks, then the strings against the raw output."""
    if batching:
        assert len(array) == batch
    rows = array if batching else [array]
    got = []
    for row in rows:
        parts = [split_classes(r.decode() if isinstance(r, bytes) else r) for r in row]
        got.append([":".join(p) for p in parts])
    assert got == expected


# ----------------------------------------------------------------------------- image_client


def _send(c: Any, protocol: str, mode: str, model: str, requests: list[tuple[Any, Any]]) -> list:
    """Every request the client's way (sync, async or streaming); the results in order."""
    if mode == "sync":
        return [c.infer(model, i, outputs=o) for i, o in requests]
    answers: queue.Queue[Any] = queue.Queue()
    if mode == "async" and protocol == "http":
        pending = [c.async_infer(model, i, outputs=o) for i, o in requests]
        return [p.get_result() for p in pending]
    if mode == "stream":
        c.start_stream(callback=lambda result, error: answers.put((result, error)))
    for n, (inputs, outputs) in enumerate(requests):
        if mode == "stream":
            c.async_stream_infer(model, inputs, outputs=outputs, request_id=str(n))
        else:
            c.async_infer(model, inputs, lambda result, error: answers.put((result, error)),
                          outputs=outputs, request_id=str(n))  # fmt: skip
    got = [answers.get(timeout=WAIT_S) for _ in requests]
    if mode == "stream":
        c.stop_stream()
    assert [error for _, error in got] == [None] * len(requests)
    by_id = {int(r.get_response().id): r for r, _ in got}
    return [by_id[n] for n in range(len(requests))]


def _image_client(c: Any, protocol: str, images: list[Path], mode: str, run: tuple) -> None:
    """image_client.py with ``-m model -b batch -s scaling -c 3`` over the test images."""
    model, batch, scaling = run
    max_batch, input_name, output_name, *chw, fmt, dtype = parse_model(c, protocol, model)
    batching = max_batch > 0
    data = [preprocess(p, fmt, dtype, tuple(chw), scaling) for p in images]
    mod = module(protocol)
    requests, raw_requests = [], []
    for indices in batches(data, batch):
        tensor = np.stack([data[i] for i in indices]) if batching else data[indices[0]]
        inputs = [mod.InferInput(input_name, list(tensor.shape), dtype)]
        inputs[0].set_data_from_numpy(tensor)
        requests.append((inputs, [mod.InferRequestedOutput(output_name, class_count=CLASSES)]))
        raw_requests.append((inputs, [mod.InferRequestedOutput(output_name)]))
    results = _send(c, protocol, mode, model, requests)
    raws = [c.infer(model, i, outputs=o).as_numpy(output_name) for i, o in raw_requests]
    for result, raw in zip(results, raws, strict=True):
        check_response(result.as_numpy(output_name), batch, batching,
                       expected_classes(raw, LABELS[model]))  # fmt: skip


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r[0]}-b{r[1]}")
def test_image_client(c: Any, protocol: str, images: list[Path], mode: str, run: tuple) -> None:
    _image_client(c, protocol, images, mode, run)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r[0]}-b{r[1]}")
def test_image_client_streaming(server: ServerProcess, images: list[Path], run: tuple) -> None:
    """``--streaming`` (gRPC only)."""
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        _image_client(c, "grpc", images, "stream", run)
    finally:
        c.close()


def test_densenet_matches_its_weights(c: Any, protocol: str, images: list[Path]) -> None:
    """densenet_onnx computes what examples/image_models.py says (fc6_1 reshaped to [1000])."""
    _, input_name, output_name, *chw, fmt, dtype = parse_model(c, protocol, "densenet_onnx")
    pixels = preprocess(images[0], fmt, dtype, tuple(chw), "INCEPTION")
    inputs = [module(protocol).InferInput(input_name, list(pixels.shape), dtype)]
    inputs[0].set_data_from_numpy(pixels)
    raw = c.infer("densenet_onnx", inputs).as_numpy(output_name)
    assert raw.shape == (1000,)
    np.testing.assert_allclose(raw, densenet_reference(pixels), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------- grpc_image_client


def _bytes_tensor(encoded: bytes) -> list[bytes]:
    """grpc_image_client.py's ``deserialize_bytes_tensor``."""
    out, offset = [], 0
    while offset < len(encoded):
        (length,) = struct.unpack_from("<I", encoded, offset)
        out.append(encoded[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return out


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r[0]}-b{r[1]}")
def test_grpc_image_client(
    server: ServerProcess, images: list[Path], streaming: bool, run: tuple
) -> None:
    """The generated gRPC stub, raw_input_contents and the int64 ``classification`` parameter,
    as grpc_image_client.py sends them."""
    model, batch, scaling = run
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        max_batch, input_name, output_name, *chw, fmt, dtype = parse_model(c, "grpc", model)
    finally:
        c.close()
    batching = max_batch > 0
    data = [preprocess(p, fmt, dtype, tuple(chw), scaling) for p in images]
    messages = []
    for indices in batches(data, batch):
        request = pb.ModelInferRequest(model_name=model)
        request.outputs.add(name=output_name).parameters["classification"].int64_param = CLASSES
        shape = [batch, *data[0].shape] if batching else list(data[0].shape)
        request.inputs.add(name=input_name, datatype=dtype, shape=shape)
        request.raw_input_contents.append(b"".join(data[i].tobytes() for i in indices))
        messages.append(request)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        if streaming:
            answers = list(stub.ModelStreamInfer(iter(messages), timeout=WAIT_S))
            assert [a.error_message for a in answers] == [""] * len(messages)
            responses = [a.infer_response for a in answers]
        else:
            responses = [stub.ModelInfer(m, timeout=WAIT_S) for m in messages]
        raws = [_raw_output(stub, m) for m in messages]
    for response, raw in zip(responses, raws, strict=True):
        assert len(response.raw_output_contents) == 1
        contents = np.reshape(
            np.array(_bytes_tensor(response.raw_output_contents[0]), dtype=object),
            list(response.outputs[0].shape),
        )
        check_response(contents, batch, batching, expected_classes(raw, LABELS[model]))


def _raw_output(stub: Any, message: Any) -> np.ndarray:
    """The same request without classes: the model's FP32 output."""
    plain = pb.ModelInferRequest()
    plain.CopyFrom(message)
    del plain.outputs[0].parameters["classification"]
    response = stub.ModelInfer(plain, timeout=WAIT_S)
    data = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
    return data.reshape(list(response.outputs[0].shape))


# --------------------------------------------------------------------- ensemble_image_client


def test_ensemble_image_client(c: Any, protocol: str, images: list[Path]) -> None:
    """preprocess_inception_ensemble with the files' bytes; each answer equals what the
    Inception classifier gives the same image preprocessed by the client ("-s INCEPTION")."""
    model = "preprocess_inception_ensemble"
    meta, config = c.get_model_metadata(model), c.get_model_config(model)
    if protocol == "grpc":
        inputs_meta, config_inputs = meta.inputs, config.config.input
        input_name, max_batch = meta.inputs[0].name, config.config.max_batch_size
        output_names = [o.name for o in meta.outputs]
    else:
        inputs_meta, config_inputs = meta["inputs"], config["input"]
        input_name, max_batch = meta["inputs"][0]["name"], config["max_batch_size"]
        output_names = [o["name"] for o in meta["outputs"]]
    assert len(inputs_meta) == 1 and len(config_inputs) == 1
    batch = min(len(images), max_batch)
    encoded = np.stack([np.array([p.read_bytes()], dtype=bytes) for p in images[:batch]])
    mod = module(protocol)
    inputs = [mod.InferInput(input_name, list(encoded.shape), "BYTES")]
    inputs[0].set_data_from_numpy(encoded)
    outputs = [mod.InferRequestedOutput(name, class_count=CLASSES) for name in output_names]
    result = c.infer(model, inputs, outputs=outputs)

    _, direct_input, direct_output, *chw, fmt, dtype = parse_model(
        c, protocol, "inception_classifier"
    )
    pixels = np.stack([preprocess(p, fmt, dtype, tuple(chw), "INCEPTION") for p in images])
    direct = [mod.InferInput(direct_input, list(pixels.shape), dtype)]
    direct[0].set_data_from_numpy(pixels.astype(np.float32))
    raw = c.infer("inception_classifier", direct).as_numpy(direct_output)
    for name in output_names:
        check_response(result.as_numpy(name), batch, True, expected_classes(raw, INCEPTION_LABELS))


def test_ensemble_bad_image(c: Any, protocol: str) -> None:
    inputs = [module(protocol).InferInput("INPUT", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[b"not an image"]], dtype=object))
    with pytest.raises(InferenceServerException) as caught:
        c.infer("preprocess_inception_ensemble", inputs)
    message = str(caught.value)
    want = "in ensemble 'preprocess_inception_ensemble', inception_preprocess: INPUT[0] (12 bytes)"
    assert want + " is not a JPEG or PNG image" in message, message
