"""Server side of the Python backend: one stub process per instance, spoken to over a socket,
restarted when it crashes (see ``instance``)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from ...errors import internal, invalid_arg
from ...config.model_config import ModelConfig, config_to_json, mc
from ...config.spec import ModelSpec
from ..base import LoadContext, ModelInstance, instance_names
from ..ragged import warn_batch_io
from . import ipc, shm_tensors
from .envarchive import default_cache_dir
from .execenv import EnvironmentManager, PythonEnv, env_path_parameter
from .bls_host import BlsDispatch, BlsHost
from .instance import EXECUTION_TIMEOUT_PARAMETER, PythonInstance, Supervision
from .observer import Observability, StubObserver
from .process import StubProcess
from .supervisor import RestartPolicy, VersionHealth

_START_TIMEOUT_S = 60.0

log = logging.getLogger("tritium")


class PythonBackend:
    def __init__(
        self,
        restart: RestartPolicy | None = None,
        env_cache: str = "",
        observability: Observability | None = None,
        bls: BlsDispatch | None = None,
    ) -> None:
        self._restart = restart or RestartPolicy()
        self._envs = EnvironmentManager(Path(env_cache) if env_cache else default_cache_dir())
        self._observability = observability or Observability()
        self._bls = bls  # the server's request/submit and model control, for BLS
        removed = shm_tensors.sweep_dead_servers()  # left by servers that were killed
        if removed:
            log.info("removed %d shared-memory segment(s) left by stopped servers", removed)

    def _stub(self, model: str, name: str, env: PythonEnv | None) -> StubProcess:
        """A stub process (not started) whose model logs and metrics reach the server."""
        stub = StubProcess(name, env)
        stub.observer = StubObserver(self._observability, name, model)
        self._observability.log_levels.watch(stub)  # the logging extension's changes reach it
        return stub

    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        path = ctx.model_file("model.py")
        if not path.is_file():
            # Triton's stub says it at INFO before the load fails (log-watching tools look for it)
            log.info(
                "Failed to preinitialize Python stub: Python model file not found in '%s'", path
            )
            raise internal(f"unable to find '{path.name}' in '{ctx.version_dir}'")
        env = await self._environment(ctx)
        stubs: list[StubProcess] = [self._stub(ctx.model_name, f"{ctx.model_name}_0_0", env)]
        try:
            await self._start(stubs[0])
            config = ctx.config
            if ctx.auto_complete:
                completed = await stubs[0].call(
                    ipc.AUTOCOMPLETE,
                    {"path": str(path), "config": config_to_json(config)},
                    timeout=_START_TIMEOUT_S,
                )
                if completed is not None:
                    config = json_format.ParseDict(completed, ModelConfig())
            spec = ctx.finalize(config)
            warn_batch_io(spec)
            timeout = execution_timeout(spec)
            names = instance_names(spec, ctx)
            observer = stubs[0].observer
            assert observer is not None  # every stub of _stub has one
            stubs[0].name = observer.name = names[0]
            for name in names[1:]:
                stubs.append(self._stub(ctx.model_name, name, env))
            await asyncio.gather(*(self._start(s) for s in stubs[1:]))
            await asyncio.gather(*(self._init(ctx, spec, s, path) for s in stubs))
        except BaseException:
            await asyncio.gather(*(s.stop(timeout=1.0) for s in stubs), return_exceptions=True)
            raise
        health = VersionHealth(ctx.on_failure, ctx.on_recovered)

        async def spawn(name: str) -> StubProcess:
            return await self._spawn(ctx, spec, name, path, env)

        supervision = Supervision(spawn, self._restart, health, timeout)
        instances = [PythonInstance(spec, ctx.version, s, supervision) for s in stubs]
        return spec, list(instances)

    async def _environment(self, ctx: LoadContext) -> PythonEnv | None:
        """The model's EXECUTION_ENV_PATH environment (unpacked, probed), or None: the stubs
        then run on the server's own interpreter."""
        path = env_path_parameter(ctx.config.parameters, ctx.model_dir, ctx.confined)
        return None if path is None else await self._envs.prepare(ctx.model_name, path)

    async def _spawn(
        self, ctx: LoadContext, spec: ModelSpec, name: str, path: Any, env: PythonEnv | None
    ) -> StubProcess:
        """A new, initialised stub for instance ``name`` (a restart); killed if that fails."""
        stub = self._stub(ctx.model_name, name, env)
        try:
            await self._start(stub)
            await self._init(ctx, spec, stub, path)
        except BaseException:
            stub.kill()
            await stub.stop(timeout=1.0)
            raise
        return stub

    async def _start(self, stub: StubProcess) -> None:
        """Spawn the stub; its BLS requests (even from ``initialize``) reach the server."""
        await stub.start()
        if self._bls is not None:
            BlsHost(self._bls, stub)

    async def _init(self, ctx: LoadContext, spec: ModelSpec, stub: StubProcess, path: Any) -> None:
        args = {
            "model_config": json.dumps(spec.config_json),
            "model_instance_kind": instance_kind(spec, stub.name),
            "model_instance_name": stub.name,
            "model_instance_device_id": "0",
            "model_repository": str(ctx.model_dir),
            "model_version": str(ctx.version),
            "model_name": ctx.model_name,
        }
        levels = self._observability.log_levels.current  # later changes: LOG_LEVELS frames
        body = {"path": str(path), "args": args, "log_levels": levels}
        reply = await stub.call(ipc.INIT, body, timeout=_START_TIMEOUT_S)
        # A model without an is_ready() of its own is ready while its stub lives (Triton
        # asks the stub only when the model has one).
        stub.asks_ready = not isinstance(reply, dict) or bool(reply.get("is_ready", True))


def instance_kind(spec: ModelSpec, name: str) -> str:
    """``args['model_instance_kind']`` of instance ``name``: its group's kind as Triton names
    it (TRITONSERVER_InstanceGroupKindString), "CPU" or "MODEL" here (KIND_AUTO became
    KIND_CPU in the spec, and KIND_GPU fails the load: no GPU)."""
    for group in spec.config.instance_group:
        if name in (f"{group.name}_{i}" for i in range(group.count)):
            return str(mc.ModelInstanceGroup.Kind.Name(group.kind)).removeprefix("KIND_")
    return "CPU"


def execution_timeout(spec: ModelSpec) -> float | None:
    """The model's opt-in execution timeout (seconds, config parameter
    EXECUTION_TIMEOUT_SECS), or None. A value that is not a positive number fails the load."""
    parameters = spec.config.parameters
    if EXECUTION_TIMEOUT_PARAMETER not in parameters:
        return None
    text = parameters[EXECUTION_TIMEOUT_PARAMETER].string_value.strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise invalid_arg(
            f"model '{spec.name}': parameter {EXECUTION_TIMEOUT_PARAMETER} must be a positive "
            f"number of seconds, got '{text}'"
        )
    return value
