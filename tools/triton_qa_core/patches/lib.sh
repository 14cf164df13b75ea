# py_identity CONFIG_DIR: replace the C++ identity backend by a Python model
py_identity() { local d=$1; ls -d $d/[0-9]* >/dev/null 2>&1 || mkdir -p $d/1; sed -i 's/backend: *"identity"/backend: "python"/' $d/config.pbtxt; for v in $d/*/; do [ -d "$v" ] && cp /tmp/qa23core/models/identity.py "$v/model.py"; done; true; }
# py_addsub CONFIG_DIR: a Python add_sub model in version 1 (platform line dropped)
py_addsub() { local d=$1; sed -i -e 's/^platform:.*$/backend: "python"/' -e 's/^backend:.*$/backend: "python"/' $d/config.pbtxt; mkdir -p $d/1; cp ../python_models/add_sub/model.py $d/1/model.py; }
