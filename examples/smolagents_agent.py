"""A smolagents agent behind runnertrace, in run and stream mode, traced.

Needs the ``smolagents`` extra: ``pip install -e '.[smolagents]'``.

Offline: a scripted smolagents ``Model`` asks for the ``multiply`` tool and then
answers with ``final_answer``, so the example needs no network and no key. The
runs are traced to the per-user local store (``runnertrace show last`` draws the
newest one); the session keeps the agent's memory between the two runs, and the
framework context round-trips through ``agent.state``.

    python examples/smolagents_agent.py
"""

from __future__ import annotations

import asyncio
import uuid

from smolagents import ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from runnertrace import load_settings
from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.smolagents import SmolagentsModule
from runnertrace.runners.smolagents.testing import ScriptedModel, calls

QUESTION = "What is 6 times 7?"


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


def scripted_model() -> ScriptedModel:
    """Two turns per run (ask for the tool, then answer), for two runs."""
    ask = calls(("multiply", {"a": 6, "b": 7}))
    answer = calls(("final_answer", {"answer": "The product is 42."}), prefix="answer")
    return ScriptedModel([ask, answer, ask, answer], model_id="scripted-smol")


async def main() -> None:
    runtime = Runtime(settings=load_settings(trace={"enabled": True}))
    native = ToolCallingAgent(
        tools=[multiply],
        model=scripted_model(),
        name="calculator",
        instructions="You are a careful calculator. Use the multiply tool.",
        verbosity_level=LogLevel.OFF,
    )
    # Native options in smolagents' own terms: a step cap for each run.
    SmolagentsModule([native], runtime=runtime).run_options(native, max_steps=4)

    agent = runtime.agents().get("calculator")
    session = runtime.sessions().get_or_new(f"smolagents-example-{uuid.uuid4().hex[:8]}")
    session.set_framework_context({"unit": "cm"})
    requests = [AgentRequestText(prompt=QUESTION)]

    reply = await runtime.run(agent, session, requests)
    print(f"run:     {reply}")

    shown: list[str] = []
    async for chunk in runtime.stream(agent, session, requests):
        event = chunk.event
        if chunk.delta:
            shown.append(chunk.delta)
        elif event is not None and event.type == "tool_call_result":
            shown.append(f"[tool -> {event.content}] ")
    print(f"stream:  {''.join(shown)}")
    print(f"memory:  {len(session.get('smolagents'))} steps kept in the session")
    print(f"context: {session.get_framework_context()}")


if __name__ == "__main__":
    asyncio.run(main())
