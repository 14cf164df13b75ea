"""Start the stub under the server's own interpreter, named as Triton's is.

Run as a script, ``python .../triton_python_backend_stub.py tritium.backends.python.stub <fd>
<server pid> <instance name> <token>``: it runs the stub module exactly as ``python -m`` would
(the working directory first on ``sys.path``), and its command line carries Triton's stub's
name, so what looks for Triton's stubs in ``ps`` finds tritium's (Triton's qa suites run
``pgrep -f triton_python_backend_stub``), and the module's name, which tritium's tools look
for. Standard library only here. (A model with an execution environment starts through
``envboot.py``, which does the same for another interpreter.)
"""

import os
import runpy
import sys
from pathlib import Path

STUB_MODULE = "tritium.backends.python.stub"

if __name__ == "__main__":
    # A script's own directory is sys.path[0]; ``python -m`` puts the working directory there.
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        sys.path[0] = os.getcwd()
    if len(sys.argv) < 2 or sys.argv[1] != STUB_MODULE:
        sys.exit(f"usage: {sys.argv[0]} {STUB_MODULE} <fd> <server pid> <instance name>")
    del sys.argv[1]
    runpy.run_module(STUB_MODULE, run_name="__main__", alter_sys=True)
