. /tmp/qa23core/patches/idsed.sh
mkdir -p ../L0_decoupled/models/repeat_int32/1
cp /tmp/qa23core/models/decoupled/repeat_model.py ../L0_decoupled/models/repeat_int32/1/model.py
cp /tmp/qa23core/models/decoupled/repeat_config.pbtxt ../L0_decoupled/models/repeat_int32/config.pbtxt
