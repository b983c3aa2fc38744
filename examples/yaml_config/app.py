"""An ordinary app with no tracing code: tracing comes from ``runnertrace.yaml``.

Needs: ``pip install -e .`` (no extra).

Run it from this directory, where the config file is::

    cd examples/yaml_config
    python app.py
    runnertrace show last

The ``Runtime`` reads ``runnertrace.yaml`` (or the file ``RUNNERTRACE_CONFIG``
names; ``RUNNERTRACE_TRACE__ENABLED=true`` works too) and, because
``trace.enabled`` is true there, wraps the runner of every agent registered
with it. Delete the file, or set ``enabled: false``, and the same code runs
untraced. Spans still being exported are flushed when the process exits.
"""

from __future__ import annotations

import asyncio

from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator


async def main() -> None:
    runtime = Runtime()
    native = Agent(ScriptedLlm(), tools=[calculator], name="yaml-app")
    agent = NativeModule([native], runtime=runtime).get(native)

    question = "What is 12 times 34, minus 8?"
    reply = await runtime.run(agent, Session("yaml-app"), [AgentRequestText(prompt=question)])
    print(f"question: {question}")
    print(f"answer:   {reply}")

    # Not tracing code: only a hint about where the spans went.
    trace = runtime.settings.trace
    if trace.enabled:
        backends = ", ".join(trace.types)
        print(f"tracing:  on from the config, to {backends}; see `runnertrace show last`")
    else:
        print("tracing:  off (no runnertrace.yaml here; run this from examples/yaml_config)")


if __name__ == "__main__":
    asyncio.run(main())
