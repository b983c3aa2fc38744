"""``PydanticAIRunner``: the runner contract over a ``pydantic_ai.Agent``.

Install with ``pip install 'runnertrace[pydantic-ai]'``; importing this module
without Pydantic AI raises :class:`~runnertrace._internal.imports.MissingExtraError`.

What the runner does, per run:

* **Session state.** The conversation (``result.all_messages()``) is stored under
  the session key ``"pydantic_ai"`` and passed back as ``message_history`` on the
  next run. It is saved only when the run succeeds.
* **Input.** Text requests become the ``user_prompt`` text; images and files
  become ``BinaryContent`` (base64 or ``data:`` URIs) or ``ImageUrl`` /
  ``DocumentUrl`` (``http(s)://`` URLs); structured requests become their JSON.
* **Framework context** (full round trip). The session's framework context is
  loaded as a deep copy and passed as ``deps=``; tools mutate that very dict
  through ``RunContext.deps``, and it is written back (shallow-merged) only
  after the native call succeeded. Without a stored context, tools get a
  throw-away ``{}``.
* **Run options.** The agent's declared and factory options are copied, then the
  keys this runner owns are written last: ``user_prompt``, ``message_history``,
  ``deps`` and ``capabilities`` (the caller's capabilities are kept, ours are
  appended). ``event_stream_handler`` is honoured in run mode and dropped, with
  one warning per runner, in stream mode, where the runner consumes the native
  event stream itself. Unknown keys reach ``agent.run`` (which rejects them).
* **Replies.** ``str`` output gives :class:`AgentReplyText` (or
  :class:`AgentReplyImage` when the final response also carries an image, or
  the output is an image); anything else (a pydantic model, a dict, a
  dataclass, a list, ...) gives :class:`AgentReplyAny` with its JSON form (a
  non-object value sits under ``"output"``).

**Events** come from one run-time capability (``_Observer``) that maps the run
onto the core :class:`~runnertrace.runners._kit.builder.EventBuilder` (which owns the
pairing rules and reports each event to the observer as it is made). It only
wraps hooks and calls each handler exactly once, so the agent's own
capabilities, hooks and ``event_stream_handler`` fire exactly once, unchanged.
An untraced run-mode call installs nothing; stream mode always needs it (the
events are the stream) but builds the request fields only when someone observes.

* A step is a ``ModelRequestNode`` and the ``CallToolsNode`` after it
  (``step_index`` is Pydantic AI's ``run_step``).
* A model call starts when the request is sent, with what it is sent: the input
  messages (Pydantic AI's own GenAI-semconv conversion, so fed-back tool results
  and retry prompts appear as the model sees them), the instructions as the text
  rendered from the request's ``instruction_parts`` (dynamic instruction functions
  resolved; system *prompts* are history and stay in the input messages), the
  request parameters of the merged model settings, and the function tools. It runs
  in the model scope (an HTTP span nests under the chat span). A failure ends the
  message with the exception, in the step that held it; Pydantic AI does not retry
  a failed model call (a ``ModelRetry`` from a tool or output validator starts a
  new step whose request carries the retry prompt).
* **Structured output is not a tool call:** an output tool's call (``final_result``)
  is reported as the message's text (its JSON arguments), without a result.
* Each tool runs in the tool scope (spans opened inside nest under
  ``execute_tool``). A failure (``ModelRetry``, ``ToolFailed``, any exception,
  arguments that do not validate) is reported with the exception the tool or
  validator raised, whether Pydantic AI fed it back or it ended the run. Calls that
  never ran (an unknown tool) are settled from the next request at step end.

In **stream mode** the deltas come from the native stream, seen through
``wrap_run_event_stream`` so they are ordered with the hooks' boundaries;
``stream()`` yields the builder's queue after each native event it pulls (no task
or extra hop per event).

**An agent that a tool runs (delegation) is a nested run.** Pydantic AI's multi-agent
pattern, ``await other.run(..., usage=ctx.usage)`` inside a tool, starts a run no
runner of ours is called for, and that receives nothing of the run that called it. So
the first traced run installs one process-wide hook: it wraps ``Agent.iter`` (every
``run``, ``run_sync``, ``run_stream``, ``run_stream_events`` and ``iter`` goes through
it; Pydantic AI has no process-wide registry of capabilities). Inside the tool of a
traced run (a context variable the runner sets in its tool scope) the hook opens a
nested run (:func:`~runnertrace.core.observer.open_nested_run`: ``invoke_agent`` under
the tool's ``execute_tool``) and adds this runner's own capability to the delegate's
run, with the silencers below: the same mapping as for the traced agent, each model
call once (from its own response: ``usage=ctx.usage`` makes Pydantic AI's run usage
cumulative, ours is not). A delegate's delegates nest the same way. Anywhere else the
hook reads that one context variable and calls the original: untraced runs pay one
lookup. A run of this runner (traced or not) inside a tool is left to the runner. The
nested run's mode is ``run`` (``iter`` cannot tell whether its caller streams).

**Pydantic AI's own OpenTelemetry spans: suppressed in traced runs.** Pydantic AI
instrumented (``agent.instrument``, ``Agent.instrument_all()``, an
``Instrumentation`` capability with the default or a custom ``id``, Logfire's
``instrument_pydantic_ai``) emits its own ``invoke_agent`` / ``chat`` /
``execute_tool`` spans, which OpenInference's Pydantic AI span processor only
re-labels. Nested under ours they would show every call twice and sum the tokens
twice. So during a traced run (``in_traced_run()``) the runner adds, for every
``Instrumentation`` id the run would use, a run-time ``Instrumentation`` of that id
with no-op providers, which takes that id's place for this run only (no global
state; untraced runs keep Pydantic AI's spans, and traced ones one vocabulary,
ours). A delegated run inside a traced run gets the same silencers. An
``Instrumentation`` with ``id=None`` has no id to take over and emits.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from asyncio import CancelledError
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from runnertrace._internal.imports import missing_extra

try:
    import pydantic_core
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.capabilities.abstract import (
        AbstractCapability,
        AgentNode,
        CapabilityOrdering,
        NodeResult,
        RawToolArgs,
        ValidatedToolArgs,
        WrapModelRequestHandler,
        WrapNodeRunHandler,
        WrapToolExecuteHandler,
        WrapToolValidateHandler,
    )
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        CallDeferred,
        SkipToolExecution,
        SkipToolValidation,
    )
    from pydantic_ai.messages import (
        ERROR_OUTCOMES,
        AgentStreamEvent,
        BinaryContent,
        DocumentUrl,
        ImageUrl,
        InstructionPart,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
        UserContent,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
    from pydantic_ai.tools import RunContext
except ImportError as exc:
    raise missing_extra(exc, "pydantic-ai") from exc

from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText
from runnertrace.core.module import Module
from runnertrace.core.observer import NULL_OBSERVER, NestedRun, in_traced_run, open_nested_run
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import (
    arguments_of,
    as_text,
    request_parameters,
    tool_definition,
)
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    is_url,
    media_bytes,
    reply_of,
    save,
)

__all__ = ["STATE_KEY", "PydanticAIModule", "PydanticAIRunner", "user_prompt_of"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "pydantic_ai"
_boundary = MappingBoundary("pydantic_ai")


# -- requests -> native input ----------------------------------------------------------------------


def _media(data: str, mime_type: str, name: str | None, url_type: type[Any]) -> UserContent:
    """One image or file: a URL stays a URL, anything else is base64 bytes."""
    if is_url(data):
        return url_type(url=data, media_type=mime_type)  # type: ignore[no-any-return]
    if data.startswith("data:"):
        return BinaryContent.from_data_uri(data)
    return BinaryContent(
        data=media_bytes(data, mime_type, name), media_type=mime_type, identifier=name
    )


_REQUEST_CONVERTERS: dict[str, Callable[[Any], UserContent]] = {
    "text": lambda r: r.prompt,
    "image": lambda r: _media(r.image_data, r.mime_type, r.name, ImageUrl),
    "file": lambda r: _media(r.file_data, r.mime_type, r.name, DocumentUrl),
    "any": lambda r: as_text(r.content),
}


def user_prompt_of(requests: Sequence[AgentRequest]) -> str | list[UserContent]:
    """Convert our requests into Pydantic AI's ``user_prompt``.

    A lone text request stays a plain string (what Pydantic AI shows best in its
    own UIs); anything else is a list of user content parts, in request order.
    """
    parts = [_REQUEST_CONVERTERS[request.type](request) for request in requests]
    if not parts:
        raise ValueError("a run needs at least one request")
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0]
    return parts


# -- what a model call is sent ---------------------------------------------------------------------


@cache
def _no_op_settings() -> Any:
    """Instrumentation settings that record nothing (no-op tracer and meter providers).

    They serve twice: as the settings of the silencing ``Instrumentation``, and as
    Pydantic AI's own converter of its messages to GenAI semconv messages.
    """
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    return InstrumentationSettings(
        tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    )


def _instructions(request_context: ModelRequestContext) -> str | None:
    """The instructions as the text the model is sent.

    ``instruction_parts`` are what Pydantic AI renders the request's instructions
    from (dynamic instruction functions already called); without them (a direct
    model request) the newest request message's ``instructions`` hold the text.
    """
    parts = request_context.model_request_parameters.instruction_parts
    if parts is not None:
        return InstructionPart.join(parts) if parts else None
    for message in reversed(request_context.messages):
        if message.kind == "request":
            return message.instructions
    return None


def _call_in_schema(part: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as JSON: a real client's reply holds them as the text
    the server sent, and Pydantic AI keeps that text in the history."""
    return {**part, "arguments": arguments_of(part["arguments"])} if "arguments" in part else part


def _response_in_schema(part: dict[str, Any]) -> dict[str, Any]:
    """A tool result under the schema's ``response`` key, Pydantic AI's ``result`` kept."""
    return {**part, "response": part["result"]} if "result" in part else part


def _as_is(part: dict[str, Any]) -> dict[str, Any]:
    return part


_PARTS_IN_SCHEMA: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "tool_call": _call_in_schema,
    "tool_call_response": _response_in_schema,
}


def _in_schema(message: dict[str, Any]) -> dict[str, Any]:
    """One of Pydantic AI's OTel messages with the keys the GenAI schema reads."""
    if "parts" not in message:
        return message
    parts = [_PARTS_IN_SCHEMA.get(part.get("type", ""), _as_is)(part) for part in message["parts"]]
    return {**message, "parts": parts}


def _request_fields(request_context: ModelRequestContext) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    tools = [
        tool_definition(tool.name, tool.description, tool.parameters_json_schema)
        for tool in request_context.model_request_parameters.function_tools
    ]
    messages = _no_op_settings().messages_to_otel_messages(request_context.messages)
    jsonable: list[dict[str, Any]] = pydantic_core.to_jsonable_python(messages)
    return {
        "input_messages": [_in_schema(message) for message in jsonable] or None,
        "system_instructions": _instructions(request_context),
        "request_parameters": request_parameters(request_context.model_settings or {}),
        "tool_definitions": tools or None,
    }


# -- native progress -> builder calls (the mapping) ------------------------------------------------


def _args_text(args: str | dict[str, Any] | None) -> str:
    return "" if args is None else as_text(args)


_RESULT_KINDS = frozenset({"tool-return", "builtin-tool-return", "retry-prompt"})


def _result_text(part: Any) -> tuple[str, bool]:
    """The text a tool result part sends the model, and whether it is an error."""
    if part.part_kind in ("retry-prompt", "retry-feedback"):  # always an error to fix
        return part.model_response(), True
    outcome = getattr(part, "outcome", "success")
    return part.model_response_str(wrap_if_error=False), outcome in ERROR_OUTCOMES


def _failure(exc: Exception) -> tuple[str, BaseException]:
    """What the model is told about a failed tool, and the exception to report.

    Pydantic AI wraps a ``ModelRetry`` / ``ToolFailed`` (or a validation error) in a
    ``ToolRetryError`` / ``ToolFailedError`` carrying the part the model gets; the
    exception the tool or validator raised is what the trace names.
    """
    part = getattr(exc, "tool_retry", None) or getattr(exc, "tool_failed", None)
    if part is None:
        return f"{type(exc).__name__}: {exc}", exc
    cause = exc.__cause__ or exc.__context__
    return _result_text(part)[0], cause if cause is not None else exc


# Not failures: the call is deferred, or Pydantic AI skips it on purpose.
_CONTROL_FLOW: tuple[type[BaseException], ...] = (
    CallDeferred,
    ApprovalRequired,
    SkipToolExecution,
    SkipToolValidation,
)


class _Mapper:
    """Turns one run's hook calls and native stream events into builder calls.

    One instance per run; all calls come from the run's own tasks on one event
    loop, so plain attributes are enough. ``detailed`` says whether to build the
    request fields (only worth it when someone observes).
    """

    def __init__(self, builder: EventBuilder, agent_name: str, *, detailed: bool) -> None:
        self.builder = builder
        self._agent_name = agent_name
        self._detailed = detailed
        self._step: int | None = None
        self._early = False  # the open step started with its request (run_stream)
        self._messages = 0
        self._message_id: str | None = None
        self._saw_parts = False
        self._output_tools: frozenset[str] = frozenset()
        self._output_parts: set[int] = set()  # part indexes of the open message's output calls
        self._call_ids: dict[int, str] = {}  # part index -> announced call id (open message)
        self._pending: set[str] = set()  # calls asked for in the open step, no result yet
        self._aliases: dict[str, str] = {}  # a call id a later part replaced -> the announced id

    # steps ------------------------------------------------------------------------------
    def step_started(self, ctx: RunContext[Any]) -> None:
        if self._early:  # run_stream: the node's step opened with its streamed request
            self._early = False
            return
        if self._step is not None:  # a request node following a request node
            self._end_step()
        self._step = ctx.run_step
        self.builder.step_start(self._agent_name, ctx.run_step)

    def step_finished(self, ctx: RunContext[Any], result: NodeResult[Any]) -> None:
        """After the ``CallToolsNode``: settle calls that never ran, then end the step."""
        if self._pending:
            parts = list(getattr(getattr(result, "request", None), "parts", ()))
            if ctx.messages and ctx.messages[-1].kind == "request":
                parts.extend(ctx.messages[-1].parts)
            for part in parts:
                if part.part_kind in _RESULT_KINDS:
                    call_id = self.call_id(part.tool_call_id)
                    if call_id in self._pending:
                        content, is_error = _result_text(part)
                        self._result(call_id, content, is_error=is_error)
        self._end_step()

    def run_ended(self) -> None:
        """The run succeeded: end the step still open (``run_stream`` ends a run at its
        final response, without the ``CallToolsNode`` that ends a step elsewhere)."""
        self._end_step()

    def _end_step(self) -> None:
        if self._step is None:
            return
        step, self._step = self._step, None
        self._early = False
        self._pending.clear()
        self._aliases.clear()
        self.builder.step_end(self._agent_name, step)

    # messages ---------------------------------------------------------------------------
    def message_started(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> str:
        if self._step is None:
            # run_stream streams a request node before wrap_node_run wraps (only) the
            # node's graph advancement: the step starts with its request instead.
            self.step_started(ctx)
            self._early = True
        self._messages += 1
        message_id = self._message_id = f"{ctx.run_id or 'run'}-m{self._messages}"
        self._saw_parts = False
        self._output_parts.clear()
        self._call_ids.clear()
        parameters = request_context.model_request_parameters
        self._output_tools = frozenset(tool.name for tool in parameters.output_tools)
        model = request_context.model
        fields = _boundary.detail(_request_fields, request_context) if self._detailed else {}
        self.builder.message_start(
            message_id, model=model.model_name, provider=getattr(model, "system", None), **fields
        )
        return message_id

    def message_finished(
        self, response: ModelResponse | None, error: BaseException | None = None
    ) -> None:
        """End the open message; ``response`` is ``None`` when the request failed."""
        message_id = self._message_id
        if message_id is None:
            return
        if response is not None and not self._saw_parts:
            # Run mode, or a wrapper that answered without streaming: the parts
            # are only known now, complete.
            for index, part in enumerate(response.parts):
                self.part_started(index, part)
        self._message_id = None
        if response is None:
            self.builder.message_end(message_id, error=error)
            return
        usage = response.usage
        self.builder.message_end(
            message_id,
            finish_reason=response.finish_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_tokens or None,
            reasoning_output_tokens=usage.output_reasoning_tokens or None,
            response_model=response.model_name,
            response_id=response.provider_response_id,
        )

    # response parts (whole parts in run mode, part events in stream mode) ---------------
    def part_started(self, index: int, part: Any) -> None:
        message_id = self._message_id
        if message_id is None:
            return
        self._saw_parts = True
        start = self._PART_STARTS.get(part.part_kind)
        if start is not None:
            start(self, message_id, index, part)

    def _start_text(self, message_id: str, index: int, part: Any) -> None:
        self.builder.text(part.content, message_id)

    def _start_thinking(self, message_id: str, index: int, part: Any) -> None:
        self.builder.reasoning(part.content, message_id)

    def _start_call(self, message_id: str, index: int, part: Any) -> None:
        args = _args_text(part.args)
        if part.tool_name in self._output_tools:
            # Structured output: the answer, not a tool call.
            self._output_parts.add(index)
            self.builder.text(args, message_id)
            return
        call_id = part.tool_call_id
        self._call_ids[index] = call_id
        self._pending.add(call_id)
        self.builder.tool_call(
            args,
            tool_call_id=call_id,
            name=part.tool_name or "unknown",
            index=index,
            message_id=message_id,
        )

    def _start_native_return(self, message_id: str, index: int, part: Any) -> None:
        # A provider-run tool's result arrives inside the response itself.
        call_id = self.call_id(part.tool_call_id)
        if call_id in self._pending:
            content, is_error = _result_text(part)
            self._result(call_id, content, is_error=is_error)

    _PART_STARTS: ClassVar[dict[str, Callable[[_Mapper, str, int, Any], None]]] = {
        "text": _start_text,
        "thinking": _start_thinking,
        "tool-call": _start_call,
        "builtin-tool-call": _start_call,
        "builtin-tool-return": _start_native_return,
    }

    def part_delta(self, index: int, delta: Any) -> None:
        message_id = self._message_id
        if message_id is None:
            return
        kind = delta.part_delta_kind
        if kind == "text":
            if delta.content_delta:
                self.builder.text(delta.content_delta, message_id)
        elif kind == "thinking":
            if delta.content_delta:
                self.builder.reasoning(delta.content_delta, message_id)
        elif kind == "tool_call":
            args = _args_text(delta.args_delta)
            if not args:
                return
            if index in self._output_parts:
                self.builder.text(args, message_id)
            elif index in self._call_ids:
                self.builder.tool_call(args, index=index, message_id=message_id)

    def part_ended(self, index: int, part: Any) -> None:
        announced = self._call_ids.get(index)
        final_id = getattr(part, "tool_call_id", None)
        if announced is not None and final_id is not None and final_id != announced:
            self._aliases[final_id] = announced

    # tool results -------------------------------------------------------------------------
    def call_id(self, tool_call_id: str) -> str:
        """The id a call was announced under."""
        return self._aliases.get(tool_call_id, tool_call_id)

    def tool_returned(self, call: ToolCallPart, result: Any) -> None:
        call_id = self.call_id(call.tool_call_id)
        if call_id in self._pending:
            part = ToolReturnPart(tool_name=call.tool_name, content=result, tool_call_id=call_id)
            self._result(call_id, part.model_response_str())

    def tool_failed(self, call: ToolCallPart, exc: Exception) -> None:
        call_id = self.call_id(call.tool_call_id)
        if call_id in self._pending:
            content, error = _failure(exc)
            self._result(call_id, content, error=error)

    def _result(
        self,
        call_id: str,
        content: str,
        *,
        error: BaseException | None = None,
        is_error: bool | None = None,
    ) -> None:
        self._pending.discard(call_id)
        self.builder.tool_result(call_id, content, error=error, is_error=is_error)

    # the native stream (stream mode) ------------------------------------------------------
    def native(self, event: Any) -> None:
        kind = event.event_kind
        if kind == "part_delta":
            self.part_delta(event.index, event.delta)
        elif kind == "part_start":
            self.part_started(event.index, event.part)
        elif kind == "part_end":
            self.part_ended(event.index, event.part)
        elif kind == "function_tool_result":  # unless the tool hooks reported it already
            call_id = self.call_id(event.part.tool_call_id)
            if call_id in self._pending:
                content, is_error = _result_text(event.part)
                self._result(call_id, content, is_error=is_error)


@dataclass
class _Observer(AbstractCapability[Any]):
    """The run-time capability that reports a run's events without displacing anything.

    Outermost, so it sees what the agent's own capabilities produce; every hook
    calls its handler exactly once and returns what the handler returned.
    Mapping faults are telemetry faults: logged once, never fatal to the run.
    """

    mapper: _Mapper = field(repr=False, kw_only=False)

    # It adds no tools, toolsets or model wrappers, so a durable agent may take it per run.
    _safe_at_runtime: ClassVar[bool] = True

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="outermost")

    async def wrap_node_run(
        self,
        ctx: RunContext[Any],
        *,
        node: AgentNode[Any],
        handler: WrapNodeRunHandler[Any],
    ) -> NodeResult[Any]:
        if PydanticAgent.is_model_request_node(node):
            with _boundary:
                self.mapper.step_started(ctx)
        result = await handler(node)
        if PydanticAgent.is_call_tools_node(node):
            with _boundary:
                self.mapper.step_finished(ctx, result)
        return result

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        mapper = self.mapper
        message_id = ""
        with _boundary:
            message_id = mapper.message_started(ctx, request_context)
        try:
            with mapper.builder.model_scope(message_id):
                response = await handler(request_context)
        except Exception as exc:
            # The message ends with the error, so the chat span fails where it
            # happened even when the run recovers; the exception goes on unchanged.
            with _boundary:
                mapper.message_finished(None, exc)
            raise
        with _boundary:
            mapper.message_finished(response)
        return response

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        try:
            return await handler(args)
        except _CONTROL_FLOW:
            raise
        except Exception as exc:
            with _boundary:
                self.mapper.tool_failed(call, exc)
            raise

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        mapper = self.mapper
        try:
            with mapper.builder.tool_scope(mapper.call_id(call.tool_call_id)):
                # An agent the tool runs (delegation) is a nested run: see _delegated_iter.
                delegation = _delegating.set(True)
                try:
                    result = await handler(args)
                finally:
                    _delegating.reset(delegation)
        except _CONTROL_FLOW:
            raise
        except Exception as exc:
            with _boundary:
                mapper.tool_failed(call, exc)
            raise
        with _boundary:
            mapper.tool_returned(call, result)
        return result


@dataclass
class _StreamObserver(_Observer):
    """Stream mode: also maps the native event stream, in order with the hooks.

    Overriding ``wrap_run_event_stream`` makes Pydantic AI stream a node even
    without an ``event_stream_handler``, which is why run mode uses the plain
    :class:`_Observer`: a run-mode call keeps its non-streaming model path.
    """

    async def wrap_run_event_stream(
        self,
        ctx: RunContext[Any],
        *,
        stream: AsyncIterable[AgentStreamEvent],
    ) -> AsyncIterable[AgentStreamEvent]:
        mapper = self.mapper
        try:
            async for event in stream:
                with _boundary:
                    mapper.native(event)
                yield event
        except Exception as exc:
            # A streamed response fails here (its request handler is then cancelled):
            # the open message ends with the error.
            with _boundary:
                mapper.message_finished(None, exc)
            raise
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


@dataclass
class _UntracedStream(_StreamObserver):
    """Stream mode with nobody observing: no tool hooks (there is no scope to enter
    and no span to put an exception on); tool results come off the native stream."""

    wrap_tool_validate = AbstractCapability.wrap_tool_validate
    wrap_tool_execute = AbstractCapability.wrap_tool_execute


# -- the framework's own instrumentation -----------------------------------------------------------


def _instrumentation_ids(native: AbstractAgent[Any, Any], options: Mapping[str, Any]) -> set[str]:
    """The ids of the ``Instrumentation`` capabilities Pydantic AI would use for this run.

    Checked so that silencers are added only when there is something to silence:
    even with no-op providers an ``Instrumentation`` serialises every message.
    """
    from pydantic_ai.capabilities.abstract import leaf_capabilities
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentedModel

    default = Instrumentation.id or "instrumentation"  # the class's one-off id
    ids: set[str] = set()
    if not isinstance(native, PydanticAgent):
        return {default}  # a wrapper agent hides its configuration: silence to be sure
    if isinstance(options.get("model") or native.model, InstrumentedModel):
        ids.add(default)
    setting = native.instrument
    if setting is None:
        # What Agent.instrument_all() set; if that attribute ever moves, assume on.
        setting = getattr(PydanticAgent, "_instrument_default", True)
    if setting:
        ids.add(default)
    capabilities: list[Any] = leaf_capabilities(native.root_capability)
    for declared in options.get("capabilities") or ():
        if isinstance(declared, AbstractCapability):
            capabilities.extend(leaf_capabilities(declared))
    ids.update(
        capability.id
        for capability in capabilities
        if isinstance(capability, Instrumentation) and capability.id is not None
    )
    return ids


@cache
def _silenced_instrumentation(capability_id: str) -> AbstractCapability[Any]:
    """An ``Instrumentation`` that records nothing; it takes the place of the one with
    ``capability_id`` for one run. One shared instance per id is enough: Pydantic AI
    copies it per run (``for_run``)."""
    from pydantic_ai.capabilities.instrumentation import Instrumentation

    return Instrumentation(settings=_no_op_settings(), id=capability_id)


# -- agents that a tool runs (delegation) ----------------------------------------------------------

# True inside the body of a tool of a traced run (its tool scope). Only there does the
# delegation hook do anything; everywhere else it costs one read of this variable.
_delegating: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_pydantic_ai_delegating", default=False
)
_hook_installed = False
_hook_lock = threading.Lock()


@dataclass
class _OwnRun(AbstractCapability[Any]):
    """Marks a run of this runner that installs no observer (run mode, untraced) inside a
    tool of a traced run: the runner decided how to trace it, the hook leaves it alone."""

    _safe_at_runtime: ClassVar[bool] = True


_OWN_RUN = _OwnRun()


def _install_delegation_hook() -> None:
    """Wrap ``Agent.iter`` once per process (at the first traced run, never at import).

    Pydantic AI has no process-wide registry of capabilities, and a delegated run
    (``await other.run(..., usage=ctx.usage)`` in a tool) receives nothing of the run
    that called it; ``Agent.iter`` is the one public method every run goes through
    (``run``, ``run_sync``, ``run_stream``, ``run_stream_events``, ``iter``). The
    wrapper reads one context variable and, outside a traced run's tool, calls the
    original at once.
    """
    global _hook_installed
    if _hook_installed:
        return
    with _hook_lock:  # first traced runs in two threads at once: one wrapper
        if _hook_installed:
            return
        PydanticAgent.iter = _delegation_hook(PydanticAgent.iter)  # type: ignore[method-assign]
        _hook_installed = True


def _delegation_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Agent.iter`` wrapped: one context-variable read, then the original, unless the
    call comes from inside a traced run's tool."""
    delegating = _delegating.get

    @functools.wraps(original)
    def iter(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not delegating():
            return original(self, *args, **kwargs)
        return _delegated_iter(original, self, args, kwargs)

    return iter


def _delegated_iter(
    original: Callable[..., Any], agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``agent.iter(...)`` called inside a traced run's tool: a nested run of its own,
    with the runner's mapping (``_Observer``) added to the run's capabilities."""
    declared = list(kwargs.get("capabilities") or ())
    if any(isinstance(capability, (_Observer, _OwnRun)) for capability in declared):
        return original(agent, *args, **kwargs)  # a run of this runner: traced (or not) by it
    delegation: _Delegation | None = None
    with _boundary:
        delegation = _Delegation.open(agent, args, kwargs)
    if delegation is None:  # nothing traces here (observed without a tracing layer, say)
        return original(agent, *args, **kwargs)
    options = {**kwargs, "capabilities": [*declared, *delegation.capabilities]}
    return delegation.around(original(agent, *args, **options))


@dataclass
class _Delegation:
    """One delegated run: its nested run, the capabilities that map it, what it was asked."""

    run: NestedRun
    observer: _Observer
    capabilities: list[AbstractCapability[Any]]
    prompt: Any

    @classmethod
    def open(cls, agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Delegation | None:
        prompt = args[0] if args else kwargs.get("user_prompt")
        name = getattr(agent, "name", None) or "agent"
        # The framework's own spans are silenced for this run too: each call counts once.
        ids = _instrumentation_ids(agent, kwargs)
        silencers = [_silenced_instrumentation(i) for i in sorted(ids)]
        requests = [AgentRequestText(prompt=prompt)] if isinstance(prompt, str) else None
        run = open_nested_run(name, mode="run", requests=requests)
        if run is None:
            return None
        observer = _Observer(_Mapper(EventBuilder(run), name, detailed=True))
        return cls(run, observer, [*silencers, observer], prompt)

    @asynccontextmanager
    async def around(self, native: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
        """The native ``iter`` context; the nested run ends as the native run ends."""
        run, builder = self.run, self.observer.mapper.builder
        try:
            async with native as agent_run:
                yield agent_run
        except CancelledError:
            with _boundary:
                run.finish(cancelled=True)
            raise
        except BaseException as error:
            with _boundary:
                builder.fail(error)
                run.finish(error=error)
            raise
        else:
            with _boundary:
                self.observer.mapper.run_ended()
                result = agent_run.result
                prompt = self.prompt if isinstance(self.prompt, str) else ""
                run.finish(reply=_reply(result, prompt) if result is not None else None)
        finally:
            builder.observer = NULL_OBSERVER  # nothing more reaches the ended run


# -- the run and the runner ------------------------------------------------------------------------


class _Run(FrameworkRun[AgentRunResult[Any]]):
    """One Pydantic AI run: ``agent.run`` (run mode) or ``run_stream_events`` (stream mode)."""

    def __init__(self, setup: RunSetup[AbstractAgent[Any, Any]], options: dict[str, Any]) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.options = options
        self.results: list[AgentRunResult[Any]] = []

    async def call(self) -> AgentRunResult[Any]:
        return await self.native.run(**self.options)

    def native_stream(self) -> AbstractAsyncContextManager[AsyncIterable[Any]]:
        return self.native.run_stream_events(**self.options)

    def map(self, item: Any) -> None:
        if isinstance(item, AgentRunResultEvent):  # the hooks map everything else
            self.results.append(item.result)

    async def outcome(self) -> AgentRunResult[Any]:
        if not self.results:
            raise RuntimeError("the Pydantic AI event stream ended without a run result")
        return self.results[-1]

    async def save(self, result: AgentRunResult[Any]) -> None:
        setup = self.setup
        save(setup.session, STATE_KEY, result.all_messages(), setup.prepared, self.options["deps"])

    def reply(self, result: AgentRunResult[Any], prompt: str) -> AgentReply:
        return _reply(result, prompt)


class PydanticAIRunner(FrameworkRunner[AbstractAgent[Any, Any]]):
    """Runs a ``pydantic_ai.Agent`` (any ``AbstractAgent``) in run or stream mode."""

    framework: ClassVar[str] = "pydantic_ai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = AbstractAgent
    native_what: ClassVar[str] = "a pydantic_ai agent"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "user_prompt": "the runner builds the prompt from the requests",
        "message_history": (
            f"the runner restores the conversation from the session (key {STATE_KEY!r})"
        ),
        "deps": (
            "the runner passes the session's framework context as deps; "
            "set it with session.set_framework_context()"
        ),
        "conversation": (
            "the runner passes the session's history as message_history, and Pydantic AI "
            "rejects conversation= alongside it"
        ),
    }

    def __init__(self) -> None:
        self._warned_stream_handler = False

    async def start(self, setup: RunSetup[AbstractAgent[Any, Any]]) -> _Run:
        # Untraced run mode installs nothing: the run is the plain native call. Stream
        # mode always needs the capability (the events are the stream).
        observer: _Observer | None = None
        if setup.streaming:
            mapper = _Mapper(setup.builder, setup.agent.name, detailed=setup.observed)
            observer = _StreamObserver(mapper) if setup.observed else _UntracedStream(mapper)
        elif setup.observed:
            observer = _Observer(_Mapper(setup.builder, setup.agent.name, detailed=True))
        return _Run(setup, self._call_options(setup, observer))

    def _call_options(self, setup: RunSetup[Any], observer: _Observer | None) -> dict[str, Any]:
        """The native call's keyword arguments (``deps`` is the loaded framework context)."""
        prepared = setup.prepared
        options = prepared.options
        dropped = setup.streaming and options.pop("event_stream_handler", None) is not None
        if dropped and not self._warned_stream_handler:
            self._warned_stream_handler = True
            logger.warning(
                "runnertrace: run option 'event_stream_handler' of agent %r is ignored in "
                "stream mode (the runner consumes the event stream itself); "
                "use a capability to observe events in both modes",
                setup.agent.name,
            )
        capabilities = list(options.get("capabilities") or [])
        if in_traced_run():
            _install_delegation_hook()
            ids = _instrumentation_ids(setup.native, options)
            capabilities.extend(_silenced_instrumentation(i) for i in sorted(ids))
        if observer is not None:
            capabilities.append(observer)
        elif _delegating.get():  # untraced, inside a traced run's tool: not a delegate
            capabilities.append(_OWN_RUN)
        # Owned keys last, so no declared option can displace them.
        options["user_prompt"] = user_prompt_of(setup.requests)
        options["message_history"] = list(prepared.state or [])
        options["deps"] = prepared.context if prepared.context is not None else {}
        options["capabilities"] = capabilities
        return options


def _reply(result: AgentRunResult[Any], prompt: str) -> AgentReply:
    output = result.output
    if isinstance(output, BinaryContent) and output.is_image:
        return reply_of(result.response.text or "", prompt, image=output.base64)
    if isinstance(output, str):
        images = result.response.images
        return reply_of(output, prompt, image=images[0].base64 if images else None)
    return reply_of(output, prompt)


class PydanticAIModule(Module):
    """Registers ``pydantic_ai.Agent`` objects with the runtime, each paired with a
    :class:`PydanticAIRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``usage_limits``, ``model_settings``, ``capabilities``, ...).
    """

    naming = ("the pydantic_ai agent", "Agent(..., name='assistant')")
    runner_class = PydanticAIRunner
