"""Test models for what Triton's own Python-backend QA (qa/L0_backend_python in the server
repository) relies on, registered in tests/support/models.py (``build_test_repository``).
tritium's own small models, written here; none of Triton's QA models is copied.

qa_argv              python; at import, argparse parses ``sys.argv`` (any stray argument
                     exits); ``execute`` runs ``unittest.main("model", exit=False)`` over the
                     module's own test case (two tests), as Triton's QA models do. INPUT0
                     INT32 [1] -> ARGV STRING [-1] = ``sys.argv`` at import, TESTS INT32 [2]
                     = (tests run, 1 if they all passed).
qa_async_overlap     python, decoupled, ``async def execute``, one instance; WAIT_MS INT32 [1]
                     -> OUT INT32 [3] = (the value waited on, the most executes in flight at
                     once while this one ran, itself included, how many other executes
                     finished meanwhile), sent through the response sender. The wait is an
                     ``asyncio.sleep`` of WAIT_MS ms, or with request parameter ``bls`` an
                     ``async_exec`` of ``slow_identity_int32`` (which sleeps that long), or
                     with ``bls`` = "decoupled" an ``async_exec(decoupled=True)`` of
                     ``qa_async_child`` (given WAIT_MS and ``until_others``), whose responses
                     are then iterated without awaiting, as Triton's QA models do; then, with
                     parameter ``until_others`` = n, it waits (30 s at most) until n other
                     executes have finished. WAIT_MS < 0 raises ValueError("wait_ms cannot be
                     negative") before answering.
qa_async_serial      the same model, not decoupled (its responses are returned).
qa_async_child       the same model, decoupled, for ``qa_async_overlap`` to call.
qa_bls_in_initialize python; ``initialize`` makes a BLS call (not caught): Triton refuses BLS
                     outside ``execute``, so the load fails. INPUT0 -> OUTPUT0 INT32 [1].
qa_bls_in_finalize   python; identity INPUT0 -> OUTPUT0 INT32 [1]; ``finalize`` makes a BLS
                     call (not caught), which Triton refuses and logs.
qa_timeout_child     python, max_batch_size 8, dynamic batching with Triton QA's queue policy
                     (REJECT, timeout override allowed, 1 s default); INPUT0 INT32 [1] ->
                     TIMEOUT INT64 [1] = ``request.timeout()`` as the model sees it.
qa_timeout_parent    python, ``async def execute``; TIMEOUT_US INT64 [1] and HOW STRING [1]
                     ("exec", "decoupled" or "async") -> SEEN INT64 [1]: what
                     ``qa_timeout_child`` saw of a BLS request made with
                     ``InferenceRequest(..., timeout=TIMEOUT_US)`` and sent that way.
qa_device_probe      python, KIND_CPU; INPUT0 INT32 [1] -> REPORT STRING [1]: a JSON object of
                     what tells a model where its tensors and instance are: ``args``' kind,
                     device id and name, ``is_cpu()`` and ``__dlpack_device__()`` of its input,
                     of a tensor of its own and of one made ``from_dlpack``, and of the output
                     of a BLS call to ``slow_identity_int32`` with no preferred memory, CPU and
                     GPU (keys ``bls_default``, ``bls_cpu``, ``bls_gpu``).
qa_device_probe_model
                     the same with ``kind: KIND_MODEL``.
qa_decoupled_returns python, decoupled; WAIT_MS INT32 [1] = n -> OUT INT32 [3]: sends n
                     responses OUT = [1, 0, 0] (the last one with the final flag), then
                     ``execute`` returns a list of responses (OUT = [2, 0, 0]) instead of
                     None, which Triton refuses for a decoupled model.
qa_sender_once       python, not decoupled, answered through ``get_response_sender()``;
                     WAIT_MS INT32 [1] = mode -> OUT INT32 [3] = [mode, k, 0], k-th response:
                     mode 0: a thread sends one response and then the final flag after
                     ``execute`` returned None; mode 1: ``execute`` sends one response, then a
                     second (which Triton refuses: the exception ends ``execute``); mode 2:
                     ``execute`` returns ``[None]`` and a thread answers as in mode 0.
qa_sys_path          python; INPUT0 INT32 [1] -> REPORT STRING [1]: a JSON object with
                     ``sys.path`` as the model sees it at import and the paths of its version
                     directory and model directory.
"""

from __future__ import annotations

from collections.abc import Callable

_Spec = Callable[[str], dict[str, str]]

_ARGV = """\
import argparse
import sys
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils

ARGV_AT_IMPORT = list(sys.argv)
FLAGS = argparse.ArgumentParser(description="a model that reads its argv").parse_args()


class ModelSelfTest(unittest.TestCase):
    def test_argv_is_the_embedded_interpreters(self):
        self.assertEqual(sys.argv, [""])

    def test_arithmetic(self):
        self.assertEqual(int(np.int32(2) + 3), 5)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _ in requests:
            result = unittest.main("model", exit=False).result
            tests = np.array([result.testsRun, int(result.wasSuccessful())], dtype=np.int32)
            argv = np.array([a.encode() for a in ARGV_AT_IMPORT], dtype=object)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ARGV", argv), pb_utils.Tensor("TESTS", tests)]
            ))
        return responses
"""


_OVERLAP = """\
import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.live = {}  # execute -> the most executes in flight at once while it ran
        self.finished = 0
        self.changed = None  # an asyncio.Condition, made on the stub's loop

    async def execute(self, requests):
        if self.changed is None:
            self.changed = asyncio.Condition()
        me = object()
        self.live[me] = 0
        for key in self.live:
            self.live[key] = max(self.live[key], len(self.live))
        finished_before = self.finished
        try:
            echoes = [await self._wait(r, finished_before) for r in requests]
        finally:
            most = self.live.pop(me)
            async with self.changed:
                self.finished += 1
                self.changed.notify_all()
        responses = [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", np.array([echo, most, self.finished - 1 - finished_before], np.int32)
            )])
            for echo in echoes
        ]
        if not self.decoupled:
            return responses
        for request, response in zip(requests, responses):
            request.get_response_sender().send(
                response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None

    async def _wait(self, request, finished_before):
        wait_ms = int(pb_utils.get_input_tensor_by_name(request, "WAIT_MS").as_numpy()[0])
        if wait_ms < 0:
            raise ValueError("wait_ms cannot be negative")
        params = json.loads(request.parameters())
        others = int(params.get("until_others", 0))
        if params.get("bls") == "decoupled":
            echo = await self._decoupled_child(wait_ms, others)
        elif params.get("bls"):
            response = await pb_utils.InferenceRequest(
                model_name="slow_identity_int32",
                inputs=[pb_utils.Tensor("INPUT0", np.array([wait_ms], dtype=np.int32))],
                requested_output_names=["OUTPUT0"],
            ).async_exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            echo = int(pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()[0])
        else:
            await asyncio.sleep(wait_ms / 1000)
            echo = wait_ms
        if others:
            async with self.changed:
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.finished - finished_before >= others), 30
                )
        return echo

    async def _decoupled_child(self, wait_ms, others):
        # As Triton's QA models do: await async_exec(decoupled=True), then iterate the
        # responses without awaiting (the child answers once, with the final flag).
        responses = await pb_utils.InferenceRequest(
            model_name="qa_async_child",
            inputs=[pb_utils.Tensor("WAIT_MS", np.array([wait_ms], dtype=np.int32))],
            requested_output_names=["OUT"],
            parameters={"until_others": others},
        ).async_exec(decoupled=True)
        outs = []
        for response in responses:
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            if response.output_tensors():
                outs.append(int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0]))
        return outs[0]
"""


_BLS_OUTSIDE_EXECUTE = """\
import numpy as np
import triton_python_backend_utils as pb_utils


def _call_another_model():
    pb_utils.InferenceRequest(
        model_name="qa_argv",
        inputs=[pb_utils.Tensor("INPUT0", np.array([1], dtype=np.int32))],
        requested_output_names=["TESTS"],
    ).exec()


class TritonPythonModel:
    def {hook}:
        _call_another_model()

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy())])
            for r in requests
        ]
"""


_TIMEOUT_CHILD = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("TIMEOUT", np.array([[r.timeout()]], dtype=np.int64))]
            )
            for r in requests
        ]
"""

_TIMEOUT_PARENT = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        return [await self._one(r) for r in requests]

    async def _one(self, request):
        timeout = int(pb_utils.get_input_tensor_by_name(request, "TIMEOUT_US").as_numpy()[0])
        how = pb_utils.get_input_tensor_by_name(request, "HOW").as_numpy()[0].decode()
        child = pb_utils.InferenceRequest(
            model_name="qa_timeout_child",
            inputs=[pb_utils.Tensor("INPUT0", np.array([[1]], dtype=np.int32))],
            requested_output_names=["TIMEOUT"],
            timeout=timeout,
        )
        if how == "async":
            response = await child.async_exec()
        elif how == "decoupled":
            response = next(iter(child.exec(decoupled=True)))
        else:
            response = child.exec()
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        seen = pb_utils.get_output_tensor_by_name(response, "TIMEOUT").as_numpy().reshape(1)
        return pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)])
"""


_DEVICE_PROBE = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _where(tensor):
    return [tensor.is_cpu(), list(tensor.__dlpack_device__())]


class TritonPythonModel:
    def initialize(self, args):
        self.instance = {
            "kind": args["model_instance_kind"],
            "device_id": args["model_instance_device_id"],
            "name": args["model_instance_name"],
        }

    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        own = pb_utils.Tensor("OWN", np.arange(3, dtype=np.float32))
        report = dict(
            self.instance,
            input=_where(pb_utils.get_input_tensor_by_name(request, "INPUT0")),
            own=_where(own),
            from_dlpack=_where(pb_utils.Tensor.from_dlpack("BACK", own.to_dlpack())),
        )
        memories = {
            "default": None,
            "cpu": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU),
            "gpu": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0),
        }
        for key, memory in memories.items():
            extra = {} if memory is None else {"preferred_memory": memory}
            response = pb_utils.InferenceRequest(
                model_name="slow_identity_int32",
                inputs=[pb_utils.Tensor("INPUT0", np.array([0], dtype=np.int32))],
                requested_output_names=["OUTPUT0"],
                **extra,
            ).exec()
            if response.has_error():
                report[f"bls_{key}"] = response.error().message()
            else:
                report[f"bls_{key}"] = _where(response.output_tensors()[0])
        text = np.array([json.dumps(report).encode()], dtype=object)
        return pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", text)])
"""


_SYS_PATH = """\
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

PATH_AT_IMPORT = list(sys.path)
VERSION_DIR = os.path.dirname(os.path.abspath(__file__))


class TritonPythonModel:
    def execute(self, requests):
        report = {
            "sys_path": PATH_AT_IMPORT,
            "version_dir": VERSION_DIR,
            "model_dir": os.path.dirname(VERSION_DIR),
        }
        text = np.array([json.dumps(report).encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", text)]) for _ in requests]
"""


_DECOUPLED_RETURNS = """\
import numpy as np
import triton_python_backend_utils as pb_utils


def _out(first):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([first, 0, 0], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "WAIT_MS").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                last = i == n - 1
                sender.send(_out(1), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)
        return [_out(2) for _ in requests]
"""


_SENDER_ONCE = """\
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _out(mode, k):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([mode, k, 0], np.int32))])


def _later(sender, mode):
    time.sleep(0.2)
    sender.send(_out(mode, 1))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        (request,) = requests
        mode = int(pb_utils.get_input_tensor_by_name(request, "WAIT_MS").as_numpy()[0])
        sender = request.get_response_sender()
        if mode == 1:
            sender.send(_out(mode, 1))
            sender.send(_out(mode, 2))  # raises: one response only
        threading.Thread(target=_later, args=(sender, mode)).start()
        return [None] if mode == 2 else None
"""


def _tensors(entries: list[tuple[str, str, str]]) -> str:
    return ",\n".join(f'  {{ name: "{n}", data_type: {t}, dims: [ {d} ] }}' for n, t, d in entries)


def _spec(
    source: str,
    inputs: list[tuple[str, str, str]],
    outputs: list[tuple[str, str, str]],
    extra: str = "",
    max_batch_size: int = 0,
) -> _Spec:
    def spec(name: str) -> dict[str, str]:
        config = (
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{extra}\n'
            f"input [\n{_tensors(inputs)}\n]\noutput [\n{_tensors(outputs)}\n]\n"
        )
        return {"config.pbtxt": config, "1/model.py": source}

    return spec


_I32 = "TYPE_INT32"
_STR = "TYPE_STRING"
_ONE_INSTANCE = "instance_group [ { count: 1, kind: KIND_CPU } ]"
_DECOUPLED = "model_transaction_policy { decoupled: true }"
_OVERLAP_IO = ([("WAIT_MS", _I32, "1")], [("OUT", _I32, "3")])
_IDENTITY_IO = ([("INPUT0", _I32, "1")], [("OUTPUT0", _I32, "1")])
_PROBE_IO = ([("INPUT0", _I32, "1")], [("REPORT", _STR, "1")])


def _kind(kind: str) -> str:
    return f"instance_group [ {{ count: 1, kind: {kind} }} ]"


_QUEUE_POLICY = (
    "dynamic_batching { default_queue_policy { timeout_action: REJECT "
    "allow_timeout_override: true default_timeout_microseconds: 1000000 } }"
)

QA_SPECS: dict[str, _Spec] = {
    "qa_argv": _spec(_ARGV, [("INPUT0", _I32, "1")], [("ARGV", _STR, "-1"), ("TESTS", _I32, "2")]),
    "qa_async_overlap": _spec(_OVERLAP, *_OVERLAP_IO, f"{_ONE_INSTANCE}\n{_DECOUPLED}"),
    "qa_async_serial": _spec(_OVERLAP, *_OVERLAP_IO, _ONE_INSTANCE),
    "qa_async_child": _spec(_OVERLAP, *_OVERLAP_IO, f"{_ONE_INSTANCE}\n{_DECOUPLED}"),
    "qa_bls_in_initialize": _spec(
        _BLS_OUTSIDE_EXECUTE.format(hook="initialize(self, args)"), *_IDENTITY_IO
    ),
    "qa_bls_in_finalize": _spec(_BLS_OUTSIDE_EXECUTE.format(hook="finalize(self)"), *_IDENTITY_IO),
    "qa_timeout_child": _spec(
        _TIMEOUT_CHILD,
        [("INPUT0", _I32, "1")],
        [("TIMEOUT", "TYPE_INT64", "1")],
        _QUEUE_POLICY,
        max_batch_size=8,
    ),
    "qa_device_probe": _spec(_DEVICE_PROBE, *_PROBE_IO, _kind("KIND_CPU")),
    "qa_device_probe_model": _spec(_DEVICE_PROBE, *_PROBE_IO, _kind("KIND_MODEL")),
    "qa_sys_path": _spec(_SYS_PATH, *_PROBE_IO),
    "qa_sender_once": _spec(_SENDER_ONCE, *_OVERLAP_IO, _ONE_INSTANCE),
    "qa_decoupled_returns": _spec(_DECOUPLED_RETURNS, *_OVERLAP_IO, _DECOUPLED),
    "qa_timeout_parent": _spec(
        _TIMEOUT_PARENT,
        [("TIMEOUT_US", "TYPE_INT64", "1"), ("HOW", _STR, "1")],
        [("SEEN", "TYPE_INT64", "1")],
    ),
}
