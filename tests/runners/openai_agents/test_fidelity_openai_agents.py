"""Trace fidelity for OpenAIRunner, asserted on spans only (the matrix of test_fidelity.py).

The shared scenario, in run and stream mode: a planner, whose instructions are a
function, asks for two tools at once; one opens a user span, the other raises and
the SDK feeds the error back to the model (its default ``failure_error_function``).
The planner then hands off to a booker, which answers. The model is the SDK's own
``ScriptedModel``; its first turn opens an HTTP-like user span and takes a while.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "agents", reason="needs the openai-agents extra: pip install -e '.[dev,openai-agents]'"
)

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from agents import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    RetryPolicyContext,
    RunConfig,
    RunContextWrapper,
    ToolErrorFormatterArgs,
    function_tool,
)
from agents.testing import ModelStep, assistant_message, function_call
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
    run,
)

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.openai_agents import OpenAIRunner
from runnertrace.runners.openai_agents.testing import FakeModel
from runnertrace.testing import CapturedSpans

FIRST_TURN_SECONDS = 0.05
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, captured_spans: CapturedSpans) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@function_tool
async def weather(city: str) -> str:
    """Look up the weather."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@function_tool
async def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def planner_instructions(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
    return f"You plan trips as {agent.name}."


async def first_turn(call: Any) -> ModelStep:
    with user["tracer"].start_as_current_span("http.request model"):
        await asyncio.sleep(FIRST_TURN_SECONDS)  # the time to the first chunk
    return ModelStep(
        output=[
            function_call("weather", {"city": "Oslo"}, call_id="c1"),
            function_call("flights", {"city": "Oslo"}, call_id="c2"),
        ]
    )


HANDOFF = [function_call("transfer_to_booker", {}, call_id="h1")]
ANSWER = [assistant_message("Booked: sunny, no flights.")]


async def answer_turn(call: Any) -> list[Any]:
    await asyncio.sleep(FIRST_TURN_SECONDS)  # the time to the first chunk
    return ANSWER


def retry_connection_errors(context: RetryPolicyContext) -> bool:
    return isinstance(context.error, ConnectionError)


def agent_with(turns: list[Any], *, retry: bool = False, **runner: Any) -> CoreAgent:
    model = FakeModel(turns)
    booker = Agent(name="booker", model=model, instructions="You book trips.")
    planner = Agent(
        name="planner",
        model=model,
        instructions=planner_instructions,
        tools=[weather, flights],
        handoffs=[booker],
        model_settings=ModelSettings(
            temperature=0.2,
            max_tokens=200,
            retry=ModelRetrySettings(max_retries=1, policy=retry_connection_errors)
            if retry
            else None,
        ),
    )
    return CoreAgent(
        "planner", TracingRunner(OpenAIRunner(**runner), capture_content=True), planner
    )


SCENARIO = [ModelStep.respond(first_turn), HANDOFF, ModelStep.respond(answer_turn)]


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, "chat fake-model")


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    first, second, third = chats(captured_spans)
    assert json.loads(first.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You plan trips as planner."}  # the function, resolved
    ]
    assert json.loads(third.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You book trips."}
    ]
    sent = json.loads(second.attributes["gen_ai.input.messages"])
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
    responses = [p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"]
    assert [(p["id"], p["name"]) for p in responses] == [("c1", "weather"), ("c2", "flights")]
    assert responses[0]["response"] == "sunny in Oslo"
    assert "error occurred" in responses[1]["response"]  # the SDK's message, fed back
    tools = json.loads(first.attributes["gen_ai.tool.definitions"])
    assert [t["name"] for t in tools] == ["weather", "flights", "transfer_to_booker"]
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"
    assert first.attributes["gen_ai.request.temperature"] == 0.2
    assert first.attributes["gen_ai.request.max_tokens"] == 200
    assert "gen_ai.request.temperature" not in third.attributes  # the booker sets none


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_error_fed_back_to_the_model_is_an_error_on_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    assert_tool_failed_and_run_recovered(captured_spans, message=None)


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_chat_span_starts_when_the_request_is_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    first, _, answer = chats(captured_spans)
    for chat in (first, answer):
        assert chat.end_time is not None and chat.start_time is not None
        assert (chat.end_time - chat.start_time) / 1e9 >= FIRST_TURN_SECONDS
    if mode == "stream":  # the answer's first chunk came after the model's wait
        assert answer.attributes["gen_ai.response.time_to_first_chunk"] >= FIRST_TURN_SECONDS


@pytest.mark.parametrize("mode", MODES)
async def test_spans_after_a_handoff_carry_the_new_agent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    first, second, third = chats(captured_spans)
    assert [c.attributes["gen_ai.agent.name"] for c in (first, second, third)] == [
        "planner",
        "planner",
        "booker",
    ]
    steps = in_start_order(captured_spans, "agent_step booker")
    (booker_step,) = steps
    assert booker_step.attributes["gen_ai.agent.name"] == "booker"
    assert booker_step.attributes["runnertrace.handoff.source"] == "planner"
    assert booker_step.attributes["runnertrace.handoff.target"] == "booker"
    transfer = one(captured_spans, "execute_tool transfer_to_booker")
    assert transfer.attributes["gen_ai.agent.name"] == "planner"
    assert parent_of(captured_spans, third) == booker_step


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span_in_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    broken = ModelStep.raise_error(ConnectionError("model endpoint reset the connection"))
    with pytest.raises(ConnectionError):
        await run(agent_with([ModelStep.respond(first_turn), broken]), mode)
    assert not trace_api.get_current_span().get_span_context().is_valid  # nothing left current
    steps = in_start_order(captured_spans, "agent_step planner")
    failed = assert_model_call_failed_in_its_step(captured_spans, chats(captured_spans), steps)
    assert len(steps) == 2
    # the tools of the first step ended before the failed call started
    assert all(
        (t.end_time or 0) <= (failed.start_time or 0)
        for t in captured_spans.spans
        if t.name.startswith("execute_tool")
    )


@pytest.mark.parametrize("mode", MODES)
async def test_each_attempt_the_sdk_retries_is_its_own_chat_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    broken = ModelStep.raise_error(ConnectionError("model endpoint reset the connection"))
    turns = [ModelStep.respond(first_turn), broken, HANDOFF, ModelStep.respond(answer_turn)]
    await run(agent_with(turns, retry=True), mode)
    spans = chats(captured_spans)
    assert [c.status.status_code for c in spans] == [StatusCode.UNSET, StatusCode.ERROR] + [
        StatusCode.UNSET
    ] * 2
    failed, retried = spans[1], spans[2]
    assert failed.attributes["error.type"] == "ConnectionError"
    assert (failed.end_time or 0) <= (retried.start_time or 0)  # ended when it failed
    assert parent_of(captured_spans, failed) == parent_of(captured_spans, retried)
    # the retry sends the same request, tool results included
    assert json.loads(retried.attributes["gen_ai.input.messages"]) == json.loads(
        failed.attributes["gen_ai.input.messages"]
    )
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    assert final_output(captured_spans) == "Booked: sunny, no flights."


# -- coexistence with the SDK's own tracing and OpenInference ------------------------------
@pytest.fixture
def openinference(captured_spans: CapturedSpans) -> Iterator[None]:
    """OpenInference's OpenAI Agents instrumentor, exporting to the same provider."""
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def counted(spans: CapturedSpans) -> dict[str, int]:
    """Model and tool calls by span kind: ours by type, OpenInference's by its kind."""
    kinds: dict[str, int] = {}
    for span in spans.spans:
        attrs = span.attributes or {}
        kind = attrs.get("runnertrace.span.type") or attrs.get("openinference.span.kind")
        key = {"message": "llm", "LLM": "llm", "tool": "tool", "TOOL": "tool"}.get(str(kind))
        if key:
            kinds[key] = kinds.get(key, 0) + 1
    return kinds


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("openinference")
async def test_with_openinference_each_call_appears_once(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(agent_with(SCENARIO), mode)
    assert counted(captured_spans) == {"llm": 3, "tool": 3}
    assert {s.instrumentation_scope.name for s in captured_spans.spans} <= {
        "runnertrace",
        "user-code",
    }


@pytest.mark.usefixtures("openinference")
async def test_keeping_the_sdks_tracing_is_a_choice_that_shows_each_call_twice(
    captured_spans: CapturedSpans,
) -> None:
    turns = [[function_call("weather", {"city": "Oslo"}, call_id="c1")], ANSWER]
    await run(agent_with(turns, keep_sdk_tracing=True), "run")
    assert counted(captured_spans) == {"llm": 2, "tool": 2}  # ours and OpenInference's


async def test_the_users_run_config_and_tool_error_formatter_still_apply(
    captured_spans: CapturedSpans,
) -> None:
    seen: list[str] = []

    def formatter(args: ToolErrorFormatterArgs[Any]) -> str:
        seen.append(type(args.error).__name__)
        return f"custom: {args.error}"

    config = RunConfig(tool_error_formatter=formatter)
    agent = agent_with(SCENARIO)
    agent.run_options = {"run_config": config}
    await run(agent, "run")
    assert seen == ["LookupFailed"]
    assert config.tool_error_formatter is formatter and config.tracing_disabled is False
    assert config.model_settings is None  # the user's object is never changed
    failed = one(captured_spans, "execute_tool flights")
    assert failed.attributes["gen_ai.tool.call.result"] == "custom: no flights to Oslo"
    assert failed.attributes["error.type"] == "LookupFailed"
