"""Triton's module paths (``tritonserver._api._server``, ``._model``, ``._request``,
``._response``, ``._tensor``, ``._datautils``, ``._memorybuffer``), which code written for
Triton names in annotations and imports: each re-exports tritium's classes (the same
objects as ``tritium.tritonserver``'s)."""

from . import _datautils, _memorybuffer, _model, _request, _response, _server, _tensor

__all__ = [
    "_datautils",
    "_memorybuffer",
    "_model",
    "_request",
    "_response",
    "_server",
    "_tensor",
]
