"""Trace fidelity for LangGraph, asserted on spans only (the matrix of tests/test_fidelity.py).

The shared scenario, per mode: a hand-built graph whose model node retries on a
connection error (``RetryPolicy``) and whose ``ToolNode`` feeds tool errors back.
The model calls two tools, one of which fails; a user span opens inside a tool
and another inside the model call; the next model request fails once and is
retried; the retry answers. A sub-agent (a compiled graph used as a node) and a
run with OpenInference's LangChain instrumentor active complete the matrix.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import RetryPolicy
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.fidelity_helpers import (
    MODES,
    LookupFailed,
    assert_model_call_failed_in_its_step,
    assert_tool_failed_and_run_recovered,
    assert_user_spans_nest,
    final_output,
    in_start_order,
    one,
    parent_of,
)
from tests.tracing_helpers import OpenSpanTracker, assert_nothing_left_open, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.langgraph import LangGraphRunner
from runnertrace.runners.langgraph.testing import ScriptedChatModel
from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A

CHAT = "chat scripted"
# The user's own tracer, on the same provider as ours; set per test by the fixture.
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool
def weather(city: str) -> str:
    """Look up the weather."""
    # a sync tool: LangChain runs it on a worker thread, in a copy of the context
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@tool
async def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def first_turn(messages: list[BaseMessage]) -> AIMessage:
    with user["tracer"].start_as_current_span("http.request model"):
        return AIMessage(
            content="",
            tool_calls=[
                {"name": "weather", "args": {"city": "Oslo"}, "id": "c1"},
                {"name": "flights", "args": {"city": "Oslo"}, "id": "c2"},
            ],
        )


ANSWER = AIMessage(content="Sunny; no flights.")


def planner(turns: list[Any], *, name: str = "planner", retries: int = 2) -> Any:
    model = ScriptedChatModel(responses=turns, temperature=0.2, max_tokens=256)
    bound = model.bind_tools([weather, flights])

    async def agent(state: MessagesState) -> dict[str, Any]:
        reply = await bound.ainvoke([SystemMessage("You plan trips."), *state["messages"]])
        return {"messages": [reply]}

    retry = RetryPolicy(
        max_attempts=retries, initial_interval=0.0, jitter=False, retry_on=ConnectionError
    )
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent, retry_policy=retry)
    graph.add_node("tools", ToolNode([weather, flights], handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(name=name)


SCENARIO = [first_turn, ConnectionError("model endpoint reset the connection"), ANSWER]


async def run(graph: Any, mode: str, name: str = "planner", capture: bool = True) -> None:
    runner = TracingRunner(LangGraphRunner(), capture_content=capture)
    agent = Agent(name, runner, graph)
    requests = [AgentRequestText(prompt="Trip to Oslo?")]
    if mode == "run":
        await runner.run(agent, Session("s1"), requests)
    else:
        async for _ in runner.stream(agent, Session("s1"), requests):
            pass


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, CHAT)


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(SCENARIO), mode)
    first, failed, last = chats(captured_spans)
    for chat in (failed, last):  # the retried request was sent the same messages
        sent = json.loads(chat.attributes["gen_ai.input.messages"])
        assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
        asked = [p for p in sent[1]["parts"] if p["type"] == "tool_call"]
        assert [(p["id"], p["name"], p["arguments"]) for p in asked] == [
            ("c1", "weather", {"city": "Oslo"}),
            ("c2", "flights", {"city": "Oslo"}),
        ]
        responses = [p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"]
        assert [(p["id"], p["name"]) for p in responses] == [("c1", "weather"), ("c2", "flights")]
        assert responses[0]["response"] == "sunny in Oslo"
        assert "LookupFailed" in responses[1]["response"]  # the error, fed back
    # system instructions as text (taken from the SystemMessage), not in the messages
    assert json.loads(first.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You plan trips."}
    ]
    assert all(m["role"] != "system" for m in json.loads(first.attributes["gen_ai.input.messages"]))
    assert first.attributes["gen_ai.request.temperature"] == 0.2
    assert first.attributes["gen_ai.request.max_tokens"] == 256
    tools = json.loads(first.attributes["gen_ai.tool.definitions"])
    assert [t["name"] for t in tools] == ["weather", "flights"]
    assert tools[0]["description"] == "Look up the weather."
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"


async def test_without_content_capture_a_chat_span_keeps_parameters_and_tool_names(
    captured_spans: CapturedSpans,
) -> None:
    await run(planner(SCENARIO), "stream", capture=False)
    first = chats(captured_spans)[0]
    assert json.loads(first.attributes["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "weather"},
        {"type": "function", "name": "flights"},
    ]
    assert first.attributes["gen_ai.request.temperature"] == 0.2
    assert "gen_ai.input.messages" not in first.attributes
    assert "gen_ai.system_instructions" not in first.attributes


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_tool_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(SCENARIO), mode)
    _, ok = assert_tool_failed_and_run_recovered(captured_spans, message=None)
    assert ok.attributes[A.TOOL_CALL_ID] == "c1"


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(SCENARIO), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_retried_model_call_is_its_own_error_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(SCENARIO), mode)
    first, failed, retried = chats(captured_spans)
    assert [c.status.status_code for c in (first, failed, retried)] == [
        StatusCode.UNSET,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert failed.attributes["error.type"] == "ConnectionError"
    assert "runnertrace.incomplete" not in failed.attributes
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert "reset the connection" in event.attributes["exception.message"]
    # ended when it failed, before the retry was sent
    assert failed.end_time is not None and retried.start_time is not None
    assert failed.end_time <= retried.start_time
    # each attempt sits in the step attempt that held it
    attempt, retry = parent_of(captured_spans, failed), parent_of(captured_spans, retried)
    assert attempt.name == retry.name == "agent_step agent"
    assert attempt.context.span_id != retry.context.span_id
    # the attempt that failed is ERROR, as in every runner; the retry is not
    assert [attempt.status.status_code, retry.status.status_code] == [
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert attempt.attributes["error.type"] == "ConnectionError"
    assert attempt.end_time is not None and attempt.end_time <= retry.start_time


@pytest.mark.parametrize("mode", MODES)
async def test_a_model_call_that_fails_the_run_is_an_error_on_its_chat_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(ConnectionError):
        await run(planner(SCENARIO, retries=1), mode)
    steps = in_start_order(captured_spans, "agent_step agent")
    assert_model_call_failed_in_its_step(captured_spans, chats(captured_spans), steps)
    run_span = one(captured_spans, "invoke_agent planner")
    assert run_span.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(SCENARIO), mode)
    assert final_output(captured_spans) == "Sunny; no flights."


def outer_graph() -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("delegate", planner(SCENARIO, name="trips"))
    graph.add_edge(START, "delegate")
    graph.add_edge("delegate", END)
    return graph.compile(name="desk")


@pytest.mark.parametrize("mode", MODES)
async def test_a_sub_agent_is_a_handoff_and_its_spans_carry_its_name(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(outer_graph(), mode, name="desk")
    (delegate,) = captured_spans.by_name("agent_step delegate")
    assert delegate.attributes[A.AGENT_NAME] == "desk"
    inner = sorted(
        [s for s in captured_spans.spans if s.name.startswith("agent_step delegate/")],
        key=lambda s: s.start_time or 0,
    )
    assert [s.name for s in inner] == [
        "agent_step delegate/agent",
        "agent_step delegate/tools",
        "agent_step delegate/agent",  # the failed attempt
        "agent_step delegate/agent",  # its retry
    ]
    assert all(parent_of(captured_spans, s) == delegate for s in inner)
    assert inner[0].attributes[A.HANDOFF_SOURCE] == "desk"
    assert inner[0].attributes[A.HANDOFF_TARGET] == "trips"
    assert all(A.HANDOFF_SOURCE not in s.attributes for s in inner[1:])
    named = [*chats(captured_spans), *captured_spans.by_name("execute_tool weather"), *inner]
    assert {s.attributes[A.AGENT_NAME] for s in named} == {"trips"}


@pytest.mark.parametrize("mode", MODES)
async def test_each_call_is_one_span_with_openinference_active(
    mode: str, captured_spans: CapturedSpans
) -> None:
    instrumentation = pytest.importorskip("openinference.instrumentation.langchain")
    instrumentor = instrumentation.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        await run(planner(SCENARIO), mode)
        ours = [s.name for s in captured_spans.spans]
        theirs = [
            s
            for s in captured_spans.spans
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name.startswith("openinference")
        ]
        assert theirs == []
        assert ours.count(CHAT) == 3
        assert ours.count("execute_tool weather") == ours.count("execute_tool flights") == 1
        assert parent_of(captured_spans, one(captured_spans, "db.query weather")).name == (
            "execute_tool weather"
        )
        assert final_output(captured_spans) == "Sunny; no flights."
        # the instrumentor is live: an untraced run of the same graph is its to trace
        captured_spans.clear()
        await planner([ANSWER]).ainvoke({"messages": [("user", "hi")]})
        assert any(s.name == "ScriptedChatModel" for s in captured_spans.spans)
    finally:
        instrumentor.uninstrument()


# -- cancellation: no span left open, no context token detached in another context ------
def event_count() -> int:
    """How many events the scenario streams (counted untraced, at collection)."""
    user.setdefault("tracer", trace_api.NoOpTracer())

    async def count() -> int:
        agent = Agent("planner", LangGraphRunner(), planner(SCENARIO))
        stream = agent.runner.stream(agent, Session("s1"), [AgentRequestText(prompt="Trip?")])
        return len([e async for e in stream])

    return asyncio.run(count())


N_EVENTS = event_count()


@pytest.fixture
def tracker(captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture) -> OpenSpanTracker:
    return OpenSpanTracker.on(captured_spans, caplog)


def traced_stream(graph: Any) -> Any:
    agent = Agent("planner", TracingRunner(LangGraphRunner()), graph)
    return agent.runner.stream(agent, Session("s1"), [AgentRequestText(prompt="Trip?")])


@pytest.mark.parametrize("index", range(N_EVENTS))
async def test_closing_the_stream_at_every_index_leaves_nothing_open(
    index: int, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    stream = traced_stream(planner(SCENARIO))
    for _ in range(index + 1):
        await anext(stream)
    await stream.aclose()
    assert_nothing_left_open(tracker, caplog)


@pytest.mark.parametrize("index", range(0, N_EVENTS, 3))
async def test_a_cancelled_consumer_at_every_index_leaves_nothing_open(
    index: int, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    reached = asyncio.Event()

    async def consume() -> None:
        count = 0
        async for _ in traced_stream(planner(SCENARIO)):
            count += 1
            if count == index + 1:
                reached.set()
                await asyncio.sleep(10)  # cancelled here, mid-stream

    task = asyncio.create_task(consume())
    await reached.wait()
    await cancel_and_settle(task)
    assert_nothing_left_open(tracker, caplog)


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cancelled_inside_a_tool_leaves_nothing_open(
    mode: str, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    inside = asyncio.Event()

    @tool
    async def slow(city: str) -> str:
        """Wait forever."""
        inside.set()
        await asyncio.sleep(10)
        return city

    turn = AIMessage("", tool_calls=[{"name": "slow", "args": {"city": "Oslo"}, "id": "c9"}])
    graph = StateGraph(MessagesState)
    model = ScriptedChatModel(responses=[turn]).bind_tools([slow])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([slow]))
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tools")
    task = asyncio.create_task(run(graph.compile(name="planner"), mode))
    await inside.wait()
    await cancel_and_settle(task)
    assert_nothing_left_open(tracker, caplog)
