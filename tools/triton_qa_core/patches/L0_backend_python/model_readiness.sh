# from the newest tree ($NEW_REF in setup.sh: v2.51.0 has no such suite); L0_backend_python's
# test.sh, which normally runs it, sets these
export MODELDIR=$(cd .. && pwd) BACKEND_DIR=/tmp/triton-ref-pyqa/backends SERVER=/tmp/qa23core/bin/server-$side
# the test kills the model's stub found by `pgrep -f triton_python_backend_stub`: tritium's
# stub's command line carries that name too (issue 45), so test.sh runs unchanged
true
