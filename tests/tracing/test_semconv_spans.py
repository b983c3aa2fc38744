"""GenAI semconv details of the spans the state machine writes, for every runner alike.

The provider on run spans, reasoning spans that OpenInference readers classify and
whose output message the schema accepts, time to first chunk for responses that
are only tool calls, and the step that held a failed model call ending ERROR.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession, scripted_events

from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A


async def foreign_run(events: list[Any], mode: str = "stream", **config: Any) -> None:
    runner = traced(ForeignRunner(events), **config)
    if mode == "run":
        await runner.run(ForeignAgent(), ForeignSession(), [])
    else:
        async for _ in runner.stream(ForeignAgent(), ForeignSession(), []):
            pass


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_the_run_span_names_the_provider_once_a_model_call_did(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await foreign_run(scripted_events(), mode)
    run = captured_spans.by_name("invoke_agent foreign")[0]
    assert (run.attributes or {})[A.PROVIDER] == "fake"
    captured_spans.clear()
    await foreign_run([ev.StepStart(step_name="s"), ev.StepEnd(step_name="s")], mode)
    run = captured_spans.by_name("invoke_agent foreign")[0]
    assert A.PROVIDER not in (run.attributes or {})  # not known: not guessed


async def test_a_native_run_span_names_its_provider(captured_spans: CapturedSpans) -> None:
    runner = traced(NativeRunner())
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    await runner.run(agent, Session("s"), [AgentRequestText(prompt="What is 2 * 3?")])
    run = captured_spans.by_name("invoke_agent math")[0]
    assert (run.attributes or {})[A.PROVIDER] == "runnertrace"


async def test_reasoning_spans_are_classified_and_schema_valid(
    captured_spans: CapturedSpans,
) -> None:
    await foreign_run(scripted_events(), capture_content=True)
    (reasoning,) = captured_spans.by_name("reasoning")
    attrs = dict(reasoning.attributes or {})
    (message,) = json.loads(attrs[A.OUTPUT_MESSAGES])
    assert message == {
        "role": "assistant",
        "parts": [{"type": "reasoning", "content": "thinking"}],
        "finish_reason": "stop",  # required of every output message by the schema
    }
    mirrors = A.vendor_mirrors(attrs, "reasoning", legacy=False)
    assert mirrors[A.OPENINFERENCE_KIND] == "CHAIN"  # a part of the call, not a second LLM
    assert mirrors[A.OUTPUT_VALUE] == "thinking"


def tool_only_message(mid: str, call: str) -> list[Any]:
    return [
        ev.MessageStart(message_id=mid, model="m"),
        ev.ToolCallStart(tool_call_id=call, tool_name="lookup", parent_message_id=mid),
        ev.ToolCallArgs(tool_call_id=call, delta="{}"),
        ev.ToolCallEnd(tool_call_id=call),
        ev.MessageEnd(message_id=mid, finish_reason="tool_calls"),
        ev.ToolCallResult(tool_call_id=call, content="ok"),
    ]


@pytest.mark.parametrize("capture", [False, True])
async def test_time_to_first_chunk_for_a_tool_call_only_response(
    capture: bool, captured_spans: CapturedSpans
) -> None:
    await foreign_run(tool_only_message("m1", "c1"), capture_content=capture)
    chat = captured_spans.by_name("chat m")[0]
    tool = captured_spans.by_name("execute_tool lookup")[0]
    ttfc = (chat.attributes or {})[A.TTFC]
    assert ttfc == pytest.approx(((tool.start_time or 0) - (chat.start_time or 0)) / 1e9)


async def test_every_streamed_native_chat_span_has_time_to_first_chunk(
    captured_spans: CapturedSpans,
) -> None:
    runner = traced(NativeRunner())
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    prompt = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]
    async for _ in runner.stream(agent, Session("s"), prompt):
        pass
    chats = captured_spans.by_name("chat scripted-1")
    assert len(chats) == 3  # two answered only with a tool call, then the answer
    assert all(A.TTFC in (c.attributes or {}) for c in chats)


async def test_the_first_reasoning_chunk_is_the_responses_first_chunk(
    captured_spans: CapturedSpans,
) -> None:
    events = [
        ev.MessageStart(message_id="m", model="m"),
        ev.ReasoningStart(message_id="r"),
        ev.ReasoningDelta(message_id="r", delta="hmm"),
        ev.ReasoningEnd(message_id="r"),
        *tool_only_message("m", "c")[1:],
    ]
    await foreign_run(events)
    chat = captured_spans.by_name("chat m")[0]
    reasoning = captured_spans.by_name("reasoning")[0]

    def first_chunk_ns(span: Any) -> float:
        return (span.start_time or 0) + (span.attributes or {})[A.TTFC] * 1e9

    # one moment, the reasoning delta's, not the later tool call's
    assert first_chunk_ns(chat) == pytest.approx(first_chunk_ns(reasoning), abs=2_000)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_the_step_that_held_a_failed_model_call_is_an_error(
    mode: str, captured_spans: CapturedSpans
) -> None:
    failure = ev.EventError(type="ConnectionError", message="reset")
    events = [
        ev.StepStart(step_name="ok", step_index=0),
        ev.MessageStart(message_id="m1"),
        ev.MessageEnd(message_id="m1"),
        ev.StepEnd(step_name="ok", step_index=0),
        ev.StepStart(step_name="broken", step_index=1),
        ev.MessageStart(message_id="m2"),
        ev.MessageEnd(message_id="m2", error=failure),
        ev.StepEnd(step_name="broken", step_index=1),
    ]
    await foreign_run(events, mode)
    ok = captured_spans.by_name("agent_step ok")[0]
    broken = captured_spans.by_name("agent_step broken")[0]
    assert ok.status.status_code is StatusCode.UNSET
    assert broken.status.status_code is StatusCode.ERROR
    assert (broken.attributes or {})[A.ERROR_TYPE] == "ConnectionError"
    assert broken.status.description == "ConnectionError: reset"
