"""``optimization { input_pinned_memory / output_pinned_memory }`` in the served config, as
Triton's NormalizeModelConfig leaves it: turned on only where the config does not say (a
user's ``enable: false`` is kept), and not added to an ensemble. The model config endpoint,
HTTP and gRPC, with the official clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.clients import client
from tests.support.models import model_files
from testkit.server_process import ServerProcess

PROTOCOLS = ("http", "grpc")
SOURCE = "identity_fp32"
OFF = "input_pinned_off"
ENSEMBLE = "pinned_ensemble"
ENSEMBLE_CONFIG = f"""\
name: "{ENSEMBLE}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{SOURCE}" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }}
}} ] }}
"""


def _write(root: Path, name: str, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("pinned") / "repo"
    _write(root, SOURCE, model_files(SOURCE))
    off = model_files(SOURCE)
    config = str(off["config.pbtxt"]).replace(f'name: "{SOURCE}"', f'name: "{OFF}"')
    off["config.pbtxt"] = config + "optimization { input_pinned_memory { enable: false } }\n"
    _write(root, OFF, off)
    _write(root, ENSEMBLE, {"config.pbtxt": ENSEMBLE_CONFIG, "1/.keep": ""})
    proc = ServerProcess([root])
    yield proc
    proc.stop()


def _optimization(server: ServerProcess, protocol: str, model: str) -> dict[str, Any]:
    c = client(protocol, server.url(protocol))
    try:
        if protocol == "http":
            config = c.get_model_config(model)
        else:
            config = c.get_model_config(model, as_json=True)["config"]
    finally:
        c.close()
    return dict(config.get("optimization", {}))


def _enabled(section: dict[str, Any], key: str) -> bool | None:
    """``enable`` of a pinned-memory message (False when the message is there but empty, as
    protobuf's JSON leaves a false out), None when the message is absent."""
    for name in (key, "".join(w.title() if i else w for i, w in enumerate(key.split("_")))):
        if name in section:
            return bool(section[name].get("enable", False))
    return None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_users_enable_false_is_kept(server: ServerProcess, protocol: str) -> None:
    optimization = _optimization(server, protocol, OFF)
    assert _enabled(optimization, "input_pinned_memory") is False, optimization
    assert _enabled(optimization, "output_pinned_memory") is True, optimization  # not said: on


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unsaid_pinned_memory_is_on(server: ServerProcess, protocol: str) -> None:
    optimization = _optimization(server, protocol, SOURCE)
    assert _enabled(optimization, "input_pinned_memory") is True, optimization
    assert _enabled(optimization, "output_pinned_memory") is True, optimization


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_ensemble_gets_no_pinned_memory(server: ServerProcess, protocol: str) -> None:
    optimization = _optimization(server, protocol, ENSEMBLE)
    assert _enabled(optimization, "input_pinned_memory") is None, optimization
    assert _enabled(optimization, "output_pinned_memory") is None, optimization
