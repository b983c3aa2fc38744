"""``execute_tool`` spans time the tool, in every runner (CrewAI: test_tool_timing_crewai.py).

Per runner and mode, an agent whose model calls one tool (``weather``, which notes
when it really ran) and then answers; once with a model that finishes as soon as it
announced the call, once with one that keeps streaming for 0.3 s after. The tool's
span must bracket the tool's own run within SLACK_NS (5 ms, see tool_timing_helpers), sit
under the step that ran it,
and end before that step.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.fidelity_helpers import MODES, run
from tests.tool_timing_helpers import (
    CITIES,
    LINGERS,
    SLACK_NS,
    ToolClock,
    assert_tool_spans_time_the_tool,
)

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.testing import CapturedSpans

Build = Callable[[ToolClock, float], CoreAgent]


# -- native ------------------------------------------------------------------------------
def native(clock: ToolClock, linger: float) -> CoreAgent:
    from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm
    from runnertrace.runners.native.tools import tool
    from runnertrace.runners.native.types import LlmResponse, StreamPart, ToolCall

    class LingeringLlm(ScriptedLlm):
        """Streams on for ``linger`` seconds after the tool call, before it finishes."""

        async def stream(self, request: Any) -> AsyncIterator[StreamPart]:
            async for part in super().stream(request):
                if isinstance(part, LlmResponse) and part.tool_calls:
                    await asyncio.sleep(linger)
                yield part

    @tool
    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    calls = [ToolCall(f"c{i}", "weather", {"city": city}) for i, city in enumerate(CITIES)]
    turns: list[Any] = [LlmResponse(content=list(calls)), "Sunny."]
    native_agent = Agent(LingeringLlm(turns=turns), tools=[weather], name="planner")
    return CoreAgent("planner", TracingRunner(NativeRunner(), capture_content=True), native_agent)


# -- pydantic_ai -------------------------------------------------------------------------
def pydantic_ai(clock: ToolClock, linger: float) -> CoreAgent:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from runnertrace.runners.pydantic_ai import PydanticAIRunner

    def asked(messages: list[ModelMessage]) -> bool:
        return any(
            getattr(part, "part_kind", "") == "tool-return" for m in messages for part in m.parts
        )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if asked(messages):
            return ModelResponse(parts=[TextPart("Sunny.")])
        return ModelResponse(
            parts=[
                ToolCallPart("weather", {"city": city}, tool_call_id=f"c{i}")
                for i, city in enumerate(CITIES)
            ]
        )

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if asked(messages):
            yield "Sunny."
            return
        for i, city in enumerate(CITIES):
            yield {i: DeltaToolCall("weather", tool_call_id=f"c{i}")}
            yield {i: DeltaToolCall(json_args=json.dumps({"city": city}))}
        await asyncio.sleep(linger)  # streams on after announcing the calls

    agent: Agent[None, str] = Agent(
        FunctionModel(respond, stream_function=stream, model_name="fake"), name="planner"
    )

    @agent.tool_plain
    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    return CoreAgent("planner", TracingRunner(PydanticAIRunner(), capture_content=True), agent)


# -- openai_agents -----------------------------------------------------------------------
def openai_agents(clock: ToolClock, linger: float) -> CoreAgent:
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from runnertrace.runners.openai_agents import OpenAIRunner

    class LingeringModel(ScriptedModel):
        """Streams on for ``linger`` seconds after the calls, before the response completes."""

        model = "fake-model"

        async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async for event in super().stream_response(*args, **kwargs):
                if event.type == "response.completed" and any(
                    getattr(item, "type", "") == "function_call" for item in event.response.output
                ):
                    await asyncio.sleep(linger)
                yield event

    @function_tool
    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    calls = [
        function_call("weather", {"city": city}, call_id=f"c{i}") for i, city in enumerate(CITIES)
    ]
    model = LingeringModel([calls, [assistant_message("Sunny.")]])
    agent = Agent(name="planner", model=model, tools=[weather])
    return CoreAgent("planner", TracingRunner(OpenAIRunner(), capture_content=True), agent)


# -- langgraph ---------------------------------------------------------------------------
def langgraph(clock: ToolClock, linger: float) -> CoreAgent:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from runnertrace.runners.langgraph import LangGraphRunner
    from runnertrace.runners.langgraph.testing import ScriptedChatModel

    @tool
    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    calls = [{"name": "weather", "args": {"city": c}, "id": f"c{i}"} for i, c in enumerate(CITIES)]
    model = ScriptedChatModel(
        responses=[AIMessage(content="", tool_calls=calls), AIMessage(content="Sunny.")],
        pause_after_tool_calls=linger,
    )
    bound = model.bind_tools([weather])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    compiled = graph.compile(name="planner")
    return CoreAgent("planner", TracingRunner(LangGraphRunner(), capture_content=True), compiled)


# -- maf ---------------------------------------------------------------------------------
def maf(clock: ToolClock, linger: float) -> CoreAgent:
    from agent_framework import Agent, tool

    from runnertrace.runners.maf import MAFRunner
    from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

    @tool
    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    calls = call(*[(f"c{i}", "weather", {"city": city}) for i, city in enumerate(CITIES)])
    client = ScriptedChatClient([calls, say("Sunny.")], pause_after_tool_calls=linger)
    agent = Agent(client, "You plan trips.", name="planner", tools=[weather])
    return CoreAgent("planner", TracingRunner(MAFRunner(), capture_content=True), agent)


# -- adk ---------------------------------------------------------------------------------
def adk(clock: ToolClock, linger: float) -> CoreAgent:
    from google.adk.agents import LlmAgent

    from runnertrace.runners.adk import GoogleADKRunner
    from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn, answer

    async def weather(city: str) -> str:
        """Look up the weather."""
        return await clock.arun(city)

    def review(callback_context: Any, llm_response: Any) -> None:
        """The agent's own look at each response, after our plugin announced its calls
        and before ADK runs them (ADK calls the model stream's pause after the tools)."""
        time.sleep(0.005)

    calls = Turn(calls=[("weather", {"city": city}, f"c{i}") for i, city in enumerate(CITIES)])
    model = ScriptedAdkLlm(script=[calls, answer("Sunny.")], pause_after_tool_calls=linger)
    agent = LlmAgent(
        name="planner",
        model=model,
        instruction="You plan trips.",
        tools=[weather],
        after_model_callback=review,
    )
    return CoreAgent("planner", TracingRunner(GoogleADKRunner(), capture_content=True), agent)


# -- smolagents --------------------------------------------------------------------------
def smolagents(clock: ToolClock, linger: float) -> CoreAgent:
    from smolagents import ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    from runnertrace.runners.smolagents import SmolagentsRunner
    from runnertrace.runners.smolagents.testing import ScriptedModel, calls

    @tool
    def weather(city: str) -> str:
        """Look up the weather.

        Args:
            city: The city to look up.
        """
        return clock.run(city)

    asked = calls(*[("weather", {"city": city}) for city in CITIES])
    answer = calls(("final_answer", {"answer": "Sunny."}))
    model = ScriptedModel([asked, answer], pause_after_tool_calls=linger)
    agent = ToolCallingAgent(
        tools=[weather], model=model, name="planner", verbosity_level=LogLevel.OFF
    )
    return CoreAgent("planner", TracingRunner(SmolagentsRunner(), capture_content=True), agent)


CASES: dict[str, tuple[Build, str]] = {
    # runner: (agent builder, the step whose span holds the tool span)
    "native": (native, "planner"),
    "pydantic_ai": (pydantic_ai, "planner"),
    "openai_agents": (openai_agents, "planner"),
    "langgraph": (langgraph, "tools"),
    "maf": (maf, "planner"),
    "adk": (adk, "planner"),
    "smolagents": (smolagents, "planner"),
}


@pytest.mark.parametrize("linger", LINGERS, ids=["prompt", "lingering"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("runner", list(CASES))
async def test_execute_tool_spans_time_the_tool(
    runner: str, mode: str, linger: float, captured_spans: CapturedSpans
) -> None:
    build, step = CASES[runner]

    async def scenario(clock: ToolClock) -> None:
        await run(build(clock, linger), mode)

    await assert_tool_spans_time_the_tool(captured_spans, scenario, step=step)


@pytest.mark.parametrize("runner", list(CASES))
async def test_a_slow_stream_consumer_does_not_move_the_tool_spans(
    runner: str, captured_spans: CapturedSpans
) -> None:
    """A consumer that takes 2 ms over each event: where a framework runs on ahead of
    its stream's reader (OpenAI Agents), the tool ran before its events were read."""
    build, step = CASES[runner]

    async def scenario(clock: ToolClock) -> None:
        agent = build(clock, 0.0)
        requests = [AgentRequestText(prompt="Trip to Oslo?")]
        async for _ in agent.runner.stream(agent, Session("s1"), requests):
            await asyncio.sleep(SLOW_READ_SECONDS)

    await assert_tool_spans_time_the_tool(captured_spans, scenario, step=step)


SLOW_READ_SECONDS = 0.002


# -- the tracer, under any runner ----------------------------------------------------------
class ScopedRunner:
    """A runner of our own making on the builder: it announces a call, waits, and only
    then runs the tool in the builder's tool scope (a user span opens inside)."""

    framework = "scoped"

    def __init__(self, clock: ToolClock, captured: CapturedSpans, wait: float) -> None:
        self.clock, self.captured, self.wait = clock, captured, wait

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        from runnertrace.core.models import AgentReplyText
        from runnertrace.core.observer import claim_observer
        from runnertrace.runners._kit.builder import EventBuilder

        with claim_observer() as observer:
            builder = EventBuilder(observer)
            builder.step_start("plan", 0)
            message = builder.message_start(model="fake")
            builder.tool_call('{"city": "Oslo"}', tool_call_id="c1", name="weather", index=0)
            await asyncio.sleep(self.wait)  # the model streams on
            builder.message_end(message, finish_reason="tool_calls")
            with builder.tool_scope("c1"):
                tracer = self.captured.provider.get_tracer("user-code")
                with tracer.start_as_current_span("db.query weather"):
                    content = await self.clock.arun("Oslo")
            builder.tool_result("c1", content)
            builder.step_end("plan", 0)
        return AgentReplyText(text="Sunny.", prompt="go")


async def test_a_tool_span_opens_at_its_scope_and_what_runs_there_nests_under_it(
    captured_spans: CapturedSpans,
) -> None:
    from tests.tracing_helpers import ForeignAgent, ForeignSession

    clock = ToolClock()
    runner = TracingRunner(ScopedRunner(clock, captured_spans, wait=0.05), capture_content=True)
    await runner.run(ForeignAgent(), ForeignSession(), [])
    (tool_span,) = captured_spans.by_name("execute_tool weather")
    entry, exit_ = clock.runs["Oslo"]
    assert tool_span.start_time is not None and tool_span.end_time is not None
    # Within the slack of the other timing tests, a tenth of the 50 ms the model streamed
    # on after announcing the call: a span opened at the announcement still fails.
    assert 0 <= entry - tool_span.start_time <= SLACK_NS
    assert 0 <= tool_span.end_time - exit_ <= SLACK_NS
    (user_span,) = captured_spans.by_name("db.query weather")
    assert user_span.parent is not None and user_span.parent.span_id == tool_span.context.span_id
    (chat,) = captured_spans.by_name("chat fake")
    assert chat.end_time is not None and chat.end_time <= tool_span.start_time


async def test_a_stream_without_tool_scopes_keeps_the_span_from_the_announcement(
    captured_spans: CapturedSpans,
) -> None:
    """A foreign runner's stream never says when a tool ran: its span starts when the
    call was announced, in the step that announced it, and ends at the result."""
    from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

    runner = TracingRunner(ForeignRunner(), capture_content=True)
    await runner.run(ForeignAgent(), ForeignSession(), [])
    (tool_span,) = captured_spans.by_name("execute_tool lookup")
    chat = min(captured_spans.by_name("chat fake-model"), key=lambda s: s.start_time or 0)
    assert chat.start_time is not None and chat.end_time is not None
    assert tool_span.start_time is not None
    assert chat.start_time <= tool_span.start_time <= chat.end_time  # announced in the message
    assert tool_span.parent is not None
    (step,) = captured_spans.by_name("agent_step plan")
    assert tool_span.parent.span_id == step.context.span_id
    assert (tool_span.attributes or {})["gen_ai.tool.call.arguments"] == '{"q": "x"}'


async def test_a_result_that_says_when_the_tool_ran_sets_the_span_times(
    captured_spans: CapturedSpans,
) -> None:
    """A stream relayed behind its run reports the tool's own start and end with the
    result (``started_at``/``ended_at``); the span takes them, not the reading times."""
    import time

    from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

    from runnertrace.core import events as ev

    now = time.time_ns()
    ran = (now + 2_000_000, now + 7_000_000)  # read long before it "happened": unmistakable
    events = [
        ev.StepStart(step_name="plan", step_index=0),
        ev.MessageStart(message_id="m1", model="fake-model"),
        ev.ToolCallStart(tool_call_id="c1", tool_name="lookup", parent_message_id="m1"),
        ev.ToolCallEnd(tool_call_id="c1"),
        ev.MessageEnd(message_id="m1", finish_reason="tool_calls"),
        ev.ToolCallResult(tool_call_id="c1", content="ok", started_at=ran[0], ended_at=ran[1]),
        ev.StepEnd(step_name="plan", step_index=0),
    ]
    await TracingRunner(ForeignRunner(events)).run(ForeignAgent(), ForeignSession(), [])
    (tool_span,) = captured_spans.by_name("execute_tool lookup")
    assert (tool_span.start_time, tool_span.end_time) == ran
    assert ev.parse_event(events[5].model_dump_json()) == events[5]  # the fields stream
