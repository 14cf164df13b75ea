. /tmp/qa23core/patches/lib.sh
# Dockerfile.QA: python_models = models + the python_backend decoupled examples; the C++
# repeat/square backends are not built here, so the "custom" trial runs the same Python models.
for d in models python_models; do
  mkdir -p $d; [ $d = python_models ] && cp -r models/* python_models/
  mkdir -p $d/repeat_int32/1 $d/square_int32/1
  cp /tmp/qa23core/models/decoupled/repeat_model.py $d/repeat_int32/1/model.py; cp /tmp/qa23core/models/decoupled/repeat_config.pbtxt $d/repeat_int32/config.pbtxt
  sed -i 's/if not using_decoupled:/if False:  # qa23: non-decoupled too, as the C++ repeat backend/' $d/repeat_int32/1/model.py
  cp /tmp/qa23core/models/decoupled/square_model.py $d/square_int32/1/model.py; cp /tmp/qa23core/models/decoupled/square_config.pbtxt $d/square_int32/config.pbtxt
  for m in $d/*/; do mkdir -p $m/1; done
  py_identity $d/identity_int32
done
sed -i 's/^TRIALS="python custom"/TRIALS="python"/' test.sh
