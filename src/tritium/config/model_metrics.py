"""A model's own metric settings: ``metric_tags`` (extra labels on its metrics) and
``model_metrics`` (the first-response histogram's buckets), validated at load as Triton core's
MetricModelReporter would use them."""

from __future__ import annotations

import re

from ..metrics.settings import DEFAULT_FIRST_RESPONSE_BUCKETS, MetricSpec
from .model_config import ConfigProblem, ModelConfig

__all__ = ["DEFAULT_FIRST_RESPONSE_BUCKETS", "FIRST_RESPONSE_FAMILY", "MetricSpec", "metric_spec"]

FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"
# Prometheus label names; a tag becomes the label "_<key>".
_LABEL_NAME = re.compile(r"[a-zA-Z0-9_]+")


def metric_spec(config: ModelConfig, problem: ConfigProblem) -> MetricSpec:
    tags = tuple(sorted(config.metric_tags.items()))
    for key, value in tags:
        if not _LABEL_NAME.fullmatch(key):
            raise problem.error(
                "metric_tags",
                f"metric tag '{key}' cannot be a Prometheus label name ('_{key}'): use "
                "letters, digits and '_'",
                key,
            )
        if "\x00" in value:
            raise problem.error("metric_tags", f"metric tag '{key}' has a NUL character", key)
    return MetricSpec(tags, _first_response_buckets(config, problem))


def _first_response_buckets(config: ModelConfig, problem: ConfigProblem) -> tuple[float, ...]:
    """Triton takes each metric_control's buckets (the last one of a family wins; none given:
    only +Inf); a family it cannot customise is a warning there and an error here."""
    buckets = DEFAULT_FIRST_RESPONSE_BUCKETS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family != FIRST_RESPONSE_FAMILY:
            raise problem.error(
                "model_metrics.metric_control.metric_identifier.family",
                f"metric family '{family}' is not a customizable metric (only "
                f"'{FIRST_RESPONSE_FAMILY}' is)",
                family or "metric_identifier",
            )
        given = tuple(control.histogram_options.buckets)
        if any(b >= a for a, b in zip(given[1:], given, strict=False)) or any(
            b != b or b in (float("inf"), float("-inf")) for b in given
        ):
            raise problem.error(
                "model_metrics.metric_control.histogram_options.buckets",
                f"the buckets of '{family}' must be finite and strictly increasing: {list(given)}",
                "buckets",
            )
        buckets = given
    return buckets
