"""tritium: a Python inference server, wire-compatible with NVIDIA Triton Inference Server."""

__version__ = "0.1.0"
# The Triton release whose protocols tritium speaks; reported by server metadata.
TRITON_VERSION = "2.73.0"

__all__ = ["TRITON_VERSION", "__version__"]
