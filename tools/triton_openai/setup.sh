#!/usr/bin/env bash
# Sets up the harness that runs Triton's own OpenAI-compatible front-end (server repository,
# python/openai) UNMODIFIED over tritium.tritonserver, with its GPU-free test models
# (mock_llm, identity_py), and its own test-suite (issue 39; bench/results/triton_openai.md).
#   bash tools/triton_openai/setup.sh        # venv + Triton's python/openai at $TRITON_COMMIT
#   bash /tmp/tritonopenai/run.sh            # the GPU-free cases (see run.sh for options)
# Needs: the server repository mirrored at $MIRROR (a git dir), network for PyPI.
# Nothing of Triton's is copied into this repository: python/openai is extracted to
# /tmp/tritonopenai/openai at the pinned commit. The venv (/tmp/tritonopenai/venv) is the
# harness's own: the front-end's requirements from PyPI plus tritium installed editable from
# this checkout (never into the project's .venv). The only shim is sitecustomize.py
# (shim/, on PYTHONPATH), which calls tritium.compat.install() so that Triton's
# `import tritonserver` / `import tritonfrontend` (tests and the main.py subprocesses
# they start) resolve to tritium's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
MIRROR=${MIRROR:-/work/.mirror/triton-inference-server+server/repo}
# the newest server commit of the mirror when this harness was written (main, 2.73.0 dev)
TRITON_COMMIT=${TRITON_COMMIT:-e1db8a603d863b1317ee859bdeea2be19959462e}
H=${H:-/tmp/tritonopenai}
BASE_PY=${BASE_PY:-$(command -v python3.11 || command -v python3)}
mkdir -p "$H/shim"
cp "$here/sitecustomize.py" "$H/shim/"
cp "$here/run.sh" "$H/run.sh" && chmod +x "$H/run.sh"
echo "$repo" > "$H/tritium-checkout"
# Triton's python/openai at the pinned commit (file by file from the git dir)
dest="$H/openai-$TRITON_COMMIT"
if [ ! -f "$dest/tests/conftest.py" ]; then
  rm -rf "$dest.part" && mkdir -p "$dest.part"
  git --git-dir="$MIRROR" archive "$TRITON_COMMIT" python/openai | tar -x -C "$dest.part"
  mv "$dest.part/python/openai" "$dest" && rm -rf "$dest.part"
fi
ln -sfn "$dest" "$H/openai"
echo "$TRITON_COMMIT" > "$H/triton-commit"
# the harness's venv: the front-end's requirements (and its tests'), then tritium (editable,
# the pure-Python build)
if [ ! -x "$H/venv/bin/python" ]; then
  "$BASE_PY" -m venv "$H/venv"
fi
PIP="$H/venv/bin/python -m pip"
$PIP install -q --upgrade pip setuptools wheel
$PIP install -q -r "$dest/requirements.txt" -r "$dest/requirements-test.txt" \
  uvicorn requests transformers
TRITIUM_PURE_PYTHON=1 $PIP install -q -e "$repo"
echo "harness ready in $H (Triton python/openai at $TRITON_COMMIT)"
