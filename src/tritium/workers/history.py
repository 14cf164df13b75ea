"""What a worker started again replays (the supervisor's side): each model's last control
action, the log settings changed, each model's trace settings changed, the system
shared-memory regions, in the order they were applied.

Every entry is small: a load's ``file:`` overrides are not in it but in the supervisor's
uploads directory (``repository/scratch.py``, kind ``uploads``), where the worker that took
the request wrote them, one file per override, and the entry names that directory. A worker
replays the entries one control message each (``Supervisor._replay``), reading the files
from there; a directory is removed once its entry is replaced and the replacing action has
been applied on every worker (a worker still replaying the old entry applies the new one
only after it), or when no worker applied its load.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..errors import invalid_arg

Entry = dict[str, Any]


class History:
    """The entries in order, and how long each model action took when it was first
    applied (what a worker replaying it is allowed, ``Supervisor._watch_heartbeats``)."""

    def __init__(self, uploads: Path | None) -> None:
        self._entries: dict[str, Entry] = {}
        self._took: dict[str, float] = {}
        self._uploads = uploads  # None: no loads with files (not explicit mode)

    def snapshot(self) -> list[tuple[Entry, float]]:
        """The entries to replay now, with the time each first took."""
        return [(entry, self._took.get(key, 0.0)) for key, entry in self._entries.items()]

    def upload(self, args: dict[str, Any]) -> Path | None:
        """The uploads directory a load names (one of the supervisor's own, else refused)."""
        given = args.get("upload")
        if not given:
            return None
        path = Path(str(given["dir"]))
        if (
            self._uploads is None
            or path.parent != self._uploads
            or not path.name.startswith("load-")
        ):
            raise invalid_arg(f"load of '{args.get('name')}': its files are not the server's")
        return path

    def model_action(self, action: str, args: dict[str, Any], took: float) -> Path | None:
        """A load or unload some worker applied: it replaces the model's entry; the
        directory of the entry replaced (to remove now), if any."""
        key = f"model:{args['name']}"
        old = self._entries.pop(key, None)
        self._entries[key] = {"action": action, "args": args}
        self._took[key] = took
        before = self.upload(old["args"]) if old is not None and old["action"] == "load" else None
        return before if before != self.upload(args) else None

    def setting(self, change: dict[str, Any]) -> None:
        _remember(self._entries, change)


def remove_upload(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _remember(history: dict[str, Entry], change: dict[str, Any]) -> None:
    """Keep a setting change for the replay, compacted: one entry per log settings, per
    model's trace settings (later values over earlier ones) and per shm region."""
    action, args = str(change["action"]), dict(change["args"])
    if action == "shm_unregister":
        name = str(args["name"])
        gone = [k for k in history if k.startswith("shm:") and (not name or k == f"shm:{name}")]
        for key in gone:
            del history[key]
        return
    if action == "shm_register":
        key = f"shm:{args['name']}"
    elif action == "log":
        key = "log"
        args = {"update": {**_earlier_update(history, key), **args["update"]}}
    else:  # trace
        key = f"trace:{args['model']}"
        earlier = _earlier_update(history, key)
        args = {"model": args["model"], "update": {**earlier, **args["update"]}}
    history.pop(key, None)
    history[key] = {"action": "setting", "args": {"action": action, "args": args}}


def _earlier_update(history: dict[str, Entry], key: str) -> dict[str, Any]:
    """The update kept under ``key`` (``{"action": "setting", "args": {"action": ...,
    "args": {..., "update": ...}}}``), or none."""
    kept = history.get(key)
    if kept is None:
        return {}
    return dict(kept["args"]["args"]["update"])
