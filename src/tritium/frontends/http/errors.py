"""ErrorKind → HTTP status (Triton's table)."""

from ...errors import ErrorKind

STATUS = {
    ErrorKind.INTERNAL: 500,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNSUPPORTED: 501,
    ErrorKind.INVALID_ARG: 400,
    ErrorKind.ALREADY_EXISTS: 400,
    ErrorKind.CANCELLED: 400,
    ErrorKind.UNKNOWN: 400,
}
