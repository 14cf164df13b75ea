"""The public in-process API: the one inference call every front-end uses (``Inference``,
inference.py), what surrounds one inference as a front-end serves it (``InferenceCall``,
``Door``: call.py), and the other workers it may forward to (``Cluster``)."""

from .call import Door, InferenceCall
from .cluster import Cluster
from .inference import Inference
from .stream import ResponseStream

__all__ = ["Cluster", "Door", "Inference", "InferenceCall", "ResponseStream"]
