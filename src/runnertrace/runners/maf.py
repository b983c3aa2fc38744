"""``MAFRunner``: the runner contract over a Microsoft Agent Framework ``Agent``, or a
workflow registered as the agent (``workflow.as_agent()``, a ``WorkflowAgent``).

Install with ``pip install 'runnertrace[maf]'``; importing this module without
``agent-framework-core`` raises :class:`~runnertrace._internal.imports.MissingExtraError`.

What the runner does, per run:

* **Session state.** The conversation lives in an Agent Framework ``AgentSession``
  (made by ``agent.create_session(session_id=<our session id>)`` on the first run;
  its history provider keeps the messages in ``session.state``). The session is
  stored as its ``to_dict()`` under the session key ``"maf"`` and rebuilt with
  ``AgentSession.from_dict`` for each run, so a failed run never touches what is
  stored: it is saved only after the run succeeded.
* **Framework context** (full round trip). The loaded copy of the session's
  framework context is put in the native session's state under
  :data:`CONTEXT_KEY`; tools read and mutate it through
  ``FunctionInvocationContext.session.state[CONTEXT_KEY]``, and what is there
  after a successful run is written back (tool-added keys included). Without a
  stored context, tools get a throw-away ``{}``.
* **Run options** go to ``agent.run`` (``options`` holds the model settings:
  ``{"temperature": ..., "max_tokens": ...}``; also ``tools``, ``middleware``,
  ``function_invocation_kwargs``, ...). ``messages``, ``session`` and ``stream``
  are the runner's. The caller's ``middleware`` is kept and ours is appended.
  ``function_invocation_configuration`` (the tool loop's limits, e.g.
  ``{"max_iterations": 3}``) is also a run option: Agent Framework keeps it on
  the chat client, so a run that declares it runs on a shallow copy of the agent
  whose client copy carries the merged configuration; the shared client is
  never changed.
* **Replies.** The response's ``value`` when the run asked for structured output
  (``options={"response_format": Model}``), else its text.

**Events** come from three middleware of ours, passed per run with
``run(middleware=...)``, which Agent Framework appends to the agent's and the
client's own (so every user middleware still runs exactly once, and ours are
innermost, nearest to the model and the tool):

* a chat middleware: a step and a message start when a model request is sent,
  with what it is sent (the messages in GenAI semconv shape, the instructions as
  text, the request parameters from the options, the tool definitions); the
  request runs in the model scope. In run mode the response becomes the message's
  events; in stream mode the model stream's own hooks report each update (a pull
  context manager keeps the model scope current while the provider produces) and
  end the message with the final response's usage;
* a function middleware: each tool runs in the tool scope (a span opened in the
  tool nests under ``execute_tool``); a tool that raises is reported with its
  exception, whether Agent Framework feeds it back to the model (its default) or
  the run fails (``MiddlewareFailure``);
* an agent middleware: it ends the last step. In stream mode its "after" runs
  before the stream is consumed, so it registers a result hook on the agent's
  stream instead.

An untraced run-mode call installs none of them (the plain ``agent.run``); stream
mode always needs them (the events are the stream) but builds the request fields
only when someone observes.

**Agent Framework's own OpenTelemetry spans: ours replace the ones we cover.**
Agent Framework emits ``invoke_agent`` / ``chat`` / ``execute_tool`` spans to the
global tracer provider by default. Next to ours (or nested under them, since ours
are current) they would show each call twice and count its tokens twice. Its only
switch, ``OBSERVABILITY_SETTINGS``, is process-wide, so the first traced run gives
that settings object a subclass whose ``enable_instrumentation`` also reads a
context variable of ours: it reads "off" for the agent, model and tool calls of a
traced ``MAFRunner`` run (the ones our spans stand for), and exactly as before
everywhere else: untraced runs, concurrent runs of other agents, and what a tool
body runs that we do not map (a bare ``other_agent.run()`` in a tool keeps its own
spans, nested under our ``execute_tool`` span, so it is seen once). HTTP
instrumentation inside a call still nests under our span. Inside our tool scope,
the one read that decides on the tool's own span is the quiet one (see
:class:`_ToolSpanOnly`).

**An agent run as a tool** (``agent.as_tool()``, or a workflow's
``as_agent().as_tool()``) is a run of its own: each run of an inner agent in such a
tool's body opens a nested run
(:func:`~runnertrace.core.observer.open_nested_run`: an ``invoke_agent`` span under
the ``execute_tool`` span) and is mapped into it, with its own steps, chat and tool
spans under its own name, whatever the provider setup. A workflow's agents (its
``AgentExecutor`` s) each get one per run, in sequence or side by side as the
workflow runs them. ``as_tool()`` calls ``agent.run`` with no middleware of its
own, so for the call ours is appended to each inner agent's ``middleware`` list
(reference-counted over concurrent calls, removed when the last one ends); it reads
a context variable set in the tool's body and passes every other run of that agent
straight through. Agent Framework's own spans (the workflow's included) stay quiet
in the whole body of such a tool: ours stand for them. Nested ``as_tool()`` agents
nest the same way, one run per level.

**A workflow as the agent** (``workflow.as_agent()`` registered, the orchestrations of
``agent-framework-orchestrations`` included): the workflow's run is the run, and each
run of one of its agents (an ``AgentExecutor``'s, a handoff's clone, a group chat's
``orchestrator_agent``, those of nested workflows) is a nested run under the run span,
through the same middleware, attached to those agents for the run (a
``WorkflowAgent`` runs no middleware of its own): in sequence or side by side as the
workflow runs them, each ended by its own end, failure or cancellation (a workflow
cancels the other branches when one fails). In stream mode the agents' events are the
run's stream too (queued there, not reported to the run, which has them through its
nested runs). The session is the ``WorkflowAgent``'s (its history provider keeps the
conversation); the framework context is lent to each agent's session (its executor's)
while it runs, so its tools find it where an ``Agent``'s do. A workflow takes no
``function_invocation_configuration`` (its agents' clients keep theirs).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import ExitStack, aclosing, asynccontextmanager, contextmanager, nullcontext
from functools import partial
from typing import Any, ClassVar

from runnertrace._internal.errors import internal_log
from runnertrace._internal.imports import missing_extra

try:
    from agent_framework import (
        Agent as MAFAgent,
    )
    from agent_framework import (
        AgentContext,
        AgentExecutor,
        AgentMiddleware,
        AgentResponse,
        AgentSession,
        ChatContext,
        ChatMiddleware,
        ChatResponse,
        ChatResponseUpdate,
        Content,
        FunctionInvocationContext,
        FunctionMiddleware,
        Message,
        ResponseStream,
        WorkflowAgent,
        WorkflowExecutor,
        normalize_function_invocation_configuration,
    )
    from agent_framework import observability as maf_observability
except ImportError as exc:
    raise missing_extra(exc, "maf") from exc

from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.context import reset_var
from runnertrace.core.events import StreamEvent
from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.core.module import Module
from runnertrace.core.observer import (
    NULL_OBSERVER,
    NestedRun,
    Observer,
    can_nest_runs,
    in_traced_run,
    open_nested_run,
)
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import Message as SemconvMessage
from runnertrace.runners._kit.genai import (
    Part,
    as_text,
    blob_part,
    or_none,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners._kit.genai import message as semconv_message
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    is_url,
    media_bytes,
    native_of,
    reply_of,
    save,
)

__all__ = ["CONTEXT_KEY", "STATE_KEY", "MAFModule", "MAFRunner", "messages_of"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "maf"
_boundary = MappingBoundary("maf")
CONTEXT_KEY = "runnertrace_context"
"""Where the framework context sits in the native session's ``state`` during a run."""

_CONFIGURATION_OPTION = "function_invocation_configuration"
_CONFIGURATION_KEYS: frozenset[str] = frozenset(
    normalize_function_invocation_configuration(None).keys()
)


# -- requests -> native input ----------------------------------------------------------------------


def _media(data: str, mime_type: str, name: str | None) -> Content:
    """One image or file: a URL or ``data:`` URI stays a URI, anything else is base64 bytes."""
    if is_url(data) or data.startswith("data:"):
        return Content.from_uri(data, media_type=mime_type, name=name)
    return Content.from_data(media_bytes(data, mime_type, name), mime_type, name=name)


_REQUEST_CONTENTS: dict[str, Callable[[Any], Content]] = {
    "text": lambda r: Content.from_text(r.prompt),
    "image": lambda r: _media(r.image_data, r.mime_type, r.name),
    "file": lambda r: _media(r.file_data, r.mime_type, r.name),
    "any": lambda r: Content.from_text(as_text(r.content)),
}


def messages_of(requests: Sequence[AgentRequest]) -> list[Message]:
    """Our requests as one Agent Framework user message, contents in request order."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return [Message(role="user", contents=[_REQUEST_CONTENTS[r.type](r) for r in requests])]


# -- what a model call is sent ---------------------------------------------------------------------


def _result_value(result: Any) -> Any:
    """A tool result as Agent Framework hands it on: its text contents joined (what the
    model reads), anything else as given (:func:`as_text` renders it)."""
    contents = isinstance(result, list | tuple) and bool(result)
    if contents and all(isinstance(item, Content) for item in result):
        return "\n".join(item.text or "" for item in result if item.type == "text")
    return result


def _modality(content: Content) -> str:
    return (content.media_type or "file").split("/", 1)[0]


# Content type -> its GenAI semconv message part (types not listed are left out).
_PARTS: dict[str, Callable[[Content, dict[str, str]], Part]] = {
    "text": lambda c, names: text_part(c.text or ""),
    "text_reasoning": lambda c, names: reasoning_part(c.text or ""),
    "function_call": lambda c, names: tool_call_part(c.call_id, c.name, c.arguments),
    "function_result": lambda c, names: tool_response_part(
        c.call_id, names.get(c.call_id or ""), _result_value(c.result)
    ),
    "uri": lambda c, names: blob_part(_modality(c)),
    "data": lambda c, names: blob_part(_modality(c)),
}


def _semconv_messages(messages: Sequence[Message]) -> list[SemconvMessage]:
    """The messages as GenAI semconv messages (tool results named after their calls)."""
    names: dict[str, str] = {}
    converted: list[SemconvMessage] = []
    for msg in messages:
        parts: list[Part] = []
        for content in msg.contents:
            if content.type == "function_call" and content.call_id and content.name:
                names[content.call_id] = content.name
            part = _PARTS.get(content.type)
            if part is not None:
                parts.append(part(content, names))
        converted.append(semconv_message(str(msg.role), parts))
    return converted


def _instructions(options: Mapping[str, Any]) -> str | None:
    instructions = options.get("instructions")
    if isinstance(instructions, str):
        return instructions or None
    if isinstance(instructions, Sequence):
        return "\n".join(str(i) for i in instructions) or None
    return None


def _tool_definition(tool: Any) -> Part:
    parameters = getattr(tool, "parameters", None)
    return tool_definition(
        getattr(tool, "name", None) or type(tool).__name__,
        getattr(tool, "description", None),
        parameters() if callable(parameters) else parameters,
    )


def _request_fields(context: ChatContext) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    options: Mapping[str, Any] = context.options or {}
    return {
        "input_messages": or_none(_semconv_messages(context.messages)),
        "system_instructions": _instructions(options),
        "request_parameters": request_parameters(options),
        "tool_definitions": or_none(_tool_definition(t) for t in options.get("tools") or ()),
    }


def _model_of(context: ChatContext) -> str | None:
    model = (context.options or {}).get("model") or getattr(context.client, "model", None)
    return str(model) if model else None


def _provider_of(context: ChatContext) -> str | None:
    provider = getattr(context.client, "otel_provider_name", None)
    return str(provider) if provider and provider != "unknown" else None


# -- native progress -> builder calls (the mapping) ------------------------------------------------


class _ContentRun:
    """One run of text or reasoning contents (its type and id), and what it reported."""

    __slots__ = ("occurrence", "reported")

    def __init__(self, occurrence: tuple[str, str | None]) -> None:
        self.occurrence = occurrence
        self.reported = ""


class _Streamed:
    """What one model message has reported so far, per occurrence, so that a content
    in replace mode sends only what it adds.

    Agent Framework streams deltas (``merge_mode`` "append" or unset) and, from some
    clients, the whole value again (``merge_mode="replace"``: the Responses client
    repeats each text, reasoning and argument value from its ``.done`` events). It
    merges them itself (``ChatResponse.from_updates``); the event stream has to do
    the same or it shows every value twice. As there, a text or reasoning content
    belongs to the run of same-type contents it follows (reasoning also by its id),
    and a tool call's arguments to its call id. An update in replace mode
    (``ChatResponseUpdate.merge_mode``) is a snapshot of the whole message: its
    contents replace the message's occurrences in order.
    """

    __slots__ = ("arguments", "last_call", "runs", "snapshot")

    def __init__(self) -> None:
        self.runs: list[_ContentRun] = []  # in message order
        self.arguments: dict[str, str] = {}  # call id -> arguments reported
        self.last_call: str | None = None  # the call id the last call chunk named
        self.snapshot: int | None = None  # in a replace-mode update: the next run to match

    def run(self, kind: str, content_id: str | None) -> _ContentRun:
        """The run a content of this type and id continues (or a new one)."""
        occurrence = (kind, content_id)
        if self.snapshot is not None:
            for index in range(self.snapshot, len(self.runs)):
                if self.runs[index].occurrence == occurrence:
                    self.snapshot = index + 1
                    return self.runs[index]
            self.snapshot = len(self.runs) + 1
        elif self.runs and self.runs[-1].occurrence == occurrence:
            return self.runs[-1]
        run = _ContentRun(occurrence)
        self.runs.append(run)
        return run


def _added(reported: str, value: str, replace: bool, what: str) -> str:
    """What a content adds to what its occurrence reported: all of it when it is a
    delta; when it is the whole value again, only what lies beyond the reported part.
    A whole value that contradicts what was already streamed cannot be taken back:
    the stream keeps what it sent, and the mismatch is logged."""
    if not replace:
        return value
    if value.startswith(reported):
        return value[len(reported) :]
    internal_log.warning(
        f"maf replaced {what}",
        "Agent Framework replaced the streamed %s with a different value; the stream "
        "keeps what it already sent (%d characters, the replacement has %d)",
        what,
        len(reported),
        len(value),
    )
    return ""


class _Mapper:
    """Turns one run's middleware and stream-hook calls into builder calls.

    One per run; every call comes from the run's own task, so plain attributes
    do. ``detailed`` says whether to build the request fields (only worth it
    when someone observes).
    """

    def __init__(self, builder: EventBuilder, agent_name: str, *, detailed: bool) -> None:
        self.builder = builder
        self._agent_name = agent_name
        self._detailed = detailed
        self._step: int | None = None
        self._steps = 0
        self._streamed: dict[str, _Streamed] = {}  # message id -> what it reported so far
        self._answered: set[str] = set()  # tool call ids whose result was reported

    # steps and messages -------------------------------------------------------------------
    def chat_started(self, context: ChatContext) -> str:
        """A model request: the previous step (its tools ran) ends, a new one starts."""
        self._end_step()
        self._step = self._steps
        self._steps += 1
        self.builder.step_start(self._agent_name, self._step)
        fields = _boundary.detail(_request_fields, context) if self._detailed else {}
        return self.builder.message_start(
            model=_model_of(context), provider=_provider_of(context), **fields
        )

    def _end_step(self) -> None:
        if self._step is not None:
            self.builder.step_end(self._agent_name, self._step)
            self._step = None

    def run_finished(self, response: Any = None) -> None:
        """The run ended (the agent middleware, or the agent stream's result hook) with
        ``response``: the results of tool calls that a middleware answered without
        running the tool (a handoff orchestration's ``handoff_to_<agent>`` tools), which
        only the response holds, then the last step's end."""
        with _boundary:
            if isinstance(response, AgentResponse):
                self._unrun_results(response)
            self._end_step()

    def _unrun_results(self, response: AgentResponse[Any]) -> None:
        names: dict[str, str] = {}
        for message in response.messages:
            for content in message.contents:
                call_id = content.call_id
                if not call_id:
                    continue
                if content.type == "function_call" and content.name:
                    names[call_id] = content.name
                elif content.type == "function_result" and call_id not in self._answered:
                    self._answered.add(call_id)
                    text = as_text(_result_value(content.result))
                    self.builder.tool_result(call_id, text, name=names.get(call_id))

    def _content(self, message_id: str, content: Content) -> None:
        kind = content.type
        if kind == "usage":
            return
        streamed = self._streamed.setdefault(message_id, _Streamed())
        replace = streamed.snapshot is not None or content.merge_mode == "replace"
        if kind in ("text", "text_reasoning"):
            run = streamed.run(kind, content.id)
            value = content.text or ""
            added = _added(run.reported, value, replace, "text" if kind == "text" else "reasoning")
            run.reported = value if replace else run.reported + value
            if kind == "text":
                self.builder.text(added, message_id)
            elif added or not replace:  # a repeated value opens no empty reasoning block
                self.builder.reasoning(added, message_id)
            return
        streamed.run(kind, None)  # ends the text or reasoning run before it
        if kind == "function_call":
            call_id = content.call_id or streamed.last_call
            if call_id:
                streamed.last_call = call_id
            arguments = content.arguments
            value = arguments if isinstance(arguments, str) else as_text(arguments or {})
            value = value if arguments else ""
            reported = streamed.arguments.get(call_id or "", "")
            delta = _added(reported, value, replace, "tool-call arguments")
            streamed.arguments[call_id or ""] = value if replace else reported + value
            self.builder.tool_call(
                delta,
                tool_call_id=call_id or None,
                name=content.name or None,
                message_id=message_id,
            )

    def update(self, message_id: str, update: ChatResponseUpdate) -> ChatResponseUpdate:
        """Stream mode: one update of the model stream (a transform hook that passes
        the update on unchanged)."""
        with _boundary:
            streamed = self._streamed.setdefault(message_id, _Streamed())
            if update.merge_mode == "replace":  # the whole message so far: match from the start
                streamed.snapshot = 0
            try:
                for content in update.contents:
                    self._content(message_id, content)
            finally:
                streamed.snapshot = None
        return update

    def response(self, message_id: str, response: ChatResponse[Any]) -> None:
        """Run mode: the whole response, then the message's end."""
        with _boundary:
            for message in response.messages:
                for content in message.contents:
                    self._content(message_id, content)
        self.finished(message_id, response)

    def finished(self, message_id: str, response: ChatResponse[Any]) -> None:
        """The message ends with the response's usage (stream mode: a result hook)."""
        with _boundary:
            usage = response.usage_details or {}
            reason = response.finish_reason
            self._streamed.pop(message_id, None)
            self.builder.message_end(
                message_id,
                finish_reason=str(reason) if reason is not None else None,
                input_tokens=usage.get("input_token_count"),
                output_tokens=usage.get("output_token_count"),
                response_model=response.model,
                response_id=response.response_id,
            )

    def failed(self, message_id: str, error: BaseException) -> None:
        with _boundary:
            self._streamed.pop(message_id, None)
            self.builder.message_end(message_id, error=error)

    # tools ---------------------------------------------------------------------------------
    def tool_returned(self, call_id: str, name: str, result: Any) -> None:
        with _boundary:
            self._answered.add(call_id)
            self.builder.tool_result(call_id, as_text(_result_value(result)), name=name)

    def tool_failed(self, call_id: str, name: str, error: BaseException) -> None:
        with _boundary:
            self._answered.add(call_id)
            self.builder.tool_result(
                call_id, f"{type(error).__name__}: {error}", name=name, error=error
            )


class _ChatObserver(ChatMiddleware):
    """Reports each model request; innermost chat middleware, so it sees what is sent."""

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        mapper = self.mapper
        message_id = ""
        with _boundary:
            message_id = mapper.chat_started(context)
        try:
            with mapper.builder.model_scope(message_id):
                await call_next()
        except Exception as exc:
            mapper.failed(message_id, exc)
            raise
        result = context.result
        if isinstance(result, ResponseStream):
            # The stream is consumed after we return: its own hooks see the updates
            # and the final response; the model scope is current during each pull.
            if mapper.builder.observed:
                result.with_pull_context_manager(partial(mapper.builder.model_scope, message_id))
            context.stream_transform_hooks.append(partial(mapper.update, message_id))
            context.stream_result_hooks.append(partial(mapper.finished, message_id))
        elif isinstance(result, ChatResponse):
            mapper.response(message_id, result)


class _FunctionObserver(FunctionMiddleware):
    """Runs each tool in its tool scope and reports its result or its exception; an
    agent run as a tool (``agent.as_tool()``) gets its own nested run there."""

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        mapper = self.mapper
        call_id = str(context.metadata.get("call_id") or "")
        name = context.function.name
        traced = _quiet.get() is True
        try:
            with mapper.builder.tool_scope(call_id):
                delegation = _open_delegation(context.function) if traced else None
                # A delegated agent's spans are ours: Agent Framework's stay quiet in
                # its whole body. Elsewhere only the tool's own span is (_ToolSpanOnly).
                quiet: bool | _ToolSpanOnly = (
                    (True if delegation is not None else _ToolSpanOnly()) if traced else False
                )
                with _quiet_as(quiet), _delegating(delegation):
                    await call_next()
        except BaseException as exc:
            if isinstance(exc, Exception):
                mapper.tool_failed(call_id, name, exc)
            raise
        mapper.tool_returned(call_id, name, context.result)


class _AgentObserver(AgentMiddleware):
    """Ends the run's last step: after the call in run mode, and in stream mode from
    the agent stream's result hook (its "after" runs before the stream is consumed)."""

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper

    async def process(
        self, context: AgentContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        await call_next()
        if isinstance(context.result, ResponseStream):
            context.stream_result_hooks.append(self.mapper.run_finished)
        else:
            self.mapper.run_finished(context.result)


def _observers(mapper: _Mapper) -> list[Any]:
    observers = _Observers(mapper)
    return [observers.agent, observers.chat, observers.function]


# -- agents run as tools (agent.as_tool()) ---------------------------------------------------------


def _tool_target(function: Any) -> Any:
    """The agent behind a tool made by ``agent.as_tool()`` (its wrapper function holds
    the agent as ``self``), else ``None``."""
    func = getattr(function, "func", None)
    code = getattr(func, "__code__", None)
    if code is None or not func.__qualname__.endswith(".as_tool.<locals>._agent_wrapper"):  # type: ignore[union-attr]
        return None
    if "self" not in code.co_freevars:
        return None
    return func.__closure__[code.co_freevars.index("self")].cell_contents  # type: ignore[union-attr]


def _delegates_of(function: Any) -> tuple[MAFAgent[Any], ...]:
    """The agents a tool runs that we can map: the agent of ``agent.as_tool()``, or
    the agents of a workflow's ``as_agent().as_tool()`` (see :func:`_workflow_agents`).
    Only an ``Agent`` runs middleware, so any other keeps Agent Framework's own spans."""
    target = _tool_target(function)
    if isinstance(target, MAFAgent):
        return (target,)
    if isinstance(target, WorkflowAgent):
        return _workflow_agents(target.workflow)
    return ()


def _workflow_agents(workflow: Any) -> tuple[MAFAgent[Any], ...]:
    """The agents a workflow runs, each once: its ``AgentExecutor`` s' agents (the
    orchestrations' participants, a handoff's clones included), an orchestrator's own
    agent (a group chat's ``orchestrator_agent``), and those of the workflows nested in
    it (a ``WorkflowExecutor``, a ``WorkflowAgent`` as an executor's agent)."""
    found: dict[int, MAFAgent[Any]] = {}
    seen: set[int] = set()

    def visit(flow: Any) -> None:
        if id(flow) in seen:
            return
        seen.add(id(flow))
        for executor in getattr(flow, "executors", {}).values():
            if isinstance(executor, WorkflowExecutor):
                visit(executor.workflow)
                continue
            # An orchestrator keeps its agent as ``_agent`` (no public accessor)
            agent = (
                executor.agent
                if isinstance(executor, AgentExecutor)
                else getattr(executor, "_agent", None)
            )
            if isinstance(agent, MAFAgent):
                found.setdefault(id(agent), agent)
            elif isinstance(agent, WorkflowAgent):
                visit(agent.workflow)

    visit(workflow)
    return tuple(found.values())


class _ForwardingBuilder(EventBuilder):
    """An inner agent's builder: each event goes to its nested run (if one traces it)
    and, in a stream-mode run of a workflow, onto the workflow's own stream too (those
    are the events a consumer reads: what the workflow's agents say), queued there
    without being reported to the workflow's run, which has them through its nested runs."""

    def __init__(self, observer: Observer, forward: Callable[[StreamEvent], None] | None) -> None:
        super().__init__(observer)
        self.forward = forward

    def emit(self, event: StreamEvent) -> None:
        self.observer(event)
        if self.forward is not None:
            self.forward(event)


class _Arrivals:
    """A stream-mode workflow run's agents' events: queued on the run's builder, to be
    yielded (not reported: the run has them through its nested runs), and a wake-up
    for the stream, which would otherwise yield them only with the workflow's next
    output (an agent whose output is not the workflow's would stream nothing live)."""

    __slots__ = ("queue", "ready")

    def __init__(self, builder: EventBuilder) -> None:
        queue = builder._queue  # noqa: SLF001 - the kit's builder has no "queue only" call
        assert queue is not None  # a stream-mode builder queues
        self.queue = queue
        self.ready = asyncio.Event()

    def put(self, event: StreamEvent) -> None:
        self.queue.append(event)
        self.ready.set()

    async def merged(self, native: AsyncIterable[Any]) -> AsyncGenerator[Any, None]:
        """``native``'s items, and a ``None`` whenever events arrived in between (the
        template drains the builder after each item). The pull runs as a task of its
        own, created in the consumer's step; it is cancelled if the consumer stops."""
        iterator = native.__aiter__()
        pull: asyncio.Future[Any] | None = None
        try:
            while True:
                if pull is None:
                    pull = asyncio.ensure_future(iterator.__anext__())
                if not self.ready.is_set():
                    wake = asyncio.ensure_future(self.ready.wait())
                    try:
                        await asyncio.wait((pull, wake), return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        wake.cancel()
                if self.ready.is_set():
                    self.ready.clear()
                    yield None
                if pull.done():
                    try:
                        item = pull.result()
                    except StopAsyncIteration:
                        return
                    finally:
                        pull = None
                    yield item
        finally:
            if pull is not None and not pull.done():
                pull.cancel()
                await asyncio.gather(pull, return_exceptions=True)


class _AgentRun:
    """One run of an inner agent: a nested run of ours (an ``invoke_agent`` span under
    the span that started it) with a mapping of its own. Without a nested run (a
    stream-mode workflow run that nothing traces) only the forwarded events remain."""

    __slots__ = ("builder", "lent", "mapper", "observers", "run")

    def __init__(
        self, run: NestedRun | None, name: str, forward: Callable[[StreamEvent], None] | None
    ) -> None:
        self.run = run
        self.builder = _ForwardingBuilder(run if run is not None else NULL_OBSERVER, forward)
        self.mapper = _Mapper(self.builder, name, detailed=run is not None)
        self.observers = _Observers(self.mapper)
        self.lent: dict[str, Any] | None = None  # the session state we lent the context to

    def lend(self, context: dict[str, Any] | None, session: AgentSession | None) -> None:
        self.lent = _lend(context, session)

    def finish(
        self, reply: str | None = None, error: BaseException | None = None, response: Any = None
    ) -> None:
        with _boundary:
            if self.lent is not None:
                self.lent.pop(CONTEXT_KEY, None)
            if error is not None:  # what is open ends with the run, failed or cancelled
                self.builder.fail(error)
            else:  # (the stream's hooks may run in any order: the response is here too)
                self.mapper.run_finished(response)
        if self.run is not None:
            cancelled = isinstance(error, asyncio.CancelledError | GeneratorExit)
            self.run.finish(reply=reply, error=error, cancelled=cancelled)


class _Delegation:
    """The agents one tool call (in a traced run) or one workflow run of ours maps:
    each run of one of them starts its own :class:`_AgentRun` (from our middleware
    attached to it) and ends it when the agent's run ends; the tool's (or the
    workflow's) end ends whatever is left. ``forward``: where a stream-mode workflow
    run queues its agents' events; ``context``: the framework context the agents'
    tools see in their session's state (a workflow's agents have sessions of their own)."""

    __slots__ = ("agents", "context", "forward", "runs")

    def __init__(
        self,
        agents: tuple[MAFAgent[Any], ...],
        *,
        forward: Callable[[StreamEvent], None] | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.agents = agents
        self.forward = forward
        self.context = context
        self.runs: dict[int, _AgentRun] = {}  # id(agent) -> its run in progress

    def observers(self, agent: MAFAgent[Any]) -> _Observers | None:
        current = self.runs.get(id(agent))
        return current.observers if current is not None else None

    def start(self, agent: MAFAgent[Any], context: AgentContext) -> _AgentRun | None:
        """A run of ``agent`` starts: its nested run opens under the current span."""
        name = agent.name or type(agent).__name__
        run = open_nested_run(name, mode="stream" if context.stream else "run")
        if run is None and self.forward is None:
            return None
        current = self.runs[id(agent)] = _AgentRun(run, name, self.forward)
        current.lend(self.context, context.session)
        return current

    def end(
        self,
        agent: MAFAgent[Any],
        reply: str | None,
        error: BaseException | None,
        response: Any = None,
    ) -> None:
        current = self.runs.pop(id(agent), None)
        if current is not None:
            current.finish(reply=reply, error=error, response=response)

    def finish(self, error: BaseException | None = None) -> None:
        for key in list(self.runs):
            self.runs.pop(key).finish(error=error)


def _open_delegation(function: Any) -> _Delegation | None:
    """A delegation for ``function`` when it runs agents and a traced run is here."""
    with _boundary:
        agents = _delegates_of(function)
        return _Delegation(agents) if agents and can_nest_runs() else None
    return None


_delegation: contextvars.ContextVar[_Delegation | None] = contextvars.ContextVar(
    "runnertrace_maf_delegation", default=None
)


class _Observers:
    """The three middleware of one mapping, by kind."""

    __slots__ = ("agent", "chat", "function")

    def __init__(self, mapper: _Mapper) -> None:
        self.agent = _AgentObserver(mapper)
        self.chat = _ChatObserver(mapper)
        self.function = _FunctionObserver(mapper)


def _delegated_to(agent: MAFAgent[Any]) -> _Observers | None:
    """The observers of the run of ``agent`` a delegation maps in this context, if any."""
    delegation = _delegation.get()
    return delegation.observers(agent) if delegation is not None else None


class _DelegatedAgent(AgentMiddleware):
    """Attached to an agent a traced run's tool runs, while it may: a run of it in
    that tool's body starts its nested run and hands its middleware calls to it; any
    other run of the agent passes straight through."""

    def __init__(self, agent: MAFAgent[Any]) -> None:
        self.agent = agent

    async def process(
        self, context: AgentContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        agent, delegation = self.agent, _delegation.get()
        current = None
        if delegation is not None and any(a is agent for a in delegation.agents):
            with _boundary:
                current = delegation.start(agent, context)
        if current is None or delegation is None:  # not mapped: the context is still lent
            lent = _lend(delegation.context, context.session) if delegation else None
            try:
                await call_next()
            finally:
                if lent is not None and not isinstance(context.result, ResponseStream):
                    lent.pop(CONTEXT_KEY, None)
            if lent is not None and isinstance(context.result, ResponseStream):
                context.result.with_cleanup_hook(partial(lent.pop, CONTEXT_KEY, None))
            return
        try:
            await current.observers.agent.process(context, call_next)
        except BaseException as exc:
            delegation.end(agent, None, exc)
            raise
        if isinstance(context.result, ResponseStream):
            # The run's end is its stream's end; a pull that fails (a cancellation: a
            # workflow cancels the other branches when one fails) ends it at once.
            context.result.with_pull_context_manager(partial(_pulling, delegation, agent))
            context.stream_result_hooks.append(partial(_ended, delegation, agent))
        else:
            _ended(delegation, agent, context.result)


def _lend(context: dict[str, Any] | None, session: AgentSession | None) -> dict[str, Any] | None:
    """The framework context, in an inner run's session state while it runs (where its
    tools look: a workflow's agents have sessions of their own), unless that state
    has one of its own; returns the state it was put in (to take it back from)."""
    if context is None or session is None or CONTEXT_KEY in session.state:
        return None
    session.state[CONTEXT_KEY] = context
    return session.state


@contextmanager
def _pulling(delegation: _Delegation, agent: MAFAgent[Any]) -> Iterator[None]:
    """Around each pull of a delegated agent's stream: a failure there ends its run."""
    try:
        yield
    except StopAsyncIteration:
        raise
    except BaseException as exc:
        delegation.end(agent, None, exc)
        raise


def _ended(delegation: _Delegation, agent: MAFAgent[Any], response: Any) -> None:
    """An inner agent's run ended with ``response``: its nested run ends with the text."""
    with _boundary:
        text = getattr(response, "text", None)
        delegation.end(agent, text if isinstance(text, str) else None, None, response)


class _DelegatedChat(ChatMiddleware):
    def __init__(self, agent: MAFAgent[Any]) -> None:
        self.agent = agent

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        observers = _delegated_to(self.agent)
        if observers is None:
            await call_next()
        else:
            await observers.chat.process(context, call_next)


class _DelegatedFunction(FunctionMiddleware):
    def __init__(self, agent: MAFAgent[Any]) -> None:
        self.agent = agent

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        observers = _delegated_to(self.agent)
        if observers is None:
            await call_next()
        else:
            await observers.function.process(context, call_next)


class _Attachment:
    """Our middleware on one agent, and how many delegated calls use it now."""

    __slots__ = ("bundle", "count", "had_none")

    def __init__(self, bundle: list[Any], had_none: bool) -> None:
        self.bundle = bundle
        self.had_none = had_none
        self.count = 0


_attachments: dict[int, _Attachment] = {}  # id(agent) -> ours on it, while a call runs
_attachments_lock = threading.Lock()


@contextmanager
def _attached(agent: MAFAgent[Any]) -> Iterator[None]:
    """Our dispatching middleware on ``agent`` (appended: innermost, as in a run of
    ours) while at least one delegated call of it runs. ``as_tool()`` calls
    ``agent.run`` with no middleware of its own, so the agent's list is the one way
    in; the dispatchers pass every other run of the agent straight through."""
    key = id(agent)
    with _attachments_lock:
        attachment = _attachments.get(key)
        if attachment is None:
            bundle: list[Any] = [
                _DelegatedAgent(agent),
                _DelegatedChat(agent),
                _DelegatedFunction(agent),
            ]
            before = agent.middleware
            attachment = _attachments[key] = _Attachment(bundle, before is None)
            agent.middleware = [*_listed(before), *bundle]
        attachment.count += 1
    try:
        yield
    finally:
        with _attachments_lock:
            attachment.count -= 1
            if attachment.count == 0:
                del _attachments[key]
                ours = attachment.bundle
                kept = [m for m in _listed(agent.middleware) if all(m is not o for o in ours)]
                agent.middleware = kept if kept or not attachment.had_none else None


@contextmanager
def _delegating(delegation: _Delegation | None) -> Iterator[None]:
    """A tool's body: the delegation it runs (or none: a run of an agent there is not
    this run's inner agent), with our middleware on the delegated agents. Whatever
    inner run is still open when the body ends, ends then (with its failure)."""
    if delegation is None and _delegation.get() is None:
        yield
        return
    with _delegation_as(delegation):
        if delegation is None:
            yield
        else:
            with _mapping(delegation):
                yield


@contextmanager
def _delegation_as(delegation: _Delegation | None) -> Iterator[None]:
    """:data:`_delegation` set to ``delegation`` for the block."""
    token = _delegation.set(delegation)
    try:
        yield
    finally:
        reset_var(_delegation, token)


@contextmanager
def _mapping(delegation: _Delegation) -> Iterator[None]:
    """Our middleware on the delegated agents for the block; the inner runs still open
    at its end end then, with its failure (a cancellation, or a consumer that stopped
    early, ends them cancelled)."""
    with ExitStack() as attachments:
        for agent in delegation.agents:
            attachments.enter_context(_attached(agent))
        try:
            yield
        except BaseException as exc:
            delegation.finish(error=exc)
            raise
        delegation.finish()


# -- the framework's own instrumentation -----------------------------------------------------------


class _ToolSpanOnly:
    """The quiet state inside our tool scope: Agent Framework's first read of its
    settings there is ``FunctionTool.invoke`` deciding on its own ``execute_tool``
    span, which ours replaces, so that one read is quiet; every later read (what
    the tool body runs: a sub-agent from ``agent.as_tool()``, a bare agent) is not,
    and those spans nest under our ``execute_tool`` span."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = False

    def quiet(self) -> bool:
        spent, self.spent = self.spent, True
        return not spent


_quiet: contextvars.ContextVar[bool | _ToolSpanOnly] = contextvars.ContextVar(
    "runnertrace_maf_quiet", default=False
)


def _silenced() -> bool:
    """Whether Agent Framework's own instrumentation is off in the current context."""
    state = _quiet.get()
    return state if isinstance(state, bool) else state.quiet()


def _quiet_settings(base: type[Any]) -> type[Any]:
    """``base`` (Agent Framework's settings class) whose ``enable_instrumentation``
    also reads "off" while :data:`_quiet` is set in the current context. Every
    other read (``ENABLED``, ``SENSITIVE_DATA_ENABLED``, ...) derives from it."""
    flag: Any = base.enable_instrumentation

    class QuietWhenTraced(base):  # type: ignore[misc]
        @property
        def enable_instrumentation(self) -> bool:
            return bool(flag.fget(self)) and not _silenced()

        @enable_instrumentation.setter
        def enable_instrumentation(self, value: bool) -> None:
            flag.fset(self, value)

    return QuietWhenTraced


_quiet_kinds: set[type[Any]] = set()  # the settings classes made by _quiet_settings


def _allow_quiet() -> None:
    """Make Agent Framework's settings object honour :data:`_quiet` (once; the same
    object, so every module that imported it sees the change)."""
    settings = maf_observability.OBSERVABILITY_SETTINGS
    if type(settings) not in _quiet_kinds:
        quiet = _quiet_settings(type(settings))
        _quiet_kinds.add(quiet)
        settings.__class__ = quiet


@contextmanager
def _quiet_as(value: bool | _ToolSpanOnly) -> Iterator[None]:
    """:data:`_quiet` set to ``value`` for the block (a no-op when it already is)."""
    if _quiet.get() is value:
        yield
        return
    token = _quiet.set(value)
    try:
        yield
    finally:
        reset_var(_quiet, token)


# -- the run and the runner ------------------------------------------------------------------------


def _with_configuration(native: MAFAgent[Any], declared: Mapping[str, Any]) -> MAFAgent[Any]:
    """A shallow copy of ``native`` over a copy of its client carrying ``declared``
    on top of the client's function-invocation configuration."""
    client = copy.copy(native.client)
    merged = {**client.function_invocation_configuration, **declared}  # type: ignore[attr-defined]
    client.function_invocation_configuration = normalize_function_invocation_configuration(  # type: ignore[attr-defined]
        merged  # type: ignore[arg-type]
    )
    agent = copy.copy(native)
    agent.client = client
    return agent


def _listed(middleware: Any) -> list[Any]:
    """A declared ``middleware`` option (one middleware or a sequence) as a list."""
    if middleware is None:
        return []
    return list(middleware) if isinstance(middleware, list | tuple) else [middleware]


def _reply_output(response: AgentResponse[Any]) -> Any:
    """The structured value when the run asked for one, else the text."""
    return response.value if response.value is not None else response.text


class _Run(FrameworkRun["AgentResponse[Any] | None"]):
    """One Agent Framework run: ``agent.run()`` or ``agent.run(stream=True)``, with
    the framework's own instrumentation quiet in a traced run."""

    def __init__(
        self,
        setup: RunSetup[MAFAgent[Any]],
        target: MAFAgent[Any],
        kwargs: dict[str, Any],
        native_session: AgentSession,
        quiet: bool,
    ) -> None:
        super().__init__(setup)
        self.target = target
        self.kwargs = kwargs
        self.native_session = native_session
        self.quiet = quiet

    async def call(self) -> AgentResponse[Any]:
        with _quiet_as(self.quiet):
            response: AgentResponse[Any] = await self.target.run(**self.kwargs)
        return response

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        quiet = self.quiet
        with _quiet_as(quiet):
            native_stream = self.target.run(stream=True, **self.kwargs)
        if _quiet.get() is not quiet:  # every pull runs with the run's own setting
            native_stream.with_pull_context_manager(partial(_quiet_as, quiet))
        # Closing the native stream too: a consumer that stops early leaves no
        # suspended provider stream behind.
        async with native_stream:
            yield native_stream
            await native_stream.get_final_response()

    async def outcome(self) -> None:
        return None

    async def save(self, result: AgentResponse[Any] | None) -> None:
        setup, native_session = self.setup, self.native_session
        produced = native_session.state.pop(CONTEXT_KEY, None)
        if not isinstance(produced, Mapping):
            produced = setup.prepared.context
        save(setup.session, STATE_KEY, native_session.to_dict(), setup.prepared, produced)

    def reply(self, result: AgentResponse[Any] | None, prompt: str) -> AgentReply:
        assert result is not None  # run mode
        return reply_of(_reply_output(result), prompt)


class _WorkflowRun(_Run):
    """One run of a ``WorkflowAgent`` (``workflow.as_agent()``): the workflow's run is
    this run; each run of one of its agents (see :func:`_workflow_agents`) is a nested
    run under it, mapped by our middleware attached to that agent for the run (a
    ``WorkflowAgent`` runs no middleware of its own). In stream mode the agents'
    events are also this run's stream, in the order they happen. Agent Framework's own
    spans (the workflow's, its executors' and its agents') stay quiet in a traced run."""

    def __init__(
        self,
        setup: RunSetup[Any],
        target: Any,
        kwargs: dict[str, Any],
        native_session: AgentSession,
        quiet: bool,
        delegation: _Delegation | None,
        arrivals: _Arrivals | None,
    ) -> None:
        super().__init__(setup, target, kwargs, native_session, quiet)
        self.delegation = delegation
        self.arrivals = arrivals

    @contextmanager
    def _pull(self) -> Iterator[None]:
        """What the workflow's code sees while it runs (each pull, in stream mode: the
        tasks the workflow starts there take it along)."""
        with _quiet_as(self.quiet), _delegation_as(self.delegation):
            yield

    async def call(self) -> AgentResponse[Any]:
        delegation = self.delegation
        with self._pull(), _mapping(delegation) if delegation is not None else nullcontext():
            response: AgentResponse[Any] = await self.target.run(**self.kwargs)
        return response

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        delegation = self.delegation
        with _mapping(delegation) if delegation is not None else nullcontext():
            with self._pull():
                native_stream = self.target.run(stream=True, **self.kwargs)
            native_stream.with_pull_context_manager(self._pull)
            async with native_stream:
                arrivals = self.arrivals
                if arrivals is None:
                    yield native_stream
                else:  # closed first: its pull must not outlive the native stream
                    async with aclosing(arrivals.merged(native_stream)) as items:
                        yield items
                await native_stream.get_final_response()


class MAFRunner(FrameworkRunner[Any]):
    """Runs an ``agent_framework.Agent``, or a workflow as an agent
    (``workflow.as_agent()``, a ``WorkflowAgent``), in run or stream mode."""

    framework: ClassVar[str] = "maf"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = MAFAgent
    native_what: ClassVar[str] = "an agent_framework.Agent or WorkflowAgent"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "messages": "the runner builds the input messages from the requests",
        "session": (
            f"the runner restores the Agent Framework session from the session (key {STATE_KEY!r})"
        ),
        "stream": "the runner chooses the mode (run() or stream())",
    }

    @classmethod
    def validate_run_options(cls, options: Mapping[str, Any]) -> None:
        """Reserved keys, and a ``function_invocation_configuration`` that Agent
        Framework would not understand."""
        super().validate_run_options(options)
        config = options.get(_CONFIGURATION_OPTION)
        if config is None:
            return
        allowed = ", ".join(sorted(_CONFIGURATION_KEYS))
        if not isinstance(config, Mapping):
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r} must be a mapping of {allowed}; "
                f"got {config!r}"
            )
        for key in config:
            if key not in _CONFIGURATION_KEYS:
                raise ValueError(
                    f"run option {_CONFIGURATION_OPTION!r} has unknown key {key!r} "
                    f"(value {config[key]!r}); allowed: {allowed}"
                )
        try:
            normalize_function_invocation_configuration(dict(config))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r}: {exc} (got {config!r})"
            ) from exc

    def native_of(self, agent: CoreAgent) -> Any:
        """The agent's ``Agent`` or ``WorkflowAgent`` (anything else: a ``TypeError``)."""
        if isinstance(agent.native, WorkflowAgent):
            return agent.native
        return native_of(agent, MAFAgent, self.native_what)

    async def start(self, setup: RunSetup[Any]) -> _Run:
        quiet = in_traced_run()
        if quiet:
            _allow_quiet()
        if isinstance(setup.native, WorkflowAgent):
            return self._start_workflow(setup, quiet)
        # Untraced run mode installs nothing: the run is the plain native call. Stream
        # mode always maps (the events are the stream).
        observers: list[Any] = []
        if setup.streaming or setup.observed:
            mapper = _Mapper(setup.builder, setup.agent.name, detailed=setup.observed)
            observers = _observers(mapper)
        native, prepared = setup.native, setup.prepared
        options = prepared.options
        declared = options.pop(_CONFIGURATION_OPTION, None)
        target = native if declared is None else _with_configuration(native, declared)
        native_session = _native_session(native, prepared.state, setup.session.id)
        native_session.state[CONTEXT_KEY] = prepared.context if prepared.context is not None else {}
        if observers:  # the caller's middleware first: ours are innermost
            options["middleware"] = [*_listed(options.get("middleware")), *observers]
        # Owned keys last, so no declared option can displace them.
        options["messages"] = messages_of(setup.requests)
        options["session"] = native_session
        return _Run(setup, target, options, native_session, quiet)

    def _start_workflow(self, setup: RunSetup[Any], quiet: bool) -> _WorkflowRun:
        """A ``WorkflowAgent``'s run: its options (``tools``, ``function_invocation_kwargs``,
        ``client_kwargs``, ``checkpoint_storage``, ...) go to its ``run``. Our middleware
        is on its agents for the run, always: it lends them the framework context, and
        maps their runs when someone traces (nested runs) and in stream mode (their
        events are the stream)."""
        native, prepared = setup.native, setup.prepared
        options = prepared.options
        if _CONFIGURATION_OPTION in options:
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r} applies to an agent_framework.Agent; a "
                f"workflow's agents keep it on their chat clients (agent {setup.agent.name!r})"
            )
        native_session = _native_session(native, prepared.state, setup.session.id)
        context = prepared.context if prepared.context is not None else {}
        native_session.state[CONTEXT_KEY] = context
        delegation = arrivals = None
        with _boundary:  # (a fault costs the mapping and the context's lending, not the run)
            agents = _workflow_agents(native.workflow)
            arrivals = _Arrivals(setup.builder) if setup.streaming else None
            forward = arrivals.put if arrivals is not None else None
            delegation = _Delegation(agents, forward=forward, context=context)
        options["messages"] = messages_of(setup.requests)
        options["session"] = native_session
        return _WorkflowRun(setup, native, options, native_session, quiet, delegation, arrivals)


def _native_session(native: Any, stored: Any, session_id: str) -> AgentSession:
    """The stored Agent Framework session, else a new one with our session's id."""
    if isinstance(stored, dict):
        return AgentSession.from_dict(stored)
    session: AgentSession = native.create_session(session_id=session_id)
    return session


class MAFModule(Module):
    """Registers ``agent_framework.Agent`` objects with the runtime, each paired with a
    :class:`MAFRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``options``, ``tools``, ``middleware``,
    ``function_invocation_configuration``, ...).
    """

    naming = ("the Agent Framework agent", "Agent(client, name='assistant')")
    runner_class = MAFRunner
