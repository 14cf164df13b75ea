"""``--metrics-config <setting>=<value>``: which latency families the server records.

Triton's settings (server ``command_line_parser.cc`` parses the ``<setting>=<value>`` form,
core ``metric_model_reporter.cc`` reads the settings):

- ``counter_latencies=false`` drops the cumulative ``*_duration_us`` counters;
- ``summary_latencies=true`` adds the ``*_summary_us`` summaries (quantiles over a sliding
  window, as prometheus-cpp's);
- ``summary_quantiles=<q>:<error>,...`` sets the summaries' quantiles;
- ``histogram_latencies=true`` adds ``nv_inference_first_response_histogram_ms`` (its buckets
  are a per-model setting: ``model_metrics`` in the model configuration).

Triton silently ignores a setting it does not know, a value other than ``true``/``false`` and
a malformed quantile pair; tritium refuses them at start-up (never accept and ignore).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# prometheus-cpp's defaults as Triton core sets them (MetricReporterConfig::quantiles_).
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
_BOOLEANS = ("counter_latencies", "histogram_latencies", "summary_latencies")
SETTINGS = (*_BOOLEANS, "summary_quantiles")


class MetricsConfigError(ValueError):
    """A ``--metrics-config`` value tritium cannot honour; the message is for the operator."""


# MetricReporterConfig::histogram_options_ in Triton core (milliseconds).
DEFAULT_FIRST_RESPONSE_BUCKETS = (100.0, 500.0, 2000.0, 5000.0)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A model's own metric settings, from its config (config/model_metrics.py reads them)."""

    tags: tuple[tuple[str, str], ...] = ()  # (key, value), sorted; labels "_<key>"
    first_response_buckets: tuple[float, ...] = DEFAULT_FIRST_RESPONSE_BUCKETS


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The server-wide latency metric settings (Triton's MetricReporterConfig)."""

    counter_latencies: bool = True
    histogram_latencies: bool = False
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    # Not a --metrics-config setting: whether the server has a response cache (--cache-config);
    # a model using it gets the cache families, and no request summary (as in Triton).
    response_cache: bool = False


def split_option(arg: str) -> tuple[str, str]:
    """One ``--metrics-config`` argument as (setting, value), with Triton's message for a
    malformed one (TritonParser::ParseMetricsConfigOption)."""
    setting, sep, value = arg.partition("=")
    if not sep or "," in setting or not setting or not value:
        raise MetricsConfigError(f"--metrics-config option format is <setting>=<value>. Got {arg}")
    return setting, value


def parse_quantiles(text: str) -> tuple[tuple[float, float], ...]:
    """``0.5:0.05,0.9:0.01``: (quantile, allowed rank error) pairs, each in [0, 1]."""
    pairs: list[tuple[float, float]] = []
    for item in text.split(","):
        quantile, sep, error = item.partition(":")
        if not sep:
            raise MetricsConfigError(
                f"Invalid option: [{item}]. No ':' delimiter found. Expected format is "
                "<quantile>:<error>"
            )
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            raise MetricsConfigError(
                f"Invalid option: [{item}]. Expected format is <quantile>:<error> (numbers)"
            ) from None
        if not all(0.0 <= v <= 1.0 for v in pair):
            raise MetricsConfigError(
                f"Invalid option: [{item}]. The quantile and its error must be in [0, 1]"
            )
        pairs.append(pair)
    return tuple(pairs)


def _boolean(setting: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise MetricsConfigError(f"--metrics-config {setting}={value}: expected 'true' or 'false'")
    return lowered == "true"


def parse_metrics_config(args: list[str]) -> MetricsSettings:
    """Every ``--metrics-config`` argument in order; a later one wins, as in Triton."""
    settings = MetricsSettings()
    for arg in args:
        setting, value = split_option(arg)
        if setting in _BOOLEANS:
            settings = replace(settings, **{setting: _boolean(setting, value)})  # type: ignore[arg-type]
        elif setting == "summary_quantiles":
            settings = replace(settings, summary_quantiles=parse_quantiles(value))
        else:
            raise MetricsConfigError(
                f"--metrics-config: unknown setting '{setting}' (Triton's settings: "
                f"{', '.join(SETTINGS)})"
            )
    return settings
