"""The from-scratch agent: ``run`` drives ``step``; each step is ``think`` then ``act``.

The loop is written once, as :meth:`Agent.execute`, an async generator of
:mod:`runnertrace.core.events`. ``run`` drains it (handing each event to an
optional sink) and ``stream`` is it, so both modes report the very same events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from runnertrace.core import events as ev
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.native.llm import LlmClient, parts_of
from runnertrace.runners.native.tools import BaseTool, FunctionTool
from runnertrace.runners.native.types import (
    AgentResult,
    Event,
    ExecutionContext,
    LlmRequest,
    LlmResponse,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolResult,
    new_id,
)

__all__ = ["Agent", "boundary"]

boundary = MappingBoundary("native")
"""The native loop's mapping boundary (the runner's too): the loop makes its events itself."""

EventSink = Callable[[ev.StreamEvent], None]


class Agent:
    """A tool-using agent over any :class:`LlmClient`.

    ``max_steps`` bounds the think/act loop so a model that never stops calling
    tools cannot run forever. With ``output_type`` the final answer is parsed
    into that pydantic model; an answer that does not parse is fed back to the
    model, which gets another step to fix it.
    """

    def __init__(
        self,
        model: LlmClient,
        tools: list[BaseTool | Callable[..., Any]] | None = None,
        instructions: str = "",
        max_steps: int = 10,
        output_type: type[BaseModel] | None = None,
        name: str = "agent",
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.model = model
        self.instructions = instructions
        self.max_steps = max_steps
        self.output_type = output_type
        self.name = name
        self.tools = self._setup_tools(tools or [])

    def _setup_tools(self, tools: list[BaseTool | Callable[..., Any]]) -> list[BaseTool]:
        prepared = [t if isinstance(t, BaseTool) else FunctionTool(t) for t in tools]
        names = [t.name for t in prepared]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"duplicate tool names: {sorted(duplicates)}")
        return prepared

    # -- the loop -------------------------------------------------------------------
    async def run(
        self,
        user_input: str,
        context: ExecutionContext | None = None,
        on_event: EventSink | None = None,
    ) -> AgentResult:
        """Run to completion; ``on_event`` sees every event ``stream`` would yield."""
        context = context if context is not None else ExecutionContext()
        async for event in self.execute(user_input, context, streaming=False):
            if on_event is not None:
                on_event(event)
        return self.result_of(context)

    async def stream(
        self, user_input: str, context: ExecutionContext | None = None
    ) -> AsyncIterator[ev.StreamEvent]:
        context = context if context is not None else ExecutionContext()
        async for event in self.execute(user_input, context, streaming=True):
            yield event

    def result_of(self, context: ExecutionContext) -> AgentResult:
        if context.final_result is None:
            return AgentResult(output=None, context=context, stop_reason="max_steps")
        return AgentResult(output=context.final_result, context=context, stop_reason="final")

    async def execute(
        self,
        user_input: str,
        context: ExecutionContext,
        *,
        streaming: bool,
        max_steps: int | None = None,
        builder: EventBuilder | None = None,
    ) -> AsyncIterator[ev.StreamEvent]:
        """The loop itself: steps until a final answer or ``max_steps`` steps this run.

        Events are made by ``builder`` (which reports each one to its observer as
        it is made) and yielded; a runner passes a builder bound to the run's
        observer (see :mod:`runnertrace.core.observer`).
        """
        builder = builder if builder is not None else EventBuilder(queue=True)
        limit = context.current_step + (max_steps or self.max_steps)
        context.final_result = None
        context.add_event(
            Event(context.execution_id, "user", [Message(role="user", content=user_input)])
        )
        while context.final_result is None and context.current_step < limit:
            async for event in self.step(context, streaming=streaming, builder=builder):
                yield event

    async def step(
        self,
        context: ExecutionContext,
        *,
        streaming: bool = False,
        builder: EventBuilder | None = None,
    ) -> AsyncIterator[ev.StreamEvent]:
        """One think/act cycle, reported as paired step/message/tool events."""
        builder = builder if builder is not None else EventBuilder(queue=True)
        index = context.current_step
        builder.step_start(self.name, index)
        for event in builder.drain():
            yield event
        request = self._prepare_llm_request(context)
        response: LlmResponse | None = None
        async for item in self._think_events(request, streaming, builder):
            if isinstance(item, LlmResponse):
                response = item
            else:
                yield item
        assert response is not None  # _think_events always ends with the response
        context.add_event(Event(context.execution_id, self.name, list(response.content)))

        tool_calls = response.tool_calls
        if tool_calls:
            results = await self.act(context, tool_calls, builder=builder)
            context.add_event(Event(context.execution_id, self.name, list(results)))
        else:
            self._finish(context, response.text)
        context.increment_step()
        builder.step_end(self.name, index)
        for event in builder.drain():
            yield event

    def _finish(self, context: ExecutionContext, text: str) -> None:
        """Accept the final answer, or feed a parse error back for another step."""
        if self.output_type is None:
            context.final_result = text
            return
        try:
            context.final_result = self.output_type.model_validate_json(text)
        except ValidationError as exc:
            feedback = (
                f"Your answer did not match the required output schema: "
                f"{exc.errors(include_url=False)}. Reply again with JSON only."
            )
            context.add_event(
                Event(context.execution_id, "system", [Message(role="user", content=feedback)])
            )

    def _prepare_llm_request(self, context: ExecutionContext) -> LlmRequest:
        contents = [item for event in context.events for item in event.content]
        return LlmRequest(
            instructions=[self.instructions] if self.instructions else [],
            contents=contents,
            tools=list(self.tools),
            tool_choice="auto" if self.tools else None,
            output_schema=self.output_type.model_json_schema() if self.output_type else None,
        )

    async def think(self, request: LlmRequest) -> LlmResponse:
        return await self.model.generate(request)

    async def _think_events(
        self, request: LlmRequest, streaming: bool, builder: EventBuilder
    ) -> AsyncIterator[ev.StreamEvent | LlmResponse]:
        """Call the model and translate its parts into message/reasoning/tool events.

        The message starts when the request is sent. A failed call ends its
        message with the error (then the exception propagates); the model call
        runs in the model scope, one chunk at a time in stream mode, so the
        scope never spans a ``yield``.
        """
        # What the model is sent, for the trace: built only if traced.
        fields = boundary.detail(_request_fields, request) if builder.observed else {}
        message_id = builder.message_start(
            model=self.model.model, provider=self.model.provider, **fields
        )
        for event in builder.drain():
            yield event
        response: LlmResponse | None = None
        try:
            if streaming:
                parts: AsyncIterator[Any] = _scoped(self.model.stream(request), builder, message_id)
            else:
                with builder.model_scope(message_id):
                    parts = _aiter(parts_of(await self.think(request)))
            async for part in parts:
                if isinstance(part, ReasoningPart):
                    builder.reasoning(part.delta, message_id)
                elif isinstance(part, TextPart):
                    builder.text(part.delta, message_id)
                elif isinstance(part, ToolCallPart):
                    builder.tool_call(
                        part.args_delta,
                        tool_call_id=part.id or new_id("call"),
                        name=part.name or "unknown",
                        index=part.index,
                        message_id=message_id,
                    )
                else:
                    response = part
                for event in builder.drain():
                    yield event
            if response is None:
                raise RuntimeError(f"{type(self.model).__name__}.stream() ended without a response")
        except Exception as exc:
            builder.message_end(message_id, error=exc)
            for event in builder.drain():
                yield event
            raise
        builder.message_end(
            message_id,
            finish_reason=response.finish_reason,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            response_model=response.model or self.model.model,
            response_id=response.response_id,
        )
        for event in builder.drain():
            yield event
        yield response

    async def act(
        self,
        context: ExecutionContext,
        tool_calls: list[ToolCall],
        *,
        builder: EventBuilder | None = None,
    ) -> list[ToolResult]:
        """Run each requested tool. Failures become error results the model will see.

        Each tool runs in the builder's tool scope (where its span starts), and its
        result is reported the moment it returns (where its span ends); a tool that
        raises has its exception reported with it, besides the error result the
        model reads.
        """
        builder = builder if builder is not None else EventBuilder()
        tools = {t.name: t for t in self.tools}
        results: list[ToolResult] = []
        for call in tool_calls:
            found = tools.get(call.name)
            error: BaseException | None = None
            if found is None:
                known = ", ".join(sorted(tools)) or "none"
                result = ToolResult(
                    call.tool_call_id,
                    call.name,
                    "error",
                    [f"Tool {call.name!r} not found; available tools: {known}"],
                )
            else:
                try:
                    with builder.tool_scope(call.tool_call_id):
                        output = await found(context, **call.arguments)
                except Exception as exc:  # noqa: BLE001 - a tool error is data for the model
                    error = exc
                    result = ToolResult(
                        call.tool_call_id, call.name, "error", [f"{type(exc).__name__}: {exc}"]
                    )
                else:
                    result = ToolResult(call.tool_call_id, call.name, "success", [_render(output)])
            builder.tool_result(
                result.tool_call_id,
                result.text,
                name=result.name,
                error=error,
                is_error=result.status == "error",
            )
            results.append(result)
        return results


async def _scoped(
    parts: AsyncIterator[Any], builder: EventBuilder, message_id: str
) -> AsyncIterator[Any]:
    """``parts``, each pulled inside the model scope (entered and left between yields)."""
    iterator = parts.__aiter__()
    while True:
        with builder.model_scope(message_id):
            try:
                part = await iterator.__anext__()
            except StopAsyncIteration:
                return
        yield part


def _semconv_messages(contents: Sequence[Any]) -> list[dict[str, Any]]:
    """The history as GenAI semconv input messages, grouped as a model is sent them.

    One model turn (its text, then its tool calls) is one assistant message, as
    ``openai_compat.to_chat_messages`` sends it; each tool result is a message.
    """
    messages: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant message tool calls join
    for item in contents:
        message = _semconv_message(item)
        if isinstance(item, ToolCall) and turn is not None:
            turn["parts"].extend(message["parts"])
            continue
        messages.append(message)
        turn = message if message["role"] == "assistant" else None
    return messages


def _request_fields(request: LlmRequest) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: what the model call is sent."""
    return {
        "input_messages": _semconv_messages(request.contents),
        "system_instructions": "\n\n".join(request.instructions) or None,
        "tool_definitions": [_semconv_tool(tool) for tool in request.tools] or None,
    }


def _semconv_message(item: Any) -> dict[str, Any]:
    """One history item as a GenAI semconv input message."""
    if isinstance(item, ToolResult):
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": item.tool_call_id,
                    "name": item.name,
                    "response": item.text,
                    "result": item.text,
                }
            ],
        }
    if isinstance(item, ToolCall):
        return {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": item.tool_call_id,
                    "name": item.name,
                    "arguments": item.arguments,
                }
            ],
        }
    return {"role": item.role, "parts": [{"type": "text", "content": item.content}]}


def _semconv_tool(tool: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }


def _render(output: Any) -> Any:
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    if isinstance(output, dict | list):
        return json.dumps(output, default=str)
    return output


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item
