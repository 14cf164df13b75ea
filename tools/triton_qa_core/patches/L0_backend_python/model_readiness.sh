# from the newest tree ($NEW_REF in setup.sh: v2.51.0 has no such suite); L0_backend_python's
# test.sh, which normally runs it, sets these
export MODELDIR=$(cd .. && pwd) BACKEND_DIR=/tmp/triton-ref-pyqa/backends SERVER=/tmp/qa23core/bin/server-$side
# the test kills the model's stub found by its process name: tritium's stub runs as
# `python -m tritium.backends.python.stub` (a difference listed in the results), not
# triton_python_backend_stub
[ "$side" = tritium ] && sed -i 's/pgrep -f "triton_python_backend_stub"/pgrep -f "tritium.backends.python.stub"/' test.sh
true
