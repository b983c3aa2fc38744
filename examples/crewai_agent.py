"""A CrewAI agent behind runnertrace, in run or stream mode.

Needs the ``crewai`` extra: ``pip install -e '.[crewai]'`` (CrewAI brings about
1 GB of dependencies and pins ``openai<3``, so give it a venv of its own).

Offline by default: a scripted ReAct model asks for the ``multiply`` tool and
then answers, so the example needs no network and no key. With
``OPENAI_API_KEY`` set it uses a real model through CrewAI's ``LLM``
(``OPENAI_MODEL``, default ``gpt-4o-mini``).

Each run builds a one-agent, one-task crew; the session keeps the conversation.
The example switches CrewAI's own telemetry off (``CREWAI_DISABLE_TELEMETRY``),
which leaves ours alone (``OTEL_SDK_DISABLED`` would switch both off).

Tracing needs no code change: set ``RUNNERTRACE_TRACE__ENABLED=true`` (or
``trace: {enabled: true}`` in ``runnertrace.yaml``), or pass ``--trace``.

    python examples/crewai_agent.py
    python examples/crewai_agent.py --stream --trace
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
import warnings
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import Agent
from crewai.tools import tool

from runnertrace import load_settings
from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.crewai import CrewAIModule
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final

QUESTION = "What is 6 times 7?"


@tool("multiply")
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def choose_model() -> Any:
    """A real OpenAI model when a key is set, else two scripted ReAct turns."""
    if not os.environ.get("OPENAI_API_KEY"):
        print("(offline: OPENAI_API_KEY is not set, using the scripted model)\n")
        return ScriptedLLM([action("multiply", a=6, b=7), final("6 times 7 is 42.")])
    from crewai import LLM

    return LLM(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))


async def main(stream: bool, trace: bool) -> None:
    settings = load_settings(trace={"enabled": True}) if trace else load_settings()
    runtime = Runtime(settings=settings)
    calculator = Agent(
        role="calculator",
        goal="Answer arithmetic questions exactly.",
        backstory="You are a careful calculator. Use the multiply tool.",
        llm=choose_model(),
        tools=[multiply],
    )
    module = CrewAIModule([calculator], runtime=runtime)
    # Native options are Crew(...) keywords: here a rate limit for the model.
    module.run_options(calculator, max_rpm=60)

    agent = runtime.agents().get("calculator")
    session = runtime.sessions().get_or_new(f"crewai-example-{uuid.uuid4().hex[:8]}")
    requests = [AgentRequestText(prompt=QUESTION)]
    print(f"user: {QUESTION}")
    if stream:
        print("agent (streaming): ", end="", flush=True)
        async for chunk in runtime.stream(agent, session, requests):
            event = chunk.event
            if chunk.delta:
                print(chunk.delta, end="", flush=True)
            elif event is not None and event.type == "tool_call_result":
                print(f"\n[multiply -> {event.content}]\n", end="", flush=True)
        print()
    else:
        reply = await runtime.run(agent, session, requests)
        print(f"agent: {reply}")
    if settings.trace.enabled:
        print(f"(traced: spans went to {settings.trace.type})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true", help="stream events instead of run()")
    parser.add_argument("--trace", action="store_true", help="same as trace.enabled: true")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # CrewAI's own deprecated fields
        asyncio.run(main(stream=args.stream, trace=args.trace))
    sys.exit(0)
