"""A Pydantic AI agent run through runnertrace, in run and stream mode.

Needs the ``pydantic-ai`` extra: ``pip install -e '.[pydantic-ai]'``.

    python examples/pydantic_ai_agent.py                    # offline, scripted model
    OPENAI_API_KEY=sk-... python examples/pydantic_ai_agent.py "What is 12 times 34?"
    RUNNERTRACE_TRACE__ENABLED=true python examples/pydantic_ai_agent.py   # traced

Offline (no ``OPENAI_API_KEY``) a ``FunctionModel`` plays the LLM: it asks for
the ``multiply`` tool with the two numbers in the question, then states the
result. With a key, ``openai:gpt-4o-mini`` is used (``PYDANTIC_AI_MODEL``
overrides it).

The tool counts its calls in ``RunContext.deps``: the runner passes the
session's framework context as ``deps`` and stores what the tool wrote, so the
count survives from the run to the stream.

Tracing is switched by configuration only: the agent is registered through
``PydanticAIModule`` on a ``Runtime``, which wraps its runner in
``TracingRunner`` when ``trace.enabled`` is on (``runnertrace.yaml`` or the env
var above). The default backend stores spans locally; ``runnertrace show last``
draws the run.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import UsageLimits

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.pydantic_ai import PydanticAIModule


def _next_part(messages: list[ModelMessage]) -> TextPart | ToolCallPart:
    """What a tool-using model would say next, judged from the last message."""
    last = messages[-1].parts[-1]
    if last.part_kind == "tool-return":
        return TextPart(f"The product is {last.content}.")
    numbers = re.findall(r"-?\d+", str(getattr(last, "content", "")))
    if len(numbers) < 2:
        return TextPart("Give me two numbers to multiply.")
    args = {"a": int(numbers[-2]), "b": int(numbers[-1])}
    return ToolCallPart("multiply", args, tool_call_id=f"call_{len(messages)}")


def offline_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[_next_part(messages)])


async def offline_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    part = _next_part(messages)
    if isinstance(part, TextPart):
        for word in re.findall(r"\S+\s*", part.content):
            yield word
        return
    call = DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)
    yield {0: call}


def build(runtime: Runtime) -> None:
    online = bool(os.environ.get("OPENAI_API_KEY"))
    model: Any = (
        os.environ.get("PYDANTIC_AI_MODEL", "openai:gpt-4o-mini")
        if online
        else FunctionModel(offline_reply, stream_function=offline_stream, model_name="offline")
    )
    calculator = Agent(
        model,
        name="calculator",
        deps_type=dict,
        instructions="Use the multiply tool for products; answer in one sentence.",
    )

    @calculator.tool
    def multiply(ctx: RunContext[dict[str, Any]], a: int, b: int) -> int:
        """Multiply two whole numbers."""
        ctx.deps["multiplications"] = ctx.deps.get("multiplications", 0) + 1
        return a * b

    PydanticAIModule([calculator], runtime=runtime).run_options(
        calculator, usage_limits=UsageLimits(request_limit=5)
    )


async def main(prompt: str) -> None:
    runtime = Runtime()
    build(runtime)
    agent = runtime.agents().get("calculator")
    session = runtime.sessions().new(f"pydantic-ai-example-{uuid.uuid4().hex[:8]}")
    session.set_framework_context({"multiplications": 0})

    reply = await runtime.run(agent, session, [AgentRequestText(prompt=prompt)])
    print(f"run:     {reply}")

    print("stream:  ", end="")
    async for chunk in runtime.stream(agent, session, [AgentRequestText(prompt=prompt)]):
        if chunk.delta:
            print(chunk.delta, end="", flush=True)
        elif chunk.event is not None and chunk.event.type == "tool_call_result":
            print(f"[tool -> {chunk.event.content}] ", end="", flush=True)
    print()
    print(f"context: {session.get_framework_context()}")


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What is 6 times 7?"))
