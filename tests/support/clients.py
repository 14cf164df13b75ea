"""Thin helpers over the official tritonclient, the same calls for HTTP and gRPC."""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def module(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def client(protocol: str, url: str, **kwargs: Any) -> Any:
    return module(protocol).InferenceServerClient(url, **kwargs)


def make_input(
    protocol: str, name: str, array: np.ndarray, datatype: str, binary: bool = True
) -> Any:
    inp = module(protocol).InferInput(name, list(array.shape), datatype)
    if protocol == "http":
        inp.set_data_from_numpy(array, binary_data=binary)
    else:
        inp.set_data_from_numpy(array)
    return inp


def add_sub_inputs(
    protocol: str, binary: bool = True, batch: int = 1
) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    return (
        [
            make_input(protocol, "INPUT0", a, "INT32", binary),
            make_input(protocol, "INPUT1", b, "INT32", binary),
        ],
        a,
        b,
    )


def assert_simple_works(c: Any, protocol: str) -> None:
    """A good ``simple`` inference: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    inputs, a, b = add_sub_inputs(protocol)
    result = c.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def simple_grpc_infer_client(c: Any, compression: str | None = None) -> None:
    """What Triton's ``simple_grpc_infer_client.py`` does with a ``tritonclient.grpc`` client:
    ``simple`` with OUTPUT0/OUTPUT1 requested (and a ``test`` header), the model's statistics,
    then ``simple`` with no outputs named; each sum and difference checked."""
    inputs, a, b = add_sub_inputs("grpc")
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    result = c.infer(
        "simple",
        inputs,
        outputs=outputs,
        client_timeout=30,
        headers={"test": "1"},
        compression_algorithm=compression,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert len(c.get_inference_statistics(model_name="simple").model_stats) == 1
    result = c.infer("simple", inputs, client_timeout=30, compression_algorithm=compression)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


async def simple_grpc_infer_aio(c: Any, compression: str | None = None) -> None:
    """The same with a ``tritonclient.grpc.aio`` client."""
    inputs, a, b = add_sub_inputs("grpc")
    assert await c.is_server_live()
    result = await c.infer(
        "simple",
        inputs,
        client_timeout=30,
        headers={"test": "1"},
        compression_algorithm=compression,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def index_rows(url: str, protocol: str) -> dict[str, Any]:
    """The repository index of the server at ``url``, a row per model name (HTTP or gRPC)."""
    c = client(protocol, url)
    try:
        if protocol == "http":
            rows = list(c.get_model_repository_index())
        else:
            rows = list(c.get_model_repository_index(as_json=True).get("models", []))
    finally:
        c.close()
    return {row["name"]: row for row in rows}
