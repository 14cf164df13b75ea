# the python and python_dlpack trials: test.sh builds them from the ONNX models' configs (as
# generated: it rewrites their `platform` line; data/srccfg) and qa/python_models'
# add_sub/sub_add; the ensembles' C++ identity models (custom_zero_1_float32) are Python
# stand-ins (run_suite.sh)
export BACKENDS="python python_dlpack" QA23_DATA=srccfg
# tritium refuses --backend-config for a backend it does not have (as in L0_batcher) and the
# Python backend's stub-timeout-seconds (a setting it does not honour): both left out of its
# command line
[ "$side" = tritium ] && sed -i -e 's/ --backend-config=tensorflow,version=\${TF_VERSION}//' \
  -e 's/ --backend-config=python,stub-timeout-seconds=120//' test.sh
true
