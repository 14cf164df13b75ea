. /tmp/qa23core/patches/lib.sh; py_addsub models/simple; mkdir -p models/simple/2; cp models/simple/1/model.py models/simple/2/
