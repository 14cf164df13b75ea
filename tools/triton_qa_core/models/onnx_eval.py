# Python-backend stand-in for a small ONNX graph (Identity/Cast/Add/Sub/Mul/Reshape...):
# graph.json next to this file lists the nodes; they are evaluated with numpy.
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

_NP = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
       7: np.int64, 8: np.object_, 9: np.bool_, 10: np.float16, 11: np.float64,
       12: np.uint32, 13: np.uint64}


def _cast(x, to):
    dt = _NP[to]
    if dt is np.object_:
        if x.dtype == np.object_:
            return x
        return np.array([str(v).encode() for v in x.flatten()], dtype=np.object_).reshape(x.shape)
    if x.dtype == np.object_:
        return np.array([dt(v.decode() if isinstance(v, bytes) else v) for v in x.flatten()], dtype=dt).reshape(x.shape)
    return x.astype(dt)


def _run(node, env):
    op, ins = node["op"], [env[i] for i in node["inputs"] if i]
    if op == "Identity":
        return ins[0]
    if op == "Cast":
        return _cast(ins[0], node["attrs"]["to"])
    if op == "Add":
        return ins[0] + ins[1]
    if op == "Sub":
        return ins[0] - ins[1]
    if op == "Mul":
        return ins[0] * ins[1]
    if op == "Reshape":
        return ins[0].reshape(tuple(int(v) for v in ins[1]))
    if op == "Constant":
        return np.array(node["attrs"]["value"])
    raise NotImplementedError(op)


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "graph.json")) as f:
            g = json.load(f)
        self.nodes, self.inits = g["nodes"], {k: np.array(v[0], dtype=v[1]) for k, v in g["inits"].items()}
        cfg = json.loads(args["model_config"])
        self.ins = [i["name"] for i in cfg["input"]]
        self.outs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in cfg["output"]]

    def execute(self, requests):
        responses = []
        for r in requests:
            env = dict(self.inits)
            for name in self.ins:
                t = pb_utils.get_input_tensor_by_name(r, name)
                if t is not None:
                    env[name] = t.as_numpy()
            for n in self.nodes:
                if all(i in env for i in n["inputs"] if i):
                    env[n["outputs"][0]] = _run(n, env)
            outs = [pb_utils.Tensor(name, np.asarray(env[name]).astype(dt)) for name, dt in self.outs if name in env]
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
