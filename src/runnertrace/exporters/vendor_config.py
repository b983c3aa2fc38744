"""Config models of the OTLP-based vendor backends (``trace.<name>`` sections).

Kept free of vendor imports so that loading the configuration stays light.
Every field may be left unset and is then taken from the vendor's usual env var
by the backend itself (see each backend's module for the exact order), so a
config file never has to hold a secret.

``timeout_s`` bounds one export request. Left unset, the vendor backends use
``trace.flush_timeout_s`` so that a hung vendor never holds an export longer
than a flush may take; ``otlp`` follows ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


class _BackendSection(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    timeout_s: float | None = Field(None, gt=0)


class OtlpConfig(_BackendSection):
    endpoint: str | None = None
    """Full traces URL; else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, else ``http://localhost:4318/v1/traces``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent on top of ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``; these win per key."""
    compression: Literal["gzip", "none"] | None = None
    """Unset: ``OTEL_EXPORTER_OTLP_(TRACES_)COMPRESSION``, else none."""
    vendor_keys: Literal["openinference", "all", "none"] = "openinference"
    """Spellings added to the exported copy beside the GenAI semconv keys.
    ``openinference`` (default): OpenInference's (``openinference.span.kind``,
    ``input.value``/``output.value``, ``session.id``), which Phoenix needs for chain
    spans; ``all`` also adds other vendors' and deprecated keys (``gen_ai.system``,
    Logfire's ``gen_ai.client.operation.time_to_first_chunk``, ``tool.name``);
    ``none``: the semconv keys only. ``true``/``false`` read as ``all``/``none``."""

    @field_validator("vendor_keys", mode="before")
    @classmethod
    def _from_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # the switch this setting was before
            return "all" if value else "none"
        return value


class LangfuseConfig(_BackendSection):
    public_key: str | None = None
    secret_key: SecretStr | None = None
    host: str | None = None
    """Else ``LANGFUSE_BASE_URL``, ``LANGFUSE_HOST``, then ``https://cloud.langfuse.com``."""
    tags: list[str] = Field(default_factory=list)
    """Trace tags (``langfuse.trace.tags``), on top of the framework name."""


class LogfireConfig(_BackendSection):
    token: SecretStr | None = None
    base_url: str | None = None
    """Else ``LOGFIRE_BASE_URL``, else the region the token names (``pylf_v1_eu_...``)."""


class OpenLLMetryConfig(_BackendSection):
    api_key: SecretStr | None = None
    base_url: str | None = None
    """Else ``TRACELOOP_BASE_URL``, else ``https://api.traceloop.com``."""
    instrument: list[str] = Field(default_factory=list)
    """Opt-in auto-instrumentation of other libraries through traceloop-sdk's
    instrumentors, e.g. ``[openai, anthropic]``; empty means traceloop is never imported."""
