"""Config model of the ``cloudwatch`` backend (``trace.cloudwatch``); no vendor imports.

Values that end up in a hostname or a URL (the region, the endpoints) are
validated here, so a typo fails at load time with the key and the fix instead
of as a DNS error in a background thread.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "NAMESPACE_PATTERN",
    "REGION_PATTERN",
    "CloudWatchConfig",
    "region_problem",
    "url_problem",
]

REGION_PATTERN = re.compile(r"^[a-z0-9-]+$")
"""An AWS region becomes part of a hostname (``xray.<region>.amazonaws.com``)."""

NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9.\-_/#:]{1,255}$")
"""What CloudWatch accepts as a custom metric namespace."""


def region_problem(region: str) -> str | None:
    """Why ``region`` cannot be used (``None`` when it is fine)."""
    if REGION_PATTERN.match(region):
        return None
    return (
        f"{region!r} is not a valid AWS region (only lowercase letters, digits and '-', "
        "e.g. 'us-east-1')"
    )


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable http(s) endpoint (``None`` when it is fine)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a malformed port
    except ValueError as exc:
        return f"{url!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL with a host, e.g. 'https://xray.us-east-1.amazonaws.com'"
    if port == 0:
        return f"{url!r} has port 0"
    return None


class CloudWatchConfig(BaseModel):
    """``trace.cloudwatch``: where spans and run metrics go in AWS."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    region: str | None = None
    """AWS region; unset: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, then the AWS config file."""
    endpoint: str | None = None
    """Replaces ``https://xray.<region>.amazonaws.com``; requests are still SigV4-signed."""
    metrics: bool = True
    """Send the GenAI metrics (durations, tokens, runs, tool calls, errors, cost) with
    ``put_metric_data`` (``trace.metrics: false`` turns them off for every backend)."""
    namespace: str = "RunnerTrace"
    metrics_endpoint: str | None = None
    """CloudWatch API endpoint for metrics and dashboards (botocore also honours
    ``AWS_ENDPOINT_URL_CLOUDWATCH``)."""
    log_group_names: list[str] = Field(default_factory=list)
    """Written to the resource as ``aws.log.group.names`` when set."""
    max_content_length: int = Field(1024, ge=0)
    """Content attributes are cut to this many characters for CloudWatch, which
    wants large content kept off spans (applied on top of ``trace.max_content_length``)."""
    metrics_queue_size: int = Field(256, ge=1)
    """No longer used: metrics are aggregated by the OTel metrics SDK, so nothing queues
    per run. Kept so that existing configuration files still load."""
    timeout_s: float | None = Field(None, gt=0)
    """Bounds one export or API request; unset: ``trace.flush_timeout_s``."""

    @field_validator("region")
    @classmethod
    def _valid_region(cls, value: str | None) -> str | None:
        if value is not None:
            problem = region_problem(value)
            if problem:
                raise ValueError(f"{problem}; set trace.cloudwatch.region to e.g. 'us-east-1'")
        return value

    @field_validator("endpoint", "metrics_endpoint")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        if value is not None:
            problem = url_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, value: str) -> str:
        if not NAMESPACE_PATTERN.match(value) or value.startswith("AWS/"):
            raise ValueError(
                "a CloudWatch namespace is 1-255 characters of letters, digits and . - _ / # :"
                " and must not start with 'AWS/'"
            )
        return value
