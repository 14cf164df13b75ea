"""mock_llm: a decoupled echo "language model" for the OpenAI API, after Triton's mock_llm test
model (server repository, python/openai/tests/test_models/mock_llm).

A token is a word with the whitespace after it. For each request the model sends the prompt's
tokens back: with ``stream`` true one response per token, ``token_delay_ms`` (a config
parameter) apart, else one response with all of them after the same total delay. At most
``max_tokens`` tokens (when given). Each response carries ``text_output``, ``num_input_tokens``
(the prompt's tokens), ``num_output_tokens`` (the tokens in this response) and
``finish_reason`` ("" until the last: "length" when max_tokens cut the text, else "stop").

Each request is served by a thread of its own, so one instance streams many requests at once;
a cancelled request (the client went away) stops at the next token with the final flag.
"""

import json
import re
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_TOKEN = re.compile(r"\S+\s*")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        delay = params.get("token_delay_ms", {}).get("string_value", "0")
        self.delay_s = float(delay) / 1000.0
        self.stopping = threading.Event()
        self.threads = set()
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            prompt = _input(request, "text_input", b"").decode("utf-8", "replace")
            stream = bool(_input(request, "stream", False))
            limit = _input(request, "max_tokens", None)
            sender = request.get_response_sender()
            thread = threading.Thread(
                target=self._generate, args=(sender, prompt, stream, limit), daemon=True
            )
            with self.lock:
                self.threads.add(thread)
            thread.start()
        return None

    def _generate(self, sender, prompt, stream, limit):
        try:
            tokens = _TOKEN.findall(prompt)
            reason = "stop"
            if limit is not None and len(tokens) > int(limit):
                tokens, reason = tokens[: int(limit)], "length"
            if stream:
                self._stream(sender, tokens, reason, len(_TOKEN.findall(prompt)))
            else:
                if self._wait(sender, self.delay_s * len(tokens)):
                    sender.send(
                        _response(
                            "".join(tokens), len(_TOKEN.findall(prompt)), len(tokens), reason
                        ),
                        flags=_FINAL,
                    )
                else:
                    sender.send(flags=_FINAL)
        finally:
            with self.lock:
                self.threads.discard(threading.current_thread())

    def _stream(self, sender, tokens, reason, prompt_tokens):
        if not tokens:
            sender.send(_response("", prompt_tokens, 0, reason), flags=_FINAL)
            return
        for i, token in enumerate(tokens):
            if not self._wait(sender, self.delay_s):
                sender.send(flags=_FINAL)  # cancelled: nothing more
                return
            last = i == len(tokens) - 1
            sender.send(_response(token, prompt_tokens, 1, reason if last else ""))
        sender.send(flags=_FINAL)

    def _wait(self, sender, seconds):
        """Sleep ``seconds``; False when the request was cancelled or the model unloads."""
        end = time.monotonic() + seconds
        while True:
            if sender.is_cancelled() or self.stopping.is_set():
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.05))

    def finalize(self):
        self.stopping.set()
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=5)


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
