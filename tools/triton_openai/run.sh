#!/usr/bin/env bash
# Runs Triton's python/openai tests (extracted by setup.sh) over tritium.tritonserver.
#   /tmp/tritonopenai/run.sh            # the GPU-free selection (below)
#   /tmp/tritonopenai/run.sh tests/     # anything pytest takes instead (no deselection)
# The environment: python3 is the harness venv's (the tests start `python3 main.py`), shim/
# on PYTHONPATH (sitecustomize.py: tritium.compat.install(), in the tests and in every
# main.py they start), Hugging Face offline (no tokenizer download), and the conftest's own
# variables set to the GPU-free test models: without TEST_BACKEND and TEST_MODEL both set it
# looks for vllm / tensorrt_llm and raises "Unknown test environment". TEST_BACKEND=vllm is
# only the request format main.py is told to use; the cases selected send no inference
# through it. TEST_TOKENIZER empty: main.py starts with no tokenizer.
# TRITIUM_OPENAI_TIMEOUT (s, default 1200) bounds the run. TRITIUM_SRC=/path/to/src runs
# another tritium tree (a before/after comparison) instead of the editable install.
set -uo pipefail
H=$(cd "$(dirname "$0")" && pwd)
# The files whose cases use only the GPU-free test models (tests/test_models: mock_llm,
# identity_py) or no model; test_completions, test_chat_completions, test_embeddings,
# test_openai_client and test_tool_calling need a vLLM or TensorRT-LLM model (a GPU).
SELECTION=(tests/test_observability.py tests/test_model_management.py tests/test_request_size.py
  tests/test_openai_restricted_apis.py tests/test_lora.py
  # completions on the model under test: needs a vLLM/TRT-LLM model (mock_llm refuses the
  # vLLM request format, in Triton as here)
  --deselect tests/test_model_management.py::TestModelManagementInference
  # the chat endpoint needs a Hugging Face tokenizer (a download)
  --deselect "tests/test_openai_restricted_apis.py::TestOpenAIServerRestrictedAPIs::test_restricted_endpoints_with_auth[headers1-True-Valid auth]"
  --deselect tests/test_openai_restricted_apis.py::TestOpenAIServerMultipleRestrictions::test_endpoint_groups_with_correct_auth
  # TensorRT-LLM's LoRA adapters (tests/tensorrtllm_models, built by Triton's CI from a
  # TRT-LLM engine) and vLLM/TRT-LLM LoRA models
  -k "not LoRATest and not (test_validate_lora_path_trtllm and False-None) and not model.lora_weights.npy")
[ $# -gt 0 ] && SELECTION=("$@")
export PATH="$H/venv/bin:$PATH" PYTHONPATH="$H/shim${TRITIUM_SRC:+:$TRITIUM_SRC}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TEST_BACKEND=${TEST_BACKEND-vllm} TEST_MODEL=${TEST_MODEL-mock_llm}
export TEST_MODEL_REPOSITORY=${TEST_MODEL_REPOSITORY-$H/openai/tests/test_models}
export TEST_TOKENIZER=${TEST_TOKENIZER-}
cd "$H/openai" || exit 2
echo "triton python/openai at $(cat "$H/triton-commit"); tritium from $(cat "$H/tritium-checkout")"
python3 -c 'import tritonserver, tritonfrontend; print("tritonserver is", tritonserver.__name__, "from", tritonserver.__file__)'
timeout "${TRITIUM_OPENAI_TIMEOUT:-1200}" python3 -m pytest -p no:cacheprovider -rA \
  --junitxml="$H/last-junit.xml" "${SELECTION[@]}"
