"""Model control modes (``--model-control-mode=none|poll|explicit``) and the repository
extension's load/unload, on top of the manager's atomic (re)load."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ServerError, internal, invalid_arg, unavailable
from ..logs.settings import about_model
from ..config.confine import check_client_paths
from ..config.model_config import ModelConfig, config_from_json
from .layout import ModelId, ModelLocation
from .manager import ModelRepositoryManager
from .names import check_model_name, check_override_key, unloadable_name
from .scratch import Scratch, sweep

log = logging.getLogger("tritium")
T = TypeVar("T")

NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"
WILDCARD_ALONE = "Wildcard model name '*' must be the ONLY startup model if specified at all."


class ModelControl:
    def __init__(
        self,
        manager: ModelRepositoryManager,
        mode: str = "none",
        poll_secs: float = 15.0,
        startup: tuple[str, ...] = (),
    ) -> None:
        if mode not in ("none", "poll", "explicit"):
            raise ValueError(f"unknown model control mode '{mode}'")
        self.manager = manager
        self.mode = mode
        self._poll_secs = poll_secs
        self._startup = startup
        self._poller: asyncio.Task[None] | None = None
        self._signatures: dict[ModelId, tuple[object, ...]] = {}
        # made on the first load with file overrides: a server killed (-9) without any
        # leaves no empty directory behind (one killed with some: the next start sweeps it)
        self._scratch: Scratch | None = None
        self._requests: set[asyncio.Task[Any]] = set()  # loads/unloads asked for by clients
        # what made the startup models fail before any load (Triton's manager creation
        # errors): the server's start reports them with the models that failed to load
        self.startup_failures: list[str] = []
        # poll mode's own timer; --workers turns it off: the supervisor polls for all
        self.own_poller = True

    async def start(self) -> None:
        await asyncio.to_thread(sweep, "overrides")  # those of servers killed (-9)
        if self.mode == "explicit":
            await self._load_startup()
        else:
            await self.manager.load_all()
        if self.mode == "poll":
            self._signatures = self._snapshot()
            if self.own_poller:
                self._poller = asyncio.ensure_future(self._poll())

    async def _load_startup(self) -> None:
        """Explicit mode's startup models, as Triton's manager takes them: "*" (alone) loads
        every model; "*" with other names loads none; a name no repository holds is logged
        and makes the start fail (with --exit-on-error), the others still load."""
        names = set(self._startup)
        if "*" in names:
            if len(names) > 1:
                self.startup_failures.append(WILDCARD_ALONE)
                return
            await self.manager.load_all(None)
            return
        known = {key.name for key in self.manager.scan()}
        for name in sorted(names - known):
            message = f"failed to poll model '{name}': model not found in any model repository."
            log.error("%s", message)
            self.startup_failures.append(message)
        await self.manager.load_all(names & known)

    def in_flight(self) -> int:
        """Loads and unloads clients asked for, not done yet (Triton's in-flight
        non-inference requests at shutdown)."""
        return len(self._requests)

    async def stop(self, timeout: float = 0.0) -> None:
        """Shutdown: the poller stops; the loads and unloads in progress finish within
        ``timeout`` seconds (Triton finishes a load, then unloads it), then are cancelled."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._requests and timeout > 0:
            await asyncio.wait(set(self._requests), timeout=timeout)
        for task in self._requests:
            task.cancel()
        await asyncio.gather(*self._requests, return_exceptions=True)
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None

    async def _finish(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a load or unload to its end even if the client goes away meanwhile (a load
        cancelled half-way would leave instances nobody closes); Triton finishes them too."""
        task = asyncio.ensure_future(work)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        return await asyncio.shield(task)

    # -- the repository extension ---------------------------------------------------------------
    async def load(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        if self.mode != "explicit":
            raise unavailable(NOT_EXPLICIT)
        check_model_name(name)  # before the name or a key comes near a path
        for key, content in (files or {}).items():
            if not isinstance(content, bytes):
                raise invalid_arg(f"File parameter '{key}' must have bytes type for its value")
        try:
            override = _override(config_json, files)
        except ServerError as exc:
            raise _poll_failure(name, exc) from None
        if override is not None:  # a client's paths stay in the model's directory: refused
            check_client_paths(override)  # before anything is written or looked up
        try:
            locations = self._locations(name, files)
        except ServerError as exc:
            raise _poll_failure(name, exc) from None
        # Under --model-namespacing a name may be in several repositories: all are loaded.
        reasons = [await self._finish(self.manager.load(loc, override)) for loc in locations]
        reason = "; ".join(r for r in reasons if r)
        if reason:
            raise internal(f"failed to load '{name}', {reason}")

    def _locations(self, name: str, files: dict[str, bytes] | None) -> list[ModelLocation]:
        if files:
            return [self._materialize(name, files)]
        locations = [loc for k, loc in self.manager.scan().items() if k.name == name]
        if not locations:
            raise invalid_arg(f"no model '{name}' in the model repositories")
        return locations

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        if self.mode != "explicit":
            raise unavailable(NOT_EXPLICIT)
        if unloadable_name(name):  # no path is built from it: an unknown name is a no-op
            await self._finish(self.manager.unload(name, unload_dependents))

    def _materialize(self, name: str, files: dict[str, bytes]) -> ModelLocation:
        """``file:<version>/<path>`` overrides as a model directory of their own, in a fresh
        directory under the scratch area (removed when the model is unloaded or replaced).
        ``name`` and every key were checked to be safe relative paths."""
        if self._scratch is None:
            self._scratch = Scratch("overrides")
        holder = Path(tempfile.mkdtemp(prefix="load-", dir=self._scratch.path))
        root = holder / name
        try:
            root.mkdir()
            for key, content in files.items():
                _write_override(root, key, content)
        except BaseException:
            shutil.rmtree(holder, ignore_errors=True)
            raise
        return ModelLocation(name, root, scratch=holder)

    # -- poll mode -----------------------------------------------------------------------------
    def _snapshot(self) -> dict[ModelId, tuple[object, ...]]:
        """Per model directory: every file's path, size and mtime."""
        signatures: dict[ModelId, tuple[object, ...]] = {}
        for key, location in self.manager.scan().items():
            if location.path is None:
                signatures[key] = ("ambiguous",)
                continue
            entries = []
            for path in sorted(location.path.rglob("*")):
                if "__pycache__" in path.parts:
                    continue
                try:
                    stat = path.stat()
                except OSError:
                    continue
                entries.append((str(path), stat.st_size, stat.st_mtime_ns))
            signatures[key] = tuple(entries)
        return signatures

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_secs)
            try:
                await self._poll_once()
            except ServerError as exc:
                log.error("repository poll failed: %s", exc.message)
            except Exception:  # the poller must keep going
                log.exception("repository poll failed")

    async def _poll_once(self) -> None:
        await self.apply_poll(await asyncio.to_thread(self._snapshot))

    async def snapshot(self) -> list[list[Any]]:
        """The repository as one poll sees it, as JSON (``[namespace, name, signature]``):
        with ``--workers`` one worker takes it and every worker applies it (``apply_poll``)."""
        current = await asyncio.to_thread(self._snapshot)
        return [[key.namespace, key.name, list(sig)] for key, sig in current.items()]

    async def apply_poll_doc(self, doc: list[list[Any]]) -> None:
        current = {
            ModelId(str(namespace), str(name)): tuple(
                tuple(e) if isinstance(e, list) else e for e in signature
            )
            for namespace, name, signature in doc
        }
        await self.apply_poll(current)

    async def apply_poll(self, current: dict[ModelId, tuple[object, ...]]) -> None:
        """Unload the models that left the repository, load those that changed."""
        locations = self.manager.scan()
        for key in self._signatures.keys() - current.keys():
            log.info(
                "model '%s' left the repository: unloading", key.name, extra=about_model(key.name)
            )
            await self.manager.unload_id(key)
        for key, signature in current.items():
            if key in locations and self._signatures.get(key) != signature:
                await self._apply_change(locations[key])
        self._signatures = current

    async def _apply_change(self, location: ModelLocation) -> None:
        """A model directory that changed: reloaded; one whose name is now in several
        repositories is unloaded (Triton's Poll marks it deleted), and loads again from the one
        left once the others are gone."""
        key = location.key
        if location.path is None:
            log.error(
                "failed to poll model '%s': not unique across all model repositories",
                key.name,
                extra=about_model(key.name),
            )
            await self.manager.unload_id(key)
            return
        log.info(
            "model '%s' changed in the repository: loading", key.name, extra=about_model(key.name)
        )
        await self.manager.load(location)


def _override(config_json: str | None, files: dict[str, bytes] | None) -> ModelConfig | None:
    """The load request's config, its ``file:`` keys checked first."""
    for key in files or ():  # before a key comes near a path; Triton's repository agent
        check_override_key(key)  # refuses a bad one in its poll: INTERNAL (_poll_failure)
    if files and config_json is None:
        raise invalid_arg("the 'config' parameter is required with 'file:' overrides")
    return None if config_json is None else config_from_json(config_json)


def _poll_failure(name: str, exc: ServerError) -> ServerError:
    """Triton logs the detail; the client gets its summary."""
    log.error("failed to load '%s': %s", name, exc.message, extra=about_model(name))
    return internal(f"failed to load '{name}', failed to poll from model repository: {exc.message}")


def _write_override(root: Path, key: str, content: bytes) -> None:
    target = root / check_override_key(key)
    if root.resolve() not in target.resolve().parents:  # belt and braces: keys were checked
        raise invalid_arg(
            f"Invalid file parameter '{key}': the path must stay within the model directory"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    except OSError as exc:  # e.g. one key's file is another key's directory
        raise invalid_arg(f"Invalid file parameter '{key}': {exc.strerror}") from None
