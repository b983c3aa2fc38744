"""The mapping: a Pydantic AI run's progress -> :class:`EventBuilder` calls.

The capability of :mod:`.adapter` hands each hook call and native stream event to
one :class:`_Mapper` per run, which turns it into builder calls (the builder owns
the pairing rules and reports each event to the observer as it is made):

* A step is a ``ModelRequestNode`` and the ``CallToolsNode`` after it
  (``step_index`` is Pydantic AI's ``run_step``).
* A model call starts when the request is sent, with what it is sent
  (:mod:`.request`), and runs in the model scope (an HTTP span nests under the chat
  span). A failure ends the message with the exception, in the step that held it;
  Pydantic AI does not retry a failed model call (a ``ModelRetry`` from a tool or
  output validator starts a new step whose request carries the retry prompt).
* **Structured output is not a tool call:** an output tool's call (``final_result``)
  is reported as the message's text (its JSON arguments), without a result.
* Each tool runs in the tool scope (spans opened inside nest under
  ``execute_tool``), which also marks "a traced run's tool runs here" for the
  delegation hook (:data:`IN_TRACED_TOOL`, :mod:`.nesting`). A failure
  (``ModelRetry``, ``ToolFailed``, any exception, arguments that do not validate) is
  reported with the exception the tool or validator raised, whether Pydantic AI fed
  it back or it ended the run. Calls that never ran (an unknown tool) are settled
  from the next request at step end.
* In stream mode the deltas come from the native stream, seen through the
  capability's ``wrap_run_event_stream`` so they are ordered with the hooks'
  boundaries.

The mapper is ``@guarded``: each of its public methods runs in the runner's one
boundary (:data:`_BOUNDARY`, defined here and used by every module of the runner),
so a fault in the mapping costs telemetry only, wherever the framework calls it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities.abstract import AgentNode, NodeResult
from pydantic_ai.messages import ERROR_OUTCOMES, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.pydantic_ai.mcp import mcp_call
from runnertrace.runners.pydantic_ai.request import request_fields

_BOUNDARY = MappingBoundary("pydantic_ai")
"""The runner's one error boundary: every module of the runner uses this instance."""

IN_TRACED_TOOL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_pydantic_ai_delegating", default=False
)
"""True inside the body of a tool of a traced run (its tool scope, :meth:`_Mapper.tool_scope`).
Only there does the delegation hook (:mod:`.nesting`) do anything; everywhere else it
costs one read of this variable."""


def _args_text(args: str | dict[str, Any] | None) -> str:
    return "" if args is None else as_text(args)


_RESULT_KINDS = frozenset({"tool-return", "builtin-tool-return", "retry-prompt"})


def _result_text(part: Any) -> tuple[str, bool]:
    """The text a tool result part sends the model, and whether it is an error."""
    if part.part_kind in ("retry-prompt", "retry-feedback"):  # always an error to fix
        return part.model_response(), True
    outcome = getattr(part, "outcome", "success")
    return part.model_response_str(wrap_if_error=False), outcome in ERROR_OUTCOMES


def _tool_failure(exc: BaseException) -> tuple[str, BaseException]:
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


@guarded(_BOUNDARY)
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
        self.mcp_toolsets: list[Any] = []  # a traced run's MCP toolsets (:mod:`.mcp`)

    # nodes and steps ----------------------------------------------------------------------
    def node_started(self, ctx: RunContext[Any], node: AgentNode[Any]) -> None:
        if PydanticAgent.is_model_request_node(node):
            self.step_started(ctx)

    def node_finished(
        self, ctx: RunContext[Any], node: AgentNode[Any], result: NodeResult[Any]
    ) -> None:
        if PydanticAgent.is_call_tools_node(node):
            self.step_finished(ctx, result)

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
        fields = _BOUNDARY.detail(request_fields, request_context) if self._detailed else {}
        self.builder.message_start(
            message_id, model=model.model_name, provider=getattr(model, "system", None), **fields
        )
        return message_id

    def message_finished(
        self, response: ModelResponse | None, error: BaseException | None = None
    ) -> None:
        """End the open message; ``response`` is ``None`` when the request failed (the
        message ends with ``error``, so the chat span fails where it happened even when
        the run recovers)."""
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

    def stream_failed(self, error: BaseException) -> None:
        """The native stream ended with ``error``. A streamed response fails there (its
        request handler is then cancelled): the open message ends with the error. A
        cancellation or an early close is no failure: the run's end closes what is
        open."""
        if isinstance(error, Exception):
            self.message_finished(None, error)

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

    # tools ------------------------------------------------------------------------------
    def call_id(self, tool_call_id: str) -> str:
        """The id a call was announced under."""
        return self._aliases.get(tool_call_id, tool_call_id)

    def tool_scope(self, call: ToolCallPart, tool_def: Any = None) -> AbstractContextManager[None]:
        """What the tool runs in: its ``execute_tool`` scope, the mark that an agent it
        runs is a delegation (:mod:`.nesting`), and for a tool of an MCP toolset, what
        tells the call once (:mod:`.mcp`)."""
        return self._in_tool(self.call_id(call.tool_call_id), tool_def)

    @contextmanager
    def _in_tool(self, call_id: str, tool_def: Any) -> Iterator[None]:
        with self.builder.tool_scope(call_id), mcp_call(self.mcp_toolsets, tool_def):
            delegating = IN_TRACED_TOOL.set(True)
            try:
                yield
            finally:
                IN_TRACED_TOOL.reset(delegating)

    def tool_returned(self, call: ToolCallPart, result: Any) -> None:
        call_id = self.call_id(call.tool_call_id)
        if call_id in self._pending:
            part = ToolReturnPart(tool_name=call.tool_name, content=result, tool_call_id=call_id)
            self._result(call_id, part.model_response_str())

    def tool_failed(self, call: ToolCallPart, exc: BaseException) -> None:
        call_id = self.call_id(call.tool_call_id)
        if call_id in self._pending:
            content, error = _tool_failure(exc)
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
