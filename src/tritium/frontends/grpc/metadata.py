"""Triton's ``--grpc-header-forward-pattern``: which request metadata becomes string
parameters (``forwarded_parameters``), following what grpc core shows the application under
Triton. The transport's metadata rules (``grpc-timeout``, ``grpc-message``, compression) are
``transport/grpc/metadata.py``'s."""

from __future__ import annotations

import base64
import binascii
import re

# ----------------------------------------------------------------------------------------
# --grpc-header-forward-pattern
# ----------------------------------------------------------------------------------------

# Metadata grpc core consumes itself and never shows the application (its metadata batch's
# known keys, less the few PublishToAppEncoder hands on: user-agent, host, lb-token,
# traceparent, grpc-previous-rpc-attempts, grpc-retry-pushback-ms). Pseudo-headers (":path")
# are left out by their colon.
TRANSPORT_METADATA = frozenset(
    {
        "content-type",
        "te",
        "grpc-encoding",
        "grpc-internal-encoding-request",
        "grpc-accept-encoding",
        "grpc-status",
        "grpc-message",
        "grpc-timeout",
        "endpoint-load-metrics-bin",
        "grpc-server-stats-bin",
        "grpc-trace-bin",
        "grpc-tags-bin",
        "grpclb_client_stats",
        "lb-cost-bin",
        "x-envoy-peer-metadata",
    }
)
# The parameters tritium's core reads as request options (tritium.extensions.parameters.RESERVED;
# a front end may not import it, a unit test keeps the two equal), and Triton's other reserved
# names.
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"}
)
_CASE_SENSITIVE = "(?-i)"


def compile_forward_pattern(text: str) -> re.Pattern[str] | None:
    """Triton's pattern as a compiled regex; None for the empty pattern (forward nothing).

    Triton matches with RE2 case-insensitively by default, "according to the HTTP protocol",
    and documents a leading ``(?-i)`` to make it case-sensitive; Python's ``re`` refuses a bare
    ``(?-i)``, so that prefix is read here. ASCII matching keeps ``\\w`` and friends as RE2 has
    them. Raises ``re.error`` on a bad pattern (the CLI reports it). The pattern is the
    operator's, but it runs on client-chosen names (bounded by the max header list size): a
    pattern with nested quantifiers can backtrack, which RE2 never does, so keep it simple."""
    if not text:
        return None
    if text.startswith(_CASE_SENSITIVE):
        return re.compile(text[len(_CASE_SENSITIVE) :], re.ASCII)
    return re.compile(text, re.IGNORECASE | re.ASCII)


def forwarded_parameters(
    pattern: re.Pattern[str] | None, headers: list[tuple[str, str]]
) -> dict[str, str]:
    """The request metadata Triton turns into string parameters: every header whose name the
    pattern finds anywhere in (RE2 ``PartialMatch``, i.e. ``search``), except pseudo-headers
    and the metadata grpc core keeps for itself (``TRANSPORT_METADATA``).

    Further, a name that is a reserved parameter (``sequence_id``, ``priority``, ``timeout``,
    ``sequence_start``, ``sequence_end``), ``headers``, or starts with ``triton_`` is not
    forwarded: in Triton a forwarded header only ever reaches the model, while tritium's core
    reads those names from the parameters, so a proxy's header would change scheduling or fail
    the request. A ``-bin`` header is base64-decoded as grpc does for the application and
    forwarded only if the bytes are UTF-8 (a parameter is a string). A name sent twice gives
    its values joined by ``", "`` (HTTP's field combination). Names keep their case (HTTP/2
    sends them lowercase). The caller merges the result over the request's own parameters
    (Triton appends them after, so a model reading its parameters sees the header's value)."""
    if pattern is None:
        return {}
    result: dict[str, str] = {}
    for name, value in headers:
        if name.startswith(":") or name in TRANSPORT_METADATA or _reserved(name):
            continue
        if pattern.search(name) is None:
            continue
        text = _binary_text(value) if name.endswith("-bin") else value
        if text is None:
            continue
        result[name] = f"{result[name]}, {text}" if name in result else text
    return result


def _reserved(name: str) -> bool:
    lowered = name.lower()
    return lowered in RESERVED_PARAMETERS or lowered == "headers" or lowered.startswith("triton_")


def _binary_text(value: str) -> str | None:
    """A ``-bin`` value: base64, padded or not (the protocol allows both), to UTF-8 text."""
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
