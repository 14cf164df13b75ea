# the python and python_dlpack trials (test.sh builds them from the ONNX models' configs and
# qa/python_models' add_sub/sub_add); the ensembles' C++ identity models (custom_zero_1_float32)
# are Python stand-ins (run_suite.sh)
export BACKENDS="python python_dlpack"
[ "$side" = tritium ] && sed -i 's/ --backend-config=tensorflow,version=\${TF_VERSION}//' test.sh
true
