"""The event -> span state machine: one :class:`RunTracer` per traced run.

Events are dispatched on their ``type`` string through ``_HANDLERS`` (so any object
with the right ``type`` and fields is traced: foreign runners are duck-typed). A
foreign event is read into typed values at the door (:mod:`runnertrace.tracing.normalize`);
ours pass as they are. Every handler is synchronous, allocation-light and never
touches the OTel *current* context: parents are passed explicitly, so no context
token can ever be detached in the wrong context.

The handlers are kept together, in the order a run meets them, since the nesting
rules are read across them: a step nests in its branch's innermost open step (or the
branch's root); a model call in the innermost open step of its branch; a reasoning
block in its message; a tool call's span in the step that runs it, or, when no scope
said when it ran, in the step that announced it (its life is
:class:`~runnertrace.tracing.records.ToolState`). What each span kind keeps is in
:mod:`runnertrace.tracing.records`; how anything is written to a span is the writer
gate's (:mod:`runnertrace.tracing.gate`), the only caller of the content policy; a
model call's usage and price are :mod:`runnertrace.tracing.usage`'s.

Malformed streams (an end without a start, a duplicate id, events after the run's
final message) are tolerated: the event is skipped for tracing, counted in
``runnertrace.stream.anomalies`` on the run span, and one warning is logged per run.
Whatever is still open when the run ends is closed then.

No event can lose track of a span: a handler leaves its span in its table until it
has finished with it, so when a handler (or the door) fails on an event,
:meth:`RunTracer._salvage` finds the span still there, marks it with
``runnertrace.event.fault``, counts the anomaly, and ends it if the event was to end
it (else it ends with its step or the run, as usual).

Contexts: a span's children start in the context current where it was first asked
for, and a scope attaches the context current where it is entered; either way with
our span set, and with any value of the run's caller (its baggage, above all) that
context lacks, since a framework's own thread may start with none of them. Tracing
changes which span is current, never what else the context holds.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from opentelemetry import trace as trace_api
from opentelemetry.context import Context, attach, detach, get_current
from opentelemetry.trace import Span, SpanKind

from runnertrace._internal.errors import internal_log, report_internal_error
from runnertrace.core.context import reset_var
from runnertrace.core.events import EventError
from runnertrace.core.observer import NULL_OBSERVER, ToolBoundary
from runnertrace.tracing import attributes as A
from runnertrace.tracing.content import ContentPolicy
from runnertrace.tracing.cost import after_prices, prices_pending
from runnertrace.tracing.gate import WriterGate, attribute_value, finish_reason
from runnertrace.tracing.normalize import (
    OWN_EVENTS,
    READERS,
    MessageEndIn,
    MessageStartIn,
    ReasoningDeltaIn,
    ReasoningEndIn,
    ReasoningStartIn,
    StepEndIn,
    StepStartIn,
    TextDeltaIn,
    ToolCallArgsIn,
    ToolCallEndIn,
    ToolCallResultIn,
    ToolCallStartIn,
    identifier,
)
from runnertrace.tracing.records import (
    Branch,
    MessageRecord,
    ReasoningRecord,
    RunRecord,
    SpanRecord,
    StepRecord,
    StreamRecord,
    ToolRecord,
)
from runnertrace.tracing.totals import RunTotals
from runnertrace.tracing.usage import count_tokens, price_call, waits_for_prices

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

_R = TypeVar("_R", bound=SpanRecord)


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
    priced_later = False  # a call's end (or a nested run's) waits for the price table

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
        self.tracer = tracer  # read by the A2A client, whose spans land with the run's
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
        self.gate = gate = WriterGate(
            tracer,
            policy,
            agent_name=agent_name,
            framework=framework,
            session_id=session_id,
            user_id=user_id,
            mode=mode,
            legacy=legacy_keys,  # trace.semconv_version 1: vendor spellings on the span too
        )
        self.common = gate.common
        self.capture = policy.capture
        self.deltas_as_events = deltas_as_events
        self.aggregated = not deltas_as_events  # delta characters counted on the span
        self.steps: list[tuple[tuple[str, Any], StepRecord]] = []
        self.branches: dict[str, Branch] = {}
        self.messages: dict[str, MessageRecord] = {}
        self.reasoning: dict[str, ReasoningRecord] = {}
        self.tools: dict[str, ToolRecord] = {}
        fields: dict[str, Any] = {}
        if self.capture and requests is not None:
            fields[A.INPUT_MESSAGES] = gate.request(requests)
            if instructions:
                fields[A.SYSTEM_INSTRUCTIONS] = gate.instructions(instructions)
        self.run = run = RunRecord(time.time_ns())
        gate.start_run(run, fields, parent)
        # The caller's context (its baggage, any value it set): each context we build
        # keeps what of it the context where it is built lacks.
        self.caller = get_current()
        run.ctx = trace_api.set_span_in_context(run.span, self.caller)
        # An unsampled run records nothing below its run span (whose context still
        # propagates the decision to nested runs and foreign spans).
        self.recording = self.accepting = run.span.is_recording()  # accepting: until the end

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

    def _container(self, branch: str | None = None) -> SpanRecord:
        """Where a message or tool call nests: the innermost open step of its branch,
        else the branch's root (the run's own line: the run)."""
        return self._innermost(branch) or self._root(branch)

    def _innermost(self, branch: str | None) -> StepRecord | None:
        """The innermost open step of ``branch`` (``None``: the run's own line)."""
        if branch is None:
            return self.steps[-1][1] if self.steps else None
        found = self.branches.get(branch)
        return found.steps[-1][1] if found is not None and found.steps else None

    def _root(self, branch: str | None) -> SpanRecord:
        found = self.branches.get(branch) if branch is not None else None
        return found.root if found is not None else self.run

    def _context(self, item: SpanRecord) -> Context:
        """The context ``item``'s children start in (built once, where first asked for)."""
        ctx = item.ctx
        if ctx is None:
            ctx = item.ctx = _span_context(item.span, get_current(), self.caller)
        return ctx

    def _start(
        self,
        item: _R,
        operation: str,
        parent: SpanRecord,
        fields: dict[str, Any],
        label: str | None = None,
        span_kind: SpanKind = _INTERNAL,
        agent: str | None = None,
    ) -> _R:
        """Open ``item``'s span under ``parent`` (see :meth:`WriterGate.start`). A span in
        a branch names the branch's agent (``agent``, else its parent's); any other
        names the run's current agent."""
        agent = agent or parent.agent
        if agent is not None or self.agent is not None:
            fields[A.AGENT_NAME] = agent or self.agent
        self.gate.start(item, operation, self._context(parent), fields, label, span_kind)
        item.agent = agent
        return item

    def _put(self, item: SpanRecord, attrs: dict[str, Any]) -> None:
        """Set attributes on ``item``'s span; a tool call whose span has not opened yet
        keeps them raw for it (its span opens with them, cleaned then)."""
        if isinstance(item, ToolRecord) and not item.opened:
            item.fields.update(attrs)
        else:
            self.gate.put(item, attrs)

    def nesting_context(self) -> Context:
        """Parent for a run nested in this one: the newest running tool, else step, else run."""
        for tool in reversed(self.tools.values()):
            if tool.opened:
                return self._context(tool)
        return self._context(self._container())

    # -- dispatch ---------------------------------------------------------------------
    def handle(self, event: Any) -> None:
        """Record ``event``; a fault here is logged once and never reaches the host."""
        try:
            kind: Any = getattr(event, "type", None)
            handler = _HANDLERS.get(kind)
            if handler is not None and self.accepting:
                try:
                    # The door: ours as they are, a foreign event read into typed values.
                    typed = (
                        event if type(event) in OWN_EVENTS else READERS[kind](event, self.capture)
                    )
                    handler(self, typed)
                except Exception:
                    self._salvage(event)
                    raise
            elif not self.recording:
                return
            elif handler is None:
                self._anomaly(f"unknown event type {kind!r}")
            else:
                self._anomaly(f"{kind} after the run ended")
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("span state machine", exc)

    def _salvage(self, event: Any) -> None:
        """A handler (or the door) failed on ``event``: keep track of the span it was for.

        The span is still in its table (handlers remove it only once done with
        it). It is marked with the event's type and counted as an anomaly; an
        event that was to end it ends it now, incomplete, and any other is left
        to end with its step or the run. A start lists its span last, once nothing
        can fail, so a failed start opened none: a span open under its id is a
        duplicate's, as it would have been had the start been read.
        """
        kind: str = event.type  # a key of _HANDLERS: a str
        table, field = _TABLES.get(kind, ("", ""))
        raw = getattr(event, field, _MISSING) if table else _MISSING
        key = None if raw is _MISSING else identifier(raw)  # as the door reads it
        if key is not None and kind in _STARTS:
            self._end_duplicate(kind, key)
        self._anomaly(f"{kind} could not be processed")
        if key is None or kind in _STARTS:
            return
        spans: dict[str, SpanRecord] = getattr(self, table)
        item = spans.get(key)
        if item is None:
            return
        self._put(item, {A.FAULT: kind})
        if kind.endswith(("_end", "_result")):
            del spans[key]
            self._close(item, incomplete=True)

    def _end_duplicate(self, kind: str, key: str) -> None:
        """A start names a span already open (``kind`` is its start): that one ends,
        incomplete, before this one opens."""
        spans: dict[str, SpanRecord] = getattr(self, _TABLES[kind][0])
        if key in spans:
            self._anomaly(f"duplicate {kind} {key!r}")
            self._close(spans.pop(key), incomplete=True)

    __call__ = handle  # the core Observer protocol: a runner reports events by calling us

    def claim(self) -> None:
        self.claimed = True

    def scope(self, kind: str, key: str) -> Any:
        """While a tool or model call runs, its span is the OTel current span.

        A tool scope also hides this run from the tool's body (see
        :class:`~runnertrace.core.observer.ToolBoundary`). A key we do not know
        (an unsampled run, a call never announced) gives a scope that only hides.
        """
        item: SpanRecord | None = (self.tools if kind == "tool" else self.messages).get(key)
        if item is None:
            return ToolBoundary() if kind == "tool" else NULL_OBSERVER.scope("model", key)
        if isinstance(item, ToolRecord) and not item.opened:  # the tool starts running now
            try:
                self._run_tool(item)
            except Exception as exc:  # noqa: BLE001 - telemetry boundary
                report_internal_error("span state machine (tool scope)", exc)
        return _Scope(item.span, self.caller, self if kind == "tool" else None)

    # -- steps --------------------------------------------------------------------------
    def _on_step_start(self, event: StepStartIn) -> None:
        name, index = event.step_name, event.step_index
        agent = event.agent_name or None
        branch_key = event.branch
        if branch_key is None:
            if agent:
                self.agent = agent
            steps, parent, agent = self.steps, self._container(), None
        else:
            branch = self.branches.get(branch_key)
            if branch is None:
                fork = event.parent_step
                root = self._open_step(*fork) if fork else None
                branch = self.branches[branch_key] = Branch(root or self.run)
            steps, parent = branch.steps, self._container(branch_key)
            agent = agent or parent.agent
        fields: dict[str, Any] = {A.STEP_NAME: name}
        if index is not None:
            fields[A.STEP_INDEX] = index
        source = event.handoff_from
        if source:
            fields[A.HANDOFF_SOURCE] = source
            fields[A.HANDOFF_TARGET] = agent or self.agent or self.common[A.AGENT_NAME]
        step = StepRecord(time.time_ns())
        self._start(step, "agent_step", parent, fields, A.STEP_NAME, agent=agent)
        step.branch = branch_key
        steps.append(((name, index), step))

    def _open_step(self, name: str, index: Any, branch: str | None) -> StepRecord | None:
        """The open step ``(name, index)`` of ``branch`` (``None``: the run's own line)."""
        found = self.branches.get(branch) if branch is not None else None
        steps = self.steps if branch is None else found.steps if found else []
        return next((step for key, step in reversed(steps) if key == (name, index)), None)

    def _on_step_end(self, event: StepEndIn) -> None:
        key = (event.step_name, event.step_index)
        branch_key = event.branch
        branch = self.branches.get(branch_key) if branch_key is not None else None
        steps = self.steps if branch_key is None else branch.steps if branch else []
        for pos in range(len(steps) - 1, -1, -1):
            if steps[pos][0] == key:
                break
        else:
            self._anomaly(f"step_end for {key} without a step_start")
            return
        popped = [item for _, item in steps[pos:]]
        if event.code and self.capture:
            self.gate.put(popped[0], {A.STEP_CODE: self.gate.truncate(event.code)})
        if len(popped) > 1:
            self._anomaly(f"step {key} ended while {len(popped) - 1} inner step(s) were open")
        for step in reversed(popped):  # still listed while closing: a fault leaves none open
            self._close_children(step)
            self._close(step, incomplete=step is not popped[0])
        del steps[pos:]

    def _close_children(self, step: StepRecord) -> None:
        """End what a step left open; an open message or reasoning block is incomplete.

        A tool call outlives the step that asked for it (LangGraph runs tools in the
        next step): it ends at its result, or normally at run end, since some
        frameworks never report results."""
        if not (self.reasoning or self.messages or self.tools):
            return
        streams: tuple[dict[str, ReasoningRecord], dict[str, MessageRecord]] = (
            self.reasoning,
            self.messages,
        )
        for table in streams:
            for key in [k for k, v in table.items() if v.owner is step]:
                item = table.pop(key)
                self._anomaly(f"{item.kind} {key!r} still open when its step ended")
                self._close(item, incomplete=True)
        for tool in self.tools.values():
            if tool.owner is step:
                tool.owner = None
                tool.move("step ended")

    # -- messages -----------------------------------------------------------------------
    def _on_message_start(self, event: MessageStartIn) -> None:
        mid = event.message_id
        self._end_duplicate("message_start", mid)
        fields = self._request_fields(event)
        branch = event.branch
        owner = self._innermost(branch)
        item = MessageRecord(time.time_ns())
        self._start(item, "chat", owner or self._root(branch), fields, A.REQUEST_MODEL, _CLIENT)
        self.messages[mid] = item
        self.own.model_calls += 1
        item.owner = owner
        item.branch = branch
        item.model = fields.get(A.REQUEST_MODEL)
        if self.capture:
            item.parts = []

    def _request_fields(self, event: MessageStartIn) -> dict[str, Any]:
        """What the model call was sent: model, provider, parameters, tools; the
        messages and instructions under content capture only."""
        fields: dict[str, Any] = {}
        if event.model:
            fields[A.REQUEST_MODEL] = self.model = event.model
        if event.provider:
            fields[A.PROVIDER] = self.provider = event.provider
        parameters = event.request_parameters
        if parameters:
            for key, value in parameters.items():
                fields[f"gen_ai.request.{key}"] = attribute_value(value)
        if event.tool_definitions:
            fields[A.TOOL_DEFINITIONS] = self.gate.tool_definitions(event.tool_definitions)
        if self.capture:
            if event.input_messages:
                fields[A.INPUT_MESSAGES] = self.gate.messages(event.input_messages)
            if event.system_instructions:
                fields[A.SYSTEM_INSTRUCTIONS] = self.gate.instructions(event.system_instructions)
        return fields

    def _on_text_delta(self, event: TextDeltaIn) -> None:
        item = self.messages.get(event.message_id)
        if item is None:
            self._anomaly(f"text_delta for unknown message {event.message_id!r}")
            return
        self._delta(item, event.delta)

    def _delta(self, item: StreamRecord, delta: str) -> None:
        item.deltas += 1
        if not item.first_ns:
            item.first_ns = time.time_ns()
        if item.parts is not None:
            item.parts.append(delta)
        if self.deltas_as_events:
            attrs: dict[str, Any] = {"length": len(delta)}
            if self.capture:
                attrs["content"] = self.gate.truncate(delta)
            self.gate.event(item, "gen_ai.content.delta", attrs)
        else:
            item.chars += len(delta)

    def _on_message_end(self, event: MessageEndIn) -> None:
        # The call ended now, whenever its span ends (see _end_call_when_priced).
        ended_ns = time.time_ns()
        mid = event.message_id
        item = self.messages.get(mid)
        if item is None:
            self._anomaly(f"message_end for unknown message {mid!r}")
            return
        attrs = item.end_attributes(self.aggregated)
        finish = event.finish_reason
        if finish:
            attrs[A.FINISH_REASONS] = (finish,)
        count_tokens(event, attrs, self.own)
        if event.response_model:
            attrs[A.RESPONSE_MODEL] = event.response_model
        if event.response_id:
            attrs[A.RESPONSE_ID] = event.response_id
        if (self.priced_later and prices_pending()) or waits_for_prices(attrs, self.provider):
            self._end_call_when_priced(item, event, attrs, ended_ns)
            return
        price_call(attrs, self.own, item.model or self.model, self.provider)
        error = event.error
        if error is not None:
            attrs[A.ERROR_TYPE] = error.type
        self.gate.put(item, attrs)
        if error is not None:
            self._failed_call(item, error)
        if item.parts is not None:
            self.gate.put(item, {A.OUTPUT_MESSAGES: self._reply(item, finish)})
        del self.messages[mid]
        item.span.end(end_time=ended_ns)

    def _end_call_when_priced(
        self, item: MessageRecord, event: MessageEndIn, attrs: dict[str, Any], ended_ns: int
    ) -> None:
        """The price table is still loading: the run goes on now, and the rest of the
        call's end (its price, the same attributes in the same order, its span's end at
        ``ended_ns``) runs once the table is settled (:mod:`runnertrace.tracing.cost`).
        What the run itself reads on (the step's failure) is set now; so is the flag that
        defers this run's later calls and its own end, which keeps its totals in order."""
        self.priced_later = True
        del self.messages[event.message_id]
        error = event.error
        if error is not None and item.owner is not None:
            item.owner.failure = error
        requested = item.model or self.model

        def end() -> None:
            try:
                price_call(attrs, self.own, requested, self.provider)
                if error is not None:
                    attrs[A.ERROR_TYPE] = error.type
                self.gate.put(item, attrs)
                if error is not None:
                    self._fail(item, error)
                if item.parts is not None:
                    self.gate.put(item, {A.OUTPUT_MESSAGES: self._reply(item, event.finish_reason)})
            except Exception as exc:  # noqa: BLE001 - telemetry boundary, off the run's path
                report_internal_error("span state machine (priced call)", exc)
            finally:
                item.span.end(end_time=ended_ns)

        after_prices(end)

    def _failed_call(self, item: MessageRecord, error: EventError) -> None:
        """A model call failed: its span ends ERROR, and so does the step it was in."""
        self._fail(item, error)
        if item.owner is not None:
            item.owner.failure = error

    def _reply(self, item: MessageRecord, finish: str | None) -> str:
        """The captured reply: its text (the run's newest, for stream mode's output),
        then the tool calls it asked for."""
        parts: list[dict[str, Any]] = []
        text = "".join(item.parts or ())
        if text:
            parts.append({"type": "text", "content": text})
            self.last_text = text
        parts.extend(item.calls or ())
        return self.gate.output(parts, finish_reason(finish))

    # -- reasoning --------------------------------------------------------------------
    def _on_reasoning_start(self, event: ReasoningStartIn) -> None:
        rid = event.message_id
        self._end_duplicate("reasoning_start", rid)
        parent_id = event.parent_message_id
        if parent_id is not None:
            message = self.messages.get(parent_id)
        else:
            message = next(reversed(self.messages.values())) if self.messages else None
        owner = message.owner if message is not None else self._innermost(None)
        item = ReasoningRecord(time.time_ns())
        self._start(item, "reasoning", message or owner or self.run, {})
        self.reasoning[rid] = item
        item.owner = owner
        item.message = message
        if self.capture:
            item.parts = []

    def _on_reasoning_delta(self, event: ReasoningDeltaIn) -> None:
        item = self.reasoning.get(event.message_id)
        if item is None:
            self._anomaly(f"reasoning_delta for unknown block {event.message_id!r}")
            return
        first = not item.first_ns
        self._delta(item, event.delta)
        message = item.message
        if first and message is not None and not message.first_ns:
            message.first_ns = item.first_ns  # the reply's first chunk

    def _on_reasoning_end(self, event: ReasoningEndIn) -> None:
        rid = event.message_id
        item = self.reasoning.get(rid)
        if item is None:
            self._anomaly(f"reasoning_end for unknown block {rid!r}")
            return
        attrs = item.end_attributes(self.aggregated)
        if item.parts is not None:
            reasoning = [{"type": "reasoning", "content": "".join(item.parts)}]
            attrs[A.OUTPUT_MESSAGES] = self.gate.output(reasoning)
        self.gate.put(item, attrs)
        del self.reasoning[rid]
        item.span.end()

    # -- tool calls (their states and moves: records.ToolState, records.TOOL_MOVES) ---
    def _on_tool_call_start(self, event: ToolCallStartIn) -> None:
        cid = event.tool_call_id
        self._end_duplicate("tool_call_start", cid)
        parent_id = event.parent_message_id
        asked = self.messages.get(parent_id) if parent_id is not None else None
        # A call belongs to its asking message's branch (and step), else the run's line.
        branch = asked.branch if asked is not None else None
        owner = self._innermost(branch)
        # The model announced the call; its span opens when the tool runs (_run_tool).
        item = ToolRecord(time.time_ns())
        item.fields = {A.TOOL_NAME: event.tool_name, A.TOOL_CALL_ID: cid}
        item.owner = item.origin = owner
        item.branch = branch
        self.tools[cid] = item
        item.name = event.tool_name
        item.parent_id = parent_id
        if self.capture:
            item.parts = []
        if asked is not None and not asked.first_ns:  # a call is a chunk of the reply too
            asked.first_ns = item.start_ns

    def _run_tool(self, tool: ToolRecord) -> None:
        """The framework starts executing an announced call (its tool scope): the span
        opens now, in the innermost open step."""
        parent = self._container(tool.branch)
        tool.owner = self._innermost(tool.branch)
        tool.start_ns = time.time_ns()
        tool.move("runs")
        self._open_tool(tool, parent)

    def _ran_tool(self, tool: ToolRecord, start_ns: int | None = None) -> None:
        """An announced call ran outside any tool scope (a foreign runner has none): its
        span opens in the step that announced it, backdated to ``start_ns`` if the
        result said when the tool started, else to when the call was announced."""
        parent = tool.origin or self._root(tool.branch)
        if start_ns:
            tool.start_ns = start_ns
        tool.move("ran")
        self._open_tool(tool, parent)

    def _open_tool(self, tool: ToolRecord, parent: SpanRecord) -> None:
        self._start(tool, "execute_tool", parent, tool.fields, A.TOOL_NAME)
        self.own.tool_calls += 1

    def _on_tool_call_args(self, event: ToolCallArgsIn) -> None:
        item = self.tools.get(event.tool_call_id)
        if item is None:
            self._anomaly(f"tool_call_args for unknown call {event.tool_call_id!r}")
            return
        item.chunks += 1
        if item.parts is not None:
            item.parts.append(event.delta)

    def _on_tool_call_end(self, event: ToolCallEndIn) -> None:
        item = self.tools.get(event.tool_call_id)
        if item is None:
            self._anomaly(f"tool_call_end for unknown call {event.tool_call_id!r}")
            return
        self._put(item, {A.DELTA_COUNT: item.chunks})
        if item.parts is None:
            return
        arguments = "".join(item.parts)
        self._put(item, {A.TOOL_ARGUMENTS: self.gate.truncate(arguments)})
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

    def _on_tool_call_result(self, event: ToolCallResultIn) -> None:
        cid = event.tool_call_id
        item = self.tools.get(cid)
        if item is None:
            self._anomaly(f"tool_call_result for unknown call {cid!r}")
            return
        if not item.opened:
            started = event.started_at
            self._ran_tool(item, started if started is not None and started > 0 else None)
        if self.capture:
            self._put(item, {A.TOOL_RESULT: self.gate.text(event.content)})
        error = event.error
        if error is None and event.is_error:
            error = EventError(type="_OTHER", message=event.content)
        if error is not None:
            self._put(item, {A.ERROR_TYPE: error.type})
            self._fail(item, error)
        del self.tools[cid]
        item.move("ends")
        ended = event.ended_at  # when the tool ended, if the result says (and it can be)
        ok = ended is not None and ended > 0 and ended >= item.start_ns
        item.span.end(end_time=ended if ok else None)

    # -- closing -------------------------------------------------------------------------
    def _close(
        self,
        item: SpanRecord,
        *,
        incomplete: bool,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        """End ``item``'s span, marked as the arguments say. It ends even when marking
        it fails (a redactor that raises): the fault propagates, the span is not lost."""
        if isinstance(item, ToolRecord):
            if not item.opened:
                self._ran_tool(item)
            item.move("ends")
        span = item.span
        if not span.is_recording():  # ended already (a salvaged event), or never recorded
            return
        try:
            attrs = item.end_attributes(self.aggregated)
            if incomplete:
                attrs[A.INCOMPLETE] = True
            if cancelled:
                attrs[A.CANCELLED] = True
            failure = error if error is not None else item.failure
            if failure is not None:
                attrs[A.ERROR_TYPE] = (
                    failure.type if isinstance(failure, EventError) else _error_type(failure)
                )
            self.gate.put(item, attrs)
            if failure is not None:
                self._status(item, failure)
        finally:
            span.end()

    def _status(self, item: SpanRecord, error: BaseException | EventError) -> None:
        """ERROR status, its description cleaned like any attribute; a failed model or
        tool call counts in the run's errors."""
        if isinstance(error, EventError):
            text = f"{error.type}: {error.message}" if error.message else error.type
        else:
            text = f"{type(error).__name__}: {error}"
        self.gate.status(item, text)
        if item.kind == "message" or item.kind == "tool":
            self.own.errors += 1

    def _fail(self, item: SpanRecord, error: EventError) -> None:
        """ERROR status plus an exception event, as ``record_exception`` would write."""
        self._status(item, error)
        attrs = {"exception.type": error.type, "exception.message": error.message}
        if error.stacktrace:
            attrs["exception.stacktrace"] = error.stacktrace
        self.gate.event(item, "exception", attrs)

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
                if not self._end_run_when_priced(reply, error, cancelled):
                    self._end_run(reply, error, cancelled)
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("span state machine (finish)", exc)

    def _end_run_when_priced(
        self, reply: Any, error: BaseException | None, cancelled: bool
    ) -> bool:
        """Hand the run's end to :func:`~runnertrace.tracing.cost.after_prices` when its
        totals wait for a price (its own call's, or a nested run's), or when its parent's
        do (so the parent adds its nested runs' totals in the order they ended). The run
        span ends then, at the time the run ended now. ``False``: end it now."""
        parent = self.parent_run
        waits = self.priced_later or (parent is not None and parent.priced_later)
        if not waits or not prices_pending():
            return False
        if parent is not None:
            parent.priced_later = True
        ended_ns = time.time_ns()

        def end() -> None:
            try:
                self._end_run(reply, error, cancelled, ended_ns)
            except Exception as exc:  # noqa: BLE001 - telemetry boundary, off the run's path
                report_internal_error("span state machine (priced run)", exc)

        after_prices(end)
        return True

    def _end_run(
        self,
        reply: Any,
        error: BaseException | None,
        cancelled: bool,
        ended_ns: int | None = None,
    ) -> None:
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
            self.gate.put(self.run, attrs)
            if self.capture and (reply is not None or self.last_text is not None):
                # stream mode has no reply object: the newest message's text is the output
                self._record_reply(reply if reply is not None else self.last_text)
            if error is not None:
                self._record_exception(error)
                self._status(self.run, error)
        finally:
            span.end(end_time=ended_ns)

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
        dangling: list[SpanRecord] = [
            *self.reasoning.values(),
            *self.messages.values(),
            *self.tools.values(),
        ]
        for branch in self.branches.values():
            dangling += [step for _, step in reversed(branch.steps)]
        dangling += [step for _, step in reversed(self.steps)]
        # Tools whose step ended while they awaited a result end normally.
        unexpected = [item for item in dangling if not item.outlived]
        if unexpected and error is None and not cancelled:
            self._anomaly(f"{len(unexpected)} span(s) still open when the run ended")
        faults: list[Exception] = []
        # A run that fails ends the work still open in its branches: those were cut short
        # by another branch's failure (which the framework reported where it happened), so
        # they end cancelled, not with an error they did not raise.
        sibling_failed = error is not None and not cancelled
        for item in dangling:  # each one ends, whatever marking another did
            failed = error is not None or cancelled or not item.outlived
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
        self.gate.event(self.run, "exception", attrs)

    def _record_reply(self, reply: Any) -> None:
        output = self.gate.output([{"type": "text", "content": str(reply)}])
        self.gate.put(self.run, {A.OUTPUT_MESSAGES: output})


def _span_context(span: Span, where: Context, caller: Context) -> Context:
    """``where`` with ``span`` current, and the values of the run's ``caller`` that
    ``where`` lacks (a framework's own thread may start with an empty context)."""
    if where is not caller and any(key not in where for key in caller):
        where = Context({**caller, **where})
    return trace_api.set_span_in_context(span, where)


class _Scope:
    """Makes one call's span current while the framework executes it; a tool's scope
    also makes its run the one that runs started in the tool nest in (``active_run``).

    The context it attaches is the one current where it is entered (see
    :func:`_span_context`), so whatever the framework set there holds inside too."""

    __slots__ = ("_boundary", "_caller", "_owner", "_run", "_span", "_token")

    def __init__(self, span: Span, caller: Context, owner: RunTracer | None) -> None:
        self._span = span
        self._caller = caller
        self._owner = owner
        self._boundary = ToolBoundary() if owner is not None else None

    def __enter__(self) -> None:
        self._token = attach(_span_context(self._span, get_current(), self._caller))
        if self._boundary is not None:
            self._run = active_run.set(self._owner)
            self._boundary.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._boundary is not None:
            self._boundary.__exit__()
            reset_var(active_run, self._run)
        detach(self._token)


_MISSING = object()
_STARTS = frozenset({"message_start", "reasoning_start", "tool_call_start"})

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
