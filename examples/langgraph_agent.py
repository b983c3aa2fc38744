"""A LangGraph ReAct agent behind runnertrace, in run or stream mode.

Needs the ``langgraph`` extra: ``pip install -e '.[langgraph]'``.

Offline by default: a scripted chat model asks for the ``multiply`` tool and
then answers, so the example needs no network and no key. With
``OPENAI_API_KEY`` set and ``langchain-openai`` installed it uses a real model
(``OPENAI_MODEL``, default ``gpt-4o-mini``).

Tracing needs no code change: set ``RUNNERTRACE_TRACE__ENABLED=true`` (or
``trace: {enabled: true}`` in ``runnertrace.yaml``), or pass ``--trace``. Spans
go to the configured backend (the local store by default).

    python examples/langgraph_agent.py
    python examples/langgraph_agent.py --stream
    RUNNERTRACE_TRACE__ENABLED=true python examples/langgraph_agent.py
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import uuid
import warnings
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from runnertrace import load_settings
from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.langgraph import LangGraphModule
from runnertrace.runners.langgraph.testing import ScriptedChatModel

QUESTION = "What is 6 times 7?"


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def scripted_model() -> ScriptedChatModel:
    """Two model turns: call the tool, then answer with its result."""
    return ScriptedChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "call_1"}],
                usage_metadata={"input_tokens": 52, "output_tokens": 18, "total_tokens": 70},
            ),
            AIMessage(
                content="6 times 7 is 42.",
                usage_metadata={"input_tokens": 83, "output_tokens": 9, "total_tokens": 92},
            ),
        ]
    )


def choose_model() -> Any:
    """A real OpenAI model when a key and langchain-openai are present, else the script."""
    if not os.environ.get("OPENAI_API_KEY"):
        print("(offline: OPENAI_API_KEY is not set, using the scripted model)\n")
        return scripted_model()
    if importlib.util.find_spec("langchain_openai") is None:
        print(
            "(offline: OPENAI_API_KEY is set but langchain-openai is not installed;\n"
            " run `pip install langchain-openai` to use a real model)\n"
        )
        return scripted_model()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))


async def main(stream: bool, trace: bool) -> None:
    settings = load_settings(trace={"enabled": True}) if trace else load_settings()
    runtime = Runtime(settings=settings)
    with warnings.catch_warnings():
        # create_react_agent moved to `langchain.agents.create_agent`, which
        # needs the full `langchain` package; the prebuilt one works unchanged.
        warnings.simplefilter("ignore", DeprecationWarning)
        graph = create_react_agent(
            choose_model(),
            [multiply],
            prompt="You are a careful calculator. Use the multiply tool.",
            checkpointer=InMemorySaver(),
            name="calculator",
        )
    module = LangGraphModule([graph], runtime=runtime)
    # Native options in LangGraph's own types: a turn cap and a tag, in config.
    module.run_options(graph, config={"recursion_limit": 10, "tags": ["example"]})

    agent = runtime.agents().get("calculator")
    session = runtime.sessions().get_or_new(f"langgraph-example-{uuid.uuid4().hex[:8]}")
    requests = [AgentRequestText(prompt=QUESTION)]
    print(f"user: {QUESTION}")
    if stream:
        print("agent (streaming): ", end="", flush=True)
        async for chunk in runtime.stream(agent, session, requests):
            event = chunk.event
            if chunk.delta:
                print(chunk.delta, end="", flush=True)
            elif event is not None and event.type == "tool_call_result":
                print(f"[multiply -> {event.content}] ", end="", flush=True)
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
    asyncio.run(main(stream=args.stream, trace=args.trace))
    sys.exit(0)
