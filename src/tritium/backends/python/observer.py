"""The server's side of Python-model observability: what a stub's OBSERVE and CALL frames say.

``pb_utils.Logger`` records become records of the server's logger ("tritium.model") carrying
the model's call site, so they print in Triton's format (``I0101 12:00:00.000000 pid
model.py:42] message``) under the server's log flags; custom metric families and metrics go to
the server's ``CustomMetrics`` registry, owned by the stub that made them and released with it
(``close``, when its process is gone: the model unloaded, or the stub crashed).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...metrics.custom import CustomMetrics, MetricError
from ...logs.settings import about_model
from . import ipc

if TYPE_CHECKING:
    from .process import StubProcess

log = logging.getLogger("tritium")
model_log = logging.getLogger("tritium.model")

# pb_utils.LogLevel order: INFO, WARNING, ERROR, VERBOSE.
_PY_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.DEBUG)


class ModelLogLevels:
    """Which pb_utils.Logger levels are on now (INFO, WARNING, ERROR, VERBOSE: Triton's
    --log-info, --log-warning, --log-error, and --log-verbose >= 1), and the stubs to tell
    when the logging extension changes them: stubs filter before sending, so a level turned on
    at run time must reach the ones already running (a LOG_LEVELS frame)."""

    def __init__(self, levels: tuple[bool, bool, bool, bool] = (True, True, True, False)) -> None:
        self.current: tuple[bool, bool, bool, bool] = levels
        self._stubs: weakref.WeakSet[StubProcess] = weakref.WeakSet()

    def watch(self, stub: StubProcess) -> None:
        """``stub`` gets every later change (its INIT carries ``current``)."""
        self._stubs.add(stub)

    def set(self, levels: tuple[bool, bool, bool, bool]) -> None:
        """New levels, sent to every live stub (on the event loop, as every stub write)."""
        if levels == self.current:
            return
        self.current = levels
        for stub in list(self._stubs):
            if stub.alive:
                try:
                    stub.send(ipc.LOG_LEVELS, levels)
                except (OSError, RuntimeError, AssertionError) as exc:  # dying: nothing to tell
                    log.debug("log levels not sent to stub '%s': %s", stub.name, exc)


@dataclass(frozen=True, slots=True)
class Observability:
    """What the Python backend needs from the server: its custom metrics registry and which
    model log levels are on (``ModelLogLevels``, changed by the logging extension)."""

    metrics: CustomMetrics = field(default_factory=CustomMetrics)
    log_levels: ModelLogLevels = field(default_factory=ModelLogLevels)


class StubObserver:
    """One stub's logs and metrics (the owner of its metric handles)."""

    def __init__(self, observability: Observability, name: str, model: str = "") -> None:
        self._metrics = observability.metrics
        self._levels = observability.log_levels
        self.name = name
        self._about = about_model(model) if model else None  # extra= of its records

    def observe(self, body: Any) -> None:
        """An OBSERVE frame: logs, how many were dropped, metric updates, deletions."""
        try:
            logs, dropped, updates, drops = body
            for level, where, message in logs:
                self._log(level, where, message)
            if dropped:
                log.warning(
                    "model instance '%s': %d log messages were dropped (the model logged "
                    "faster than the server could take them)",
                    self.name,
                    dropped,
                    extra=self._about,
                )
            for update in updates:
                self._metrics.update(self, tuple(update))
            for handle, is_family in drops:
                if is_family:
                    self._metrics.drop_family(self, handle)
                else:
                    self._metrics.drop_metric(self, handle)
        except (MetricError, TypeError, ValueError, IndexError, KeyError) as exc:
            log.warning(
                "model instance '%s': malformed observability frame: %s",
                self.name,
                exc,
                extra=self._about,
            )

    def _log(self, level: int, where: str, message: str) -> None:
        if not self._levels.current[level]:
            return
        py_level = _PY_LEVELS[level]
        if not model_log.isEnabledFor(py_level):
            return
        filename, _, line = str(where).rpartition(":")
        record = model_log.makeRecord(
            model_log.name,
            py_level,
            filename,
            int(line) if line.isdigit() else 0,
            str(message),
            (),
            None,
            extra=self._about,
        )
        model_log.handle(record)

    def call(self, body: Any) -> tuple[Any, bool, Any]:
        """A CALL frame → the CALL_REPLY body (id, ok, value or error text)."""
        call_id = body[0] if isinstance(body, (list, tuple)) and body else None
        try:
            _, operation, args = body
            return (call_id, True, self._dispatch(operation, args))
        except MetricError as exc:
            return (call_id, False, str(exc))
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            return (call_id, False, f"malformed call: {exc}")

    def _dispatch(self, operation: str, args: Any) -> Any:
        metrics = self._metrics
        if operation == "family":
            handle, name, description, kind = args
            metrics.new_family(self, handle, name, description, kind)
            return None
        if operation == "metric":
            handle, family, labels, buckets = args
            metrics.new_metric(self, handle, family, labels, buckets)
            return metrics.bounds(self, handle)
        if operation == "value":
            return metrics.value(self, args)
        raise ValueError(f"unknown operation {operation!r}")

    def close(self) -> None:
        """The stub is gone: its families and metrics go with it."""
        self._metrics.release(self)
