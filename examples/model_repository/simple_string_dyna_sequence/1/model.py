"""simple_string_dyna_sequence: Triton's string correlation-ID sequence model as a Python model.

Triton's QA (qa/L0_http/test.sh, qa/L0_grpc/test.sh) makes it from simple_dyna_sequence's
config with CORRID as TYPE_STRING and serves it with the ``dyna_sequence`` test backend
(server repository, src/test/dyna_sequence/src/dyna_sequence.cc). That backend keeps an INT32
accumulator per correlation ID in each instance:

* READY = 0: the request is ignored, the accumulator unchanged;
* READY = 1, START = 1: the accumulator becomes the sum of INPUT's elements;
* READY = 1, START = 0: INPUT's elements are added to it;
* END = 1 (and READY = 1): the correlation ID is added too, and the accumulator is dropped
  after this answer.

OUTPUT (INPUT's shape) holds the accumulator in every element. The ID arrives in the CORRID
control input (BYTES [1]) and must read as a decimal integer, as ``std::stoi`` reads it
(leading spaces, a sign, then digits; anything after is ignored) and within INT32; otherwise
the request fails with the backend's INVALID_ARG message. The official client examples with
``-d`` send "1002" (plus the ``-o`` offset) and expect 20, 9, 2, -3, -6, -8, -8, -9 + 1002.

Oldest strategy: a sequence stays on one instance, so a per-instance dictionary is enough; a
batch never holds two requests of one sequence (checked, as the backend does). Each execution
first sleeps the config's ``execute_delay_ms`` parameter.
"""

import json
import re
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_STOI = re.compile(rb"\s*([+-]?[0-9]+)")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
NOT_AN_INTEGER = "dyna sequence backend expects correlation ID to be decodable into an integer"
SAME_ID_TWICE = (
    "Execute() called with batch containing multiple inferences requests for the same "
    "Correlation ID"
)


def _wrap32(value):
    """``value`` as an INT32 would hold it (two's complement wrap-around)."""
    return (value - _INT32_MIN) % 2**32 + _INT32_MIN


def _parse_corrid(raw):
    """The integer ``std::stoi`` reads from ``raw`` (bytes), or None where it would throw."""
    match = _STOI.match(raw)
    if match is None:
        return None
    value = int(match.group(1))
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def _scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


def _error(message, code):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("execute_delay_ms", {})
        self.delay_s = int(delay.get("string_value", "0")) / 1000.0
        self.accumulators = {}  # correlation ID (int) -> INT32 accumulator (int)

    def execute(self, requests):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        seen = set()
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0]
            corrid = _parse_corrid(raw if isinstance(raw, bytes) else str(raw).encode())
            if corrid is None:
                responses.append(_error(NOT_AN_INTEGER, pb_utils.TritonError.INVALID_ARG))
            elif corrid in seen:
                responses.append(_error(SAME_ID_TWICE, pb_utils.TritonError.UNSUPPORTED))
            else:
                seen.add(corrid)
                responses.append(self._step(request, corrid))
        return responses

    def _step(self, request, corrid):
        """One request of sequence ``corrid``: update its accumulator, answer it."""
        value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        if not _scalar(request, "READY"):
            return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.zeros_like(value))])
        total = int(value.astype(np.int64).sum())
        if not _scalar(request, "START"):
            total += self.accumulators.get(corrid, 0)
        ending = _scalar(request, "END") != 0
        if ending:
            total += corrid
        accumulator = _wrap32(total)
        if ending:
            self.accumulators.pop(corrid, None)
        else:
            self.accumulators[corrid] = accumulator
        output = np.full(value.shape, accumulator, dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)])
