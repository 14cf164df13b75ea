"""Every fuzz target by name (the order ``make fuzz`` runs them in)."""

from __future__ import annotations

from fuzz_harness import Target
from fuzz_structured import CONFIG_STRUCT, GRPC_STRUCT, HTTP_CODEC_STRUCT
from fuzz_grpc import GRPC_BYTES
from fuzz_h2 import H2_CORE, H2_FRAMES
from fuzz_http import HTTP_CODEC, HTTP_PROTOCOL
from fuzz_misc import BYTES, CONFIG

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        HTTP_PROTOCOL,
        HTTP_CODEC,
        HTTP_CODEC_STRUCT,
        GRPC_BYTES,
        GRPC_STRUCT,
        H2_FRAMES,
        H2_CORE,
        BYTES,
        CONFIG,
        CONFIG_STRUCT,
    )
}
