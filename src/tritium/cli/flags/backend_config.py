"""``--backend-config [<backend>,]<setting>=<value>``: the settings tritium honours.

Triton hands each backend its own settings plus the global ones (no backend name); what a
backend does with a setting is the backend's business. tritium's backends are built in, so
the settings are a table here: each implemented, or accepted because it only sizes something
tritium's backend does not have (the reason says why), and anything else refused at start-up
rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import Decision

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's backends' default-max-batch-size

_STUB_SHM = (
    "sizes the Python backend's shared-memory pool of each stub; tritium's stubs receive "
    "each message's tensors in a buffer of that message's size, so there is no pool to size"
)

# (backend, setting) -> (decision, reason); backend '' is a global setting.
SETTINGS: dict[tuple[str, str], tuple[Decision, str]] = {
    ("", "default-max-batch-size"): (
        Decision.IMPLEMENTED,
        "the max_batch_size auto-complete gives a model that can batch (ONNX Runtime)",
    ),
    ("onnxruntime", "default-max-batch-size"): (
        Decision.IMPLEMENTED,
        "as the global setting, for ONNX Runtime models only",
    ),
    ("python", "shm-default-byte-size"): (Decision.TUNING, _STUB_SHM),
    ("python", "shm-growth-byte-size"): (Decision.TUNING, _STUB_SHM),
    ("python", "shm-message-queue-size"): (
        Decision.TUNING,
        "sizes the Python backend's message queue; tritium's stubs read a socket",
    ),
    ("python", "shm-region-prefix-name"): (
        Decision.TUNING,
        "names the Python backend's shared-memory regions; tritium's stubs have none",
    ),
}


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """What ``--backend-config`` configures in tritium's backends."""

    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    onnx_default_max_batch_size: int | None = None  # None: the global one

    @property
    def onnxruntime_max_batch_size(self) -> int:
        specific = self.onnx_default_max_batch_size
        return self.default_max_batch_size if specific is None else specific


def split_setting(text: str) -> tuple[str, str, str]:
    """(backend, setting, value) of one flag value, with Triton's messages for bad syntax."""
    comma = text.find(",")
    equals = text.find("=", comma + 1)
    if comma == 0:
        raise ValueError(
            "No backend specified. --backend-config option format is "
            f"<backend name>,<setting>=<value> or <setting>=<value>. Got {text}"
        )
    backend = text[:comma] if comma > 0 else ""
    setting, value = text[comma + 1 : equals], text[equals + 1 :]
    if equals < 0 or not setting or not value:
        raise ValueError(
            f"--backend-config option format is '<backend name>,<setting>=<value>'. Got {text}"
        )
    return backend, setting, value


def parse_backend_config(values: list[str]) -> tuple[BackendSettings, list[str]]:
    """The settings, and one note per accepted tuning-only setting (for the verbose log).
    Raises ``ValueError`` naming a setting tritium does not honour."""
    global_batch, onnx_batch = DEFAULT_MAX_BATCH_SIZE, None
    notes: list[str] = []
    for text in values:
        backend, setting, value = split_setting(text)
        rule = SETTINGS.get((backend, setting))
        if rule is None:
            raise ValueError(_refusal(backend, setting))
        decision, reason = rule
        if decision is Decision.TUNING:
            notes.append(f"--backend-config={text} accepted: {reason}")
            continue
        size = _batch_size(text, value)
        if backend:
            onnx_batch = size
        else:
            global_batch = size
    return BackendSettings(global_batch, onnx_batch), notes


def _batch_size(text: str, value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = -1
    if size < 0:
        raise ValueError(f"{text}: expected an integer >= 0")
    return size


def _refusal(backend: str, setting: str) -> str:
    known = sorted({b for b, _ in SETTINGS if b})
    if backend and backend not in known:
        return f"tritium has no settings for backend '{backend}' (it has: {', '.join(known)})"
    honoured = sorted(s for b, s in SETTINGS if b == backend)
    where = f"backend '{backend}'" if backend else "all backends (no backend name)"
    return f"tritium does not honour the setting '{setting}' for {where}; it honours: " + ", ".join(
        honoured
    )
