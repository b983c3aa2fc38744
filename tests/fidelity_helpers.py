"""What the fidelity matrices and composition tests share: modes, a run, span lookups,
and the checks of the one fidelity scenario every framework's matrix drives.

Each framework's file builds its own agent with its own offline model; the way a
scenario is driven, the way spans are found, and what the shared scenario must
show (``tests/tracing/test_fidelity.py``'s docstring: two tools, one failing and fed
back; a user span inside a tool and one inside a model call; then an answer) are
the same for all of them, so they are written once here.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from runnertrace.core import Session
from runnertrace.core.models import AgentRequestText
from runnertrace.testing import CapturedSpans

MODES = ["run", "stream"]
RUN = "invoke_agent planner"  # the scenario's run span


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


# -- span lookups ---------------------------------------------------------------------------------
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


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def attr(span: ReadableSpan, key: str) -> Any:
    """The attribute ``key`` of ``span`` (a KeyError, not None, when it is missing)."""
    assert span.attributes is not None
    return span.attributes[key]


def agent_of(span: ReadableSpan) -> Any:
    return attrs(span).get("gen_ai.agent.name")


def chat_spans(spans: CapturedSpans) -> list[ReadableSpan]:
    """Every chat span, whatever its model (by operation, not by name)."""
    return [s for s in spans.spans if attrs(s).get("gen_ai.operation.name") == "chat"]


def times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


def overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def in_step(spans: CapturedSpans, span: ReadableSpan, step: str, agent: str) -> ReadableSpan:
    """``span`` carries ``agent`` and nests directly in ``agent_step <step>`` of ``agent``."""
    assert agent_of(span) == agent, span.name
    parent = parent_of(spans, span)
    assert parent.name == f"agent_step {step}", (span.name, parent.name)
    assert agent_of(parent) == agent
    return parent


def final_output(spans: CapturedSpans, run_span: str = RUN) -> Any:
    """The text of the first part of the run span's output messages."""
    return json.loads(attr(one(spans, run_span), "gen_ai.output.messages"))[0]["parts"][0][
        "content"
    ]


# -- the shared scenario's checks -----------------------------------------------------------------
def assert_tool_failed_and_run_recovered(
    spans: CapturedSpans, error: str = "LookupFailed", message: str | None = "no flights to Oslo"
) -> tuple[ReadableSpan, ReadableSpan]:
    """``execute_tool flights`` raised ``error`` (fed back to the model): ERROR on its own
    span with the exception event, its raise in the stack trace; ``execute_tool weather``
    and the run are not errors. ``message``: the exception's message, where the framework
    keeps it as raised. Returns (failed, ok) for a file's own checks."""
    failed = one(spans, "execute_tool flights")
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == error
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == error
    if message is not None:
        assert event.attributes["exception.message"] == message
    assert f"raise {error.rsplit('.', 1)[-1]}" in str(event.attributes["exception.stacktrace"])
    ok = one(spans, "execute_tool weather")
    assert ok.status.status_code is StatusCode.UNSET
    assert one(spans, RUN).status.status_code is StatusCode.UNSET  # the run itself recovered
    return failed, ok


def assert_user_spans_nest(spans: CapturedSpans, first_chat: ReadableSpan) -> None:
    """The user's span inside the weather tool nests under its tool span, and the one
    inside the first model call under that call's chat span."""
    db = one(spans, "db.query weather")
    assert parent_of(spans, db).name == "execute_tool weather"
    http = one(spans, "http.request model")
    assert parent_of(spans, http) == first_chat


def assert_model_call_failed_in_its_step(
    spans: CapturedSpans, chats: list[ReadableSpan], steps: list[ReadableSpan]
) -> ReadableSpan:
    """The scenario's second model call raised ``ConnectionError`` ("... reset the
    connection"): its chat span is ERROR with the exception event and not incomplete, the
    first is not; it sits in the second step, which is ERROR, and the first step is not.
    ``chats`` and ``steps`` in start order. Returns the failed chat span."""
    first, failed = chats
    assert [first.status.status_code, failed.status.status_code] == [
        StatusCode.UNSET,
        StatusCode.ERROR,
    ]
    assert attr(failed, "error.type") == "ConnectionError"
    assert "runnertrace.incomplete" not in attrs(failed)
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes is not None
    assert "reset the connection" in str(event.attributes["exception.message"])
    assert parent_of(spans, failed) == steps[1]  # the step that held the failure
    assert steps[1].status.status_code is StatusCode.ERROR
    assert steps[0].status.status_code is StatusCode.UNSET
    return failed
