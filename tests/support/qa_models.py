"""Test models for what Triton's own Python-backend QA (qa/L0_backend_python in the server
repository) relies on, registered in tests/support/models.py (``build_test_repository``).
tritium's own small models, written here; none of Triton's QA models is copied.

qa_argv              python; at import, argparse parses ``sys.argv`` (any stray argument
                     exits); ``execute`` runs ``unittest.main("model", exit=False)`` over the
                     module's own test case (two tests), as Triton's QA models do. INPUT0
                     INT32 [1] -> ARGV STRING [-1] = ``sys.argv`` at import, TESTS INT32 [2]
                     = (tests run, 1 if they all passed).
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


def _tensors(entries: list[tuple[str, str, str]]) -> str:
    return ",\n".join(f'  {{ name: "{n}", data_type: {t}, dims: [ {d} ] }}' for n, t, d in entries)


def _spec(
    source: str,
    inputs: list[tuple[str, str, str]],
    outputs: list[tuple[str, str, str]],
    extra: str = "",
) -> _Spec:
    def spec(name: str) -> dict[str, str]:
        config = (
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{extra}\n'
            f"input [\n{_tensors(inputs)}\n]\noutput [\n{_tensors(outputs)}\n]\n"
        )
        return {"config.pbtxt": config, "1/model.py": source}

    return spec


_I32 = "TYPE_INT32"
_STR = "TYPE_STRING"

QA_SPECS: dict[str, _Spec] = {
    "qa_argv": _spec(
        _ARGV, [("INPUT0", _I32, "1")], [("ARGV", _STR, "-1"), ("TESTS", _I32, "2")]
    ),
}
