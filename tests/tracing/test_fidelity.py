"""Trace fidelity: what a user debugging an agent needs, asserted on spans only.

The shared scenario, per runner and mode: the model calls two tools, one of which
fails and is fed back; a user span opens inside a tool and another inside a model
call; the second model call answers. A second scenario fails a model call. We
check what each chat span says it was sent, where each error lands, and that
what ran inside a call nests under its span.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import trace as trace_api
from tests.fidelity_helpers import (
    MODES,
    LookupFailed,
    assert_model_call_failed_in_its_step,
    assert_tool_failed_and_run_recovered,
    assert_user_spans_nest,
    final_output,
    in_start_order,
    run,
)

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm
from runnertrace.runners.native.tools import tool
from runnertrace.runners.native.types import LlmRequest, LlmResponse, Message, ToolCall
from runnertrace.testing import CapturedSpans

# The user's own tracer, on the same provider as ours (as with an app's global SDK
# provider); set per test by the fixture below.
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool
async def weather(city: str) -> str:
    """Look up the weather."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@tool
async def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def first_turn(request: LlmRequest) -> LlmResponse:
    with user["tracer"].start_as_current_span("http.request model"):
        return LlmResponse(
            content=[
                ToolCall("c1", "weather", {"city": "Oslo"}),
                ToolCall("c2", "flights", {"city": "Oslo"}),
            ]
        )


def second_turn(request: LlmRequest) -> LlmResponse:
    return LlmResponse(content=[Message(role="assistant", content="Sunny; no flights.")])


def broken_turn(request: LlmRequest) -> LlmResponse:
    raise ConnectionError("model endpoint reset the connection")


def agent_with(turns: list[Any]) -> CoreAgent:
    runner = TracingRunner(NativeRunner(), capture_content=True)
    native = Agent(
        ScriptedLlm(turns=turns),
        tools=[weather, flights],
        instructions="You plan trips.",
        name="planner",
    )
    return CoreAgent("planner", runner, native)


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with([first_turn, second_turn]), mode)
    first, second = sorted(captured_spans.by_name("chat scripted-1"), key=lambda s: s.start_time)
    sent = json.loads(second.attributes["gen_ai.input.messages"])
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
    # grouped as sent: one assistant turn with both calls, then one message per result
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [(p["type"], p["id"]) for p in sent[1]["parts"]] == [
        ("tool_call", "c1"),
        ("tool_call", "c2"),
    ]
    responses = [p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"]
    assert [(p["id"], p["name"]) for p in responses] == [("c1", "weather"), ("c2", "flights")]
    assert "LookupFailed: no flights to Oslo" in responses[1]["response"]  # fed back
    assert json.loads(first.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You plan trips."}
    ]
    tools = json.loads(first.attributes["gen_ai.tool.definitions"])
    assert [t["name"] for t in tools] == ["weather", "flights"]
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"


async def test_tool_definitions_without_content_capture_are_names_only(
    captured_spans: CapturedSpans,
) -> None:
    agent = agent_with([first_turn, second_turn])
    agent.runner = TracingRunner(NativeRunner(), capture_content=False)
    await run(agent, "run")
    chat = captured_spans.by_name("chat scripted-1")[0]
    assert json.loads(chat.attributes["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "weather"},
        {"type": "function", "name": "flights"},
    ]
    assert "gen_ai.input.messages" not in chat.attributes
    assert "gen_ai.system_instructions" not in chat.attributes


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_tool_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with([first_turn, second_turn]), mode)
    assert_tool_failed_and_run_recovered(captured_spans)


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with([first_turn, second_turn]), mode)
    assert_user_spans_nest(captured_spans, in_start_order(captured_spans, "chat scripted-1")[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(ConnectionError):
        await run(agent_with([first_turn, broken_turn]), mode)
    assert_model_call_failed_in_its_step(
        captured_spans,
        in_start_order(captured_spans, "chat scripted-1"),
        in_start_order(captured_spans, "agent_step planner"),
    )


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with([first_turn, second_turn]), mode)
    assert final_output(captured_spans) == "Sunny; no flights."
