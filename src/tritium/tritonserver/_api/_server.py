"""Triton's ``tritonserver._api._server`` names."""

from .._enums import (
    InstanceGroupKind,
    LogFormat,
    LogLevel,
    MetricFormat,
    MetricKind,
    ModelControlMode,
    RateLimitMode,
)
from .._metrics import Metric, MetricFamily
from .._options import ModelLoadDeviceLimit, Options, RateLimiterResource
from .._server import ModelDictionary, Server

__all__ = [
    "InstanceGroupKind",
    "LogFormat",
    "LogLevel",
    "Metric",
    "MetricFamily",
    "MetricFormat",
    "MetricKind",
    "ModelControlMode",
    "ModelDictionary",
    "ModelLoadDeviceLimit",
    "Options",
    "RateLimitMode",
    "RateLimiterResource",
    "Server",
]
