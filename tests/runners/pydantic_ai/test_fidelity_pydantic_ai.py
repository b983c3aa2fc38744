"""Trace fidelity for Pydantic AI, on spans only (the matrix of tests/test_fidelity.py).

The shared scenario, per mode: the model (Pydantic AI's offline ``FunctionModel``)
calls two tools; one raises ``ModelRetry``, which Pydantic AI feeds back as a retry
prompt; a user span opens inside a tool and another inside the model call; the
second model call answers. Pydantic AI does not retry a model call that raised,
so a failing model call ends the run: its chat span fails in the step that held
it. A sub-agent run inside a tool nests under that tool. Pydantic AI's own
instrumentation (with a custom ``Instrumentation`` id, and with OpenInference's
span processor) never adds a second copy of a call.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "pydantic_ai", reason="needs the pydantic-ai extra: pip install -e '.[dev,pydantic-ai]'"
)

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import aclosing
from typing import Any

from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from tests.fidelity_helpers import (
    MODES,
    LookupFailed,
    assert_model_call_failed_in_its_step,
    assert_tool_failed_and_run_recovered,
    assert_user_spans_nest,
    attr,
    final_output,
    in_start_order,
    one,
    parent_of,
    run,
)

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.pydantic_ai import PydanticAIRunner
from runnertrace.runners.pydantic_ai.testing import function_model
from runnertrace.testing import CapturedSpans

CHAT = "chat planner-llm"
# The user's own tracer, on the same provider as ours (as with an app's global SDK
# provider); set per test by the fixture below.
user: dict[str, trace_api.Tracer] = {}

Turn = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


def first_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    with user["tracer"].start_as_current_span("http.request model"):
        return ModelResponse(
            parts=[
                ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="c1"),
                ToolCallPart("flights", {"city": "Oslo"}, tool_call_id="c2"),
            ]
        )


def second_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Sunny; no flights.")])


def broken_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ConnectionError("model endpoint reset the connection")


def scripted(turns: list[Turn]) -> FunctionModel:
    """A model answering with ``turns`` in order, in both modes (stream mode streams
    what the turn returns)."""
    pending = iter(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return next(pending)(messages, info)

    return function_model(respond, model_name="planner-llm")


def planner(turns: list[Turn], **kw: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        scripted(turns),
        name="planner",
        instructions="You plan trips.",
        model_settings={"temperature": 0.3, "max_tokens": 200},
        **kw,
    )

    @agent.instructions
    def today(ctx: RunContext[None]) -> str:  # a dynamic instruction: its text, never a repr
        return "Today is Tuesday."

    @agent.tool_plain
    async def weather(city: str) -> str:
        """Look up the weather."""
        with user["tracer"].start_as_current_span("db.query weather"):
            return f"sunny in {city}"

    @agent.tool_plain
    async def flights(city: str) -> str:
        """Look up flights."""
        raise ModelRetry(f"no flights to {city}")

    return agent


def core(native: Agent[Any, Any], name: str = "planner") -> CoreAgent:
    return CoreAgent(name, TracingRunner(PydanticAIRunner(), capture_content=True), native)


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, CHAT)


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, second_turn])), mode)
    first, second = chats(captured_spans)
    assert json.loads(attr(first, "gen_ai.system_instructions")) == [
        {"type": "text", "content": "You plan trips.\n\nToday is Tuesday."}
    ]
    assert attr(first, "gen_ai.request.temperature") == 0.3
    assert attr(first, "gen_ai.request.max_tokens") == 200
    tools = json.loads(attr(first, "gen_ai.tool.definitions"))
    assert [(t["name"], t["description"]) for t in tools] == [
        ("weather", "Look up the weather."),
        ("flights", "Look up flights."),
    ]
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"
    sent = json.loads(attr(second, "gen_ai.input.messages"))
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
    calls = [p for m in sent for p in m["parts"] if p["type"] == "tool_call"]
    assert [(p["id"], p["name"]) for p in calls] == [("c1", "weather"), ("c2", "flights")]
    responses = {p["id"]: p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"}
    assert responses["c1"]["result"] == "sunny in Oslo"
    assert responses["c2"]["response"] == "no flights to Oslo"  # the retry prompt, fed back
    for span in captured_spans.spans:  # no span shows a Python repr for instructions
        assert "<bound method" not in json.dumps(dict(span.attributes or {}))
        assert "<function" not in json.dumps(dict(span.attributes or {}))


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_fed_back_to_the_model_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, second_turn])), mode)
    failed, ok = assert_tool_failed_and_run_recovered(captured_spans, error="ModelRetry")
    assert json.loads(attr(failed, "gen_ai.tool.call.arguments")) == {"city": "Oslo"}
    assert attr(ok, "gen_ai.tool.call.result") == "sunny in Oslo"


@pytest.mark.parametrize("mode", MODES)
async def test_a_plain_exception_in_a_tool_fails_its_span_and_the_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    def ask_hotels(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("hotels", {"city": "Oslo"}, tool_call_id="h1")])

    native = planner([ask_hotels])

    @native.tool_plain
    def hotels(city: str) -> str:
        raise LookupFailed(f"no hotels in {city}")

    with pytest.raises(LookupFailed):
        await run(core(native), mode)
    failed = one(captured_spans, "execute_tool hotels")
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "LookupFailed"
    assert "raise LookupFailed" in str(
        next(e for e in failed.events if e.name == "exception").attributes["exception.stacktrace"]  # type: ignore[index]
    )
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, second_turn])), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span_in_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    # Pydantic AI does not retry a model request that raised: the run ends.
    with pytest.raises(ConnectionError):
        await run(core(planner([first_turn, broken_turn])), mode)
    steps = in_start_order(captured_spans, "agent_step planner")
    failed = assert_model_call_failed_in_its_step(captured_spans, chats(captured_spans), steps)
    # the failed request still shows what it was sent, the fed-back retry included
    assert "no flights to Oslo" in attr(failed, "gen_ai.input.messages")


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, second_turn])), mode)
    assert final_output(captured_spans) == "Sunny; no flights."


class Trip(BaseModel):
    city: str
    flights: int


@pytest.mark.parametrize("mode", MODES)
async def test_structured_output_is_the_answer_not_a_tool_call(
    mode: str, captured_spans: CapturedSpans
) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (output_tool,) = info.output_tools
        args = {"city": "Oslo", "flights": 0}
        return ModelResponse(parts=[ToolCallPart(output_tool.name, args, tool_call_id="o1")])

    await run(core(planner([first_turn, answer], output_type=Trip)), mode)
    tools = sorted(s.name for s in captured_spans.spans if s.name.startswith("execute_tool"))
    assert tools == ["execute_tool flights", "execute_tool weather"]
    last = chats(captured_spans)[-1]
    (message,) = json.loads(attr(last, "gen_ai.output.messages"))
    assert [p["type"] for p in message["parts"]] == ["text"]
    assert Trip.model_validate_json(message["parts"][0]["content"]) == Trip(city="Oslo", flights=0)
    defined = [t["name"] for t in json.loads(attr(last, "gen_ai.tool.definitions"))]
    assert defined == ["weather", "flights"]
    run_output = json.loads(
        attr(one(captured_spans, "invoke_agent planner"), "gen_ai.output.messages")
    )
    assert Trip.model_validate_json(run_output[0]["parts"][0]["content"]).city == "Oslo"


@pytest.mark.parametrize("mode", MODES)
async def test_a_sub_agent_run_inside_a_tool_nests_under_it_with_its_own_name(
    mode: str, captured_spans: CapturedSpans
) -> None:
    expert = core(
        Agent(scripted([second_turn]), name="expert", instructions="You know Oslo."), "expert"
    )

    def delegate(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("ask_expert", {}, tool_call_id="x1")])

    native: Agent[None, Any] = Agent(scripted([delegate, second_turn]), name="planner")

    @native.tool_plain
    async def ask_expert() -> str:
        requests = [AgentRequestText(prompt="Flights to Oslo?")]
        return str(await expert.runner.run(expert, Session("inner"), requests))

    await run(core(native), mode)
    inner = one(captured_spans, "invoke_agent expert")
    assert parent_of(captured_spans, inner).name == "execute_tool ask_expert"
    (inner_chat,) = [s for s in chats(captured_spans) if attr(s, "gen_ai.agent.name") == "expert"]
    assert parent_of(captured_spans, parent_of(captured_spans, inner_chat)) == inner
    assert json.loads(attr(inner_chat, "gen_ai.system_instructions"))[0]["content"] == (
        "You know Oslo."
    )
    outer_chats = [s for s in chats(captured_spans) if attr(s, "gen_ai.agent.name") == "planner"]
    assert len(outer_chats) == 2


# -- Pydantic AI's own instrumentation: never a second copy of a call ------------------------------


@pytest.fixture
def framework_spans() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """Where Pydantic AI's own spans go, through OpenInference's span processor."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(OpenInferenceSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    Agent.instrument_all(False)
    provider.shutdown()


def assert_each_call_once(spans: CapturedSpans) -> None:
    names = sorted(s.name for s in spans.spans if not s.name.startswith(("http.", "db.")))
    assert names == [
        "agent_step planner",
        "agent_step planner",
        CHAT,
        CHAT,
        "execute_tool flights",
        "execute_tool weather",
        "invoke_agent planner",
    ]
    run_span = one(spans, "invoke_agent planner")
    per_chat = sum(attr(c, "gen_ai.usage.input_tokens") for c in chats(spans))
    assert attr(run_span, "gen_ai.aggregated_usage.input_tokens") == per_chat


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("capability_id", ["instrumentation", "my-otel"])
async def test_an_instrumentation_capability_adds_no_copies_in_traced_runs(
    mode: str,
    capability_id: str,
    captured_spans: CapturedSpans,
    framework_spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = framework_spans
    settings = InstrumentationSettings(tracer_provider=provider)
    capability = Instrumentation(settings=settings, id=capability_id)
    # untraced, Pydantic AI's spans are there (so the check below can fail)
    untraced = planner([first_turn, second_turn], capabilities=[capability])
    runner = PydanticAIRunner()
    await runner.run(
        CoreAgent("planner", runner, untraced), Session("u"), [AgentRequestText(prompt="x")]
    )
    assert any(s.name.startswith("chat") for s in exporter.get_finished_spans())
    exporter.clear()
    await run(core(planner([first_turn, second_turn], capabilities=[capability])), mode)
    assert exporter.get_finished_spans() == ()
    assert_each_call_once(captured_spans)


@pytest.mark.parametrize("mode", MODES)
async def test_openinference_over_instrument_all_adds_no_copies_in_traced_runs(
    mode: str,
    captured_spans: CapturedSpans,
    framework_spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = framework_spans
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    await run(core(planner([first_turn, second_turn])), mode)
    assert exporter.get_finished_spans() == ()
    assert_each_call_once(captured_spans)


async def test_a_consumer_stopping_at_any_event_leaves_no_span_open_or_context_attached(
    captured_spans: CapturedSpans,
) -> None:
    requests = [AgentRequestText(prompt="Trip to Oslo?")]
    agent = core(planner([first_turn, second_turn]))
    total = len([e async for e in agent.runner.stream(agent, Session("all"), requests)])
    assert total > 10
    for stop in range(total):
        captured_spans.clear()
        agent = core(planner([first_turn, second_turn]))
        async with aclosing(agent.runner.stream(agent, Session(f"s{stop}"), requests)) as events:
            seen = 0
            async for _ in events:
                seen += 1
                if seen > stop:
                    break
        assert trace_api.get_current_span() is trace_api.INVALID_SPAN
        assert asyncio.all_tasks() == {asyncio.current_task()}
        run_span = one(captured_spans, "invoke_agent planner")  # exported: it ended
        assert attr(run_span, "runnertrace.cancelled") is True
        assert all(s.end_time for s in captured_spans.spans)


@pytest.mark.parametrize("mode", MODES)
async def test_an_answer_rejected_by_an_output_validator_is_retried_with_the_prompt_shown(
    mode: str, captured_spans: CapturedSpans
) -> None:
    def vague(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Maybe.")])

    native = planner([vague, second_turn])

    @native.output_validator
    def definite(output: str) -> str:
        if output == "Maybe.":
            raise ModelRetry("answer definitely")
        return output

    await run(core(native), mode)
    rejected, retried = chats(captured_spans)
    assert rejected.status.status_code is StatusCode.UNSET  # the model call itself worked
    assert "answer definitely" in attr(retried, "gen_ai.input.messages")
    steps = sorted(captured_spans.by_name("agent_step planner"), key=lambda s: s.start_time or 0)
    assert [parent_of(captured_spans, c) for c in (rejected, retried)] == steps
    output = json.loads(attr(one(captured_spans, "invoke_agent planner"), "gen_ai.output.messages"))
    assert output[0]["parts"][0]["content"] == "Sunny; no flights."
