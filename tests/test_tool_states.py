"""A tool call's life (``records.ToolState``): it may outlive the step that asked for it.

A framework may end the step before the tool runs (LangGraph runs tools in the next
step) or while it runs, and some never report a result. Such a call ends at its result
or, failing that, normally at the run's end: not incomplete, not counted as an anomaly.
A call running in a step still open at the run's end, or in none, and never answered,
was left open: it ends incomplete, and is counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from tests.tracing_helpers import ForeignAgent, ForeignSession

from runnertrace import TracingRunner
from runnertrace.core.models import AgentReplyText
from runnertrace.core.observer import claim_observer
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.testing import CapturedSpans

Script = Callable[[EventBuilder], None]


class ScriptedRunner:
    """A runner of ours on the builder that plays ``script``, in run mode."""

    framework = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = script

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        with claim_observer() as observer:
            self.script(EventBuilder(observer))
        return AgentReplyText(text="done", prompt="go")


def announce(builder: EventBuilder) -> None:
    builder.message_start(model="fake")
    builder.tool_call("{}", tool_call_id="c1", name="lookup", index=0)
    builder.message_end(finish_reason="tool_calls")


def runs_in_the_next_step(builder: EventBuilder) -> None:
    builder.step_start("plan", 0)
    announce(builder)
    builder.step_end("plan", 0)
    builder.step_start("tools", 1)
    with builder.tool_scope("c1"):
        pass
    builder.tool_result("c1", "found")
    builder.step_end("tools", 1)


def runs_in_a_step_the_run_leaves_open(builder: EventBuilder) -> None:
    builder.step_start("plan", 0)
    announce(builder)
    builder.step_end("plan", 0)
    builder.step_start("tools", 1)
    with builder.tool_scope("c1"):
        pass


def its_step_ends_while_it_runs(builder: EventBuilder) -> None:
    builder.step_start("plan", 0)
    announce(builder)
    with builder.tool_scope("c1"):
        builder.step_end("plan", 0)


def never_runs_after_its_step(builder: EventBuilder) -> None:
    builder.step_start("plan", 0)
    announce(builder)
    builder.step_end("plan", 0)


def in_no_step_and_never_answered(builder: EventBuilder) -> None:
    announce(builder)


CASES: dict[str, tuple[Script, str, bool]] = {
    # script -> (the step the tool's span is in, whether it ends incomplete and counted)
    "runs in the next step": (runs_in_the_next_step, "agent_step tools", False),
    # Running again, in a step of its own: that step's end is the one it may outlive.
    "runs in a step the run leaves open": (
        runs_in_a_step_the_run_leaves_open,
        "agent_step tools",
        True,
    ),
    "its step ends while it runs": (its_step_ends_while_it_runs, "agent_step plan", False),
    "never runs after its step": (never_runs_after_its_step, "agent_step plan", False),
    "in no step, never answered": (in_no_step_and_never_answered, "invoke_agent scripted", True),
}


def one(captured: CapturedSpans, name: str) -> ReadableSpan:
    (span,) = captured.by_name(name)
    return span


@pytest.mark.parametrize("case", list(CASES))
async def test_a_tool_call_ends_normally_only_if_it_outlived_its_step(
    case: str, captured_spans: CapturedSpans
) -> None:
    script, step, left_open = CASES[case]
    await TracingRunner(ScriptedRunner(script)).run(ForeignAgent("scripted"), ForeignSession(), [])
    tool = one(captured_spans, "execute_tool lookup")
    assert tool.parent is not None
    assert tool.parent.span_id == one(captured_spans, step).context.span_id
    run = one(captured_spans, "invoke_agent scripted").attributes or {}
    assert ("runnertrace.incomplete" in (tool.attributes or {})) is left_open
    assert ("runnertrace.stream.anomalies" in run) is left_open
    assert run["runnertrace.aggregated.tool_calls"] == 1
