"""Custom Python execution environments for Python models (config parameter EXECUTION_ENV_PATH).

As in Triton's Python backend, the value names a conda-pack archive (``.tar.gz``) or an
already unpacked environment directory; ``$$TRITON_MODEL_DIRECTORY`` in it is replaced by the
model's directory and a relative path is taken from the server's working directory. An archive
is unpacked once into the content-keyed cache of ``envarchive``; a directory (a conda env, or a
plain ``python -m venv`` one, which Triton does not take) is used in place. The stub then runs
under ``<env>/bin/python3`` with Triton's activation applied to its environment variables
(``VIRTUAL_ENV``, ``<env>/bin`` first on PATH, ``<env>/lib`` first on LD_LIBRARY_PATH, no
PYTHONHOME) and, tritium's addition, no PYTHONPATH: the model sees the environment's packages,
not the server's. ``bin/activate`` is not run, as in Triton.

The interpreter is probed once per load: it must start, be Python 3.11 or newer speaking the
server's ``marshal`` format (the stub's frames), and import numpy (the stub needs it, as
Triton's does); otherwise the load fails with a reason saying which.

A model's configuration may come from a client (a load request's ``config``): its value must
then be ``$$TRITON_MODEL_DIRECTORY/<path>`` leading, links followed, inside the model's
directory (``config/confine.py``), and the load's reason must not tell whether a path exists
there: a path that is missing, unreadable, not a file or directory, an archive that cannot be
unpacked (or is refused) and a directory without an interpreter all fail with the same reason
(``NOT_AN_ENVIRONMENT``); the server's log says which it was, for the operator.
"""

from __future__ import annotations

import asyncio
import json
import logging
import marshal
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config.confine import MODEL_DIRECTORY_KEYWORD, client_path
from ...errors import ServerError, invalid_arg, unavailable
from .envarchive import ArchiveCache, ArchiveError, CacheError

log = logging.getLogger("tritium")
EXECUTION_ENV_PARAMETER = "EXECUTION_ENV_PATH"
MIN_PYTHON = (3, 11)  # pyproject's requires-python: the stub's own code needs it
# The one reason for every path that cannot be an environment, whatever is (or is not) there.
NOT_AN_ENVIRONMENT = (
    "not a usable execution environment: expected a readable conda-pack archive (.tar.gz) or "
    "an environment directory with bin/python3 (the server's log says what was found)"
)
_BOOT = Path(__file__).with_name("envboot.py")
# The launcher of a stub under the server's own interpreter: its command line names Triton's
# stub (``ps``, ``pgrep -f triton_python_backend_stub``) and the stub module.
LAUNCHER = Path(__file__).with_name("triton_python_backend_stub.py")
STUB_MODULE = "tritium.backends.python.stub"  # named on the command line, as with -m
_PROBE_TIMEOUT_S = 120.0
_PROBE = """\
import json, marshal, sys
out = {"version": list(sys.version_info[:3]), "marshal": marshal.version,
       "executable": sys.executable}
try:
    import numpy
    out["numpy"] = numpy.__version__
except Exception as exc:
    out["numpy_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class PythonEnv:
    """An execution environment ready to run stubs: its directory and interpreter."""

    root: Path
    python: Path

    def command(self, args: list[str]) -> list[str]:
        return [str(self.python), str(_BOOT), STUB_MODULE, *args]

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (the server's environment) as Triton's activation changes it."""
        env = dict(os.environ if base is None else base)
        env.pop("PYTHONHOME", None)
        env.pop("PYTHONPATH", None)
        env["VIRTUAL_ENV"] = str(self.root)
        env["VIRTUAL_ENV_PROMPT"] = f"({self.root})"
        env["PATH"] = _prepend(self.root / "bin", env.get("PATH"))
        env["LD_LIBRARY_PATH"] = _prepend(self.root / "lib", env.get("LD_LIBRARY_PATH"))
        env["PYTHONUNBUFFERED"] = "1"
        return env


def _prepend(directory: Path, current: str | None) -> str:
    return f"{directory}:{current}" if current else str(directory)


def env_path_parameter(parameters: Any, model_dir: Path, confined: bool = False) -> Path | None:
    """The environment a model's config asks for (substituted, absolute), or None.
    ``confined``: the config is a client's (a load request's), whose value must be
    ``$$TRITON_MODEL_DIRECTORY/<path>`` leading, links followed, to something inside the
    model's directory (config/confine.py; INVALID_ARG otherwise, before any path is probed)."""
    if EXECUTION_ENV_PARAMETER not in parameters:
        return None
    value = parameters[EXECUTION_ENV_PARAMETER].string_value.strip()
    if not value:
        return None
    if confined:
        return client_path(model_dir, model_dir, f"parameters.{EXECUTION_ENV_PARAMETER}", value)
    return Path(os.path.abspath(value.replace(MODEL_DIRECTORY_KEYWORD, str(model_dir))))


class EnvironmentManager:
    """Resolves EXECUTION_ENV_PATH values to probed environments; one per server."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache = ArchiveCache(cache_dir)

    async def prepare(self, model: str, path: Path) -> PythonEnv:
        """The environment at ``path`` for ``model``, unpacked and probed; a ServerError (the
        load's reason) when it cannot serve."""
        prefix = f"model '{model}': {EXECUTION_ENV_PARAMETER} '{path}'"
        root = await self._root(path, prefix)
        python = _interpreter(root)
        if python is None:
            raise _refused(
                prefix,
                f"the environment '{root}' has no bin/python3 (a conda-pack archive, "
                "a conda environment or a venv is expected)",
            )
        env = PythonEnv(root, python)
        await probe(env, prefix)
        return env

    async def _root(self, path: Path, prefix: str) -> Path:
        """The environment's directory: ``path`` itself, or its archive unpacked."""
        if path.is_dir():
            return path
        if not path.is_file():
            raise _refused(prefix, "no such file or directory (or not readable)")
        try:
            return await asyncio.to_thread(self.cache.unpacked, path)
        except CacheError as exc:  # the operator's cache, not the model's path
            raise invalid_arg(f"{prefix}: {exc}") from None
        except ArchiveError as exc:
            raise _refused(prefix, str(exc)) from None


def _refused(prefix: str, detail: str) -> ServerError:
    """The load's one reason for a path that is no environment; the detail goes to the log."""
    log.warning("%s: %s", prefix, detail)
    return invalid_arg(f"{prefix}: {NOT_AN_ENVIRONMENT}")


def _interpreter(root: Path) -> Path | None:
    for name in ("python3", "python"):
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


async def probe(env: PythonEnv, prefix: str) -> dict[str, Any]:
    """Run the environment's interpreter once; raise when the stub could not run under it."""
    try:
        proc = await asyncio.create_subprocess_exec(
            str(env.python),
            "-c",
            _PROBE,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env.environ(),
        )
    except OSError as exc:
        raise unavailable(f"{prefix}: the interpreter {env.python} does not start: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _PROBE_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise unavailable(f"{prefix}: the interpreter {env.python} did not answer") from None
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise unavailable(
            f"{prefix}: the interpreter {env.python} failed (exit code {proc.returncode}): "
            + " | ".join(tail)
        )
    try:
        facts: dict[str, Any] = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise unavailable(f"{prefix}: the interpreter {env.python} is not Python") from None
    problem = compatibility_problem(facts)
    if problem is not None:
        raise unavailable(f"{prefix}: {problem}")
    return facts


def compatibility_problem(facts: dict[str, Any]) -> str | None:
    """Why the stub cannot run on an interpreter that reported ``facts``, or None."""
    version = tuple(facts.get("version", ()))[:2]
    if version < MIN_PYTHON:
        have = ".".join(str(part) for part in version)
        need = ".".join(str(part) for part in MIN_PYTHON)
        return f"the environment's Python is {have}; tritium's Python stub needs {need} or newer"
    if facts.get("marshal") != marshal.version:
        return (
            f"the environment's Python writes marshal format {facts.get('marshal')}, the "
            f"server's Python ({sys.version_info[0]}.{sys.version_info[1]}) format "
            f"{marshal.version}: the stub could not speak to the server"
        )
    if "numpy" not in facts:
        return (
            f"numpy cannot be imported in the environment ({facts.get('numpy_error')}); "
            "install numpy in it, the Python stub needs it (as Triton's does)"
        )
    return None
