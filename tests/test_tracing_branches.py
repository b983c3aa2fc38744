"""The builder's composition capability, framework-free: branches and agents run as tools.

A runner whose framework runs several agents at once passes a ``branch`` key to
its steps and model calls; each branch keeps its own innermost step, so
interleaved events of overlapping branches still nest where they belong. A
branch started with ``parent_tool_call_id`` is an agent run as that tool call:
an ``invoke_agent`` span under the tool's span. The events are made with the
real :class:`EventBuilder` and traced through the real tracer by a foreign runner.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from tests.fidelity_helpers import one, parent_of
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

from runnertrace import traced
from runnertrace.core import events as ev
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.testing import CapturedSpans


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def trace_events(events: list[ev.StreamEvent]) -> None:
    runner = traced(ForeignRunner(events))
    async for _ in runner.stream(ForeignAgent(), ForeignSession(), []):
        pass


def interleaved() -> list[ev.StreamEvent]:
    """Two branches at once; the right one asks for an agent run as a tool."""
    b = EventBuilder(queue=True)
    b.step_start("left", 1, agent_name="left", branch="L")
    b.step_start("right", 2, agent_name="right", branch="R")
    left = b.message_start(model="left-llm", branch="L")
    right = b.message_start(model="right-llm", branch="R")  # the newest message now
    b.reasoning("hmm", left)
    b.tool_call("{}", tool_call_id="lc", name="left_tool", index=0, message_id=left)
    b.tool_call("{}", tool_call_id="rc", name="helper", index=0, message_id=right)
    b.message_end(left, input_tokens=3)
    b.message_end(right, input_tokens=5)
    b.tool_result("lc", "ok", name="left_tool")
    b.step_start("helper", 3, agent_name="helper", branch="H", parent_tool_call_id="rc")
    inner = b.message_start(model="helper-llm", branch="H")
    b.message_end(inner, input_tokens=7)
    b.step_end("helper", 3, branch="H")
    b.tool_result("rc", "done", name="helper")
    b.step_end("left", 1, branch="L")
    b.step_end("right", 2, branch="R")
    return list(b.drain())


async def test_interleaved_branches_keep_their_own_children(
    captured_spans: CapturedSpans,
) -> None:
    await trace_events(interleaved())
    spans = captured_spans
    run_span = parent_of(spans, one(spans, "agent_step left"))
    for name, tool in (("left", "left_tool"), ("right", "helper")):
        step = one(spans, f"agent_step {name}")
        assert parent_of(spans, step) is run_span
        for child in (one(spans, f"chat {name}-llm"), one(spans, f"execute_tool {tool}")):
            assert parent_of(spans, child) is step
            assert attrs(child)["gen_ai.agent.name"] == name
    assert parent_of(spans, one(spans, "reasoning")) is one(spans, "chat left-llm")
    agent_run = one(spans, "invoke_agent helper")
    assert parent_of(spans, agent_run) is one(spans, "execute_tool helper")
    assert attrs(agent_run)["gen_ai.operation.name"] == "invoke_agent"
    helper_step = one(spans, "agent_step helper")
    assert parent_of(spans, helper_step) is agent_run
    assert parent_of(spans, one(spans, "chat helper-llm")) is helper_step
    assert attrs(one(spans, "chat helper-llm"))["gen_ai.agent.name"] == "helper"
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == 3 + 5 + 7
    assert "runnertrace.stream.anomalies" not in attrs(run_span)
    # The run's own agent name is untouched by its branches' agents.
    assert attrs(run_span)["gen_ai.agent.name"] not in ("left", "right", "helper")


async def test_an_agent_run_ends_with_its_tool_and_unknown_branches_are_anomalies(
    captured_spans: CapturedSpans,
) -> None:
    b = EventBuilder(queue=True)
    b.step_start("outer", 1)
    asking = b.message_start(model="outer-llm")
    b.tool_call("{}", tool_call_id="t1", name="helper", index=0, message_id=asking)
    b.message_end(asking)
    b.step_start("helper", 2, agent_name="helper", branch="H", parent_tool_call_id="t1")
    b.tool_result("t1", "done", name="helper")  # the helper's step is still open
    b.step_end("outer", 1)
    events = [*b.drain(), ev.StepEnd(step_name="x", step_index=9, branch="nowhere")]
    await trace_events(events)
    spans = captured_spans
    helper_step = one(spans, "agent_step helper")
    agent_run = one(spans, "invoke_agent helper")
    tool = one(spans, "execute_tool helper")
    assert parent_of(spans, helper_step) is agent_run and parent_of(spans, agent_run) is tool
    assert attrs(helper_step)["runnertrace.incomplete"] is True
    assert (helper_step.end_time or 0) <= (agent_run.end_time or 0) <= (tool.end_time or 0)
    run_span = one(spans, "invoke_agent " + str(attrs(tool)["gen_ai.agent.name"]))
    assert attrs(run_span)["runnertrace.stream.anomalies"] == 2  # the open step, the unknown end
