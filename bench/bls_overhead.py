#!/usr/bin/env python3
"""What one BLS call costs (issue 14): microseconds per child request, small and 16 MiB.

    PYTHONPATH=$PWD/src .venv/bin/python bench/bls_overhead.py [--small-repeat 2000]

A server runs ``bls_forward_fp32`` (tests/bls_models.py), which calls its target ``repeat``
times with ``exec()`` inside one ``execute`` and reports the mean time per call measured in the
model: the whole round trip stub → server → child model → server → stub. Targets: the ONNX
identity (runs in the server: the BLS hops alone) and the Python identity (a second stub: its
EXECUTE hop too). Then, in this process, the hop itself for a 16 MiB tensor: a frame through a
socket pair (``ipc``, the path of small tensors) against a shared-memory segment
(``shm_tensors``, the path of large ones).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from models import build_test_repository  # noqa: E402
from server_process import ServerProcess  # noqa: E402

MIB = 1 << 20
TARGETS = ("identity_onnx_fp32", "identity_fp32")


def _per_call_us(url: str, target: str, floats: int, repeat: int) -> float:
    import tritonclient.http as httpclient

    data = np.ones(floats, dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [floats], "FP32")
    inp.set_data_from_numpy(data)
    with httpclient.InferenceServerClient(url, network_timeout=600) as client:
        params = {"target": target, "repeat": repeat}
        client.infer("bls_forward_fp32", [inp], parameters={**params, "repeat": 2})  # warm up
        result = client.infer("bls_forward_fp32", [inp], parameters=params)
    return float(result.as_numpy("OUTPUT1")[0])


def _socket_hop_us(nbytes: int, rounds: int) -> float:
    """One frame carrying ``nbytes`` from a BlockingChannel to the server's FrameReader."""
    from tritium.backends.python import ipc

    left, right = socket.socketpair()
    sender = ipc.BlockingChannel(left)
    reader = ipc.FrameReader()
    payload = np.ones(nbytes, dtype=np.uint8)
    began = time.perf_counter()
    for _ in range(rounds):
        thread = threading.Thread(target=sender.send, args=(ipc.BLS_REQUEST, 1, [payload.data]))
        thread.start()
        frames: list[object] = []
        while not frames:
            frames = reader.feed(right.recv(1 << 20))
        thread.join()
    left.close()
    right.close()
    return (time.perf_counter() - began) * 1e6 / rounds


def _shm_hop_us(nbytes: int, rounds: int) -> float:
    from tritium.backends.python import shm_tensors

    names = shm_tensors.SegmentNames(os.getpid(), os.getpid())
    stub, server = shm_tensors.SegmentPool(names), shm_tensors.SegmentPool(names)
    payload = np.ones(nbytes, dtype=np.uint8)
    began = time.perf_counter()
    for _ in range(rounds):  # there and back, as a BLS call's input and output
        view = shm_tensors.unpack(shm_tensors.pack(payload, [], stub), [], server)
        del view
        view = shm_tensors.unpack(shm_tensors.pack(payload, [], server), [], stub)
        del view
    stub.close()
    server.close()
    return (time.perf_counter() - began) * 1e6 / (2 * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-repeat", type=int, default=2000)
    parser.add_argument("--large-repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_test_repository(Path(tmp) / "repo", ["bls_forward_fp32", *TARGETS])
        server = ServerProcess([repo], "--http-max-input-size", str(64 * MIB))
        try:
            for target in TARGETS:
                small = _per_call_us(server.http_url, target, 16, args.small_repeat)
                large = _per_call_us(server.http_url, target, 4 * MIB, args.large_repeat)
                print(f"BLS exec() -> {target:20s} 64 B: {small:8.1f} us   16 MiB: {large:8.1f} us")
        finally:
            server.stop()
    print(f"16 MiB hop, socket frame (ipc):     {_socket_hop_us(16 * MIB, 10):8.1f} us")
    print(f"16 MiB hop, shared memory segment:  {_shm_hop_us(16 * MIB, 10):8.1f} us")


if __name__ == "__main__":
    main()
