"""A batched PyTriton-style model with the decorators that shape a batch (PyTriton's
``identity_python`` and ``linear_random_pytorch`` examples, without torch): ``@batch`` joins
the requests of one execution, ``@fill_optionals`` fills an optional input a request left out,
``@first_value`` reads a per-batch scalar parameter given as an input.

    python examples/pytriton_identity.py
"""

from __future__ import annotations

import numpy as np

from tritium.pytriton.decorators import batch, fill_optionals, first_value
from tritium.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from tritium.pytriton.triton import Triton, TritonConfig

WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0  # the "linear" layer


@fill_optionals(scale=np.array([1.0], dtype=np.float32))
@batch
@first_value("scale")
def linear(x: np.ndarray, scale: np.float32) -> dict[str, np.ndarray]:
    return {"y": (x @ WEIGHTS * scale).astype(np.float32)}


@batch
def identity(data: np.ndarray) -> dict[str, np.ndarray]:
    return {"identity": data}


def bind(triton: Triton) -> None:
    config = ModelConfig(
        max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=500)
    )
    triton.bind(
        model_name="identity",
        infer_func=identity,
        inputs=[Tensor(name="data", dtype=np.bytes_, shape=(1,))],
        outputs=[Tensor(name="identity", dtype=np.bytes_, shape=(1,))],
        config=config,
    )
    triton.bind(
        model_name="linear",
        infer_func=linear,
        inputs=[
            Tensor(name="x", dtype=np.float32, shape=(4,)),
            Tensor(name="scale", dtype=np.float32, shape=(1,), optional=True),
        ],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(3,))],
        config=config,
    )


def main() -> None:
    with Triton(config=TritonConfig()) as triton:
        bind(triton)
        triton.serve()


if __name__ == "__main__":
    main()
