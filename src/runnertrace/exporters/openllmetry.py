"""``openllmetry``: spans to Traceloop (or any OpenLLMetry-aware OTLP receiver).

Wire: ``POST {base_url}/v1/traces``, protobuf, gzip, with
``Authorization: Bearer <api key>``. A plain OTLP exporter does this without
traceloop-sdk, whose ``Traceloop.init()`` installs a global provider and
instruments requests, urllib3 and more by default.

Settings: ``trace.openllmetry.api_key`` / ``TRACELOOP_API_KEY`` (required for
Traceloop's own hosts; optional for a self-hosted collector, which then gets no
Authorization header), ``trace.openllmetry.base_url`` / ``TRACELOOP_BASE_URL``
(default ``https://api.traceloop.com``).

Mapping (OpenLLMetry's ``traceloop.*`` vocabulary):

* ``traceloop.span.kind``: the outermost traced run -> ``workflow``, a nested
  run -> ``agent``, a step or reasoning block -> ``task``, a tool call -> ``tool``.
  Model spans get no kind (OpenLLMetry marks LLM spans by ``llm.request.type``,
  which we set to ``chat``, plus ``llm.usage.total_tokens``).
* ``traceloop.entity.name`` (agent, step, tool name) and ``traceloop.entity.path``
  (the enclosing tasks and tools, dotted) on every non-LLM span;
  ``traceloop.entity.input/output`` there too when content capture is on.
* ``traceloop.workflow.name`` (the outermost run's agent) on every span.
* ``traceloop.association.properties.session_id`` / ``user_id`` on every span.

Workflow name and entity path depend on a span's ancestors, which have not
ended (or been exported) when the span is; a small span processor,
:class:`LineageTracker`, records them as spans start.

Auto-instrumentation of other libraries is opt-in: ``trace.openllmetry.instrument:
[openai, anthropic, ...]`` uses the OpenLLMetry instrumentors that traceloop-sdk
installs (``pip install 'runnertrace[openllmetry]'``), pointed at our provider,
never the global one. Without that setting nothing from traceloop is imported.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.util.types import AttributeValue

from runnertrace._internal.forksafe import relock_after_fork
from runnertrace._internal.imports import MissingExtraError, import_dotted, require
from runnertrace.exporters.otlp import OtlpHttpBackend, Setting, lookup, validate_url
from runnertrace.exporters.vendor_config import OpenLLMetryConfig
from runnertrace.tracing import attributes as A
from runnertrace.tracing.backend import Check
from runnertrace.tracing.config import ConfigError

__all__ = ["INSTRUMENTORS", "LineageTracker", "OpenLLMetryBackend"]

DEFAULT_BASE_URL = "https://api.traceloop.com"

# Library name -> the OpenLLMetry instrumentor traceloop-sdk brings along.
INSTRUMENTORS: dict[str, str] = {
    "openai": "opentelemetry.instrumentation.openai:OpenAIInstrumentor",
    "anthropic": "opentelemetry.instrumentation.anthropic:AnthropicInstrumentor",
    "cohere": "opentelemetry.instrumentation.cohere:CohereInstrumentor",
    "langchain": "opentelemetry.instrumentation.langchain:LangchainInstrumentor",
    "llama_index": "opentelemetry.instrumentation.llamaindex:LlamaIndexInstrumentor",
    "bedrock": "opentelemetry.instrumentation.bedrock:BedrockInstrumentor",
}

# Non-LLM span type -> (traceloop.span.kind, whether it extends the entity path).
_KINDS: dict[str, tuple[str, bool]] = {
    "step": ("task", True),
    "reasoning": ("task", True),
    "tool": ("tool", True),
}

# Where each span type keeps what Traceloop shows as the entity's input / output.
_ENTITY_IO: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "run": ((A.INPUT_MESSAGES,), (A.OUTPUT_MESSAGES,)),
    "tool": ((A.TOOL_ARGUMENTS,), (A.TOOL_RESULT,)),
    "reasoning": ((), (A.OUTPUT_MESSAGES,)),
}


def _entity_name(kind: str, attrs: Mapping[str, AttributeValue]) -> str:
    key = {"run": A.AGENT_NAME, "step": A.STEP_NAME, "tool": A.TOOL_NAME}.get(kind)
    value = attrs.get(key) if key else None
    return str(value) if value is not None else kind


@dataclass(frozen=True, slots=True)
class Lineage:
    """What a span inherits from its ancestors."""

    workflow: str | None
    """The agent name of the outermost traced run above (or at) this span."""
    path: str
    """Dotted names of the enclosing tasks and tools (excluding the span itself)."""
    child_path: str
    """The path this span's children inherit."""
    outermost: bool
    """A run with no traced run above it."""


class LineageTracker(SpanProcessor):
    """Records each of our spans' :class:`Lineage` at start, for the export-time mapping.

    Entries move to a bounded table when the span ends and are taken when it is
    mapped, so a span that is never exported (dropped by a full queue) costs one
    slot until it is evicted.
    """

    def __init__(self, max_ended: int = 8192) -> None:
        self.max_ended = max_ended
        self._open: dict[int, Lineage] = {}
        self._ended: OrderedDict[int, Lineage] = OrderedDict()
        self._lock = threading.Lock()
        relock_after_fork(self, _lock=threading.Lock)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attrs = span.attributes or {}
        kind = attrs.get(A.SPAN_TYPE)
        if kind is None:
            return  # not a span of ours
        parent = span.parent
        with self._lock:
            above = None
            if parent is not None:
                above = self._open.get(parent.span_id) or self._ended.get(parent.span_id)
        name = _entity_name(str(kind), attrs)
        inherited = above.child_path if above else ""
        if kind == "run":
            workflow = above.workflow if above and above.workflow else name
            lineage = Lineage(workflow, inherited, inherited, outermost=above is None)
        else:
            extends = _KINDS.get(str(kind), ("", False))[1]
            child = inherited
            if extends:
                child = f"{inherited}.{name}" if inherited else name
            lineage = Lineage(above.workflow if above else None, inherited, child, outermost=False)
        with self._lock:
            self._open[span.context.span_id] = lineage

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            lineage = self._open.pop(span.context.span_id, None)
            if lineage is None:
                return
            self._ended[span.context.span_id] = lineage
            while len(self._ended) > self.max_ended:
                self._ended.popitem(last=False)

    def take(self, span: ReadableSpan) -> Lineage | None:
        with self._lock:
            return self._ended.pop(span.context.span_id, None)


class OpenLLMetryBackend(OtlpHttpBackend):
    name = "openllmetry"
    config_model = OpenLLMetryConfig

    @property
    def settings(self) -> OpenLLMetryConfig:
        """``trace.openllmetry``, typed."""
        return self.trace_config.section(self.name, OpenLLMetryConfig)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.lineage = LineageTracker()
        self.instrumented: list[Any] = []
        self._instrumentors: list[type] = []

    # -- settings -----------------------------------------------------------------------
    def _api_key(self) -> Setting:
        config = self.settings
        return lookup("trace.openllmetry.api_key", config.api_key, "TRACELOOP_API_KEY")

    def _base_url(self) -> str:
        setting = lookup(
            "trace.openllmetry.base_url",
            self.settings.base_url,
            "TRACELOOP_BASE_URL",
            default=DEFAULT_BASE_URL,
        )
        return validate_url(setting, DEFAULT_BASE_URL)

    def _key_required(self) -> bool:
        host = urlsplit(self._base_url()).hostname or ""
        return host == "traceloop.com" or host.endswith(".traceloop.com")

    def credentials(self) -> list[Setting]:
        key = self._api_key()
        try:
            required = self._key_required()
        except ConfigError:
            required = True
        return [key] if required or key.value is not None else []

    def traces_endpoint(self) -> str:
        return self._base_url() + "/v1/traces"

    def headers(self) -> dict[str, str]:
        key = self._api_key()
        if key.value is None and not self._key_required():
            return {}
        return {"Authorization": f"Bearer {key.required()}"}

    # -- pipeline -----------------------------------------------------------------------
    def instrumentor_classes(self) -> list[type]:
        """The instrumentors ``trace.openllmetry.instrument`` names (imported only then)."""
        classes: list[type] = []
        for library in self.settings.instrument:
            target = INSTRUMENTORS.get(library, library if ":" in library else None)
            if target is None:
                known = ", ".join(sorted(INSTRUMENTORS))
                raise ConfigError(
                    f"trace.openllmetry.instrument: unknown library {library!r}; expected one "
                    f"of {known}, or 'module:InstrumentorClass'"
                )
            require(target.partition(":")[0], "openllmetry")
            cls = import_dotted(target)
            if not isinstance(cls, type):
                raise ConfigError(f"trace.openllmetry.instrument: {target!r} is not a class")
            classes.append(cls)
        return classes

    def processors(self) -> list[SpanProcessor]:
        self._instrumentors = self.instrumentor_classes()
        return [self.lineage, *super().processors()]

    def bind(self, provider: TracerProvider) -> None:
        """Instrument the opted-in libraries onto ``provider`` (never the global one)."""
        for cls in self._instrumentors:
            instrumentor = cls()
            if not getattr(instrumentor, "is_instrumented_by_opentelemetry", False):
                instrumentor.instrument(tracer_provider=provider)
                self.instrumented.append(instrumentor)

    def check(self) -> list[Check]:
        checks = super().check()
        if self.settings.instrument:
            try:
                names = [c.__name__ for c in self.instrumentor_classes()]
            except (ConfigError, MissingExtraError) as exc:
                checks.append(Check(self.name, "instrument", "fail", str(exc), fix=str(exc)))
            else:
                checks.append(Check(self.name, "instrument", "ok", ", ".join(names)))
        return checks

    # -- mapping ------------------------------------------------------------------------
    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        attrs = span.attributes or {}
        kind = attrs.get(A.SPAN_TYPE)
        if kind is None:
            return None
        kind = str(kind)
        lineage = self.lineage.take(span)
        out: dict[str, AttributeValue] = {}
        if lineage is not None and lineage.workflow:
            out["traceloop.workflow.name"] = lineage.workflow
        for ours, key in ((A.CONVERSATION_ID, "session_id"), (A.USER_ID, "user_id")):
            value = attrs.get(ours)
            if value:
                out[f"traceloop.association.properties.{key}"] = value
        if kind == "message":
            out["llm.request.type"] = "chat"
            inputs, outputs = attrs.get(A.INPUT_TOKENS), attrs.get(A.OUTPUT_TOKENS)
            if isinstance(inputs, int) and isinstance(outputs, int):
                out["llm.usage.total_tokens"] = inputs + outputs
            return out
        if kind == "run":
            outermost = lineage.outermost if lineage is not None else True
            out["traceloop.span.kind"] = "workflow" if outermost else "agent"
        else:
            out["traceloop.span.kind"] = _KINDS.get(kind, ("task", False))[0]
        out["traceloop.entity.name"] = _entity_name(kind, attrs)
        if lineage is not None and lineage.path:
            out["traceloop.entity.path"] = lineage.path
        inputs_keys, output_keys = _ENTITY_IO.get(kind, ((), ()))
        for role, keys in (("input", inputs_keys), ("output", output_keys)):
            value = next((attrs[k] for k in keys if k in attrs), None)
            if value is not None:
                # a run's prompt and reply as plain text, as Traceloop's own entities show them
                out[f"traceloop.entity.{role}"] = A.message_text(value) if kind == "run" else value
        return out
