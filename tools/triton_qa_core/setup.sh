#!/usr/bin/env bash
# Sets up the harness that runs Triton 2.51's core/protocol QA suites (qa/L0_*) against real
# Triton 2.51 and against tritium (issue 23; results in bench/results/triton_qa_core.md).
#   bash tools/triton_qa_core/setup.sh          # from a tritium checkout with `make venv` done
#   /tmp/qa23core/batch.sh L0_parameters L0_http  # each suite on both sides, then a comparison
#   /tmp/qa23core/batch.sh -s tritium L0_http     # rerun one side only
#   python3 /tmp/qa23core/mkreport.py             # the table
# Needs: the server repository mirrored at $MIRROR (git dir; v2.51.0), python_backend at
# $PB_MIRROR (r24.10), Triton 2.51 set up by ../shared/triton/setup.sh in $TRITON_DIR, root
# (each suite runs in its own network and PID namespace: `unshare -n -p -f`, so the suites'
# fixed ports 8000-8002 never collide and nothing outlives a suite).
# The harness lives in /tmp/qa23core (its scripts use that path); Triton's QA tree is
# extracted to /tmp/qa23core-qa; nothing of Triton's is copied into this repository.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
MIRROR=${MIRROR:-/work/.mirror/triton-inference-server+server/repo}
PB_MIRROR=${PB_MIRROR:-/work/.mirror/triton-inference-server+python_backend/repo}
H=/tmp/qa23core
mkdir -p $H/data $H/runs $H/skip $H/models/decoupled
cp -r "$here"/{bin,cbin,py,patches} "$here"/*.sh "$here"/*.py $H/
cp "$here"/models/*.py $H/models/
# the tritium checkout whose .venv serves and runs the clients
sed -i "s#/work/wt/qa23core#$repo#g" $H/bin/server-tritium $H/cbin/python3 $H/cbin/python
chmod +x $H/*.sh $H/bin/* $H/cbin/*
PY=$repo/.venv/bin/python
"$PY" -m pip install -q psutil  # L0_shared_memory's leak test
# Triton's qa/ tree at v2.51.0 (file by file: a partial mirror may lack some blobs)
if [ ! -d /tmp/qa23core-qa/qa/common ]; then
  mkdir -p /tmp/qa23core-qa && cd /tmp/qa23core-qa
  git --git-dir="$MIRROR" ls-tree -r v2.51.0 qa | while read -r mode type sha path; do
    [ "$type" = blob ] || continue
    mkdir -p "$(dirname "$path")"
    git --git-dir="$MIRROR" cat-file blob "$sha" > "$path" 2>/dev/null || rm -f "$path"
    [ "$mode" = 100755 ] && chmod +x "$path" 2>/dev/null || true
  done
fi
for f in repeat_config.pbtxt repeat_model.py square_config.pbtxt square_model.py; do
  git --git-dir="$PB_MIRROR" show "r24.10:examples/decoupled/$f" > $H/models/decoupled/$f
done
# qa/common's generators, ONNX only; then Python-backend copies of the same graphs for both sides
cd /tmp/qa23core-qa/qa/common
gen() { mkdir -p "$H/data/onnx/$2"; "$PY" "$1" "${@:3}" --models_dir="$H/data/onnx/$2"; }
gen gen_qa_identity_models.py qa_identity_model_repository --onnx --onnx_opset=0
gen gen_qa_models.py qa_model_repository --onnx --onnx_opset=0
gen gen_qa_models.py qa_variable_model_repository --onnx --onnx_opset=0 --variable
gen gen_qa_models.py qa_ensemble_model_repository/qa_model_repository --ensemble
gen gen_qa_identity_models.py qa_ensemble_model_repository/qa_identity_model_repository --ensemble
cd $H/data
for r in qa_identity_model_repository qa_model_repository qa_variable_model_repository \
         qa_ensemble_model_repository/qa_model_repository \
         qa_ensemble_model_repository/qa_identity_model_repository; do
  mkdir -p "py/$(dirname $r)"; "$PY" $H/pythonize.py "onnx/$r" "py/$r"
done
# libtorch_* add/sub stand-ins (L0_decoupled's fan_repeat uses OUTPUT__0/OUTPUT__1)
cd $H/data/py/qa_model_repository
for m in onnx_nobatch_int32_int32_int32 onnx_int32_int32_int32 onnx_float32_float32_float32 \
         onnx_nobatch_float32_float32_float32; do
  t=libtorch_${m#onnx_}; rm -rf $t; cp -r $m $t
  sed -i -e "s/$m/$t/" -e 's/"OUTPUT\([01]\)"/"OUTPUT__\1"/' $t/config.pbtxt
  sed -i 's/"OUTPUT\([01]\)"/"OUTPUT__\1"/g' $t/*/graph.json
done
# the docs' example models (Dockerfile.QA copies them into L0_http, L0_grpc, ...): tritium's
# examples/model_repository, ONNX ones as Python
(cd "$repo" && make models >/dev/null)
rm -rf $H/data/ex && mkdir -p $H/data/ex
for m in simple simple_dyna_sequence simple_identity simple_sequence simple_string simple_int8; do
  cp -r "$repo/examples/model_repository/$m" $H/data/ex/
done
"$PY" $H/pythonize.py $H/data/ex $H/data/pyex
cp -r "$repo/examples/model_repository/simple_string_dyna_sequence" $H/data/pyex/
echo "ready: /tmp/qa23core/batch.sh SUITE..." >&2
