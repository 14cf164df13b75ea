# the python trial only: test.sh builds it from the ONNX sequence models' configs (as
# generated: data/srccfg) and qa/python_models/sequence_int32
export BACKENDS=python QA23_DATA=srccfg
# tritium refuses --backend-config for a backend it does not have (as in L0_batcher)
[ "$side" = tritium ] && sed -i 's/ --backend-config=tensorflow,version=\${TF_VERSION}//' test.sh
true
