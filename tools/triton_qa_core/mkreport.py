import sys; sys.path.insert(0,'/tmp/qa23core')
from compare import load
NOTES = {
 "L0_parameters": ("C++ `identity` → Python stand-in", ""),
 "L0_http": ("docs example models as Python; ONNX identity models as Python; the C++/C client binaries of test.sh (`../clients/*`, cc_client_test) and image_client (inception_graphdef) are not unittest cases and are not counted; tritium run with `--allow-client-shm=true`. Left: `test_content_encoding_chunked_manually` (deliberate, see docs/triton-differences.md); both fail: basic auth ×2 (no nginx proxy), repository index (7 models expected: inception_graphdef)", "TensorFlow inception_graphdef; C++ client binaries; nginx"),
 "L0_grpc": ("as L0_http; basic-auth step made non-fatal (no nginx proxy). Left: `test_register_system_shared_memory` (deliberate: empty shm key, see docs)", "TensorFlow inception_graphdef; C++ client binaries; nginx"),
 "L0_shared_memory": ("docs `simple` as Python; tritium run with `--allow-client-shm=true`", ""),
 "L0_optional_input": ("C++ `identity` → Python stand-in", ""),
 "L0_model_namespacing": ("", ""),
 "L0_simple_ensemble": ("TensorFlow `simple` → Python add/sub (versions 1, 2)", ""),
 "L0_input_validation": ("`InputValTest` only (docs `simple_identity` + the suite's Python models)", "`InputShapeTest`: PyTorch backend, TensorFlow and TensorRT shape-tensor models"),
 "L0_decoupled": ("python trial only (python_backend's decoupled examples; repeat_int32 also non-decoupled for the NonDecoupledTest step); run with a 60-minute limit", "C++ repeat/square backends (the `custom` trial); libtorch model"),
 "L0_logging": ("ONNX add/sub as Python; `log_format_test.py` runs `tritonserver` itself (the side's server). Both fail the four unescaped `test_injection` cases (Triton's own suite expects the injected record to appear; neither server logs the input name)", ""),
 "L0_request_cancellation": ("C++ `identity` → Python stand-in (`execute_delay_ms` kept); the C++ unit-test binary `request_cancellation_test` is not a unittest case. Left: `test_grpc_async_infer_cancellation_at_step_start` (deliberate: it counts Triton's gRPC handler-state log lines, see docs/triton-differences.md); `TestImplicitState` (PyTorch `model.pt`) passes on tritium only: this Triton has no PyTorch backend", "PyTorch backend (Triton side)"),
 "L0_batcher": ("`BACKENDS=python` (the ONNX add/sub models as Python add_sub, as test.sh does for its python trial); tritium run without `--backend-config=tensorflow,...` (tritium refuses settings for a backend it does not have, deliberate)", "TensorFlow, TensorRT, PyTorch, ONNX Runtime trials; the C++ custom models of the ragged/variable-size cases"),
 "L0_trace": ("the C++ `simple_{http,grpc}_infer_client` → a Python stand-in doing the same one inference (`py/qa23_simple_client.py`); C++ `identity` → Python stand-in; repeat_int32 → python_backend's example without its decoupled-only check; the OpenTelemetry collector (`otelcol`, downloaded by test.sh) cannot be fetched in the namespace: its cases fail on both sides", "network access for otelcol"),
 "L0_grpc_state_cleanup": ("C++ `identity` (custom_zero_1_float32, `execute_delay_ms` kept) and C++ `repeat` (repeat_int32 and its non-decoupled copy) → Python stand-ins, same configs, on both sides; the non-decoupled stand-in drops the responses after the first that the Python backend refuses. test.sh also compares the counts of Triton's gRPC `StateNew`/`StateRelease` log lines: tritium writes none (0 = 0, the check passes; Triton 222 = 222). The `*_shutdownserver` cases need the SIGINT they send to reach the server: the harness's guard now forwards it", "C++ identity and repeat backends"),
 "L0_string_io": ("TensorFlow `graphdef_nobatch_zero_1_object` → the ONNX identity of the same contract, as Python", ""),
 "L0_model_update": ("Triton 2.51 passes none here (instance counting of `model_init_del` fails on this machine: e.g. 7 != 4 initializations); nothing to compare", ""),
 "L0_nan_inf": ("`np.NINF` aliased for NumPy 2 by the harness (the client venv has NumPy 2.4)", ""),
}
ORDER = ["L0_http","L0_parameters","L0_shared_memory","L0_grpc","L0_logging","L0_request_cancellation","L0_batcher","L0_trace","L0_optional_input","L0_model_namespacing","L0_input_validation","L0_decoupled","L0_grpc_state_cleanup","L0_simple_ensemble","L0_string_io","L0_nan_inf","L0_model_update"]
print("| Suite | Cases | Pass on Triton 2.51 | Pass on tritium | Notes | Needs what no CPU machine here has |")
print("|---|---|---|---|---|---|")
for s in ORDER:
    a,b=load("triton",s),load("tritium",s)
    note, needs = NOTES.get(s, ("",""))
    if a is None or b is None or not (set(a)|set(b)):
        print(f"| {s} | – | – | – | not completed: {note} | {needs} |"); continue
    keys=set(a)|set(b)
    ta=sum(1 for k in keys if a.get(k,{}).get("outcome")=="pass"); tb=sum(1 for k in keys if b.get(k,{}).get("outcome")=="pass")
    both=sum(1 for k in keys if a.get(k,{}).get("outcome")=="pass" and b.get(k,{}).get("outcome")=="pass")
    extra = f" ({both} of Triton's)" if both != ta else ""
    print(f"| {s} | {len(keys)} | {ta} | {tb}{extra} | {note} | {needs} |")
