"""``langfuse``: spans to Langfuse's OTLP endpoint, typed as Langfuse observations.

Wire: ``POST {host}/api/public/otel/v1/traces``, protobuf, gzip, with
``Authorization: Basic base64(public_key:secret_key)``,
``x-langfuse-ingestion-version: 4`` (real-time processing on Langfuse v4) and
``x-langfuse-public-key``. These are the headers the Langfuse SDK's own exporter
sends; we send them with a plain OTLP exporter because the SDK would add nothing
here but risks (it may install a global provider, and its default export filter
drops spans that it does not recognise as LLM spans).

Settings: ``trace.langfuse.public_key`` / ``LANGFUSE_PUBLIC_KEY``,
``trace.langfuse.secret_key`` / ``LANGFUSE_SECRET_KEY``, ``trace.langfuse.host`` /
``LANGFUSE_BASE_URL`` / ``LANGFUSE_HOST`` (default ``https://cloud.langfuse.com``).

Mapping (Langfuse reads the first match, so we set the explicit keys):

* ``langfuse.observation.type``: run -> ``agent``, step -> ``chain``, model
  message -> ``generation``, tool call -> ``tool``, reasoning -> ``span``.
* generations: ``langfuse.observation.model.name``,
  ``langfuse.observation.usage_details`` (JSON: input/output/total, cache reads,
  reasoning) and ``langfuse.observation.completion_start_time`` (ISO, span start
  + time to first chunk).
* every span: ``langfuse.session.id`` and ``langfuse.user.id`` when known.
* the run that starts the trace: ``langfuse.trace.name`` (the agent) and
  ``langfuse.trace.tags`` (``trace.langfuse.tags`` + the framework).
* failed spans: ``langfuse.observation.level=ERROR`` and the status message.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

from runnertrace.exporters._mapping import is_local_root, iso_time
from runnertrace.exporters.otlp import OtlpHttpBackend, Setting, lookup, validate_url
from runnertrace.exporters.vendor_config import LangfuseConfig
from runnertrace.tracing import attributes as A

__all__ = ["LangfuseBackend"]

DEFAULT_HOST = "https://cloud.langfuse.com"
TRACES_PATH = "/api/public/otel/v1/traces"

OBSERVATION_TYPES: dict[str, str] = {
    "run": "agent",
    "step": "chain",
    "message": "generation",
    "tool": "tool",
    "reasoning": "span",
}

# Our usage attribute -> Langfuse usage_details key.
USAGE_KEYS: tuple[tuple[str, str], ...] = (
    (A.INPUT_TOKENS, "input"),
    (A.OUTPUT_TOKENS, "output"),
    (A.CACHE_READ_TOKENS, "input_cache_read"),
    (A.REASONING_TOKENS, "output_reasoning"),
)


class LangfuseBackend(OtlpHttpBackend):
    name = "langfuse"
    config_model = LangfuseConfig

    @property
    def settings(self) -> LangfuseConfig:
        """``trace.langfuse``, typed."""
        return self.trace_config.section(self.name, LangfuseConfig)

    def _public_key(self) -> Setting:
        config = self.settings
        return lookup("trace.langfuse.public_key", config.public_key, "LANGFUSE_PUBLIC_KEY")

    def _secret_key(self) -> Setting:
        config = self.settings
        return lookup("trace.langfuse.secret_key", config.secret_key, "LANGFUSE_SECRET_KEY")

    def credentials(self) -> list[Setting]:
        return [self._public_key(), self._secret_key()]

    def traces_endpoint(self) -> str:
        host = lookup(
            "trace.langfuse.host",
            self.settings.host,
            "LANGFUSE_BASE_URL",
            "LANGFUSE_HOST",
            default=DEFAULT_HOST,
        )
        return validate_url(host, DEFAULT_HOST) + TRACES_PATH

    def headers(self) -> dict[str, str]:
        public = self._public_key().required()
        secret = self._secret_key().required()
        token = base64.b64encode(f"{public}:{secret}".encode()).decode("ascii")
        return {
            "Authorization": f"Basic {token}",
            "x-langfuse-ingestion-version": "4",
            "x-langfuse-public-key": public,
        }

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        attrs = span.attributes or {}
        kind = attrs.get(A.SPAN_TYPE)
        # Langfuse reads input.value/output.value before the gen_ai.* content keys.
        out: dict[str, AttributeValue] = A.vendor_mirrors(attrs, kind)
        observation = OBSERVATION_TYPES.get(str(kind))
        if observation:
            out["langfuse.observation.type"] = observation
        session = A.session_of(attrs)
        if session:
            out["langfuse.session.id"] = session
        user = attrs.get(A.USER_ID)
        if user:
            out["langfuse.user.id"] = user
        if kind == "run" and is_local_root(span):
            out["langfuse.trace.name"] = str(attrs.get(A.AGENT_NAME) or span.name)
            tags = list(self.trace_config.section("langfuse", LangfuseConfig).tags)
            framework = attrs.get(A.FRAMEWORK)
            if framework and framework not in tags:
                tags.append(str(framework))
            if tags:
                out["langfuse.trace.tags"] = tags
        elif kind == "message":
            out.update(_generation(span, attrs))
        if span.status.status_code is StatusCode.ERROR:
            out["langfuse.observation.level"] = "ERROR"
            if span.status.description:
                out["langfuse.observation.status_message"] = span.status.description
        return out


def _generation(
    span: ReadableSpan, attrs: Mapping[str, AttributeValue]
) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    model = attrs.get(A.RESPONSE_MODEL) or attrs.get(A.REQUEST_MODEL)
    if model:
        out["langfuse.observation.model.name"] = model
    usage: dict[str, int] = {}
    for ours, key in USAGE_KEYS:
        value = attrs.get(ours)
        if isinstance(value, int):
            usage[key] = value
    if usage:
        if "input" in usage or "output" in usage:
            usage["total"] = usage.get("input", 0) + usage.get("output", 0)
        out["langfuse.observation.usage_details"] = json.dumps(usage)
    ttfc = attrs.get(A.TTFC)
    if isinstance(ttfc, int | float) and span.start_time is not None:
        out["langfuse.observation.completion_start_time"] = iso_time(
            span.start_time + int(ttfc * 1e9)
        )
    return out
