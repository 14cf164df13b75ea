"""A decoupled PyTriton-style model: a generator yields one answer per step, each sent to the
client as it comes (PyTriton's decoupled examples). ``count`` answers ``n`` times with the
running total of ``x``.

    python examples/pytriton_streaming.py
    # from pytriton.client import DecoupledModelClient
    # with DecoupledModelClient("grpc://localhost:8001", "count") as client:
    #     for answer in client.infer_sample(x=np.ones(2, np.float32), n=np.array([3], np.int32)):
    #         print(answer)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tritium.pytriton.model_config import ModelConfig, Tensor
from tritium.pytriton.proxy.types import Request
from tritium.pytriton.triton import Triton, TritonConfig


def count(requests: list[Request]) -> Iterator[list[dict[str, Any]]]:
    (request,) = requests  # no batching: one request per execution
    total = np.zeros_like(request["x"])
    for step in range(int(request["n"][0])):
        total = total + request["x"]
        yield [{"total": total, "step": np.array([step], dtype=np.int32)}]


def bind(triton: Triton) -> None:
    triton.bind(
        model_name="count",
        infer_func=count,
        inputs=[
            Tensor(name="x", dtype=np.float32, shape=(-1,)),
            Tensor(name="n", dtype=np.int32, shape=(1,)),
        ],
        outputs=[
            Tensor(name="total", dtype=np.float32, shape=(-1,)),
            Tensor(name="step", dtype=np.int32, shape=(1,)),
        ],
        config=ModelConfig(batching=False, decoupled=True),
    )


def main() -> None:
    with Triton(config=TritonConfig()) as triton:
        bind(triton)
        triton.serve()


if __name__ == "__main__":
    main()
