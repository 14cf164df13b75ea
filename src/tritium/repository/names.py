"""What a client may send as a model name, a version string or a ``file:`` override key.

Each of these ends up in a filesystem path (a model directory, a version folder, a file of a
model loaded from a request), so each is checked here, before anything touches a path:

- a model name is one safe path component: not empty or blank, not '.' or '..', no '/', '\\',
  NUL or other control character, at most 255 bytes of UTF-8 (a file name's limit on Linux);
- a version is ASCII digits only (Python's ``int()`` also reads '١' as 1, and '²' passes
  ``str.isdigit()``), as Triton's ``std::stol`` reads them;
- a ``file:`` key is a relative path of such components (at most 4096 bytes, a path's limit).

Triton validates names only on load (``ValidateModelName`` in core
model_repository_manager.cc: empty, '..' or a '/'); tritium refuses a bad name on every route
that takes one, with the same messages, so a name that can never be loaded is answered
INVALID_ARG rather than looked up (readiness and metadata included) — except an unload,
which builds no path and answers such a name as any unknown model (``unloadable_name``), as
Triton's QA (L0_input_validation) expects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import invalid_arg

NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096
_INT64_MAX = 2**63 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ASCII_DIGITS = re.compile(r"[0-9]+")
_SHOWN = 64  # characters of a bad name or key echoed back in an error message


def _shown(text: str) -> str:
    """A bad name as an error message shows it: control characters escaped, length bounded."""
    head = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text[:_SHOWN])
    return head + "..." if len(text) > _SHOWN else head


def component_problem(part: str) -> str:
    """Why ``part`` is not a safe single path component ('' when it is)."""
    if part in (".", "..") or "/" in part or "\\" in part:
        return "must not contain path traversal characters"
    if _CONTROL.search(part):
        return "must not contain control characters"
    if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        return f"must be at most {NAME_MAX_BYTES} bytes long"
    return ""


def check_model_name(name: str) -> None:
    """Refuse (INVALID_ARG) a model name that is not one safe path component."""
    if not name.strip():
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    problem = component_problem(name)
    if problem:
        raise invalid_arg(f"invalid model name '{_shown(name)}', model name {problem}")


def unloadable_name(name: str) -> bool:
    """Whether an unload of ``name`` can find anything: empty or blank is refused as on load;
    a name that can never be loaded (see ``component_problem``) is an unknown model, which an
    unload answers as it does any other (Triton checks traversal on load only: its QA expects
    the unload of ``../etc`` not to be refused as traversal)."""
    if not name.strip():
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    return not component_problem(name)


def check_override_key(key: str) -> str:
    """The relative path of a ``file:<path>`` load parameter, or INVALID_ARG when it is not
    a relative path of safe components (nothing is written for a request with a bad key)."""
    relative = key[len("file:") :]
    problem = ""
    if not relative or relative.startswith("/"):
        problem = "must be relative to the model directory"
    elif len(relative.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        problem = f"must be at most {PATH_MAX_BYTES} bytes long"
    else:
        for part in relative.split("/"):
            problem = component_problem(part) if part else "must not have an empty component"
            if problem:
                break
    if problem:
        raise invalid_arg(f"Invalid file parameter '{_shown(key)}': the path {problem}")
    return relative


def check_load_keys(keys: Iterable[str]) -> None:
    """A load request's parameters are ``config`` and ``file:<path>`` ones (Triton's
    grpc_server.cc refuses any other, "unrecognized load parameter"), never silently ignored."""
    for key in keys:
        if key != "config" and not key.startswith("file:"):
            raise invalid_arg(f"unrecognized load parameter '{_shown(key)}'.")


def version_from_string(text: str) -> int:
    """Parse a version string as Triton does ('' means the latest); only ASCII digits (after
    an optional '-') make a version."""
    if not text:
        return -1
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    significant = digits.lstrip("0")  # int() refuses over 4,300 digits: never ask it to
    if (
        _ASCII_DIGITS.fullmatch(digits) is None
        or len(significant) > 19
        or int(significant or "0") > _INT64_MAX
    ):
        raise invalid_arg(
            f"failed to get model version from specified version string '{_shown(text)}' "
            "(details: stol), version should be an integral value > 0"
        )
    version = -int(significant or "0") if negative else int(significant or "0")
    if version < 0:
        raise invalid_arg(
            f"invalid model version specified '{_shown(text)}' , version should be an integral "
            "value > 0"
        )
    return version


def is_version_dir(name: str) -> bool:
    """A version folder's name: ASCII digits, no leading zero (Triton ignores others)."""
    return _ASCII_DIGITS.fullmatch(name) is not None and not name.startswith("0")
