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
