"""The bound function of the ``pytriton`` suite, served by one side: ``tritium`` (tritium.pytriton)
or ``pytriton`` (nvidia-pytriton 0.7 with its embedded Triton 2.51), run by that side's Python:

    python bench/pytriton_serve.py SIDE HTTP_PORT GRPC_PORT METRICS_PORT READY_FILE

PyTriton's add_sub with ``@batch`` behind a dynamic batcher (FP32 [16] inputs, max batch 64);
the ready file is written once the model serves; SIGTERM/SIGINT stops it."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import numpy as np


def main(side: str, http_port: str, grpc_port: str, metrics_port: str, ready: str) -> None:
    if side == "tritium":
        from tritium.pytriton.decorators import batch
        from tritium.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
        from tritium.pytriton.triton import Triton, TritonConfig, TritonSecurityConfig
    else:
        from pytriton.decorators import batch  # type: ignore[no-redef]
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # type: ignore[no-redef]
        from pytriton.triton import (  # type: ignore[no-redef]
            Triton,
            TritonConfig,
            TritonSecurityConfig,
        )

    @batch
    def add_sub(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
        return {"add": a + b, "sub": a - b}

    config = TritonConfig(
        http_address="127.0.0.1",
        grpc_address="127.0.0.1",
        http_port=int(http_port),
        grpc_port=int(grpc_port),
        metrics_port=int(metrics_port),
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    # perf_analyzer reads the statistics endpoint, which PyTriton restricts to a token by default
    open_endpoints = TritonSecurityConfig(restricted_endpoints=[])
    with Triton(config=config, security_config=open_endpoints) as triton:
        triton.bind(
            model_name="add_sub",
            infer_func=add_sub,
            inputs=[
                Tensor(name="a", dtype=np.float32, shape=(16,)),
                Tensor(name="b", dtype=np.float32, shape=(16,)),
            ],
            outputs=[
                Tensor(name="add", dtype=np.float32, shape=(16,)),
                Tensor(name="sub", dtype=np.float32, shape=(16,)),
            ],
            config=ModelConfig(
                max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=100)
            ),
        )
        Path(ready).write_text("ready")
        done.wait()


if __name__ == "__main__":
    main(*sys.argv[1:6])
