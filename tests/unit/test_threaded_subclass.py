"""``ThreadedInstance`` is compiled and subclassed by interpreted backends (PyTorch's and
OpenVINO's instances): the class attributes a subclass sets, ``failure`` (the prefix of an
execution error) and ``own_errors`` (its own ServerErrors reach the client as they are), are
the subclass's in both builds. (Compiled, a plain class attribute would be an instance field
whose default the interpreted subclass could not change.)"""

from __future__ import annotations

from tritium.backends.inline_policy import ModelExecution
from tritium.backends.threaded import ThreadedInstance
from tritium.errors import ErrorKind, ServerError, invalid_arg
from tritium.request import InferenceRequest
from tritium.types import InferenceResponse


class _Raising(ThreadedInstance):
    failure = "framework execute failure"

    def __init__(self, error: Exception) -> None:
        super().__init__("raising", 1, "test", ModelExecution("raising"))
        self.error = error

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        raise self.error


class _OwnErrors(_Raising):
    own_errors = True


def _outcome(instance: ThreadedInstance) -> ServerError:
    try:
        outcome = instance._run_or_error([])
    finally:
        instance._work.put(None)  # ends its thread
    assert isinstance(outcome, ServerError)
    return outcome


def test_an_interpreted_subclass_names_its_framework_in_execution_errors() -> None:
    error = _outcome(_Raising(RuntimeError("negative input")))
    assert (error.kind, error.message) == (
        ErrorKind.INTERNAL,
        "framework execute failure: negative input",
    )


def test_an_interpreted_subclass_may_pass_its_own_errors_through() -> None:
    error = _outcome(_OwnErrors(invalid_arg("input 'X' has the wrong shape")))
    assert (error.kind, error.message) == (ErrorKind.INVALID_ARG, "input 'X' has the wrong shape")


def test_without_own_errors_a_server_error_is_internal_with_the_prefix() -> None:
    error = _outcome(_Raising(invalid_arg("bad")))
    assert (error.kind, error.message) == (ErrorKind.INTERNAL, "framework execute failure: bad")
