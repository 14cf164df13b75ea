#!/usr/bin/env bash
# run_suite.sh SUITE SIDE [TIMEOUT]  -- runs qa/SUITE/test.sh in a private network namespace
[ -f /tmp/qa23core/skip/$1 ] && { echo "skipped $1"; exit 0; }
# against SIDE (triton|tritium); results in /tmp/qa23core/runs/SIDE/SUITE/results.jsonl
# (SUITE may be a sub-suite, e.g. L0_backend_python/model_readiness: its parent's *.sh come too)
suite=$1 side=$2 to=${3:-1500}
W=/tmp/qa23core/runs/$side/$suite
rm -rf "$W"; mkdir -p "$W/qa/$(dirname "$suite")"
cp -r /tmp/qa23core-qa/qa/common /tmp/qa23core-qa/qa/python_models "$W/qa/" 2>/dev/null
[ -d /tmp/qa23core-qa/qa/ensemble_models ] && cp -r /tmp/qa23core-qa/qa/ensemble_models "$W/qa/"
[ "$(dirname "$suite")" != . ] && cp /tmp/qa23core-qa/qa/"$(dirname "$suite")"/*.sh "$W/qa/$(dirname "$suite")/"
# qa/custom_models: the C++ test backends' models (identity, sequence) as Python stand-ins
# with the same configs (execute_delay_ms kept by the identity stand-in)
cp -r /tmp/qa23core-qa/qa/custom_models "$W/qa/"
for m in "$W"/qa/custom_models/*/; do
  c=$m/config.pbtxt; src=
  grep -q 'backend: *"identity"' "$c" && src=/tmp/qa23core/models/identity.py
  grep -q 'backend: *"sequence"' "$c" && src=$W/qa/python_models/sequence_int32/model.py
  [ -n "$src" ] || continue
  sed -i -e 's/^backend:.*/backend: "python"/' -e '/^default_model_filename:/d' "$c"
  mkdir -p "$m/1" && cp "$src" "$m/1/model.py"
done
cp -r /tmp/qa23core-qa/qa/$suite "$W/qa/$(dirname "$suite")/"
cd "$W/qa/$suite"
sed -i -e "s#/opt/tritonserver/bin/tritonserver#/tmp/qa23core/bin/server-$side#g" \
  -e "s#/opt/tritonserver/backends#/tmp/triton-ref-pyqa/backends#g" \
  -e 's#/data/inferenceserver/\${REPO_VERSION}#/tmp/qa23core/data/${QA23_DATA:-py}#g' \
  -e 's#/data/inferenceserver/\$REPO_VERSION#/tmp/qa23core/data/${QA23_DATA:-py}#g' -e "s#\${TRITON_DIR}/bin/tritonserver#/tmp/qa23core/bin/server-$side#g" test.sh
if [ -f /tmp/qa23core/patches/$suite.sh ]; then . /tmp/qa23core/patches/$suite.sh; fi
mkdir -p "$W/bin"; ln -sf /tmp/qa23core/bin/server-$side "$W/bin/tritonserver"  # tests that run `tritonserver` themselves
export PATH=$W/bin:/tmp/qa23core/cbin:$PATH PYTHONPATH=/tmp/qa23core/py QA23_RESULTS=$W/results.jsonl \
  PYTEST_ADDOPTS="-p qa23_pytest" TRITON_SERVER_CPU_ONLY=1 NVIDIA_TRITON_SERVER_VERSION=24.10 \
  TRITON_DIR=/tmp/triton-ref-pyqa TRITON_QA_ROOT_DIR=$W/qa \
  TRITON_SERVER_VERSION=$(cat /tmp/qa23core/version-$side) SERVER_TIMEOUT=${SERVER_TIMEOUT:-600}
# (TRITON_SERVER_VERSION: what the image sets and L0_lifecycle compares with the server's
# metadata, each side's own; SERVER_TIMEOUT: util.sh's 120 s wait for a server start is
# too short on this shared machine, a start that long under load would fail on either side)
: > "$W/results.jsonl"
# its own /proc too (--mount-proc): test.sh's `ps | grep tritonserver` and `pgrep -f
# triton_python_backend_stub` must see this suite's processes, not another suite's
timeout -k 10 $to unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec bash -x ./test.sh 24.10' > "$W/test.out" 2>&1
rc=$?
echo "rc=$rc" >> "$W/test.out"
[ $rc = 124 ] || [ $rc = 137 ] && echo '{"id": "(suite)", "outcome": "timeout", "detail": "stopped at the '"$to"' s limit"}' >> "$W/results.jsonl"
# a client log showing a test file that failed at import: that file is NOT RUN (its cases
# are not counted on either side), not a failure
python3 /tmp/qa23core/importcheck.py "$W" >> "$W/results.jsonl"
# leftover servers in the namespace die with it; count
python3 - "$W/results.jsonl" <<'PY'
import json,sys,collections
c=collections.Counter(json.loads(l)["outcome"] for l in open(sys.argv[1]) if l.strip())
print(sys.argv[1], dict(c))
PY
