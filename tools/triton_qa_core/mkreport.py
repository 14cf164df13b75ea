"""mkreport.py: the results table of bench/results/triton_qa_core.md from the runs in
/tmp/qa23core/runs (compare.py's counting: a file that failed at import is NOT RUN, not failed;
a suite stopped at its time limit says so)."""

# ruff: noqa: E501
import sys

sys.path.insert(0, "/tmp/qa23core")
from compare import counts, load, meta  # noqa: E402

# fmt: off
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
 "L0_model_update": ("three rate-limiter modes; v2.51.0's tearDown reads unittest internals Python 3.11 removed (`_feedErrorsToResult`): the harness's shim gives it the answer later trees read from `_outcome.result` (before it, every case errored on both sides)", ""),
 "L0_lifecycle": ("graphdef_/savedmodel_/plan_ models → the Python add/sub stand-ins under those names (cases that delete a framework's model file or check a framework's behaviour fail on both sides); `kill $SERVER_PID` of an exited server made non-fatal (it ended the suite under `set -e`)", "TensorFlow, TensorRT, ONNX Runtime, PyTorch models; a GPU (`test_load_gpu_limit`, `cuda_memory_consumer`)"),
 "L0_backend_python/model_readiness": ("from the v2.71.0 tree (v2.51.0 has no such suite: it tests the user-defined `is_ready()` of later Python backends, which Triton 2.51 does not call); tritium's stub found by its own process name (`tritium.backends.python.stub`)", ""),
 "L0_sequence_batcher": ("python trial only (`BACKENDS=python`, qa/python_models/sequence_int32 from the ONNX sequence configs), generated GPU instance groups as CPU", "graphdef/savedmodel/onnx/plan/libtorch trials; C++ sequence backend (`custom`)"),
 "L0_infer": ("python and python_dlpack trials (qa/python_models add_sub/sub_add and their dlpack variants from the ONNX configs); C++ identity (custom_zero_1_float32, nop_*) → Python stand-ins; tritium run without `--backend-config=python,stub-timeout-seconds=120` (it refuses that setting)", "the other backends' trials; GPU target"),
 "L0_client_timeout": ("the C++ client_timeout_test steps (not unittest cases; its first failure ended the script) cut; C++ identity (custom_identity_int32, 3 s delay) → Python stand-in", "C++ client_timeout_test"),
 "L0_model_queue": ("C++ identity (custom_zero_1_float32, execute_delay_ms kept) → Python stand-in; the cases assert response-time windows", ""),
 "L0_rate_limiter": ("C++ identity and sequence test models → Python stand-ins (qa/python_models/sequence_int32 for custom_sequence_int32)", ""),
 "L0_nan_inf": ("`np.NINF` aliased for NumPy 2 by the harness (the client venv has NumPy 2.4)", ""),
}
# fmt: on
# the table's rows: the harness's suites, in suites.txt's order
ORDER = [
    line.split()[0]
    for line in open("/tmp/qa23core/suites.txt")
    if line.split() and not line.startswith("#")
]


def status(a, b):
    """What did not run or finish, per side."""
    out = []
    for side, res in (("Triton", a), ("tritium", b)):
        for f, why in sorted(meta(res, "notrun").items()):
            out.append(f"NOT RUN on {side}: `{f}` ({why})")
        if meta(res, "timeout"):
            out.append(f"did not finish on {side} ({next(iter(meta(res, 'timeout').values()))})")
    return "; ".join(out)


def row(s):
    a, b = load("triton", s), load("tritium", s)
    note, needs = NOTES.get(s, ("", ""))
    if a is None or b is None:
        return f"| {s} | – | – | – | not run: {note} | {needs} |"
    keys, ta, tb, both = counts(a, b)
    st = status(a, b)
    if not keys:
        return f"| {s} | – | – | – | NOT RUN ({st or 'no case recorded'}): {note} | {needs} |"
    extra = f" ({both} of Triton's)" if both != ta else ""
    note = f"**{st}.** {note}" if st else note
    return f"| {s} | {len(keys)} | {ta} | {tb}{extra} | {note} | {needs} |"


def main(suites):
    print(
        "| Suite | Cases | Pass on Triton 2.51 | Pass on tritium | Notes | Needs what no CPU machine here has |"
    )
    print("|---|---|---|---|---|---|")
    for s in suites or ORDER:
        print(row(s))


if __name__ == "__main__":
    main(sys.argv[1:])
