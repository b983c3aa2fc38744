"""A Microsoft Agent Framework agent run through runnertrace, in run and stream mode.

Needs the ``maf`` extra: ``pip install -e '.[maf]'``.

    python examples/maf_agent.py "What is 12 times 34?"                 # offline
    RUNNERTRACE_TRACE__ENABLED=true python examples/maf_agent.py        # traced

Offline, ``ScriptedChatClient`` (a real Agent Framework chat client whose provider
call is scripted) plays the LLM: it asks for the ``multiply`` tool with the last
two numbers in the question, then states the tool's result. Swap in any Agent
Framework chat client for a real model: the ``maf`` extra installs the OpenAI ones,
``agent_framework.openai.OpenAIChatClient(model=...)`` (the Responses API) and
``OpenAIChatCompletionClient(model=...)`` (Chat Completions); both stream each
answer once (``tests/runners/maf/test_maf_openai_clients.py``).

The tool counts its calls in the framework context, which the runner keeps in
the Agent Framework session's state under ``CONTEXT_KEY`` and writes back after
each successful run, so the count survives from the run to the stream.

Tracing is switched by configuration only: the agent is registered through
``MAFModule`` on a ``Runtime``, which wraps its runner in ``TracingRunner`` when
``trace.enabled`` is on (``runnertrace.yaml`` or the env var above). The default
backend stores spans locally; ``runnertrace show last`` draws the run.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from typing import Any

from agent_framework import Agent, FunctionInvocationContext, Message, tool

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import CONTEXT_KEY, MAFModule
from runnertrace.runners.maf.testing import ScriptedChatClient, call, say


def ask_for_the_tool(messages: list[Message]) -> Any:
    """The first turn: multiply the last two numbers of the question."""
    numbers = re.findall(r"-?\d+", messages[-1].text)
    if len(numbers) < 2:
        return say("Give me two numbers to multiply.")
    arguments = {"a": int(numbers[-2]), "b": int(numbers[-1])}
    return call((f"call_{len(messages)}", "multiply", arguments))


def state_the_result(messages: list[Message]) -> Any:
    """The second turn: the tool's result, in one sentence."""
    results = [c.result for c in messages[-1].contents if c.type == "function_result"]
    return say(f"The product is {results[-1] if results else 'unknown'}.")


@tool
def multiply(a: int, b: int, ctx: FunctionInvocationContext) -> int:
    """Multiply two whole numbers."""
    context = ctx.session.state.get(CONTEXT_KEY) if ctx.session is not None else None
    if context is not None:  # run through MAFRunner: the session's framework context
        context["multiplications"] = context.get("multiplications", 0) + 1
    return a * b


def build(runtime: Runtime) -> None:
    client = ScriptedChatClient([ask_for_the_tool, state_the_result], model="offline", loop=True)
    calculator = Agent(
        client,
        "Use the multiply tool for products; answer in one sentence.",
        name="calculator",
        tools=[multiply],
    )
    MAFModule([calculator], runtime=runtime).run_options(
        calculator, function_invocation_configuration={"max_iterations": 5}
    )


async def main(prompt: str) -> None:
    runtime = Runtime()
    build(runtime)
    agent = runtime.agents().get("calculator")
    session = runtime.sessions().new(f"maf-example-{uuid.uuid4().hex[:8]}")
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
