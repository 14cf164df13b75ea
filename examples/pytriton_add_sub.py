"""PyTriton's add_sub example, served by tritium in this process: a batched function bound as
the model ``add_sub`` (two FP32 inputs, their sum and difference) behind a dynamic batcher.

    python examples/pytriton_add_sub.py            # serves on 8000 (HTTP) / 8001 (gRPC)

then, from another shell, PyTriton's client or tritonclient:

    from pytriton.client import ModelClient
    with ModelClient("localhost", "add_sub") as client:
        print(client.infer_batch(a=np.ones((2, 3), np.float32), b=np.ones((2, 3), np.float32)))
"""

from __future__ import annotations

import numpy as np

from tritium.pytriton.decorators import batch
from tritium.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from tritium.pytriton.triton import Triton, TritonConfig


@batch
def add_sub(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    return {"add": a + b, "sub": a - b}


def bind(triton: Triton, pool: str | None = None) -> None:
    triton.bind(
        model_name="add_sub",
        infer_func=add_sub,
        inputs=[
            Tensor(name="a", dtype=np.float32, shape=(-1,)),
            Tensor(name="b", dtype=np.float32, shape=(-1,)),
        ],
        outputs=[
            Tensor(name="add", dtype=np.float32, shape=(-1,)),
            Tensor(name="sub", dtype=np.float32, shape=(-1,)),
        ],
        config=ModelConfig(
            max_batch_size=128, batcher=DynamicBatcher(max_queue_delay_microseconds=100)
        ),
        strict=True,
        pool=pool,
    )


def main() -> None:
    with Triton(config=TritonConfig()) as triton:
        bind(triton)
        triton.serve()


if __name__ == "__main__":
    main()
