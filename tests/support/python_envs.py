"""Small Python execution environments built at test time (no network): a venv whose
site-packages holds ``tritium_envprobe`` (a package the server does not have) at a version of
the test's choosing, numpy made importable through a ``.pth`` file that names a directory
holding ONLY the server's numpy (so no other server package leaks in), and optionally a marker
the model can check. ``pack`` writes one as a conda-pack-like ``.tar.gz`` (``bin/activate``,
``bin/python3``, ``lib/pythonX.Y/site-packages``, members relative to the env's root).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

PROBE_PACKAGE = "tritium_envprobe"
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"

# A model that reports what it sees: its interpreter, the probe package's version, whether a
# package of the server (tritonclient) leaks in, and the activation's variables.
PROBE_MODEL = """
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


def _facts():
    try:
        import tritium_envprobe
        probe = tritium_envprobe.__version__
    except ImportError:
        probe = None
    try:
        import tritonclient  # noqa: F401 - the server has it; an environment does not
        leaks = True
    except ImportError:
        leaks = False
    return {
        "probe": probe,
        "server_package_visible": leaks,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "virtual_env": os.environ.get("VIRTUAL_ENV"),
        "path0": os.environ.get("PATH", "").split(":")[0],
        "numpy": np.__version__,
    }


class TritonPythonModel:
    def initialize(self, args):
        self.facts = json.dumps(_facts())

    def execute(self, requests):
        out = np.array([self.facts.encode()], dtype=np.object_)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests
        ]
"""


def probe_config(name: str, env_path: str | None) -> str:
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        "max_batch_size: 0",
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]',
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
    ]
    if env_path is not None:
        lines.append(
            f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env_path}" }} }}'
        )
    return "\n".join(lines) + "\n"


def write_probe_model(repo: Path, name: str, env_path: str | None) -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(probe_config(name, env_path))
    (model / "1" / "model.py").write_text(PROBE_MODEL)
    return model


def numpy_only_dir(parent: Path) -> Path:
    """A directory whose only packages are links to the server's numpy (and its bundled
    libraries), for a ``.pth`` file: numpy without the rest of the server's site-packages."""
    shim = parent / "numpy_only"
    shim.mkdir(exist_ok=True)
    source = Path(np.__file__).resolve().parent
    for name in ("numpy", "numpy.libs"):
        target = source.parent / name
        if target.exists() and not (shim / name).exists():
            (shim / name).symlink_to(target)
    return shim


def make_venv(
    path: Path, probe_version: str | None, numpy_dir: Path | None, copies: bool = False
) -> Path:
    """``python -m venv`` (no pip) with the probe package and numpy as described above."""
    command = [sys.executable, "-m", "venv", "--without-pip", str(path)]
    subprocess.run([*command, "--copies"] if copies else command, check=True)
    site = path / SITE
    if probe_version is not None:
        (site / PROBE_PACKAGE).mkdir()
        (site / PROBE_PACKAGE / "__init__.py").write_text(f'__version__ = "{probe_version}"\n')
    if numpy_dir is not None:
        (site / "numpy_only.pth").write_text(f"{numpy_dir}\n")
    return path


def pack(env: Path, archive: Path, extra: list[tarfile.TarInfo] | None = None) -> Path:
    """``env`` as a conda-pack-like archive: members relative to the env's root."""
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for child in sorted(env.iterdir()):
            tar.add(child, arcname=child.name)
        for member in extra or []:
            data = b"evil\n" if member.isfile() else None
            member.size = len(data) if data else 0
            tar.addfile(member, io.BytesIO(data) if data else None)
    return archive


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info
