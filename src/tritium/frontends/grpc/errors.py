"""ErrorKind → gRPC status code (Triton's table), and the one
place an exception becomes a status (``status_of``, the transport's dispatcher calls it)."""

from google.protobuf.message import DecodeError

from ...errors import ErrorKind, ServerError
from ...logs.budget import UNEXPECTED_ERRORS
from ...transport.grpc.status import RpcError, StatusCode, status_message

CODE = {
    ErrorKind.INTERNAL: StatusCode.INTERNAL,
    ErrorKind.NOT_FOUND: StatusCode.NOT_FOUND,
    ErrorKind.UNAVAILABLE: StatusCode.UNAVAILABLE,
    ErrorKind.UNSUPPORTED: StatusCode.UNIMPLEMENTED,
    ErrorKind.INVALID_ARG: StatusCode.INVALID_ARGUMENT,
    ErrorKind.ALREADY_EXISTS: StatusCode.ALREADY_EXISTS,
    ErrorKind.CANCELLED: StatusCode.CANCELLED,
    ErrorKind.UNKNOWN: StatusCode.UNKNOWN,
}

_KIND_OF = {code: kind for kind, code in CODE.items()}


def triton_status(code: StatusCode) -> str:
    """A call's status code as the access log's Triton status: SUCCESS, the error kind it
    maps from, or (a transport refusal) the gRPC code's name."""
    if code is StatusCode.OK:
        return "SUCCESS"
    kind = _KIND_OF.get(code)
    return kind.value if kind is not None else code.name


def code_of(exc: BaseException) -> StatusCode:
    """The status code ``status_of`` gives an exception (without logging anything)."""
    if isinstance(exc, RpcError):
        return exc.code
    if isinstance(exc, ServerError):
        return CODE[exc.kind]
    if isinstance(exc, DecodeError):
        return StatusCode.INVALID_ARGUMENT
    return StatusCode.INTERNAL


def status_of(exc: BaseException) -> tuple[StatusCode, str]:
    """An exception as the status its call ends with; anything unexpected is a bug: logged,
    answered INTERNAL (``UNEXPECTED_ERRORS``: one traceback per kind a minute), and the server
    goes on."""
    if isinstance(exc, RpcError):
        return exc.code, status_message(exc.message)
    if isinstance(exc, ServerError):
        return CODE[exc.kind], status_message(exc.message)
    if isinstance(exc, DecodeError):
        return StatusCode.INVALID_ARGUMENT, f"unable to parse the request message: {exc}"
    UNEXPECTED_ERRORS.report("unhandled error in a gRPC handler", exc)
    return StatusCode.INTERNAL, status_message(f"{type(exc).__name__}: {exc}")
