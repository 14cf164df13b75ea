"""Hostile (or broken) Python models: each may only hurt itself, never the server (issue 22).
Registered in tests/support/models.py (``build_test_repository``); they call
``identity_onnx_queued`` (tests/support/models.py), ``identity_py_queued`` and
``identity_fp32``:

hostile_truncate     INPUT0 FP32 [-1] -> OUTPUT0 FP32 [-1] from a BLS child (request parameter
                     ``target``, default ``identity_onnx_queued``; to a ``*_queued`` target
                     the input goes as [1, n]),
                     while a thread of the model truncates its own /dev/shm segments (names
                     ``tritium-bls-*-<stub pid>-*``): parameter ``mode`` ``queued`` (once,
                     ``delay`` seconds (default 0.5) after the call is sent, while the child
                     waits in the ONNX model's queue) or ``hammer`` (again and again until
                     ``repeat`` calls, default 20, are done). OUTPUT0 is the last child's.
hostile_frames       INPUT0 FP32 [-1] -> OUTPUT0 = INPUT0, unless INPUT0[0] is 1: it writes 8
                     bytes of 0xff on the stub's socket, or 2: a frame head declaring one 2 GiB
                     buffer, then HOSTILE_PUSH_BYTES of zeros; then it sleeps 60 s.
hostile_self_call    one instance; INPUT0 FP32 [-1] -> OUTPUT0 = INPUT0; with request parameter
                     ``again`` it BLS-calls itself instead (without it), and answers what the
                     child answered: the child can never run while its parent holds the one
                     instance.
hostile_fork         INPUT0 FP32 [-1] -> OUTPUT0 = INPUT0, OUTPUT1 INT64 [3] = the pids of the
                     children ``initialize`` started (a multiprocessing 'fork' child, which
                     holds the stub's socket, and a ``sleep 600`` subprocess) and of the stub.
identity_py_queued   an innocent python identity, FP32 [-1] with max_batch_size 8 and dynamic
                     batching (preferred batch 8, max_queue_delay 2 s): a lone request waits
                     2 s in the queue.
"""

from __future__ import annotations

from collections.abc import Callable

_Spec = Callable[[str], dict[str, str]]

HOSTILE_PUSH_BYTES = 128 << 20

_HEAD = """\
import glob
import json
import multiprocessing
import os
import socket
import stat
import struct
import subprocess
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _in(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def _out(response, name):
    return pb_utils.get_output_tensor_by_name(response, name).as_numpy()


def _reply(*tensors):
    return pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in tensors])


def _params(request):
    return json.loads(request.parameters() or "{}")
"""

_TRUNCATE = """
def _truncate_mine():
    for path in glob.glob(f"/dev/shm/tritium-bls-*-{os.getpid()}-*"):
        try:
            os.truncate(path, 0)
        except OSError:
            pass


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        params = _params(request)
        target = params.get("target", "identity_onnx_queued")
        data = _in(request, "INPUT0")
        if target.endswith("_queued"):
            data = data.reshape(1, -1)
        done = threading.Event()
        if params.get("mode", "queued") == "queued":
            delay = float(params.get("delay", 0.5))
            threading.Thread(target=lambda: (time.sleep(delay), _truncate_mine())).start()
            repeat = 1
        else:
            def hammer():
                while not done.is_set():
                    _truncate_mine()
                    time.sleep(0.001)
            threading.Thread(target=hammer, daemon=True).start()
            repeat = int(params.get("repeat", 20))
        try:
            for _ in range(repeat):
                response = pb_utils.InferenceRequest(
                    model_name=target,
                    inputs=[pb_utils.Tensor("INPUT0", data)],
                    requested_output_names=["OUTPUT0"],
                ).exec()
                if response.has_error():
                    return pb_utils.InferenceResponse(error=response.error())
        finally:
            done.set()
        return _reply(("OUTPUT0", _out(response, "OUTPUT0").reshape(-1).copy()))
"""

_FRAMES = """
def _server_socket():
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        if sock.family == socket.AF_UNIX:
            return sock
        sock.close()
    raise RuntimeError("no socket to the server")


class TritonPythonModel:
    def execute(self, requests):
        what = int(_in(requests[0], "INPUT0").reshape(-1)[0])
        if what == 1:
            _server_socket().sendall(b"\\xff" * 8)
            time.sleep(60)
        elif what == 2:
            sock = _server_socket()
            sock.sendall(struct.pack("<IIQ", 16, 1, 2 << 30) + bytes(16))
            chunk = bytes(1 << 20)
            try:
                for _ in range(%(push)d >> 20):
                    sock.sendall(chunk)
            except OSError:
                pass
            time.sleep(60)
        return [_reply(("OUTPUT0", _in(r, "INPUT0"))) for r in requests]
"""

_SELF_CALL = """
class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        out = []
        for request in requests:
            data = _in(request, "INPUT0")
            if not _params(request).get("again"):
                out.append(_reply(("OUTPUT0", data)))
                continue
            child = pb_utils.InferenceRequest(
                model_name=self.name,
                inputs=[pb_utils.Tensor("INPUT0", data)],
                requested_output_names=["OUTPUT0"],
            ).exec()
            if child.has_error():
                out.append(pb_utils.InferenceResponse(error=child.error()))
            else:
                out.append(_reply(("OUTPUT0", _out(child, "OUTPUT0"))))
        return out
"""

_FORK = """
class TritonPythonModel:
    def initialize(self, args):
        self.child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
        self.child.start()
        self.sleeper = subprocess.Popen(["sleep", "600"])

    def execute(self, requests):
        pids = np.array([self.child.pid, self.sleeper.pid, os.getpid()], dtype=np.int64)
        return [_reply(("OUTPUT0", _in(r, "INPUT0")), ("OUTPUT1", pids)) for r in requests]
"""


_IDENTITY = """
class TritonPythonModel:
    def execute(self, requests):
        return [_reply(("OUTPUT0", _in(r, "INPUT0"))) for r in requests]
"""


def _spec(source: str, outputs: str, extra: str = "", max_batch_size: int = 0) -> _Spec:
    def spec(name: str) -> dict[str, str]:
        config = (
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{extra}\n'
            'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]\n'
            f"output [ {outputs} ]\n"
        )
        return {"config.pbtxt": config, "1/model.py": _HEAD + source}

    return spec


_FP32_OUT = '{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }'
_ONE_INSTANCE = "instance_group [ { count: 1, kind: KIND_CPU } ]"
_QUEUED = "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }"

HOSTILE_SPECS: dict[str, _Spec] = {
    "hostile_truncate": _spec(_TRUNCATE, _FP32_OUT),
    "hostile_frames": _spec(_FRAMES % {"push": HOSTILE_PUSH_BYTES}, _FP32_OUT),
    "hostile_self_call": _spec(_SELF_CALL, _FP32_OUT, _ONE_INSTANCE),
    "hostile_fork": _spec(
        _FORK, _FP32_OUT + ', { name: "OUTPUT1", data_type: TYPE_INT64, dims: [ 3 ] }'
    ),
    "identity_py_queued": _spec(_IDENTITY, _FP32_OUT, _QUEUED, max_batch_size=8),
}
