"""The trace extension's state (Triton's ``TraceManager``): the global setting, the models'
settings, sampling, and where completed traces go (the trace file, or OpenTelemetry).

Front-ends ask ``active`` once per request (a plain attribute: tracing off costs nothing
more) and, when it is true, ``sample`` for a trace of the request. Everything runs on the
event loop, so nothing here takes a lock.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from .file import TraceFile, TraceStream
from .settings import (
    TraceLevel,
    TraceMode,
    TraceSetting,
    TraceUpdate,
    TraceValues,
    check_setting,
    level_names,
    merged,
)
from .trace import Trace, TraceGroup, triton_entries

log = logging.getLogger("tritium")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The trace flags: the global values, and ``--trace-config opentelemetry,<k>=<v>``
    settings in the order given (``resource`` may repeat)."""

    values: TraceValues = field(default_factory=TraceValues)
    opentelemetry: tuple[tuple[str, str], ...] = ()
    # --workers: this worker's part of the trace file (``.w<index>``, workers/trace_parts.py)
    # added to the file's path; the settings still show the path given
    file_suffix: str = ""
    # the first trace id and the step between ids: --workers gives worker i (i + 1, N),
    # so ids stay unique in the whole server (the joined file)
    ids: tuple[int, int] = (1, 1)


class TraceManager:
    def __init__(self, config: TraceConfig) -> None:
        self.config = config
        self.default = config.values
        self.global_setting = TraceSetting(config.values)
        self.models: dict[str, TraceSetting] = {}
        self.active = False  # some setting traces: front-ends then call sample()
        self._ids = itertools.count(*config.ids).__next__
        self._file = TraceFile(config.values.file + config.file_suffix)
        self._streams: dict[TraceSetting, TraceStream] = {}
        self._exporter: Any = None
        if config.values.mode is TraceMode.OPENTELEMETRY:
            from .otel import OtelExporter  # the SDK is imported only in this mode

            self._exporter = OtelExporter(config.opentelemetry)
        self._refresh()

    # -- the trace extension ---------------------------------------------------------------
    def settings(self, model_name: str = "") -> dict[str, list[str]]:
        """A setting as the trace extension shows it (every value a list of strings)."""
        values = self.models.get(model_name, self.global_setting).current()
        shown: dict[str, list[str]] = {
            "trace_level": level_names(values.level),
            "trace_rate": [str(values.rate)],
            "trace_count": [str(values.count)],
        }
        if values.mode is TraceMode.TRITON:
            shown["log_frequency"] = [str(values.log_frequency)]
            shown["trace_file"] = [values.file]
        shown["trace_mode"] = [values.mode.value]
        if values.mode is TraceMode.OPENTELEMETRY:
            for key, value in self._exporter.settings():
                shown.setdefault(key, []).append(value)
        return shown

    def update(self, model_name: str, update: TraceUpdate) -> None:
        """Apply a trace-extension update to a model's setting, or to the global one (whose
        change reaches every model field that mirrors it). Raises on an invalid setting."""
        if model_name:
            self._update_model(model_name, update)
        else:
            values, specified = merged(self.global_setting, self.default, update)
            check_setting(values, values.count)
            self._replace_global(TraceSetting(values, specified))
            for name in list(self.models):
                self._update_model(name, TraceUpdate())
        self._refresh()

    def _update_model(self, name: str, update: TraceUpdate) -> None:
        current = self.models.get(name)
        values, specified = merged(current, self.global_setting.current(), update)
        if not specified:
            self.models.pop(name, None)  # nothing of its own: the global setting applies
        else:
            check_setting(values, values.count)
            self.models[name] = TraceSetting(values, specified)
        if current is not None:
            self._retire(current)

    def _replace_global(self, setting: TraceSetting) -> None:
        old, self.global_setting = self.global_setting, setting
        self._retire(old)

    def _retire(self, setting: TraceSetting) -> None:
        stream = self._streams.pop(setting, None)
        if stream is not None:
            stream.retire()

    def _refresh(self) -> None:
        settings = [self.global_setting, *self.models.values()]
        self.active = any(s.values.level for s in settings)

    # -- sampling ----------------------------------------------------------------------------
    def sample(
        self, model_name: str, traceparent: str | None = None, tracestate: str | None = None
    ) -> Trace | None:
        """A root trace for a request to ``model_name``, or None when it is not sampled. In
        opentelemetry mode a valid W3C ``traceparent`` from the client is always traced, as
        a child of the client's span."""
        setting = self.models.get(model_name, self.global_setting)
        context = None
        if traceparent is not None and self._exporter is not None and setting.values.level:
            context = self._exporter.extract(traceparent, tracestate)
        if not setting.sample(context is not None):
            return None
        group = TraceGroup(setting, self._ids, self._completed, context)
        return group.new_trace(0)

    def _completed(self, group: TraceGroup) -> None:
        if self._exporter is not None:
            self._exporter.export(group)
            return
        if not group.level & (TraceLevel.TIMESTAMPS | TraceLevel.TENSORS):
            return
        stream = self._streams.get(group.setting)
        if stream is None:
            stream = self._streams[group.setting] = TraceStream(group.setting, self._file)
        stream.write(triton_entries(group))
        live = group.setting is self.global_setting or group.setting in self.models.values()
        if not live:
            self._retire(group.setting)  # a late trace of a replaced setting

    def close(self) -> None:
        """At shutdown: write what every setting still holds, close the trace file, and
        flush the OpenTelemetry exporter."""
        for stream in list(self._streams.values()):
            stream.retire()
        self._streams.clear()
        self._file.close()
        if self._exporter is not None:
            self._exporter.close()
