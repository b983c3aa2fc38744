"""The README's quick tour, as a script: trace one run of the native agent.

Needs: ``pip install -e .`` (no extra).

Run it with ``.venv/bin/python examples/quick_tour.py`` (or ``python ...`` in
an activated venv). The model is ``ScriptedLlm``, offline and deterministic.
The run is traced to the per-user local store; look at it afterwards with
``.venv/bin/runnertrace show last``.
"""

from __future__ import annotations

import asyncio

from runnertrace import traced
from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator


async def main() -> None:
    runtime = Runtime()
    NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
    agent = runtime.agents().get("math")
    agent.runner = traced(agent.runner)  # or trace.enabled: true in runnertrace.yaml
    reply = await runtime.run(
        agent,
        runtime.sessions().new("quick-tour"),
        [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")],
    )
    print(reply)


if __name__ == "__main__":
    asyncio.run(main())
