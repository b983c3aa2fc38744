"""A Google ADK agent run through runnertrace, in run and stream mode.

Needs the ``adk`` extra: ``pip install -e '.[adk]'``.

    python examples/adk_agent.py                    # offline, scripted model
    RUNNERTRACE_TRACE__ENABLED=true python examples/adk_agent.py   # traced

The model is ``ScriptedAdkLlm`` (a real ADK ``BaseLlm`` that answers from a
script, so no API key or network is involved): it asks for the ``multiply``
tool with the two numbers in the question, then states the result. To use
Gemini instead, give the ``LlmAgent`` a model name such as
``"gemini-2.5-flash"`` (and ADK its credentials).

The tool counts its calls in the ADK session state (``tool_context.state``):
the runner merges the session's framework context into that state and writes
the state back after each successful run, so the count survives from the run to
the stream. The stream is ADK's SSE mode: partial responses arrive as text
deltas.

Tracing is switched by configuration only: the agent is registered through
``GoogleADKModule`` on a ``Runtime``, which wraps its runner in
``TracingRunner`` when ``trace.enabled`` is on (``runnertrace.yaml`` or the env
var above). The default backend stores spans locally; ``runnertrace show last``
draws the run.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid

from google.adk.agents import LlmAgent, RunConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.tool_context import ToolContext

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.adk import GoogleADKModule
from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn


def multiply(a: int, b: int, tool_context: ToolContext) -> int:
    """Multiply two whole numbers."""
    tool_context.state["multiplications"] = tool_context.state.get("multiplications", 0) + 1
    return a * b


def offline_turn(request: LlmRequest) -> Turn:
    """What a tool-using model would say next, judged from the last message."""
    last = request.contents[-1].parts or []
    results = [p.function_response for p in last if p.function_response is not None]
    if results:
        product = (results[-1].response or {}).get("result")
        return Turn(text=f"The product is {product}.", chunks=3)
    text = " ".join(p.text for p in last if p.text)
    numbers = re.findall(r"-?\d+", text)
    if len(numbers) < 2:
        return Turn(text="Give me two numbers to multiply.")
    args = {"a": int(numbers[-2]), "b": int(numbers[-1])}
    return Turn(calls=[("multiply", args, f"call_{len(request.contents)}")])


def build(runtime: Runtime) -> None:
    calculator = LlmAgent(
        name="calculator",
        model=ScriptedAdkLlm(model="offline", script=[offline_turn], loop=True),
        instruction="Use the multiply tool for products; answer in one sentence.",
        tools=[multiply],
    )
    GoogleADKModule([calculator], runtime=runtime).run_options(
        calculator, run_config=RunConfig(max_llm_calls=5)
    )


async def main(prompt: str) -> None:
    runtime = Runtime()
    build(runtime)
    agent = runtime.agents().get("calculator")
    session = runtime.sessions().new(f"adk-example-{uuid.uuid4().hex[:8]}")
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
