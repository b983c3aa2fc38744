"""What every fidelity matrix (``tests/test_fidelity*.py``) shares: modes, a run, span lookups.

Each framework's file builds its own agent with its own offline model; the way a
scenario is driven and the way spans are found are the same for all of them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from runnertrace.core import Session
from runnertrace.core.models import AgentRequestText
from runnertrace.testing import CapturedSpans

MODES = ["run", "stream"]


class LookupFailed(RuntimeError):
    """What the scenario's failing tool raises (its class must reach ``error.type``)."""


async def run(agent: Any, mode: str, prompt: str = "Trip to Oslo?") -> None:
    """Drive ``agent`` (a core agent with a traced runner) once, in ``mode``."""
    requests = [AgentRequestText(prompt=prompt)]
    if mode == "run":
        await agent.runner.run(agent, Session("s1"), requests)
    else:
        async for _ in agent.runner.stream(agent, Session("s1"), requests):
            pass


def one(spans: CapturedSpans, name: str) -> ReadableSpan:
    """The one finished span called ``name`` (fails if there are none or several)."""
    (span,) = spans.by_name(name)
    return span


def parent_of(spans: CapturedSpans, span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None
    (parent,) = [s for s in spans.spans if s.context.span_id == span.parent.span_id]
    return parent


def in_start_order(spans: CapturedSpans, name: str) -> list[ReadableSpan]:
    return sorted(spans.by_name(name), key=lambda s: s.start_time or 0)
