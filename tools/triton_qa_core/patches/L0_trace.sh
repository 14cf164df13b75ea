. /tmp/qa23core/patches/idsed.sh
mkdir -p ../L0_decoupled/models/repeat_int32/1
cp /tmp/qa23core/models/decoupled/repeat_model.py ../L0_decoupled/models/repeat_int32/1/model.py
# the C++ repeat backend also serves non-decoupled (test.sh turns decoupled off): the Python
# stand-in's decoupled-only check is dropped
sed -i 's/if not using_decoupled:/if False:  # qa23: non-decoupled too, as the C++ repeat backend/' ../L0_decoupled/models/repeat_int32/1/model.py
cp /tmp/qa23core/models/decoupled/repeat_config.pbtxt ../L0_decoupled/models/repeat_int32/config.pbtxt
