"""The event -> span state machine: one :class:`RunTracer` per traced run.

Events are dispatched on their ``type`` string through ``_HANDLERS`` (so any
object with the right ``type`` and fields is traced: foreign runners are
duck-typed). Every handler is synchronous, allocation-light and never touches
the OTel *current* context: parents are passed explicitly, so no context token
can ever be detached in the wrong context.

Malformed streams (an end without a start, a duplicate id, events after the
run's final message) are tolerated: the event is skipped for tracing, counted in
``runnertrace.stream.anomalies`` on the run span, and one warning is logged per
run. Whatever is still open when the run ends is closed then.

No event can lose track of a span: a handler leaves its span in its table until
it has finished with it, so when a handler fails (a foreign event with a field
of the wrong type), :meth:`RunTracer._salvage` finds the span still there, marks
it with ``runnertrace.event.fault``, counts the anomaly, and ends it if the event
was to end it (else it ends with its step or the run, as usual).

Every value written to a span, and every span name, is built from what
:meth:`~runnertrace.tracing.content.ContentPolicy.clean_value` returned: the one
place where redaction and sanitizing happen (see :mod:`runnertrace.tracing.content`).
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from runnertrace._internal.errors import internal_log, report_internal_error
from runnertrace.core.context import reset_var
from runnertrace.core.events import EventError
from runnertrace.core.observer import NULL_OBSERVER, ToolBoundary
from runnertrace.tracing import attributes as A
from runnertrace.tracing.content import ContentPolicy, request_parts
from runnertrace.tracing.cost import usage_cost
from runnertrace.tracing.totals import RunTotals

__all__ = ["RunTracer", "active_run"]

active_run: contextvars.ContextVar[RunTracer | None] = contextvars.ContextVar(
    "runnertrace_active_run", default=None
)
"""The traced run a run started here nests in: set by the tracing layer around its base
runner, and by each tool scope to the run that owns the tool (a nested run's tools
included), so a run nested two deep hands its totals to the right parent."""

logger = logging.getLogger("runnertrace")

_INTERNAL = SpanKind.INTERNAL
# Guards each run's list of open nested runs, which nested runs ending on other threads
# (CrewAI, smolagents) change: taken once when a nested run starts and once as a run ends.
_CHILDREN = threading.Lock()
_CLIENT = SpanKind.CLIENT


class _Open:
    """An open span plus what we aggregate for it until it ends.

    One is made per span on the hot path, so only the three fields every span
    has are written at creation; the rest read as these class defaults until
    set.
    """

    ctx: Context | None = None
    deltas = 0  # deltas (text, reasoning) or argument chunks (tool calls) seen
    chars = 0  # characters of the aggregated deltas
    first_ns = 0  # time of the first delta
    parts: list[str] | None = None  # captured text (content capture only)
    calls: list[dict[str, Any]] | None = None  # a message's captured tool calls
    name = ""  # a tool call's tool name
    parent_id: Any = None  # a tool call's parent message id
    owner: _Open | None = None  # the step this span started in
    awaiting = False  # a tool whose step ended before its result arrived
    pending: dict[str, Any] | None = None  # a tool call not yet running: its span's fields
    origin: _Open | None = None  # the step a tool call was announced in
    message: _Open | None = None  # the message a reasoning block is part of
    failure: EventError | None = None  # a step's failed model call: the step ends ERROR
    branch: str | None = None  # the branch a step, message or tool call belongs to
    model: str | None = None  # a model call's requested model (what it is priced by, else)
    agent: str | None = None  # a branch span's agent (its children inherit it)
    sanitized: tuple[str, ...] = ()  # keys already named in runnertrace.sanitized

    def __init__(self, span: Span, kind: str, start_ns: int) -> None:
        self.span = span
        self.kind = kind
        self.start_ns = start_ns

    def context(self) -> Context:
        if self.ctx is None:
            self.ctx = trace_api.set_span_in_context(self.span)
        return self.ctx


class _Branch:
    """One agent's line of work in a run (``StepStart.branch``): its open steps,
    innermost last, and the span its steps nest under when none is open."""

    __slots__ = ("root", "steps")

    def __init__(self, root: _Open) -> None:
        self.root = root
        self.steps: list[tuple[tuple[str, Any], _Open]] = []


def _error_type(exc: BaseException) -> str:
    return type(exc).__qualname__ or "_OTHER"


class RunTracer:
    """Turns one run's events into spans. Not thread-safe: one run, one task."""

    # Per-run counters start as these class defaults (written only on change).
    anomalies = 0
    finished = False
    claimed = False  # the runner reports its stream's events itself (stream_observer)
    model: str | None = None
    agent: str | None = None  # the agent now running, after a handoff (None: the run's)
    last_text: str | None = None  # the newest message's text (content capture only)
    provider: str | None = None

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
        deltas_as_events: bool,
        parent: Context | None,
        legacy_keys: bool = False,
        requests: Any = None,
        instructions: str | None = None,
        parent_run: RunTracer | None = None,
    ) -> None:
        self.tracer = tracer
        # What this run's own calls add up to, and what the runs nested in it hand up as
        # they end; at its end, the sum of both goes on the run span and up to parent_run.
        self.own = RunTotals()
        self.nested = RunTotals()
        self.parent_run = parent_run
        self.open_children: list[RunTracer] | None = None  # nested runs not yet finished
        if parent_run is not None:
            with _CHILDREN:
                if parent_run.open_children is None:
                    parent_run.open_children = []
                parent_run.open_children.append(self)
        self.policy = policy
        self.capture = policy.capture
        self.clean = policy.clean
        self.clean_value = policy.clean_value
        self.deltas_as_events = deltas_as_events
        self.legacy = legacy_keys  # trace.semconv_version 1: vendor spellings on the span too
        self.mode = mode
        if policy.redactor is None:
            self.common, self.templates = _templates(
                agent_name, framework, session_id, user_id, mode, policy
            )
        else:  # a redactor may see (and change) every value: nothing shared
            self.common, self.templates = _templates.__wrapped__(
                agent_name, framework, session_id, user_id, mode, policy
            )
        self.steps: list[tuple[tuple[str, Any], _Open]] = []
        self.branches: dict[str, _Branch] = {}
        self.messages: dict[str, _Open] = {}
        self.reasoning: dict[str, _Open] = {}
        self.tools: dict[str, _Open] = {}
        now = time.time_ns()
        fields: dict[str, Any] = {}
        if self.capture and requests is not None:
            parts = request_parts(requests)
            messages = [{"role": "user", "parts": parts}]
            fields[A.INPUT_MESSAGES] = policy.messages(messages)
            if instructions:
                fields[A.SYSTEM_INSTRUCTIONS] = policy.parts(
                    [{"type": "text", "content": instructions}]
                )
        attrs = _merged(self.templates["run"], self.clean(fields) if fields else None)
        if self.legacy:
            attrs.update(A.vendor_mirrors(attrs, "run"))
        run_span = tracer.start_span(
            f"invoke_agent {self.common[A.AGENT_NAME]}",
            context=parent,
            kind=_INTERNAL,
            attributes=attrs,
            start_time=now,
        )
        self.run = _Open(run_span, "run", now)
        self.run.sanitized = attrs.get(A.SANITIZED, ())
        # An unsampled run records nothing below its run span (whose context still
        # propagates the decision to nested runs and foreign spans).
        self.recording = self.accepting = run_span.is_recording()  # accepting: until the end

    # -- helpers ------------------------------------------------------------------------
    def _anomaly(self, what: str) -> None:
        self.anomalies += 1
        if self.anomalies == 1:
            internal_log.warning(
                "malformed-stream",
                "runnertrace: malformed event stream in run %r: %s (further anomalies in this "
                "run are counted on the span, not logged)",
                self.common.get(A.AGENT_NAME),
                what,
            )

    def _container(self, branch: str | None = None) -> _Open:
        """Where a message or tool call nests: the innermost open step of its branch,
        else the branch's root (the run's own line: the run)."""
        return self._innermost(branch) or self._root(branch)

    def _innermost(self, branch: str | None) -> _Open | None:
        """The innermost open step of ``branch`` (``None``: the run's own line)."""
        if branch is None:
            return self.steps[-1][1] if self.steps else None
        found = self.branches.get(branch)
        return found.steps[-1][1] if found is not None and found.steps else None

    def _root(self, branch: str | None) -> _Open:
        found = self.branches.get(branch) if branch is not None else None
        return found.root if found is not None else self.run

    def _start(
        self,
        operation: str,
        kind: str,
        parent: _Open,
        fields: dict[str, Any],
        label: str | None = None,
        span_kind: SpanKind = _INTERNAL,
        start_ns: int | None = None,
        agent: str | None = None,
    ) -> _Open:
        """Open a child span with ``self.templates[kind]`` plus its own ``fields``.

        The fields are cleaned first, and the name is ``operation`` followed by the
        cleaned value of ``fields[label]`` (when given): a name never holds what
        its attribute could not. ``start_ns`` backdates the span (a tool that ran
        before the tracer heard of it). A span in a branch names the branch's agent
        (``agent``, else its parent's); any other names the run's current agent.
        """
        now = time.time_ns() if start_ns is None else start_ns
        agent = agent or parent.agent
        if agent is not None or self.agent is not None:
            fields[A.AGENT_NAME] = agent or self.agent
        fields = self.clean(fields)
        name = operation if label is None or label not in fields else f"{operation} {fields[label]}"
        attrs = _merged(self.templates[kind], fields)
        if self.legacy:
            attrs.update(A.vendor_mirrors(attrs, kind))
        span = self.tracer.start_span(
            name, context=parent.context(), kind=span_kind, attributes=attrs, start_time=now
        )
        item = _Open(span, kind, now)
        item.agent = agent
        marked = attrs.get(A.SANITIZED)
        if marked:
            item.sanitized = marked
        return item

    def _put(self, item: _Open, attrs: dict[str, Any]) -> None:
        """Set attributes on ``item``'s span, cleaned (redacted and made encodable).

        A tool call not yet running keeps them raw; its span opens with them (cleaned then).
        """
        if item.pending is not None:
            item.pending.update(attrs)
        elif attrs:
            attrs = self.clean(attrs)
            marked = attrs.get(A.SANITIZED)
            if marked:  # keep the keys named before: one span, one list
                item.sanitized = attrs[A.SANITIZED] = (*item.sanitized, *marked)
            if self.legacy:
                attrs.update(A.vendor_mirrors(attrs, item.kind))
            item.span.set_attributes(attrs)

    def _event(self, item: _Open, name: str, attrs: dict[str, Any]) -> None:
        """Add a span event whose attributes are cleaned like the span's."""
        item.span.add_event(name, self.clean(attrs))

    def nesting_context(self) -> Context:
        """Parent for a run nested in this one: the newest running tool, else step, else run."""
        for tool in reversed(self.tools.values()):
            if tool.pending is None:
                return tool.context()
        return self._container().context()

    # -- dispatch ---------------------------------------------------------------------
    def handle(self, event: Any) -> None:
        """Record ``event``; a fault here is logged once and never reaches the host."""
        try:
            handler = _HANDLERS.get(getattr(event, "type", None))
            if handler is not None and self.accepting:
                try:
                    handler(self, event)
                except Exception:
                    self._salvage(event)
                    raise
            elif not self.recording:
                return
            elif handler is None:
                self._anomaly(f"unknown event type {getattr(event, 'type', None)!r}")
            else:
                self._anomaly(f"{event.type} after the run ended")
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("span state machine", exc)

    def _salvage(self, event: Any) -> None:
        """A handler failed on ``event``: keep track of the span it was for.

        The span is still in its table (handlers remove it only once done with
        it). It is marked with the event's type and counted as an anomaly; an
        event that was to end it ends it now, incomplete, and any other is left
        to end with its step or the run.
        """
        kind: str = event.type  # a key of _HANDLERS: a str
        self._anomaly(f"{kind} could not be processed")
        table, key = _TABLES.get(kind, (None, ""))
        if table is None:
            return
        spans: dict[Any, _Open] = getattr(self, table)
        try:
            item = spans.get(getattr(event, key, None))
        except TypeError:  # an id that cannot be a key (a list...): never stored either
            return
        if item is None:
            return
        self._put(item, {A.FAULT: kind})
        if kind.endswith(("_end", "_result")):
            del spans[getattr(event, key)]
            self._close(item, incomplete=True)

    __call__ = handle  # the core Observer protocol: a runner reports events by calling us

    def claim(self) -> None:
        self.claimed = True

    def scope(self, kind: str, key: str) -> Any:
        """While a tool or model call runs, its span is the OTel current span.

        A tool scope also hides this run from the tool's body (see
        :class:`~runnertrace.core.observer.ToolBoundary`). A key we do not know
        (an unsampled run, a call never announced) gives a scope that only hides.
        """
        item = (self.tools if kind == "tool" else self.messages).get(key)
        if item is None:
            return ToolBoundary() if kind == "tool" else NULL_OBSERVER.scope("model", key)
        if item.pending is not None:  # the framework starts executing the tool now
            try:
                self._run_tool(item)
            except Exception as exc:  # noqa: BLE001 - telemetry boundary
                report_internal_error("span state machine (tool scope)", exc)
        return _Scope(item.context(), self if kind == "tool" else None)

    # -- steps --------------------------------------------------------------------------
    def _on_step_start(self, event: Any) -> None:
        name = _field(event, "step_name", "name")
        index = getattr(event, "step_index", None)
        agent = getattr(event, "agent_name", None)
        agent = (agent if type(agent) is str else str(agent)) if agent else None
        branch_key = getattr(event, "branch", None)
        if branch_key is None:
            if agent:
                self.agent = agent
            steps, parent, agent = self.steps, self._container(), None
        else:
            branch_key = _text(branch_key)
            branch = self.branches.get(branch_key)
            if branch is None:
                fork = getattr(event, "parent_step", None)
                root = self._open_step(*fork) if fork else None
                branch = self.branches[branch_key] = _Branch(root or self.run)
            steps, parent = branch.steps, self._container(branch_key)
            agent = agent or parent.agent
        fields: dict[str, Any] = {A.STEP_NAME: _text(name)}
        if index is not None:
            fields[A.STEP_INDEX] = _number(index)
        source = getattr(event, "handoff_from", None)
        if source:
            fields[A.HANDOFF_SOURCE] = _text(source)
            fields[A.HANDOFF_TARGET] = agent or self.agent or self.common[A.AGENT_NAME]
        step = self._start("agent_step", "step", parent, fields, A.STEP_NAME, agent=agent)
        step.branch = branch_key
        steps.append(((name, index), step))

    def _open_step(self, name: Any, index: Any, branch: Any) -> _Open | None:
        """The open step ``(name, index)`` of ``branch`` (``None``: the run's own line)."""
        found = self.branches.get(_text(branch)) if branch is not None else None
        steps = self.steps if branch is None else found.steps if found else []
        return next((step for key, step in reversed(steps) if key == (name, index)), None)

    def _on_step_end(self, event: Any) -> None:
        key = (_field(event, "step_name", "name"), getattr(event, "step_index", None))
        branch_key = getattr(event, "branch", None)
        branch = self.branches.get(_text(branch_key)) if branch_key is not None else None
        steps = self.steps if branch_key is None else branch.steps if branch else []
        for pos in range(len(steps) - 1, -1, -1):
            if steps[pos][0] == key:
                break
        else:
            self._anomaly(f"step_end for {key} without a step_start")
            return
        popped = [item for _, item in steps[pos:]]
        code = getattr(event, "code", None)
        if code and self.capture:
            self._put(popped[0], {A.STEP_CODE: self.policy.truncate(_text(code))})
        if len(popped) > 1:
            self._anomaly(f"step {key} ended while {len(popped) - 1} inner step(s) were open")
        for step in reversed(popped):  # still listed while closing: a fault leaves none open
            self._close_children(step)
            self._close(step, incomplete=step is not popped[0])
        del steps[pos:]

    def _close_children(self, step: _Open) -> None:
        """End what a step left open; an open message or reasoning block is incomplete.

        A tool still waiting for its result outlives the step that asked for it
        (LangGraph runs tools in the next step): it ends at its result, or
        normally at run end, since some frameworks never report results."""
        if not (self.reasoning or self.messages or self.tools):
            return
        for table in (self.reasoning, self.messages, self.tools):
            for key in [k for k, v in table.items() if v.owner is step]:
                if table is self.tools:
                    table[key].owner = None
                    table[key].awaiting = True
                    continue
                item = table.pop(key)
                self._anomaly(f"{item.kind} {key!r} still open when its step ended")
                self._close(item, incomplete=True)

    # -- messages -----------------------------------------------------------------------
    def _on_message_start(self, event: Any) -> None:
        mid = event.message_id
        if mid in self.messages:
            self._anomaly(f"duplicate message_start {mid!r}")
            self._close(self.messages.pop(mid), incomplete=True)
        model = getattr(event, "model", None)
        provider = getattr(event, "provider", None)
        fields: dict[str, Any] = {}
        if model:
            fields[A.REQUEST_MODEL] = self.model = _text(model)
        if provider:
            fields[A.PROVIDER] = self.provider = _text(provider)
        parameters = getattr(event, "request_parameters", None)
        if parameters:
            for key, value in parameters.items():
                fields[f"gen_ai.request.{key}"] = _attribute(value)
        definitions = getattr(event, "tool_definitions", None)
        if definitions:
            fields[A.TOOL_DEFINITIONS] = self._tool_definitions(definitions)
        if self.capture:
            messages = getattr(event, "input_messages", None)
            if messages:
                fields[A.INPUT_MESSAGES] = self.policy.messages(messages)
            instructions = getattr(event, "system_instructions", None)
            if instructions:
                fields[A.SYSTEM_INSTRUCTIONS] = self.policy.parts(
                    [{"type": "text", "content": instructions}]
                )
        branch = getattr(event, "branch", None)
        branch = _text(branch) if branch is not None else None
        owner = self._innermost(branch)
        parent = owner or self._root(branch)
        item = self._start("chat", "message", parent, fields, A.REQUEST_MODEL, _CLIENT)
        self.messages[mid] = item
        self.own.model_calls += 1
        item.owner = owner
        item.branch = branch
        item.model = fields.get(A.REQUEST_MODEL)
        if self.capture:
            item.parts = []

    def _tool_definitions(self, definitions: Any) -> str:
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

    def _on_text_delta(self, event: Any) -> None:
        item = self.messages.get(event.message_id)
        if item is None:
            self._anomaly(f"text_delta for unknown message {event.message_id!r}")
            return
        self._delta(item, _field(event, "delta", "content"))

    def _delta(self, item: _Open, delta: Any) -> None:
        if type(delta) is not str:  # a foreign event's None or number: as text, None as ""
            delta = "" if delta is None else str(delta)
        item.deltas += 1
        if not item.first_ns:
            item.first_ns = time.time_ns()
            message = item.message
            if message is not None and not message.first_ns:  # reasoning: the reply's first chunk
                message.first_ns = item.first_ns
        if item.parts is not None:
            item.parts.append(delta)
        if self.deltas_as_events:
            attrs: dict[str, Any] = {"length": len(delta)}
            if self.capture:
                attrs["content"] = self.policy.truncate(delta)
            self._event(item, "gen_ai.content.delta", attrs)
        else:
            item.chars += len(delta)

    def _delta_attributes(self, item: _Open) -> dict[str, Any]:
        """The aggregated-delta attributes of a message or reasoning span."""
        attrs: dict[str, Any] = {A.DELTA_COUNT: item.deltas}
        if item.deltas and not self.deltas_as_events:
            attrs[A.DELTA_CHARS] = item.chars
        if item.first_ns:
            ttfc = (item.first_ns - item.start_ns) / 1e9
            attrs[A.TTFC] = ttfc
        return attrs

    def _on_message_end(self, event: Any) -> None:
        # The call ended now: pricing it below may first wait for the price table
        # (once per process), and that wait is ours, not the model's.
        ended_ns = time.time_ns()
        mid = event.message_id
        item = self.messages.get(mid)
        if item is None:
            self._anomaly(f"message_end for unknown message {event.message_id!r}")
            return
        span = item.span
        attrs = self._delta_attributes(item)
        finish = getattr(event, "finish_reason", None)
        if finish:
            attrs[A.FINISH_REASONS] = (str(finish),)
        own = self.own
        tokens = getattr(event, "input_tokens", None)
        if tokens is not None:
            attrs[A.INPUT_TOKENS] = tokens = _number(tokens)
            if type(tokens) is int:
                own.input_tokens += tokens
        tokens = getattr(event, "output_tokens", None)
        if tokens is not None:
            attrs[A.OUTPUT_TOKENS] = tokens = _number(tokens)
            if type(tokens) is int:
                own.output_tokens += tokens
        for key, field in _DETAIL_USAGE_FIELDS:
            value = getattr(event, field, None)
            if value is not None:
                attrs[key] = _number(value)
        for key, field in _RESPONSE_FIELDS:
            value = getattr(event, field, None)
            if value:
                attrs[key] = _text(value)
        if _counted(attrs.get(A.INPUT_TOKENS)) or _counted(attrs.get(A.OUTPUT_TOKENS)):
            self._price(item, attrs)
        error = _event_error(getattr(event, "error", None))
        if error is not None:
            attrs[A.ERROR_TYPE] = error.type
        self._put(item, attrs)
        if error is not None:
            self._fail(item, error)
            if item.owner is not None:
                item.owner.failure = error
        if item.parts is not None:
            parts: list[dict[str, Any]] = []
            text = "".join(item.parts)
            if text:
                parts.append({"type": "text", "content": text})
                self.last_text = text
            parts.extend(item.calls or ())
            message = {"role": "assistant", "parts": parts, "finish_reason": _finish(finish)}
            self._put(item, {A.OUTPUT_MESSAGES: self.policy.messages([message])})
        del self.messages[mid]
        span.end(end_time=ended_ns)

    def _price(self, item: _Open, attrs: dict[str, Any]) -> None:
        """Price a model call by the model the response names, else (none named, or one
        with no price) by the model it asked for; a call with no price is counted as such,
        so the run's cost says it is partial."""
        requested = item.model or self.model
        response = attrs.get(A.RESPONSE_MODEL)
        usage = (attrs.get(A.INPUT_TOKENS), attrs.get(A.OUTPUT_TOKENS))
        cached = attrs.get(A.CACHE_READ_TOKENS)
        cost = usage_cost(response or requested, self.provider, *usage, cached)
        if cost is None and response and requested and response != requested:
            cost = usage_cost(requested, self.provider, *usage, cached)
        if cost is None:
            self.own.unpriced_call(response or requested, self.provider)
        else:
            attrs[A.COST] = cost
            self.own.priced(cost)

    # -- reasoning --------------------------------------------------------------------
    def _on_reasoning_start(self, event: Any) -> None:
        rid = event.message_id
        if rid in self.reasoning:
            self._anomaly(f"duplicate reasoning_start {rid!r}")
            self._close(self.reasoning.pop(rid), incomplete=True)
        parent_id = getattr(event, "parent_message_id", None)
        if parent_id is not None:
            message = self.messages.get(parent_id)
        else:
            message = next(reversed(self.messages.values())) if self.messages else None
        owner = message.owner if message is not None else self._innermost(None)
        item = self._start("reasoning", "reasoning", message or owner or self.run, {})
        self.reasoning[rid] = item
        item.owner = owner
        item.message = message
        if self.capture:
            item.parts = []

    def _on_reasoning_delta(self, event: Any) -> None:
        item = self.reasoning.get(event.message_id)
        if item is None:
            self._anomaly(f"reasoning_delta for unknown block {event.message_id!r}")
            return
        self._delta(item, _field(event, "delta", "content"))

    def _on_reasoning_end(self, event: Any) -> None:
        rid = event.message_id
        item = self.reasoning.get(rid)
        if item is None:
            self._anomaly(f"reasoning_end for unknown block {rid!r}")
            return
        attrs = self._delta_attributes(item)
        if item.parts is not None:
            message = {  # finish_reason: the schema requires it of every output message
                "role": "assistant",
                "parts": [{"type": "reasoning", "content": "".join(item.parts)}],
                "finish_reason": "stop",
            }
            attrs[A.OUTPUT_MESSAGES] = self.policy.messages([message])
        self._put(item, attrs)
        del self.reasoning[rid]
        item.span.end()

    # -- tool calls -------------------------------------------------------------------
    def _on_tool_call_start(self, event: Any) -> None:
        cid = event.tool_call_id
        if cid in self.tools:
            self._anomaly(f"duplicate tool_call_start {cid!r}")
            self._close(self.tools.pop(cid), incomplete=True)
        name = _text(_field(event, "tool_name", "name"))
        fields: dict[str, Any] = {A.TOOL_NAME: name, A.TOOL_CALL_ID: _text(cid)}
        parent_id = getattr(event, "parent_message_id", None)
        asked = self.messages.get(parent_id) if parent_id is not None else None
        # A call belongs to its asking message's branch (and step), else the run's line.
        branch = asked.branch if asked is not None else None
        owner = self._innermost(branch)
        # The model announced the call; its span opens when the tool runs (_run_tool).
        item = _Open(trace_api.INVALID_SPAN, "tool", time.time_ns())
        item.pending = fields
        item.owner = item.origin = owner
        item.branch = branch
        self.tools[cid] = item
        item.name = name
        item.parent_id = parent_id
        if self.capture:
            item.parts = []
        if parent_id is not None:  # a tool call is a chunk of the asking message's reply too
            asking = self.messages.get(parent_id)
            if asking is not None and not asking.first_ns:
                asking.first_ns = item.start_ns

    def _run_tool(self, item: _Open, *, late: bool = False, start_ns: int | None = None) -> None:
        """Open an announced call's span as the framework starts executing the tool, in
        the innermost open step. ``late``: the tool ran outside any tool scope (a
        foreign runner has none), so the span starts at ``start_ns`` if the result
        said when the tool started, else when the call was announced, in the step
        that announced it."""
        attrs, item.pending = item.pending or {}, None
        if late:
            parent, start_ns = item.origin or self._root(item.branch), start_ns or item.start_ns
        else:
            parent, start_ns = self._container(item.branch), None
            item.owner = self._innermost(item.branch)
            item.awaiting = False
        opened = self._start("execute_tool", "tool", parent, attrs, A.TOOL_NAME, start_ns=start_ns)
        self.own.tool_calls += 1
        item.span, item.start_ns, item.ctx = opened.span, opened.start_ns, None
        item.sanitized = opened.sanitized

    def _on_tool_call_args(self, event: Any) -> None:
        item = self.tools.get(event.tool_call_id)
        if item is None:
            self._anomaly(f"tool_call_args for unknown call {event.tool_call_id!r}")
            return
        item.deltas += 1
        if item.parts is not None:
            delta = _field(event, "delta", "content")
            item.parts.append(delta if type(delta) is str else "" if delta is None else str(delta))

    def _on_tool_call_end(self, event: Any) -> None:
        item = self.tools.get(event.tool_call_id)
        if item is None:
            self._anomaly(f"tool_call_end for unknown call {event.tool_call_id!r}")
            return
        self._put(item, {A.DELTA_COUNT: item.deltas})
        if item.parts is None:
            return
        arguments = "".join(item.parts)
        self._put(item, {A.TOOL_ARGUMENTS: self.policy.truncate(arguments)})
        asking = self.messages.get(item.parent_id or "")
        if asking is not None and asking.parts is not None:
            try:
                parsed: Any = json.loads(arguments) if arguments else {}
            except ValueError:
                parsed = arguments
            if asking.calls is None:
                asking.calls = []
            asking.calls.append(
                {
                    "type": "tool_call",
                    "id": event.tool_call_id,
                    "name": item.name,
                    "arguments": parsed,
                }
            )

    def _on_tool_call_result(self, event: Any) -> None:
        cid = event.tool_call_id
        item = self.tools.get(cid)
        if item is None:
            self._anomaly(f"tool_call_result for unknown call {cid!r}")
            return
        if item.pending is not None:
            self._run_tool(item, late=True, start_ns=_time(getattr(event, "started_at", None)))
        if self.capture:
            self._put(item, {A.TOOL_RESULT: self.policy.text(event.content)})
        error = _event_error(getattr(event, "error", None))
        if error is None and getattr(event, "is_error", False):
            error = EventError(type="_OTHER", message=_text(getattr(event, "content", "")))
        if error is not None:
            self._put(item, {A.ERROR_TYPE: error.type})
            self._fail(item, error)
        del self.tools[cid]
        ended_ns = _time(getattr(event, "ended_at", None))
        item.span.end(end_time=ended_ns if ended_ns is None or ended_ns >= item.start_ns else None)

    # -- closing -------------------------------------------------------------------------
    def _close(
        self,
        item: _Open,
        *,
        incomplete: bool,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        """End ``item``'s span, marked as the arguments say. It ends even when marking
        it fails (a redactor that raises): the fault propagates, the span is not lost."""
        if item.pending is not None:
            self._run_tool(item, late=True)
        span = item.span
        if not span.is_recording():  # ended already (a salvaged event), or never recorded
            return
        try:
            attrs = self._delta_attributes(item) if item.kind in ("message", "reasoning") else {}
            if incomplete:
                attrs[A.INCOMPLETE] = True
            if cancelled:
                attrs[A.CANCELLED] = True
            failure = error if error is not None else item.failure
            if failure is not None:
                attrs[A.ERROR_TYPE] = (
                    failure.type if isinstance(failure, EventError) else _error_type(failure)
                )
            self._put(item, attrs)
            if failure is not None:
                self._status(item, failure)
        finally:
            span.end()

    def _status(self, item: _Open, error: BaseException | EventError) -> None:
        """ERROR status, its description cleaned like any attribute; a failed model or
        tool call counts in the run's errors."""
        if isinstance(error, EventError):
            text = f"{error.type}: {error.message}" if error.message else error.type
        else:
            text = f"{type(error).__name__}: {error}"
        item.span.set_status(Status(StatusCode.ERROR, self.clean_value(text)[0]))
        if item.kind == "message" or item.kind == "tool":
            self.own.errors += 1

    def _fail(self, item: _Open, error: EventError) -> None:
        """ERROR status plus an exception event, as ``record_exception`` would write."""
        self._status(item, error)
        attrs = {"exception.type": error.type, "exception.message": error.message}
        if error.stacktrace:
            attrs["exception.stacktrace"] = error.stacktrace
        self._event(item, "exception", attrs)

    def finish(
        self, reply: Any = None, error: BaseException | None = None, cancelled: bool = False
    ) -> None:
        """End the run: close every open span, then the run span. Idempotent.

        A run that fails or is cancelled while runs nested in it are still open ends
        them first, as cancelled (a framework may end them later, or never), so their
        spans end inside this run's and their totals are in its own."""
        with _CHILDREN:
            if self.finished:
                return
            self.finished = True
            parent, children = self.parent_run, self.open_children
            if parent is not None and parent.open_children:
                with suppress(ValueError):  # not listed: the parent ended it already
                    parent.open_children.remove(self)
            self.open_children = None
        self.accepting = False
        if children and (error is not None or cancelled):
            for child in children:
                child.finish(error=error if cancelled else None, cancelled=True)
        try:
            try:
                if self.reasoning or self.messages or self.tools or self.steps or self.branches:
                    self._close_dangling(error, cancelled)
            finally:
                self._end_run(reply, error, cancelled)
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("span state machine (finish)", exc)

    def _end_run(self, reply: Any, error: BaseException | None, cancelled: bool) -> None:
        span = self.run.span
        try:
            totals = self.own.plus(self.nested)
            if self.parent_run is not None:  # first: its totals hold, whatever fails below
                self.parent_run.adopt(totals)
            attrs = totals.attributes(self.own)
            if self.model:
                attrs[A.REQUEST_MODEL] = self.model
            if self.provider:  # required on invoke_agent when known
                attrs[A.PROVIDER] = self.provider
            if self.anomalies:
                attrs[A.MALFORMED] = self.anomalies
            if cancelled:
                attrs[A.CANCELLED] = True
            if error is not None:
                attrs[A.ERROR_TYPE] = _error_type(error)
            if reply is not None:
                kind = getattr(reply, "type", None)
                if kind:
                    attrs[A.REPLY_TYPE] = str(kind)
            self._put(self.run, attrs)
            if self.capture and (reply is not None or self.last_text is not None):
                # stream mode has no reply object: the newest message's text is the output
                self._record_reply(reply if reply is not None else self.last_text)
            if error is not None:
                self._record_exception(error)
                self._status(self.run, error)
        finally:
            span.end()

    def adopt(self, totals: RunTotals) -> None:
        """A run nested in this one ended with ``totals`` (its subtree's): they count in
        this run's totals. A nested run that outlives this one is logged, once."""
        if self.finished and not self.run.span.is_recording():
            internal_log.warning(
                "nested-run-after-parent",
                "runnertrace: a run nested in %r ended after it; its totals are not in %r's",
                self.common.get(A.AGENT_NAME),
                self.common.get(A.AGENT_NAME),
            )
            return
        self.nested.absorb(totals)

    def _close_dangling(self, error: BaseException | None, cancelled: bool) -> None:
        dangling = [*self.reasoning.values(), *self.messages.values(), *self.tools.values()]
        for branch in self.branches.values():
            dangling += [step for _, step in reversed(branch.steps)]
        dangling += [step for _, step in reversed(self.steps)]
        # Tools whose step ended while they awaited a result end normally.
        unexpected = [item for item in dangling if not item.awaiting]
        if unexpected and error is None and not cancelled:
            self._anomaly(f"{len(unexpected)} span(s) still open when the run ended")
        faults: list[Exception] = []
        # A run that fails ends the work still open in its branches: those were cut short
        # by another branch's failure (which the framework reported where it happened), so
        # they end cancelled, not with an error they did not raise.
        sibling_failed = error is not None and not cancelled
        for item in dangling:  # each one ends, whatever marking another did
            failed = error is not None or cancelled or not item.awaiting
            cut_short = sibling_failed and item.branch is not None
            try:
                self._close(
                    item,
                    incomplete=failed,
                    error=None if cut_short else error,
                    cancelled=cancelled or cut_short,
                )
            except Exception as exc:  # noqa: BLE001 - re-raised below, once all have ended
                faults.append(exc)
        self.reasoning.clear()
        self.messages.clear()
        self.tools.clear()
        self.branches.clear()
        self.steps.clear()
        if faults:
            raise faults[0]

    def _record_exception(self, error: BaseException) -> None:
        """The run's exception event, as ``Span.record_exception`` writes it, but with
        every field cleaned (a message may name a file whose name is not UTF-8)."""
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        attrs = {
            "exception.type": type(error).__qualname__,
            "exception.message": str(error),
            "exception.stacktrace": trace,
        }
        self._event(self.run, "exception", attrs)

    def _record_reply(self, reply: Any) -> None:
        message = {
            "role": "assistant",
            "parts": [{"type": "text", "content": str(reply)}],
            "finish_reason": "stop",
        }
        self._put(self.run, {A.OUTPUT_MESSAGES: self.policy.messages([message])})


@functools.lru_cache(maxsize=256)
def _templates(
    agent_name: str,
    framework: str,
    session_id: str | None,
    user_id: str | None,
    mode: str,
    policy: ContentPolicy,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The attributes every span of a run shares, and per-kind start templates.

    Cached: runs of one agent in one session share them (they are only ever
    copied, never changed). A span's start attributes are then one dict copy
    plus its own few keys. Each fact appears once, in its GenAI semconv key;
    vendor spellings (``session.id``, ``openinference.span.kind``, ...) are
    added by each backend's mapping on its exported copy. Every value is cleaned
    here, once (see :meth:`ContentPolicy.clean`).
    """
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


def _field(event: Any, name: str, alias: str) -> Any:
    """``event.<name>``, else ``event.<alias>``: the spelling some foreign runners use.

    Agent Kernel's events, for one, carry ``TextDelta.content``, ``ToolCallStart.name``
    and ``StepStart.name``; the AG-UI-style names are ours. Both are accepted on the
    duck-typed path; a missing field raises, which ``handle`` reports.
    """
    value = getattr(event, name, _MISSING)
    return getattr(event, alias) if value is _MISSING else value


_MISSING = object()


def _error_name(error: Any) -> str:
    """``error.type`` of an event's error (foreign events may carry anything)."""
    name = getattr(error, "type", None)
    return name if isinstance(name, str) and name else "_OTHER"


def _event_error(error: Any) -> EventError | None:
    """An event's ``error`` field as an :class:`EventError`; ``None`` when it names none.

    Ours is an ``EventError`` already. A foreign runner may send an exception, an
    object with ``type``/``message``, or a C-style ``0`` for "no error" (any falsy
    value reads as none).
    """
    if error is None or isinstance(error, EventError):
        return error
    if isinstance(error, BaseException):
        return EventError.from_exception(error)
    if not error:
        return None
    trace = getattr(error, "stacktrace", None)
    return EventError(
        type=_error_name(error),
        message=_text(getattr(error, "message", error)),
        stacktrace=trace if isinstance(trace, str) else None,
    )


def _attribute(value: Any) -> Any:
    """A request parameter as an attribute value (a list becomes a tuple of its texts)."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return tuple(v if isinstance(v, str) else str(v) for v in value)
    return str(value)


class _Scope:
    """Makes one call's span current while the framework executes it; a tool's scope
    also makes its run the one that runs started in the tool nest in (``active_run``)."""

    __slots__ = ("_boundary", "_context", "_owner", "_run", "_token")

    def __init__(self, context: Context, owner: RunTracer | None) -> None:
        self._context = context
        self._owner = owner
        self._boundary = ToolBoundary() if owner is not None else None

    def __enter__(self) -> None:
        self._token = attach(self._context)
        if self._boundary is not None:
            self._run = active_run.set(self._owner)
            self._boundary.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._boundary is not None:
            self._boundary.__exit__()
            reset_var(active_run, self._run)
        detach(self._token)


def _time(value: Any) -> int | None:
    """An event's Unix-ns timestamp field, if it holds one (foreign events may not)."""
    return value if type(value) is int and value > 0 else None


def _text(value: Any) -> str:
    """An event field as an attribute string (foreign events may carry anything)."""
    return value if type(value) is str else str(value)


def _number(value: Any) -> int | float | str:
    """A numeric event field as an attribute value; a numeric text (``"12"``, from a
    foreign runner) as its number; anything else as its text."""
    kind = type(value)
    if kind is int or kind is float:
        return value  # type: ignore[no-any-return]
    text = str(value)
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


def _counted(value: Any) -> bool:
    """Whether a usage attribute is a count (a foreign text stays an attribute only)."""
    return type(value) is int or type(value) is float


def _finish(reason: str | None) -> str:
    if reason in (None, "", "stop", "end_turn"):
        return "stop"
    if reason in ("tool_calls", "tool_call", "tool_use", "function_call"):
        return "tool_call"
    if reason in ("length", "max_tokens"):
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return "error" if reason == "error" else str(reason)


_DETAIL_USAGE_FIELDS = (  # beside input and output tokens, which are also summed per run
    (A.CACHE_READ_TOKENS, "cache_read_input_tokens"),
    (A.REASONING_TOKENS, "reasoning_output_tokens"),
)
_RESPONSE_FIELDS = ((A.RESPONSE_MODEL, "response_model"), (A.RESPONSE_ID, "response_id"))

# Where the span an event is for is kept: the table's attribute name and the event's key field.
_TABLES: dict[str, tuple[str, str]] = {
    "text_delta": ("messages", "message_id"),
    "message_start": ("messages", "message_id"),
    "message_end": ("messages", "message_id"),
    "reasoning_start": ("reasoning", "message_id"),
    "reasoning_delta": ("reasoning", "message_id"),
    "reasoning_end": ("reasoning", "message_id"),
    "tool_call_start": ("tools", "tool_call_id"),
    "tool_call_args": ("tools", "tool_call_id"),
    "tool_call_end": ("tools", "tool_call_id"),
    "tool_call_result": ("tools", "tool_call_id"),
}

# Each event type is handled by the method named after it (``step_start`` -> ``_on_step_start``).
_HANDLERS: dict[Any, Callable[[RunTracer, Any], None]] = {
    kind: getattr(RunTracer, f"_on_{kind}")
    for kind in (
        "step_start",
        "step_end",
        "message_start",
        "text_delta",
        "message_end",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_call_result",
    )
}
