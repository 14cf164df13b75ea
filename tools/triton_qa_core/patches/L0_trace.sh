. /tmp/qa23core/patches/idsed.sh
mkdir -p ../L0_decoupled/models/repeat_int32/1
cp /tmp/qa23core/models/decoupled/repeat_model.py ../L0_decoupled/models/repeat_int32/1/model.py
# the C++ repeat backend also serves non-decoupled (test.sh turns decoupled off): the Python
# stand-in's decoupled-only check is dropped
sed -i 's/if not using_decoupled:/if False:  # qa23: non-decoupled too, as the C++ repeat backend/' ../L0_decoupled/models/repeat_int32/1/model.py
cp /tmp/qa23core/models/decoupled/repeat_config.pbtxt ../L0_decoupled/models/repeat_int32/config.pbtxt
# the C++ simple_{http,grpc}_infer_client are not built here: a Python stand-in doing the same one
# inference (py/qa23_simple_client.py)
sed -i -e 's#^SIMPLE_HTTP_CLIENT=.*#SIMPLE_HTTP_CLIENT="python3 /tmp/qa23core/py/qa23_simple_client.py http"#' \
  -e 's#^SIMPLE_GRPC_CLIENT=.*#SIMPLE_GRPC_CLIENT="python3 /tmp/qa23core/py/qa23_simple_client.py grpc"#' test.sh
