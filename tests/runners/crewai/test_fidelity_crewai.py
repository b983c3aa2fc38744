"""Trace fidelity for CrewAI, asserted on spans only (the matrix of tests/test_fidelity.py).

The shared scenario, per mode: a ReAct agent (CrewAI drives a model without
function calling through ``Action:`` text) asks for ``weather`` (a user span
opens inside the tool; another inside the model call), then for ``flights``,
which fails and is fed back (CrewAI tries a failing tool three times: one call,
one span); the next model request fails, CrewAI retries the agent's execution,
and the retry answers. A run that the model failure ends, and a run with
OpenInference's CrewAI instrumentor active, complete the matrix. CrewAI has no
sub-agent in a one-agent crew (delegation needs coworkers), so that row is not
here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
pytest.importorskip("crewai", reason="the crewai extra lives in its own venv (.ci/extra-crewai)")

# CrewAI warns about its own deprecated fields on every crew it builds.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from crewai import Agent as CrewAgent  # noqa: E402
from crewai.tools import tool  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from tests.fidelity_helpers import MODES, LookupFailed, one, parent_of  # noqa: E402
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core import Session  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.runners.crewai import CrewAIRunner  # noqa: E402
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final  # noqa: E402
from runnertrace.testing import CapturedSpans  # noqa: E402
from runnertrace.tracing import attributes as A  # noqa: E402

CHAT = "chat scripted"
ANSWER = "Sunny; no flights."
# The user's own tracer, on the same provider as ours; set per test by the fixture.
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """CrewAI writes under $HOME and phones home unless told not to."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool("weather")
def weather(city: str) -> str:
    """Look up the weather."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@tool("flights")
def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def first_turn(messages: Any) -> str:
    with user["tracer"].start_as_current_span("http.request model"):
        return action("weather", city="Oslo")


def scenario() -> list[Any]:
    return [
        first_turn,
        action("flights", city="Oslo"),
        ConnectionError("model endpoint reset the connection"),
        final(ANSWER),  # CrewAI re-runs the agent's execution: the retry answers at once
    ]


def planner(turns: list[Any], *, retries: int = 2) -> CrewAgent:
    model = ScriptedLLM(turns, temperature=0.2, max_tokens=256)
    return CrewAgent(
        role="planner",
        goal="Plan trips.",
        backstory="You plan trips.",
        llm=model,
        tools=[weather, flights],
        max_retry_limit=retries,
    )


async def run(native: CrewAgent, mode: str, capture: bool = True) -> None:
    runner = TracingRunner(CrewAIRunner(), capture_content=capture)
    agent = Agent("planner", runner, native)
    requests = [AgentRequestText(prompt="Trip to Oslo?")]
    if mode == "run":
        await runner.run(agent, Session("s1"), requests)
    else:
        async for _ in runner.stream(agent, Session("s1"), requests):
            pass


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return sorted(spans.by_name(CHAT), key=lambda s: s.start_time or 0)


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(scenario()), mode)
    first, second, _failed, _retried = chats(captured_spans)
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["user"]
    assert "Trip to Oslo?" in sent[0]["parts"][0]["content"]
    # the second request carries the first answer and the tool's observation
    later = json.loads(second.attributes["gen_ai.input.messages"])
    assert any("sunny in Oslo" in p["content"] for m in later for p in m["parts"])
    # system instructions as text, not in the messages
    (instructions,) = json.loads(first.attributes["gen_ai.system_instructions"])
    assert instructions["type"] == "text"
    assert "You plan trips." in instructions["content"]
    assert first.attributes["gen_ai.request.temperature"] == 0.2
    assert first.attributes["gen_ai.request.max_tokens"] == 256
    tools = json.loads(first.attributes["gen_ai.tool.definitions"])
    assert [t["name"] for t in tools] == ["weather", "flights"]
    assert tools[0]["description"] == "Look up the weather."
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"
    # what the model answered, with the tool call its ReAct text asked for
    output = json.loads(first.attributes["gen_ai.output.messages"])
    (call,) = [p for p in output[0]["parts"] if p["type"] == "tool_call"]
    assert (call["name"], call["arguments"]) == ("weather", {"city": "Oslo"})
    assert call["id"] == one(captured_spans, "execute_tool weather").attributes[A.TOOL_CALL_ID]
    assert first.attributes["gen_ai.usage.output_tokens"] > 0


async def test_without_content_capture_a_chat_span_keeps_parameters_and_tool_names(
    captured_spans: CapturedSpans,
) -> None:
    await run(planner(scenario()), "stream", capture=False)
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
    await run(planner(scenario()), mode)
    failed = one(captured_spans, "execute_tool flights")  # three attempts, one call
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "LookupFailed"
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "LookupFailed"
    assert "raise LookupFailed" in event.attributes["exception.stacktrace"]
    ok = one(captured_spans, "execute_tool weather")
    assert ok.status.status_code is StatusCode.UNSET
    assert json.loads(ok.attributes[A.TOOL_ARGUMENTS]) == {"city": "Oslo"}
    assert ok.attributes[A.TOOL_RESULT] == "sunny in Oslo"
    run_span = one(captured_spans, "invoke_agent planner")
    assert run_span.status.status_code is StatusCode.UNSET  # the run recovered


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(scenario()), mode)
    db = one(captured_spans, "db.query weather")
    assert parent_of(captured_spans, db).name == "execute_tool weather"
    http = one(captured_spans, "http.request model")
    assert parent_of(captured_spans, http) == chats(captured_spans)[0]


@pytest.mark.parametrize("mode", MODES)
async def test_a_retried_model_call_is_its_own_error_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(scenario()), mode)
    _first, _second, failed, retried = chats(captured_spans)
    assert failed.status.status_code is StatusCode.ERROR
    assert retried.status.status_code is StatusCode.UNSET
    assert failed.attributes["error.type"] == "ConnectionError"
    assert "runnertrace.incomplete" not in failed.attributes
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert "reset the connection" in event.attributes["exception.message"]
    assert failed.end_time is not None and retried.start_time is not None
    assert failed.end_time <= retried.start_time
    # each attempt sits in the agent execution that held it, under the one task
    attempt, retry = parent_of(captured_spans, failed), parent_of(captured_spans, retried)
    assert attempt.name == retry.name == "agent_step planner"
    assert attempt.context.span_id != retry.context.span_id
    assert attempt.end_time is not None and attempt.end_time <= retry.start_time
    assert parent_of(captured_spans, attempt) == parent_of(captured_spans, retry)
    assert parent_of(captured_spans, attempt).name == "agent_step task"


@pytest.mark.parametrize("mode", MODES)
async def test_a_model_call_that_fails_the_run_is_an_error_on_its_chat_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(ConnectionError):
        await run(planner(scenario(), retries=0), mode)
    first, second, failed = chats(captured_spans)
    assert [s.status.status_code for s in (first, second, failed)] == [
        StatusCode.UNSET,
        StatusCode.UNSET,
        StatusCode.ERROR,
    ]
    assert failed.attributes["error.type"] == "ConnectionError"
    assert parent_of(captured_spans, failed).name == "agent_step planner"
    run_span = one(captured_spans, "invoke_agent planner")
    assert run_span.status.status_code is StatusCode.ERROR
    assert run_span.attributes["error.type"] == "ConnectionError"


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(planner(scenario()), mode)
    output = json.loads(
        one(captured_spans, "invoke_agent planner").attributes["gen_ai.output.messages"]
    )
    # run mode records the reply (the final answer); stream mode, the last message,
    # whose ReAct text ends with it
    assert output[0]["parts"][0]["content"].endswith(ANSWER)


@pytest.mark.parametrize("mode", MODES)
async def test_each_call_is_one_span_with_openinference_active(
    mode: str, captured_spans: CapturedSpans
) -> None:
    instrumentation = pytest.importorskip("openinference.instrumentation.crewai")
    instrumentor = instrumentation.CrewAIInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        await run(planner(scenario()), mode)
        names = [s.name for s in captured_spans.spans]
        theirs = [
            s.name
            for s in captured_spans.spans
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name.startswith("openinference")
            # the kickoff span of a stream (CrewAI starts that thread itself) is a
            # crew-level span, not a model or tool call
            and not (mode == "stream" and s.name.endswith(".kickoff"))
        ]
        assert theirs == []
        assert names.count(CHAT) == 4
        assert names.count("execute_tool weather") == names.count("execute_tool flights") == 1
        db = one(captured_spans, "db.query weather")
        assert parent_of(captured_spans, db).name == "execute_tool weather"
        # the instrumentor is live: an untraced run of the same agent is its to trace
        captured_spans.clear()
        untraced = Agent("planner", CrewAIRunner(), planner([final(ANSWER)]))
        await untraced.runner.run(untraced, Session("s2"), [AgentRequestText(prompt="Hi")])
        assert any(
            s.instrumentation_scope is not None
            and s.instrumentation_scope.name.startswith("openinference")
            for s in captured_spans.spans
        )
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize("mode", MODES)
async def test_tracing_does_not_depend_on_otel_sdk_disabled(
    mode: str, captured_spans: CapturedSpans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CrewAI's telemetry is off through its own switch; OTEL_SDK_DISABLED stays unset,
    and our spans are all there."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    await run(planner(scenario()), mode)
    assert os.environ.get("OTEL_SDK_DISABLED") is None
    assert len(chats(captured_spans)) == 4


# -- cancellation: no span left open, no context token detached in another context ------
def assert_clean(tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture) -> None:
    assert tracker.started > 0
    assert tracker.open == {}
    bad = [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert not bad, bad


@pytest.fixture
def tracker(captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture) -> OpenSpanTracker:
    caplog.set_level(logging.DEBUG)
    tracking = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracking)
    return tracking


@pytest.mark.parametrize("index", [0, 5, 20])
async def test_a_cancelled_consumer_leaves_nothing_open(
    index: int, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    reached = asyncio.Event()
    agent = Agent("planner", TracingRunner(CrewAIRunner()), planner(scenario()))

    async def consume() -> None:
        count = 0
        stream = agent.runner.stream(agent, Session("s1"), [AgentRequestText(prompt="Trip?")])
        async for _ in stream:
            count += 1
            if count == index + 1:
                reached.set()
                await asyncio.sleep(10)  # cancelled here, mid-stream

    task = asyncio.create_task(consume())
    await reached.wait()
    await cancel_and_settle(task)
    assert_clean(tracker, caplog)
