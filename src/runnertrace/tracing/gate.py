"""The writer gate: the one way a run's spans are written, and the only caller of the
content policy.

A :class:`WriterGate` holds one run's start templates and its
:class:`~runnertrace.tracing.content.ContentPolicy`. Every span name, attribute,
span event and status description the span state machine
(:mod:`runnertrace.tracing.state`) writes passes :meth:`WriterGate.start`,
:meth:`~WriterGate.put`, :meth:`~WriterGate.event` or :meth:`~WriterGate.status`, so
each is redacted and made encodable in one place; content (messages, instructions,
tool arguments and results) is shaped for its attribute by the content methods below,
which only this module calls the policy for. The state machine decides what to write
and when; this module decides how a value may appear on a span.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace.tracing import attributes as A
from runnertrace.tracing.content import ContentPolicy, request_parts
from runnertrace.tracing.records import SpanRecord

__all__ = ["WriterGate", "attribute_value", "finish_reason"]

_INTERNAL = SpanKind.INTERNAL


class WriterGate:
    """Writes one run's spans: templates, start, put, event and status, content shaped.

    One per run (made with its tracer), so the hot path reads bound methods, not the
    policy's settings.
    """

    __slots__ = (
        "capture",
        "clean",
        "clean_value",
        "common",
        "legacy",
        "policy",
        "templates",
        "tracer",
    )

    def __init__(
        self,
        tracer: trace_api.Tracer,
        policy: ContentPolicy,
        *,
        agent_name: str,
        framework: str,
        session_id: str | None,
        user_id: str | None,
        mode: str,
        legacy: bool,
    ) -> None:
        self.tracer = tracer
        self.policy = policy
        self.capture = policy.capture
        self.clean = policy.clean
        self.clean_value = policy.clean_value
        self.legacy = legacy  # trace.semconv_version 1: vendor spellings on the span too
        self.common, self.templates = _templates(
            agent_name, framework, session_id, user_id, mode, policy
        )

    # -- spans ----------------------------------------------------------------------------
    def start_run(self, item: SpanRecord, fields: dict[str, Any], parent: Context | None) -> None:
        """Open the run span (``invoke_agent``) with its template plus ``fields``."""
        attrs = _merged(self.templates["run"], self.clean(fields) if fields else None)
        if self.legacy:
            attrs.update(A.vendor_mirrors(attrs, "run"))
        item.span = self.tracer.start_span(
            f"invoke_agent {self.common[A.AGENT_NAME]}",
            context=parent,
            kind=_INTERNAL,
            attributes=attrs,
            start_time=item.start_ns,
        )
        item.sanitized = attrs.get(A.SANITIZED, ())

    def start(
        self,
        item: SpanRecord,
        operation: str,
        parent: Context,
        fields: dict[str, Any],
        label: str | None = None,
        span_kind: SpanKind = _INTERNAL,
    ) -> None:
        """Open ``item``'s span at ``item.start_ns``, under ``parent``, with the template of
        its kind plus its own ``fields``.

        The fields are cleaned first, and the name is ``operation`` followed by the
        cleaned value of ``fields[label]`` (when given): a name never holds what its
        attribute could not.
        """
        fields = self.clean(fields)
        name = operation if label is None or label not in fields else f"{operation} {fields[label]}"
        attrs = _merged(self.templates[item.kind], fields)
        if self.legacy:
            attrs.update(A.vendor_mirrors(attrs, item.kind))
        item.span = self.tracer.start_span(
            name, context=parent, kind=span_kind, attributes=attrs, start_time=item.start_ns
        )
        marked = attrs.get(A.SANITIZED)
        if marked:
            item.sanitized = marked

    def put(self, item: SpanRecord, attrs: dict[str, Any]) -> None:
        """Set attributes on ``item``'s span, cleaned (redacted and made encodable)."""
        if attrs:
            attrs = self.clean(attrs)
            marked = attrs.get(A.SANITIZED)
            if marked:  # keep the keys named before: one span, one list
                item.sanitized = attrs[A.SANITIZED] = (*item.sanitized, *marked)
            if self.legacy:
                attrs.update(A.vendor_mirrors(attrs, item.kind))
            item.span.set_attributes(attrs)

    def event(self, item: SpanRecord, name: str, attrs: dict[str, Any]) -> None:
        """Add a span event whose attributes are cleaned like the span's."""
        item.span.add_event(name, self.clean(attrs))

    def status(self, item: SpanRecord, description: str) -> None:
        """ERROR status, its description cleaned like any attribute."""
        item.span.set_status(Status(StatusCode.ERROR, self.clean_value(description)[0]))

    # -- content (the policy's truncation, and the GenAI shapes it is written in) ----------
    def truncate(self, text: str) -> str:
        return self.policy.truncate(text)

    def text(self, value: Any) -> str:
        """Content of any shape (a tool's result) as a truncated string."""
        return self.policy.text(value)

    def messages(self, messages: Any) -> str:
        """GenAI input messages, as a model call was sent them."""
        return self.policy.messages(messages)

    def instructions(self, instructions: Any) -> str:
        """System instructions, as ``gen_ai.system_instructions`` parts."""
        return self.policy.parts([{"type": "text", "content": instructions}])

    def request(self, requests: Any) -> str:
        """What the run was asked, as one user message."""
        return self.policy.messages([{"role": "user", "parts": request_parts(requests)}])

    def output(self, parts: list[dict[str, Any]], finish: str = "stop") -> str:
        """One assistant output message (``finish``: its GenAI finish reason, which the
        schema requires of every output message)."""
        message = {"role": "assistant", "parts": parts, "finish_reason": finish}
        return self.policy.messages([message])

    def tool_definitions(self, definitions: Any) -> str:
        """Tool names and types always (not content); descriptions and schemas only
        under content capture."""
        if self.capture:
            return json.dumps(definitions, default=str, ensure_ascii=False)
        names = [
            {"type": d.get("type", "function"), "name": d.get("name")}
            for d in definitions
            if isinstance(d, dict)
        ]
        return json.dumps(names, ensure_ascii=False)


def attribute_value(value: Any) -> Any:
    """A request parameter as an attribute value (a list becomes a tuple of its texts)."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return tuple(v if isinstance(v, str) else str(v) for v in value)
    return str(value)


def finish_reason(reason: str | None) -> str:
    """A finish reason as the GenAI output-message schema spells it."""
    if reason in (None, "", "stop", "end_turn"):
        return "stop"
    if reason in ("tool_calls", "tool_call", "tool_use", "function_call"):
        return "tool_call"
    if reason in ("length", "max_tokens"):
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return "error" if reason == "error" else str(reason)


def _templates(
    agent_name: str,
    framework: str,
    session_id: str | None,
    user_id: str | None,
    mode: str,
    policy: ContentPolicy,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The attributes every span of a run shares, and per-kind start templates.

    What is constant per agent (its name, the framework, the mode, each kind's own
    keys) is built and cleaned once (:func:`_agent_templates`, cached: they are only
    ever copied, never changed); a run adds its conversation and user, cleaned here,
    the only per-run part (a session id is often new per run). A span's start
    attributes are then one dict copy plus its own few keys. Each fact appears once,
    in its GenAI semconv key; vendor spellings (``session.id``,
    ``openinference.span.kind``, ...) are added by each backend's mapping on its
    exported copy. A redactor may see (and change) every value: then nothing is
    shared (:func:`_built_templates`).
    """
    if policy.redactor is not None:
        return _built_templates(agent_name, framework, session_id, user_id, mode, policy)
    common, kinds = _agent_templates(agent_name, framework, mode, policy)
    if not session_id and not user_id:
        return common, kinds
    run: dict[str, Any] = {}
    if session_id:
        run[A.CONVERSATION_ID] = session_id
    if user_id:
        run[A.USER_ID] = user_id
    run = policy.clean(run)
    if A.SANITIZED in run or A.SANITIZED in common:  # one list per span: build it whole
        return _built_templates(agent_name, framework, session_id, user_id, mode, policy)
    name = {A.AGENT_NAME: common[A.AGENT_NAME]}
    return (
        {**name, **run},
        {kind: {**name, **run, **template} for kind, template in kinds.items()},
    )


@functools.lru_cache(maxsize=256)
def _agent_templates(
    agent_name: str, framework: str, mode: str, policy: ContentPolicy
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The agent's common attributes (its name) and each kind's template with no
    conversation or user: the name first, as :func:`_built_templates` orders them."""
    common, templates = _built_templates(agent_name, framework, None, None, mode, policy)
    if A.SANITIZED in common:  # kept whole: _templates builds these runs in full
        return common, templates
    return common, {
        kind: {key: value for key, value in template.items() if key != A.AGENT_NAME}
        for kind, template in templates.items()
    }


def _built_templates(
    agent_name: str,
    framework: str,
    session_id: str | None,
    user_id: str | None,
    mode: str,
    policy: ContentPolicy,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Every template of a run, built and cleaned in full (see :func:`_templates`)."""
    common: dict[str, Any] = {A.AGENT_NAME: agent_name}
    if session_id:
        common[A.CONVERSATION_ID] = session_id
    if user_id:
        common[A.USER_ID] = user_id
    templates = {
        "run": {
            **common,
            A.SPAN_TYPE: "run",
            A.OPERATION: "invoke_agent",
            A.AGENT_ID: common[A.AGENT_NAME],
            A.FRAMEWORK: framework,
            A.MODE: mode,
        },
        "step": {**common, A.SPAN_TYPE: "step"},
        "message": {
            **common,
            A.SPAN_TYPE: "message",
            A.OPERATION: "chat",
            A.REQUEST_STREAM: mode == "stream",
        },
        "reasoning": {**common, A.SPAN_TYPE: "reasoning"},
        "tool": {
            **common,
            A.SPAN_TYPE: "tool",
            A.OPERATION: "execute_tool",
            A.TOOL_TYPE: "function",
        },
    }
    return policy.clean(common), {kind: policy.clean(t) for kind, t in templates.items()}


def _merged(template: dict[str, Any], fields: dict[str, Any] | None) -> dict[str, Any]:
    """A span's start attributes: its template plus its own cleaned fields, with the
    keys either had to sanitize named once in ``runnertrace.sanitized``."""
    attrs = template.copy()
    if fields:
        attrs.update(fields)
        marked = fields.get(A.SANITIZED)
        if marked and A.SANITIZED in template:
            attrs[A.SANITIZED] = (*template[A.SANITIZED], *marked)
    return attrs
