#!/usr/bin/env bash
# Sets up the harness that runs Triton 2.51's core/protocol QA suites (qa/L0_*) against real
# Triton 2.51 and against tritium (issue 23; results in bench/results/triton_qa_core.md).
#   bash tools/triton_qa_core/setup.sh          # from a tritium checkout (its .venv or main's)
#   /tmp/qa23core/batch.sh L0_parameters L0_http  # each suite on both sides, then a comparison
#   TO=1800 /tmp/qa23core/batch.sh L0_model_update  # with a time limit (s) per side
#   /tmp/qa23core/batch.sh -s tritium L0_http     # rerun one side only
#   python3 /tmp/qa23core/mkreport.py             # the table
# Needs: the server repository mirrored at $MIRROR (git dir; v2.51.0, and $NEW_REF for the
# suites that only later trees have: suites.txt), python_backend at $PB_MIRROR (r24.10),
# Triton 2.51 set up by ../shared/triton/setup.sh in $TRITON_REF (copied to /tmp/triton-ref-pyqa
# here: its backends/ is the suites' own), a tritium venv at $TRITIUM_VENV (the checkout's
# .venv, else /work/main/.venv; the harness never installs into it), network for PyPI, root
# (each suite runs in its own network, PID and mount namespace, with its own /proc:
# `unshare -n -p -f --mount-proc`, so the suites' fixed ports 8000-8002 never collide, their
# ps/pgrep see only their own processes and nothing outlives a suite). suites.txt lists the
# suites (the table's rows, and whose test.sh pip lines are installed).
# The harness lives in /tmp/qa23core (its scripts use that path); Triton's QA tree is
# extracted to /tmp/qa23core-qa; nothing of Triton's is copied into this repository.
# The clients run in the harness's own venv, /tmp/qa23core/venv: the tritium venv's packages
# (a .pth) plus what the suites' test.sh files `pip install` (pipdeps.py, from PyPI, here and
# not during a run: the cbin/pip stand-in only logs the lines).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
MIRROR=${MIRROR:-/work/.mirror/triton-inference-server+server/repo}
PB_MIRROR=${PB_MIRROR:-/work/.mirror/triton-inference-server+python_backend/repo}
NEW_REF=${NEW_REF:-v2.71.0}
TRITON_REF=${TRITON_REF:-/tmp/triton-ref}
TRITIUM_VENV=${TRITIUM_VENV:-$repo/.venv}
[ -x "$TRITIUM_VENV/bin/tritium" ] || TRITIUM_VENV=/work/main/.venv
H=/tmp/qa23core
mkdir -p $H/data $H/runs $H/skip $H/models/decoupled
# each file replaced by a rename, never rewritten in place: bash reads a running script as it
# goes, and a run_suite.sh rewritten under a running suite re-ran parts of it
stage=$(mktemp -d $H/.stage.XXXXXX)
cp -r "$here"/{bin,cbin,py,patches} "$here"/*.sh "$here"/*.py "$here"/suites.txt $stage/
mkdir -p $stage/models && cp "$here"/models/*.py $stage/models/
(cd $stage && find . -type f) | while read -r f; do
  mkdir -p "$H/$(dirname "$f")" && mv -f "$stage/$f" "$H/$f"
done
rm -rf $stage
# tritium serves from $TRITIUM_VENV; the clients run in $H/venv
sed -i "s#/work/wt/qa23core/.venv#$TRITIUM_VENV#g" $H/bin/server-tritium
chmod +x $H/*.sh $H/bin/* $H/cbin/*
# Triton 2.51 (../shared/triton/setup.sh) with a backends/ of the harness's own
if [ ! -x /tmp/triton-ref-pyqa/backends/python/triton_python_backend_stub ]; then
  [ -x "$TRITON_REF/backends/python/triton_python_backend_stub" ] || TRITON_DIR=$TRITON_REF bash "${SHARED_TRITON_SETUP:-/work/shared/triton/setup.sh}"
  mkdir -p /tmp/triton-ref-pyqa && ln -sfn "$TRITON_REF/pytriton" /tmp/triton-ref-pyqa/pytriton
  rm -rf /tmp/triton-ref-pyqa/backends && cp -a "$TRITON_REF/backends" /tmp/triton-ref-pyqa/
fi
# the clients' venv: the tritium venv's packages, then what the suites' test.sh install
TPY=$TRITIUM_VENV/bin/python
if [ ! -x $H/venv/bin/python ]; then
  "$("$TPY" -c 'import sys; print(sys._base_executable)')" -m venv $H/venv
  "$TPY" -c 'import site; print(site.getsitepackages()[0])' \
    > "$($H/venv/bin/python -c 'import site; print(site.getsitepackages()[0])')/qa23-tritium-venv.pth"
fi
PY=$H/venv/bin/python
# torch for Triton's stub (L0_infer's python_dlpack models; test.sh pip-installs it into the
# server's Python): links from the tritium venv into the harness's copy of backends/python
"$TPY" $H/stublinks.py /tmp/triton-ref-pyqa/backends/python \
  "$(ls -d /tmp/triton-ref-pyqa/pytriton/lib/python3*/site-packages | head -1)" torch
# the version each side reports in its metadata (the image's TRITON_SERVER_VERSION)
echo 2.51.0 > $H/version-triton
"$TPY" -c 'import tritium; print(tritium.TRITON_VERSION)' > $H/version-tritium
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
# suites only later trees have (suites.txt: "SUITE REF"), at $NEW_REF, with their parent's common.sh
"$PY" $H/pipdeps.py --later $H/suites.txt | while read -r suite ref; do
  [ "$ref" = NEW ] && ref=$NEW_REF
  [ -f "/tmp/qa23core-qa/qa/$suite/test.sh" ] && continue
  git --git-dir="$MIRROR" ls-tree -r "$ref" "qa/$suite" "qa/$(dirname "$suite")" | while read -r mode type sha path; do
    [ "$type" = blob ] || continue
    case "$path" in qa/"$suite"/*|qa/"$(dirname "$suite")"/common.sh) ;; *) continue;; esac
    mkdir -p "/tmp/qa23core-qa/$(dirname "$path")"
    git --git-dir="$MIRROR" cat-file blob "$sha" > "/tmp/qa23core-qa/$path"
    [ "$mode" = 100755 ] && chmod +x "/tmp/qa23core-qa/$path"
  done
done
# what the suites' test.sh files pip-install (sseclient-py, ...), from PyPI now, not in a run
"$PY" $H/pipdeps.py $H/suites.txt /tmp/qa23core-qa/qa > $H/pip-requirements.txt
cat $H/pip-requirements.txt >&2
if [ -s $H/pip-requirements.txt ]; then "$PY" -m pip install -q -r $H/pip-requirements.txt; fi
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
# sequence models (L0_sequence_batcher's python trial reads their configs; L0_lifecycle loads one)
gen gen_qa_sequence_models.py qa_sequence_model_repository --onnx --onnx_opset=0
gen gen_qa_sequence_models.py qa_variable_sequence_model_repository --onnx --onnx_opset=0 --variable
gen gen_qa_sequence_models.py qa_ensemble_model_repository/qa_sequence_model_repository --ensemble
gen gen_qa_sequence_models.py qa_ensemble_model_repository/qa_variable_sequence_model_repository --ensemble --variable
cd $H/data
for r in qa_identity_model_repository qa_model_repository qa_variable_model_repository \
         qa_ensemble_model_repository/qa_model_repository \
         qa_ensemble_model_repository/qa_identity_model_repository \
         qa_sequence_model_repository qa_variable_sequence_model_repository \
         qa_ensemble_model_repository/qa_sequence_model_repository \
         qa_ensemble_model_repository/qa_variable_sequence_model_repository; do
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
# TensorFlow/TensorRT names (L0_lifecycle loads graphdef_*, savedmodel_*, plan_* models): the
# same Python add/sub/identity models under those names
for m in onnx_*; do
  for fw in graphdef savedmodel plan; do
    t=${fw}_${m#onnx_}; [ -e "$t" ] && continue
    cp -r $m $t && sed -i "s/$m/$t/" $t/config.pbtxt
  done
done
# no GPU here: the generated models' GPU instance groups (the sequence models, the nop_*
# ensembles' steps) become CPU ones, for both sides
grep -rl --include=config.pbtxt KIND_GPU $H/data | xargs -r sed -i 's/KIND_GPU/KIND_CPU/g'
# L0_infer's and L0_sequence_batcher's python trials derive their models from the ONNX
# models' configs (rewriting their `platform` line): data/srccfg is data/py with those
# configs as generated (the C++ identity nop_* models stay Python stand-ins; the folder's
# name must not contain "onnx" or "python": test.sh rewrites those words in the paths)
rm -rf $H/data/srccfg && cp -r $H/data/py $H/data/srccfg
(cd $H/data/onnx && find . -path '*/onnx_*/config.pbtxt') | while read -r c; do
  [ -d "$H/data/srccfg/$(dirname "$c")" ] && cp "$H/data/onnx/$c" "$H/data/srccfg/$c"
done
# the docs' example models (Dockerfile.QA copies them into L0_http, L0_grpc, ...): tritium's
# examples/model_repository, ONNX ones as Python
(cd "$repo" && "$TPY" examples/build_models.py --repository examples/model_repository >/dev/null)  # as `make models`, with the tritium venv
rm -rf $H/data/ex && mkdir -p $H/data/ex
for m in simple simple_dyna_sequence simple_identity simple_sequence simple_string simple_int8; do
  cp -r "$repo/examples/model_repository/$m" $H/data/ex/
done
"$PY" $H/pythonize.py $H/data/ex $H/data/pyex
cp -r "$repo/examples/model_repository/simple_string_dyna_sequence" $H/data/pyex/
echo "ready: /tmp/qa23core/batch.sh SUITE..." >&2
