"""mock_llm: a decoupled echo "language model" for the OpenAI API, after Triton's mock_llm test
model (server repository, python/openai/tests/test_models/mock_llm).

A token is a word with the whitespace after it. For each request the model sends the prompt's
tokens back: with ``stream`` true one response per token, ``token_delay_ms`` (a config
parameter) apart, else one response with all of them after the same total delay. At most
``max_tokens`` tokens (when given). Each response carries ``text_output``, ``num_input_tokens``
(the prompt's tokens), ``num_output_tokens`` (the tokens in this response) and
``finish_reason`` ("" until the last: "length" when max_tokens cut the text, else "stop").

One thread sends every request's tokens, each when it is due (a schedule ordered by time), so
one instance streams many requests at once at little cost; a cancelled request (the client
went away) is dropped when its next token is due, with the final flag.
"""

import heapq
import itertools
import json
import re
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_TOKEN = re.compile(r"\S+\s*")


class _Job:
    """One request's tokens still to send."""

    def __init__(self, sender, tokens, reason, prompt_tokens, stream):
        self.sender = sender
        self.tokens = tokens
        self.reason = reason
        self.prompt_tokens = prompt_tokens
        self.stream = stream
        self.sent = 0

    def step(self):
        """Send what is due now; True when more tokens follow."""
        sender = self.sender
        if sender.is_cancelled():
            sender.send(flags=_FINAL)
            return False
        if not self.stream:
            text = "".join(self.tokens)
            response = _response(text, self.prompt_tokens, len(self.tokens), self.reason)
            sender.send(response, flags=_FINAL)
            return False
        if not self.tokens:
            sender.send(_response("", self.prompt_tokens, 0, self.reason), flags=_FINAL)
            return False
        token = self.tokens[self.sent]
        self.sent += 1
        last = self.sent == len(self.tokens)
        sender.send(_response(token, self.prompt_tokens, 1, self.reason if last else ""))
        if last:
            sender.send(flags=_FINAL)
        return not last


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        delay = params.get("token_delay_ms", {}).get("string_value", "0")
        self.delay_s = float(delay) / 1000.0
        self.schedule = []  # (due, order, job)
        self.order = itertools.count()
        self.wakeup = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._send_loop, daemon=True)
        self.thread.start()

    def execute(self, requests):
        now = time.monotonic()
        jobs = []
        for request in requests:
            prompt = _input(request, "text_input", b"").decode("utf-8", "replace")
            stream = bool(_input(request, "stream", False))
            limit = _input(request, "max_tokens", None)
            tokens = _TOKEN.findall(prompt)
            prompt_tokens, reason = len(tokens), "stop"
            if limit is not None and len(tokens) > int(limit):
                tokens, reason = tokens[: int(limit)], "length"
            job = _Job(request.get_response_sender(), tokens, reason, prompt_tokens, stream)
            wait = self.delay_s if stream else self.delay_s * len(tokens)
            jobs.append((now + wait, job))
        with self.wakeup:
            for due, job in jobs:
                heapq.heappush(self.schedule, (due, next(self.order), job))
            self.wakeup.notify()
        return None

    def _send_loop(self):
        while True:
            with self.wakeup:
                while not self.stopping:
                    wait = self.schedule[0][0] - time.monotonic() if self.schedule else None
                    if wait is not None and wait <= 0:
                        break
                    self.wakeup.wait(wait)
                if self.stopping:
                    return
                due, _, job = heapq.heappop(self.schedule)
            if job.step():
                with self.wakeup:
                    heapq.heappush(self.schedule, (due + self.delay_s, next(self.order), job))

    def finalize(self):
        with self.wakeup:
            self.stopping = True
            self.wakeup.notify()
            left, self.schedule = self.schedule, []
        self.thread.join(timeout=5)
        for _, _, job in left:
            job.sender.send(flags=_FINAL)


def _input(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


def _response(text, prompt_tokens, tokens, reason):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([tokens], dtype=np.int32)),
            pb_utils.Tensor("finish_reason", np.array([reason.encode()], dtype=np.object_)),
        ]
    )
