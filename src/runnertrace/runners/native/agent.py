"""The from-scratch agent: ``run`` drives ``step``; each step is ``think`` then ``act``.

The loop is written once, as :meth:`Agent.execute`, an async generator of
:mod:`runnertrace.core.events`. ``run`` drains it (handing each event to an
optional sink) and ``stream`` is it, so both modes report the very same events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from runnertrace.core import events as ev
from runnertrace.core.observer import NULL_OBSERVER, Observer
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

__all__ = ["Agent"]

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
        observer: Observer = NULL_OBSERVER,
    ) -> AsyncIterator[ev.StreamEvent]:
        """The loop itself: steps until a final answer or ``max_steps`` steps this run.

        ``observer`` is told when each model call and tool runs (see
        :mod:`runnertrace.core.observer`); the events themselves are yielded.
        """
        limit = context.current_step + (max_steps or self.max_steps)
        context.final_result = None
        context.add_event(
            Event(context.execution_id, "user", [Message(role="user", content=user_input)])
        )
        while context.final_result is None and context.current_step < limit:
            async for event in self.step(context, streaming=streaming, observer=observer):
                yield event

    async def step(
        self,
        context: ExecutionContext,
        *,
        streaming: bool = False,
        observer: Observer = NULL_OBSERVER,
    ) -> AsyncIterator[ev.StreamEvent]:
        """One think/act cycle, reported as paired step/message/tool events."""
        index = context.current_step
        yield ev.StepStart(step_name=self.name, step_index=index)
        request = self._prepare_llm_request(context)
        response: LlmResponse | None = None
        async for item in self._think_events(request, streaming, observer):
            if isinstance(item, LlmResponse):
                response = item
            else:
                yield item
        assert response is not None  # _think_events always ends with the response
        context.add_event(Event(context.execution_id, self.name, list(response.content)))

        tool_calls = response.tool_calls
        if tool_calls:
            errors: dict[str, BaseException] = {}
            results = await self.act(context, tool_calls, observer=observer, errors=errors)
            context.add_event(Event(context.execution_id, self.name, list(results)))
            for result in results:
                failure = errors.get(result.tool_call_id)
                yield ev.ToolCallResult(
                    tool_call_id=result.tool_call_id,
                    content=result.text,
                    is_error=result.status == "error",
                    error=ev.EventError.from_exception(failure) if failure is not None else None,
                )
        else:
            self._finish(context, response.text)
        context.increment_step()
        yield ev.StepEnd(step_name=self.name, step_index=index)

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
        self, request: LlmRequest, streaming: bool, observer: Observer = NULL_OBSERVER
    ) -> AsyncIterator[ev.StreamEvent | LlmResponse]:
        """Call the model and translate its parts into message/reasoning/tool events.

        The message starts when the request is sent. A failed call ends its
        message with the error (then the exception propagates); the model call
        runs in the observer's model scope, one chunk at a time in stream mode,
        so the scope never spans a ``yield``.
        """
        message_id = new_id("msg")
        reasoning_id = f"{message_id}_reasoning"
        yield ev.MessageStart(
            message_id=message_id,
            model=self.model.model,
            provider=self.model.provider,
            input_messages=[_semconv_message(item) for item in request.contents],
            system_instructions="\n\n".join(request.instructions) or None,
            tool_definitions=[_semconv_tool(tool) for tool in request.tools] or None,
        )
        if streaming:
            parts: AsyncIterator[Any] = _scoped(self.model.stream(request), observer, message_id)
        else:
            try:
                with observer.scope("model", message_id):
                    parts = _aiter(parts_of(await self.think(request)))
            except Exception as exc:
                yield _failed(message_id, exc)
                raise
        reasoning_open = False
        open_calls: dict[int, str] = {}
        response: LlmResponse | None = None
        try:
            async for part in parts:
                if isinstance(part, ReasoningPart):
                    if not reasoning_open:
                        reasoning_open = True
                        yield ev.ReasoningStart(message_id=reasoning_id)
                    yield ev.ReasoningDelta(message_id=reasoning_id, delta=part.delta)
                    continue
                if reasoning_open:
                    reasoning_open = False
                    yield ev.ReasoningEnd(message_id=reasoning_id)
                if isinstance(part, TextPart):
                    yield ev.TextDelta(message_id=message_id, delta=part.delta)
                elif isinstance(part, ToolCallPart):
                    if part.index not in open_calls:
                        call_id = part.id or new_id("call")
                        open_calls[part.index] = call_id
                        yield ev.ToolCallStart(
                            tool_call_id=call_id,
                            tool_name=part.name or "unknown",
                            parent_message_id=message_id,
                        )
                    if part.args_delta:
                        yield ev.ToolCallArgs(
                            tool_call_id=open_calls[part.index], delta=part.args_delta
                        )
                else:
                    response = part
        except Exception as exc:
            # a stream that fails midway: close what it opened, end the message failed
            if reasoning_open:
                yield ev.ReasoningEnd(message_id=reasoning_id)
            yield _failed(message_id, exc)
            raise
        if reasoning_open:
            yield ev.ReasoningEnd(message_id=reasoning_id)
        if response is None:
            raise RuntimeError(f"{type(self.model).__name__}.stream() ended without a response")
        for call_id in open_calls.values():
            yield ev.ToolCallEnd(tool_call_id=call_id)
        yield ev.MessageEnd(
            message_id=message_id,
            finish_reason=response.finish_reason,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            response_model=response.model or self.model.model,
            response_id=response.response_id,
        )
        yield response

    async def act(
        self,
        context: ExecutionContext,
        tool_calls: list[ToolCall],
        *,
        observer: Observer = NULL_OBSERVER,
        errors: dict[str, BaseException] | None = None,
    ) -> list[ToolResult]:
        """Run each requested tool. Failures become error results the model will see.

        Each tool runs in the observer's tool scope; a tool that raises has its
        exception put in ``errors`` under its call id (for the trace), besides
        the error result the model reads.
        """
        tools = {t.name: t for t in self.tools}
        results: list[ToolResult] = []
        for call in tool_calls:
            found = tools.get(call.name)
            if found is None:
                known = ", ".join(sorted(tools)) or "none"
                results.append(
                    ToolResult(
                        call.tool_call_id,
                        call.name,
                        "error",
                        [f"Tool {call.name!r} not found; available tools: {known}"],
                    )
                )
                continue
            try:
                with observer.scope("tool", call.tool_call_id):
                    output = await found(context, **call.arguments)
            except Exception as exc:  # noqa: BLE001 - a tool error is data for the model
                if errors is not None:
                    errors[call.tool_call_id] = exc
                results.append(
                    ToolResult(
                        call.tool_call_id, call.name, "error", [f"{type(exc).__name__}: {exc}"]
                    )
                )
            else:
                results.append(
                    ToolResult(call.tool_call_id, call.name, "success", [_render(output)])
                )
        return results


def _failed(message_id: str, exc: BaseException) -> ev.MessageEnd:
    return ev.MessageEnd(
        message_id=message_id, finish_reason="error", error=ev.EventError.from_exception(exc)
    )


async def _scoped(
    parts: AsyncIterator[Any], observer: Observer, message_id: str
) -> AsyncIterator[Any]:
    """``parts``, each pulled inside the model scope (entered and left between yields)."""
    iterator = parts.__aiter__()
    while True:
        with observer.scope("model", message_id):
            try:
                part = await iterator.__anext__()
            except StopAsyncIteration:
                return
        yield part


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
