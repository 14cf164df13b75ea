"""repeat_int32: Triton's decoupled "repeat" example contract (0..N responses per request).

Inputs (max_batch_size 0):
  IN     INT32  [-1]  the values to send back, one response each
  DELAY  UINT32 [-1]  same shape as IN: milliseconds to wait before the i'th response
  WAIT   UINT32 [1]   milliseconds ``execute`` holds the instance before returning

For a request the model sends ``len(IN)`` responses; the i'th carries OUT = [IN[i]] (INT32
[1]) and IDX = [i] (UINT32 [1]) and is sent DELAY[i] ms after the previous one. After the last
response the request is closed with a flag-only COMPLETE_FINAL send (IN of shape [0] sends only
that). The responses come from a thread started in ``execute``; ``execute`` itself returns after
WAIT ms, so with WAIT shorter than the sum of DELAY one instance serves several requests at once
and their responses interleave (clients match them by request id).

Like Triton's python_backend examples/decoupled/repeat_model.py, plus two courtesies: a request
the client has cancelled stops early (one CANCELLED error response, then the final flag), and
``finalize`` cuts the remaining delays short instead of waiting them out.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_POLL_S = 0.05  # how often a waiting response thread looks for cancellation


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` can generate any number of responses per "
                "request, enable decoupled transaction policy in model configuration to "
                "serve this model"
            )
        out_config = pb_utils.get_output_config_by_name(model_config, "OUT")
        idx_config = pb_utils.get_output_config_by_name(model_config, "IDX")
        self.out_dtype = pb_utils.triton_string_to_numpy(out_config["data_type"])
        self.idx_dtype = pb_utils.triton_string_to_numpy(idx_config["data_type"])

        # Response threads still running, so that finalize can wait for them.
        self.inflight_thread_count = 0
        self.inflight_thread_count_lck = threading.Lock()
        self.stopping = threading.Event()

    def execute(self, requests):
        wait_ms = 0
        for request in requests:
            in_input = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delay_input = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait_input = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            sender = request.get_response_sender()
            if in_input.shape != delay_input.shape:
                error = pb_utils.TritonError(
                    f"expected IN and DELAY shape to match, got {list(in_input.shape)} "
                    f"and {list(delay_input.shape)}.",
                    pb_utils.TritonError.INVALID_ARG,
                )
                sender.send(pb_utils.InferenceResponse(error=error), flags=_FINAL)
                continue
            wait_ms = max(wait_ms, int(wait_input.reshape(-1)[0]))

            # The responses are sent from their own thread, independent of execute.
            thread = threading.Thread(
                target=self.response_thread,
                args=(sender, in_input.reshape(-1).copy(), delay_input.reshape(-1).copy()),
                daemon=True,
            )
            with self.inflight_thread_count_lck:
                self.inflight_thread_count += 1
            thread.start()

        # Hold the instance for WAIT ms, then let Triton call execute with the next request
        # even though the response threads may still be sending.
        time.sleep(wait_ms / 1000)
        return None

    def response_thread(self, response_sender, in_input, delay_input):
        try:
            for idx in range(in_input.size):
                if self._wait(response_sender, int(delay_input[idx]) / 1000):
                    error = pb_utils.TritonError(
                        "request cancelled", pb_utils.TritonError.CANCELLED
                    )
                    response_sender.send(pb_utils.InferenceResponse(error=error), flags=_FINAL)
                    return
                out_output = pb_utils.Tensor("OUT", np.array([in_input[idx]], self.out_dtype))
                idx_output = pb_utils.Tensor("IDX", np.array([idx], self.idx_dtype))
                response_sender.send(
                    pb_utils.InferenceResponse(output_tensors=[out_output, idx_output])
                )
            # Close the sender: no more responses for this request.
            response_sender.send(flags=_FINAL)
        except Exception:  # noqa: BLE001 - the client may be gone; nothing left to tell it
            pass
        finally:
            with self.inflight_thread_count_lck:
                self.inflight_thread_count -= 1

    def _wait(self, response_sender, seconds):
        """Sleep ``seconds``; True when the request was cancelled (or the model is unloading)."""
        deadline = time.monotonic() + seconds
        while True:
            if response_sender.is_cancelled() or self.stopping.is_set():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.stopping.wait(min(left, _POLL_S))

    def finalize(self):
        self.stopping.set()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            with self.inflight_thread_count_lck:
                if self.inflight_thread_count == 0:
                    return
            time.sleep(0.01)
