"""``Model``: a model of the in-process server, by name and version (-1: the highest ready
one), with its metadata and inference (``infer``, ``async_infer``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._enums import ModelBatchFlag, ModelTxnPropertyFlag
from ._errors import UnsupportedError
from ._loop import AsyncSink, ThreadSink
from ._request import InferenceRequest
from ._response import AsyncResponseIterator, Handle, Item, ResponseIterator

if TYPE_CHECKING:
    from ._server import Server


class Model:
    """A model of a started server (``Server.model``, ``Server.models``, ``Server.load``)."""

    def __init__(
        self,
        server: Server,
        name: str,
        version: int = -1,
        state: str | None = None,
        reason: str | None = None,
    ) -> None:
        server._started()  # InvalidArgumentError when it is not
        self._server = server
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason

    def _served(self, name: str, version: int) -> Model:
        """The model a response names (this one when it names the same version)."""
        if name == self.name and version == self.version:
            return self
        return Model(self._server, name, version)

    def _version(self) -> str:
        return str(self.version) if self.version > 0 else ""

    # -- inference -----------------------------------------------------------------------------
    def create_request(self, **kwargs: Any) -> InferenceRequest:
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs: Any,
    ) -> ResponseIterator:
        """Send a request; its responses (every one of a decoupled model, the last flagged
        ``final``) are iterated in this thread. A request the server refuses before
        scheduling (unknown model or input, wrong shape...) raises here."""
        request = (
            inference_request if inference_request is not None else self.create_request(**kwargs)
        )
        client = request._client()
        loop = self._server._loop_or_raise()
        if loop.on_loop():
            raise UnsupportedError(
                "infer() on the server's own event loop thread would deadlock: use async_infer"
            )
        handle = Handle(ThreadSink[Item](), announce=True)
        iterator = ResponseIterator(self, loop, handle, request, raise_on_error)
        self._server._dispatch(client, handle)
        iterator._wait_accepted()
        return iterator

    def async_infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs: Any,
    ) -> AsyncResponseIterator:
        """Send a request without waiting; its responses are awaited on the caller's event
        loop (``async for``). A refusal before scheduling raises at the first response."""
        request = (
            inference_request if inference_request is not None else self.create_request(**kwargs)
        )
        client = request._client()
        loop = self._server._loop_or_raise()
        handle = Handle(AsyncSink[Item](), announce=False)
        iterator = AsyncResponseIterator(self, loop, handle, request, raise_on_error)
        self._server._dispatch(client, handle)
        return iterator

    # -- what the server says of it ------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        name, version = self.name, self._version()
        return self._server._run(lambda core: core.model_metadata(name, version))

    def ready(self) -> bool:
        name, version = self.name, self._version()
        ready: bool = self._server._wait(lambda core: core.model_ready(name, version))
        return ready

    def batch_properties(self) -> ModelBatchFlag:
        config = self.config()
        if int(config.get("max_batch_size", 0)) > 0:
            return ModelBatchFlag.FIRST_DIM
        return ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        policy = self.config().get("model_transaction_policy", {})
        if policy.get("decoupled"):
            return ModelTxnPropertyFlag.DECOUPLED
        return ModelTxnPropertyFlag.ONE_TO_ONE

    def statistics(self) -> dict[str, Any]:
        name, version = self.name, self._version()
        return self._server._run(lambda core: core.statistics(name, version))

    def config(self, config_version: int = 1) -> dict[str, Any]:
        name, version = self.name, self._version()
        return self._server._run(lambda core: core.model_config_json(name, version))

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return str({"name": self.name, "version": self.version, "state": self.state})
