"""``tritonclient.grpc`` with its ``__init__`` deferred (``tritium/_lazy_client.py``): the
server's modules read Triton's protobuf messages without loading the gRPC client library, and
a client imported afterwards in the same process is the package as always, with the very same
message classes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import sys
    import tritium.server
    from tritium.frontends.grpc import codec, service, stream
    from tritium.config import model_config
    assert "grpc" not in sys.modules, "the server's modules loaded the gRPC library"
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as grpcaio
    from tritonclient.grpc import *  # noqa: F403 (``__all__`` runs the real __init__)
    assert "grpc" in sys.modules
    assert grpcclient.service_pb2.ModelInferRequest is codec.pb.ModelInferRequest
    assert grpcclient.model_config_pb2.ModelConfig is model_config.ModelConfig
    assert InferenceServerClient is grpcclient.InferenceServerClient  # noqa: F405
    assert grpcaio.InferenceServerClient.__module__ == "tritonclient.grpc.aio"
    print("ok")
    """
)


def test_server_modules_do_not_load_grpc_and_the_client_still_works() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_client_imported_first_is_left_as_it_is() -> None:
    script = (
        "import sys, tritonclient.grpc as g; before = sys.modules['tritonclient.grpc']\n"
        "import tritium.server\n"
        "assert sys.modules['tritonclient.grpc'] is before and type(before).__name__ == 'module'\n"
        "print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
