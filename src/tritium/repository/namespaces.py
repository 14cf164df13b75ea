"""Model namespacing (``--model-namespacing``): which model a bare name means.

With namespacing, each repository is a namespace (its path) and models of the same name in
different repositories load side by side. Clients only ever send a name, so a name held by
several namespaces is ambiguous and refused with Triton's error (core's
``ModelRepositoryManager::FindModelIdentifier``); an ensemble's step looks in the ensemble's
own namespace first (Triton's dependency graph). Without namespacing every model is in the
namespace '' and a name is one model, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import invalid_arg
from .layout import ModelId
from .records import ModelRecord, was_unloaded


def ambiguous(name: str, count: int) -> str:
    """Triton's text for a name found in several namespaces."""
    return (
        f"There are {count} identifiers of model '{name}' in global map, model namespace "
        "must be provided to resolve ambiguity."
    )


class NameIndex:
    """The records of each model name, kept beside the manager's records (by identifier),
    so a request's lookup is one dictionary read."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._by_name: dict[str, list[ModelRecord]] = {}

    def store(self, record: ModelRecord) -> None:
        """``record`` replaces the one of the same identifier (a load or a reload)."""
        peers = [r for r in self._by_name.get(record.name, ()) if r.key != record.key]
        peers.append(record)
        peers.sort(key=lambda r: r.namespace)
        self._by_name[record.name] = peers

    def find(self, name: str, near: str | None = None) -> ModelRecord | None:
        """The record ``name`` means (None: no such model). ``near``: a namespace to look in
        first (an ensemble's step). INVALID_ARG when several namespaces hold the name."""
        records = self._by_name.get(name)
        if not records:
            return None
        if len(records) == 1:
            return records[0]
        if near is not None:
            for record in records:
                if record.namespace == near:
                    return record
        # A model unloaded everywhere but one namespace has left Triton's global map.
        live = [r for r in records if not (r.versions and was_unloaded(r))]
        if len(live) > 1:
            raise invalid_arg(ambiguous(name, len(live)))
        return (live or records)[0]

    def keys(self, name: str, known: Iterable[ModelId]) -> list[ModelId]:
        """Every identifier of ``name`` (a load or unload by name acts on all of them)."""
        if not self.on:
            return [ModelId("", name)]
        return sorted({k for k in known if k.name == name}) or [ModelId("", name)]


def composing_id(namespace: str, name: str, known: Iterable[ModelId], on: bool) -> ModelId:
    """The model an ensemble in ``namespace`` means by a step's ``name``: its own namespace's,
    else the one namespace that has it (several: none is chosen, the step's model is missing
    and the ensemble fails to load naming it)."""
    own = ModelId(namespace, name)
    if not on:
        return own
    found = {k for k in known if k.name == name}
    if own in found or len(found) != 1:
        return own
    return found.pop()
