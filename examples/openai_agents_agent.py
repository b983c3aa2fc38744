"""An OpenAI Agents SDK agent run through runnertrace, in run and stream mode.

Needs the ``openai-agents`` extra: ``pip install -e '.[openai-agents]'``.

    python examples/openai_agents_agent.py                  # offline, scripted model
    OPENAI_API_KEY=sk-... python examples/openai_agents_agent.py "What is 12 times 34?"
    RUNNERTRACE_TRACE__ENABLED=true python examples/openai_agents_agent.py   # traced

Offline (no ``OPENAI_API_KEY``) a scripted model plays the LLM: it asks for the
``multiply`` tool with the two numbers in the question, then states the result.
With a key, the SDK's default model is used (``OPENAI_MODEL`` overrides it).

Tracing is switched by configuration only: the agent is registered through
``OpenAIModule`` on a ``Runtime``, which wraps its runner in ``TracingRunner``
when ``trace.enabled`` is on (``runnertrace.yaml`` or the env var above). The
default backend stores spans locally; ``runnertrace show last`` draws the run.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.openai_agents import OpenAIModule

_ids = itertools.count(1)


@function_tool
def multiply(a: int, b: int) -> int:
    """Multiply two whole numbers."""
    return a * b


def _answer(call: ModelCall) -> Any:
    """Decide the next output from the conversation, as a tool-using model would."""
    last = call.input[-1] if isinstance(call.input, list) and call.input else {}
    n = next(_ids)
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return [assistant_message(f"The product is {last['output']}.", item_id=f"msg_{n}")]
    numbers = re.findall(r"-?\d+", str(last))
    if len(numbers) < 2:
        return [assistant_message("Give me two numbers to multiply.", item_id=f"msg_{n}")]
    args = {"a": int(numbers[-2]), "b": int(numbers[-1])}
    return [function_call("multiply", args, call_id=f"call_{n}")]


class OfflineModel(ScriptedModel):
    """A scripted model that never runs out: each call is answered by ``_answer``."""

    model = "offline-calculator"

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.enqueue(ModelStep.respond(_answer))
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.enqueue(ModelStep.respond(_answer))
        async for event in super().stream_response(*args, **kwargs):
            yield event


def build(runtime: Runtime) -> None:
    online = bool(os.environ.get("OPENAI_API_KEY"))
    calculator = Agent(
        name="calculator",
        instructions="Use the multiply tool for products; answer in one sentence.",
        model=os.environ.get("OPENAI_MODEL") if online else OfflineModel(),
        tools=[multiply],
    )
    module = OpenAIModule([calculator], runtime=runtime).run_options(calculator, max_turns=5)
    if not online:
        # Without a key the SDK's own trace exporter has nowhere to send spans
        # and would only warn; runnertrace's tracing is unaffected by this.
        module.run_options(calculator, run_config=RunConfig(tracing_disabled=True))


async def main(prompt: str) -> None:
    runtime = Runtime()
    build(runtime)
    agent = runtime.agents().get("calculator")
    session = runtime.sessions().new(f"openai-agents-example-{uuid.uuid4().hex[:8]}")

    reply = await runtime.run(agent, session, [AgentRequestText(prompt=prompt)])
    print(f"run:    {reply}")

    print("stream: ", end="")
    async for chunk in runtime.stream(agent, session, [AgentRequestText(prompt=prompt)]):
        if chunk.delta:
            print(chunk.delta, end="", flush=True)
        elif chunk.event is not None and chunk.event.type == "tool_call_result":
            print(f"[tool -> {chunk.event.content}] ", end="", flush=True)
    print()


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What is 6 times 7?"))
