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
import os
import uuid
from pathlib import Path

from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, load_settings


async def main() -> None:
    runtime = Runtime()
    native = Agent(ScriptedLlm(), tools=[calculator], name="yaml-app")
    agent = NativeModule([native], runtime=runtime).get(native)

    question = "What is 12 times 34, minus 8?"
    session = Session(f"yaml-app-{uuid.uuid4().hex[:8]}")
    reply = await runtime.run(agent, session, [AgentRequestText(prompt=question)])
    print(f"question: {question}")
    print(f"answer:   {reply}")

    # Not tracing code: only a hint about where the spans went.
    trace = runtime.settings.trace
    if trace.enabled:
        backends = ", ".join(trace.types)
        print(f"tracing:  on from the config, to {backends}; see `runnertrace show last`")
    else:
        print(f"tracing:  off ({why_off()})")


def why_off() -> str:
    """Why the configuration left tracing off: no file, an invalid one, or enabled: false."""
    source = Path(os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE))
    if not source.is_file():
        return f"no {source} here; run this from examples/yaml_config"
    try:
        load_settings()
    except Exception as exc:  # the Runtime logged it too; say it where the user looks
        return f"{source} is invalid: {exc}"
    return f"trace.enabled is false in {source}"


if __name__ == "__main__":
    asyncio.run(main())
