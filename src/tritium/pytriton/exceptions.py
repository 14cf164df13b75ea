"""PyTriton's exception classes (``pytriton.exceptions``), under the same names."""

from __future__ import annotations


class PyTritonError(Exception):
    """The base of PyTriton's errors; ``message`` is the text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        return self._message


class PyTritonValidationError(PyTritonError):
    """A value PyTriton checks is wrong."""


class PyTritonInvalidOperationError(PyTritonError):
    """An operation that cannot be done in the current state."""


class PyTritonBadParameterError(PyTritonError):
    """A parameter is wrong (here also: a TritonConfig value tritium cannot honour)."""


class PyTritonModelConfigError(PyTritonError):
    """A model configuration is wrong."""


class PyTritonUnrecoverableError(PyTritonError):
    """An inference callable raises it to stop the server."""


class PyTritonRuntimeError(PyTritonError):
    """A failure while serving."""
