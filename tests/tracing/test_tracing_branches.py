"""The builder's composition capability, framework-free: branches.

A runner whose framework runs several agents at once inside one run passes a
``branch`` key to its steps and model calls; each branch keeps its own innermost
step, so interleaved events of overlapping branches still nest where they belong.
(An agent run that another agent starts is not a branch but a nested run of its
own: ``tests/test_run_totals.py``.) The events are made with the real
:class:`EventBuilder` and traced through the real tracer by a foreign runner.
"""

from __future__ import annotations

import pytest
from opentelemetry.trace import StatusCode
from tests.fidelity_helpers import attrs, one, parent_of
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

from runnertrace import traced
from runnertrace.core import events as ev
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.testing import CapturedSpans


async def trace_events(events: list[ev.StreamEvent]) -> None:
    runner = traced(ForeignRunner(events))
    async for _ in runner.stream(ForeignAgent(), ForeignSession(), []):
        pass


def interleaved() -> list[ev.StreamEvent]:
    """Two branches at once, each with a model call and a tool call."""
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
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == 3 + 5
    assert attrs(run_span)["runnertrace.aggregated.model_calls"] == 2
    assert "runnertrace.stream.anomalies" not in attrs(run_span)
    # The run's own agent name is untouched by its branches' agents.
    assert attrs(run_span)["gen_ai.agent.name"] not in ("left", "right", "helper")


async def test_a_branch_step_open_at_the_end_and_an_unknown_branch_are_anomalies(
    captured_spans: CapturedSpans,
) -> None:
    b = EventBuilder(queue=True)
    b.step_start("outer", 1)
    asking = b.message_start(model="outer-llm")
    b.message_end(asking)
    b.step_start("helper", 2, agent_name="helper", branch="H")  # never ended
    b.step_end("outer", 1)
    events = [*b.drain(), ev.StepEnd(step_name="x", step_index=9, branch="nowhere")]
    await trace_events(events)
    spans = captured_spans
    helper_step = one(spans, "agent_step helper")
    run_span = parent_of(spans, helper_step)
    assert attrs(run_span)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(helper_step)["runnertrace.incomplete"] is True
    assert attrs(run_span)["runnertrace.stream.anomalies"] == 2  # the open step, the unknown end


async def test_a_branch_forked_inside_an_open_step_nests_in_it(
    captured_spans: CapturedSpans,
) -> None:
    """Branches that fork inside a step (LangGraph ``Send`` in a subgraph's node) start
    in that step, not beside it; without ``parent_step`` they start under the run."""
    b = EventBuilder(queue=True)
    b.step_start("team", 1)
    b.step_start("worker", 2, agent_name="worker", parent_step=("team", 1, None))
    b.step_start("worker", 3, agent_name="worker", branch="B", parent_step=("team", 1, None))
    b.step_start("other", 4, branch="C")
    for branch in (None, "B"):
        b.message_end(b.message_start(model="worker-llm", branch=branch), input_tokens=2)
    b.step_end("worker", 3, branch="B")
    b.step_end("other", 4, branch="C")
    b.step_end("worker", 2)
    b.step_end("team", 1)
    await trace_events(list(b.drain()))
    spans = captured_spans
    team = one(spans, "agent_step team")
    assert [parent_of(spans, s) for s in spans.by_name("agent_step worker")] == [team, team]
    assert parent_of(spans, one(spans, "agent_step other")) is parent_of(spans, team)
    assert "runnertrace.stream.anomalies" not in attrs(parent_of(spans, team))


async def test_a_run_failing_in_one_branch_ends_the_other_branchs_open_work_cancelled(
    captured_spans: CapturedSpans,
) -> None:
    """Paris's call fails (reported where it happened); the run fails with it while Oslo's
    call is still open: Oslo's call and step end cancelled, not with Paris's error."""
    b = EventBuilder(queue=True)
    b.step_start("paris", 1, agent_name="paris", branch="P")
    b.step_start("oslo", 2, agent_name="oslo", branch="O")
    paris = b.message_start(model="paris-llm", branch="P")
    b.message_start(model="oslo-llm", branch="O")  # never ends
    b.message_end(paris, error=ConnectionError("down"))
    events = list(b.drain())
    # the run fails after the last event (the one at fail_at is never reported)
    events.append(ev.StepEnd(step_name="oslo", step_index=2, branch="O"))
    runner = traced(ForeignRunner(events, fail_at=len(events) - 1, error=ConnectionError("down")))
    with pytest.raises(ConnectionError):
        await runner.run(ForeignAgent(), ForeignSession(), [])
    spans = captured_spans
    for name in ("chat oslo-llm", "agent_step oslo"):
        span = one(spans, name)
        assert attrs(span)["runnertrace.cancelled"] is True, name
        assert span.status.status_code is not StatusCode.ERROR, name
        assert "error.type" not in attrs(span), name
    assert one(spans, "chat paris-llm").status.status_code is StatusCode.ERROR
    run_span = parent_of(spans, one(spans, "agent_step paris"))
    assert attrs(run_span)["error.type"] == "ConnectionError"
    assert attrs(run_span)["runnertrace.aggregated.errors"] == 1  # Paris's call, once
