"""``logfire``: spans to Pydantic Logfire, shaped for its Agents and LLM views.

Wire: ``POST {base_url}/v1/traces``, protobuf, gzip, with
``Authorization: <write token>`` (the raw token, no scheme), as the Logfire SDK
sends it. We use a plain OTLP exporter: the SDK's ``configure()`` would either
take over the global provider or, in local mode, add nothing we need, and its
flush was seen ignoring its own timeout.

Settings: ``trace.logfire.token`` / ``LOGFIRE_TOKEN``; ``trace.logfire.base_url`` /
``LOGFIRE_BASE_URL``, else the region named in the token (``pylf_v1_eu_...`` ->
``https://logfire-eu.pydantic.dev``; tokens without a region are US ones).

Mapping:

* Agents view: a run is ``gen_ai.operation.name=invoke_agent`` with
  ``gen_ai.agent.name``; both are ensured on run spans.
* LLM view: model spans carry a provider (``gen_ai.system`` and
  ``gen_ai.provider.name``), ``gen_ai.request.model`` and Logfire's time-to-first-
  chunk key ``gen_ai.client.operation.time_to_first_chunk``.
* Cost: a model call's ``gen_ai.usage.cost`` is also sent as ``operation.cost``,
  the key Logfire's LLM views read (the run's sum stays under its own key, so
  Logfire's per-trace total does not count it twice).
* Metrics: the GenAI metrics go to ``{base_url}/v1/metrics`` with the same
  token, with delta temporality, as the Logfire SDK sends them.
* Session id: sent as ``gen_ai.conversation.id`` only. That key is on
  Logfire's list of keys its scrubber never touches, and it is the key the
  Agents view groups conversations by. ``session.id`` is dropped from Logfire's
  copy: its name matches the default scrubbing pattern ``session``, so anywhere
  Logfire's scrubber runs over it, the value would arrive as
  ``[Scrubbed due to 'session']``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from opentelemetry.sdk.metrics.export import AggregationTemporality
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import AttributeValue

from runnertrace.exporters.otlp import OtlpHttpBackend, Setting, lookup, validate_url
from runnertrace.exporters.vendor_config import LogfireConfig
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import ConfigError
from runnertrace.tracing.metrics import delta_temporality

__all__ = ["LogfireBackend", "base_url_for_token"]

REGION_URLS: dict[str, str] = {
    "us": "https://logfire-us.pydantic.dev",
    "eu": "https://logfire-eu.pydantic.dev",
}
LOGFIRE_COST = "operation.cost"
"""Where Logfire reads a model call's cost (its LLM views sum it per trace)."""
_TOKEN_REGION = re.compile(r"^pylf_v\d+_(?P<region>[a-z]+)_")


def base_url_for_token(token: str) -> str:
    """The API base URL for ``token``'s region; raises :class:`ConfigError` for an unknown one."""
    match = _TOKEN_REGION.match(token)
    if match is None:
        return REGION_URLS["us"]  # tokens from before regions existed
    region = match.group("region")
    url = REGION_URLS.get(region)
    if url is None:
        raise ConfigError(
            f"the Logfire token names region {region!r}, which runnertrace does not know "
            f"(known: {', '.join(sorted(REGION_URLS))}); set trace.logfire.base_url in "
            "runnertrace.yaml or LOGFIRE_BASE_URL"
        )
    return url


class LogfireBackend(OtlpHttpBackend):
    name = "logfire"
    dropped_attributes: ClassVar[frozenset[str]] = frozenset({A.SESSION_ID})
    sends_metrics = True

    def metric_temporality(self) -> dict[type, AggregationTemporality]:
        return delta_temporality()  # what the Logfire SDK sends

    config_model = LogfireConfig

    @property
    def settings(self) -> LogfireConfig:
        """``trace.logfire``, typed."""
        return self.trace_config.section(self.name, LogfireConfig)

    def _token(self) -> Setting:
        return lookup("trace.logfire.token", self.settings.token, "LOGFIRE_TOKEN")

    def credentials(self) -> list[Setting]:
        return [self._token()]

    def traces_endpoint(self) -> str:
        setting = lookup("trace.logfire.base_url", self.settings.base_url, "LOGFIRE_BASE_URL")
        if setting.value is None:
            token = self._token().value
            region_url = base_url_for_token(token) if token else REGION_URLS["us"]
            setting = Setting(setting.key, setting.env, region_url, "the token's region")
        return validate_url(setting, REGION_URLS["eu"]) + "/v1/traces"

    def headers(self) -> dict[str, str]:
        return {"Authorization": self._token().required()}

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        attrs = span.attributes or {}
        out: dict[str, AttributeValue] = {}
        session = attrs.get(A.CONVERSATION_ID) or attrs.get(A.SESSION_ID)
        if session and A.CONVERSATION_ID not in attrs:
            out[A.CONVERSATION_ID] = session
        kind = attrs.get(A.SPAN_TYPE)
        if kind == "run":
            if A.OPERATION not in attrs:
                out[A.OPERATION] = "invoke_agent"
            if A.AGENT_NAME not in attrs:
                out[A.AGENT_NAME] = span.name.removeprefix("invoke_agent ")
        elif kind == "message":
            provider = attrs.get(A.SYSTEM) or attrs.get(A.PROVIDER)
            if provider:
                for key in (A.SYSTEM, A.PROVIDER):
                    if key not in attrs:
                        out[key] = provider
            model = attrs.get(A.REQUEST_MODEL) or attrs.get(A.RESPONSE_MODEL)
            if model and A.REQUEST_MODEL not in attrs:
                out[A.REQUEST_MODEL] = model
            ttfc = attrs.get(A.TTFC)
            if ttfc is not None and A.TTFC_LOGFIRE not in attrs:
                out[A.TTFC_LOGFIRE] = ttfc
            cost = attrs.get(A.COST)
            if cost is not None:
                out[LOGFIRE_COST] = cost
        return out
