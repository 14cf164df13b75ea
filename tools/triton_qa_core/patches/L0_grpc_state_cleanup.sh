. /tmp/qa23core/patches/lib.sh
# Dockerfile.QA: models/repeat_int32 = src/test/models/repeat_int32 + the C++ repeat backend, and
# ../custom_models/custom_zero_1_float32 = the C++ identity backend (test.sh adds execute_delay_ms).
# No CPU Triton here has those backends: both sides get the same Python stand-ins, same configs.
mkdir -p models/repeat_int32/1 ../custom_models
cp /tmp/qa23core/models/decoupled/repeat_config.pbtxt models/repeat_int32/config.pbtxt
cp /tmp/qa23core/models/decoupled/repeat_model.py models/repeat_int32/1/model.py
# test.sh copies it as repeat_int32_non_decoupled (decoupled policy removed): the C++ repeat
# backend serves that too, sending all its responses; the Python backend refuses a second
# response from a non-decoupled model, so the stand-in drops the refused ones and then ends the
# request (the client sees the first response, as from Triton's front-end with the C++ model).
sed -i 's/if not using_decoupled:/if False:  # qa23: non-decoupled too, as the C++ repeat backend/' models/repeat_int32/1/model.py
python3 - models/repeat_int32/1/model.py <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = "            response_sender.send(response)\n"
new = ("            try:  # qa23: a non-decoupled model may send one response only\n"
       "                response_sender.send(response)\n"
       "            except Exception:\n"
       "                pass\n")
assert old in s; open(p, "w").write(s.replace(old, new, 1))
PY
cp -r /tmp/qa23core-qa/qa/custom_models/custom_zero_1_float32 ../custom_models/
py_identity ../custom_models/custom_zero_1_float32
