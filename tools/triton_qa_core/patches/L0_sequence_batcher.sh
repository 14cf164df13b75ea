# the python trial only: test.sh builds it from the ONNX sequence models' configs (as
# generated: data/srccfg) and qa/python_models/sequence_int32
export BACKENDS=python QA23_DATA=srccfg
# tritium refuses --backend-config for a backend it does not have (as in L0_batcher)
[ "$side" = tritium ] && sed -i 's/ --backend-config=tensorflow,version=\${TF_VERSION}//' test.sh
# no GPU here: the ensembles' nop_* models stay KIND_CPU on both sides (test.sh turns them to
# KIND_GPU "to avoid cuda init delay"; Triton 2.51 refuses KIND_GPU without a GPU, so no
# server of the suite started)
sed -i 's#sed -i "s/kind: KIND_CPU/kind: KIND_GPU/" config.pbtxt#true#' test.sh
true
