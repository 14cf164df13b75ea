# Stand-in for Triton's C++ identity backend: OUTPUTi = INPUTi (by position), any types.
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.ins = [i["name"] for i in cfg["input"]]
        self.outs = [o["name"] for o in cfg["output"]]
        delay = cfg.get("parameters", {}).get("execute_delay_ms", {}).get("string_value", "0")
        self.delay = float(delay) / 1000.0  # the C++ identity backend's execute_delay_ms

    def execute(self, requests):
        if self.delay:
            import time
            time.sleep(self.delay)
        out = []
        for r in requests:
            ts = []
            for i, o in zip(self.ins, self.outs):
                t = pb_utils.get_input_tensor_by_name(r, i)
                if t is not None:
                    ts.append(pb_utils.Tensor(o, t.as_numpy()))
            out.append(pb_utils.InferenceResponse(output_tensors=ts))
        return out
