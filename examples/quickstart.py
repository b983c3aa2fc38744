"""Quickstart: trace the native agent to the local store, offline.

Needs: ``pip install -e .`` (no extra).

Run it with ``python examples/quickstart.py``. The agent uses ``ScriptedLlm``,
a deterministic offline model that solves arithmetic with the calculator tool,
so no API key and no network are needed. Tracing is switched on in code here
(``trace.enabled``); see ``yaml_config/`` for switching it on from a config
file instead.

Every run becomes one trace in the per-user store (``runnertrace doctor``
prints where it is; ``trace.local.path`` chooses another): the run, each
think/act step, each model message and each tool call. Look at it afterwards,
from any directory, with::

    runnertrace show last            # the span tree in the terminal
    runnertrace traces               # the recent runs as a table
    runnertrace report last -o run.html
"""

from __future__ import annotations

import asyncio

from runnertrace import load_settings
from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing import get_tracing_setup

QUESTION = "What is 1234 * 5678, plus 17?"


async def main() -> None:
    # The same settings a runnertrace.yaml would hold; `local` is the default backend.
    settings = load_settings(trace={"enabled": True, "type": "local"})
    runtime = Runtime(settings=settings)

    native = Agent(
        ScriptedLlm(),
        tools=[calculator],
        instructions="Answer arithmetic questions with the calculator tool.",
        name="quickstart",
    )
    # Registering with a tracing-enabled runtime wraps the agent's runner for us.
    agent = NativeModule([native], runtime=runtime).get(native)

    reply = await runtime.run(agent, Session("quickstart"), [AgentRequestText(prompt=QUESTION)])
    print(f"question: {QUESTION}")
    print(f"answer:   {reply}")

    # Spans are exported in the background; flush so the store is complete now
    # (at exit this happens on its own).
    get_tracing_setup(settings.trace).flush()
    store = SpanStore(settings.trace.local.path)
    run = store.list_runs(1)[0]
    print(f"traced:   {run.span_count} spans in trace {run.trace_id} -> {store.path}")
    print("next:     runnertrace show last   (or: runnertrace traces)")


if __name__ == "__main__":
    asyncio.run(main())
