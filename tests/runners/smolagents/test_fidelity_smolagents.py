"""Trace fidelity for smolagents, on spans only (the matrix of tests/test_fidelity.py).

The shared scenario, per mode: the model (``ScriptedModel``, a real smolagents
``Model``) asks for two tools in one reply, which smolagents runs in parallel
threads; one raises, and smolagents feeds the error back to the model; a user span
opens inside a tool and another inside the model call; the second model call
answers with ``final_answer``. smolagents does not retry a model call that raised:
the run ends, and the chat span fails in the step that held it. A ``CodeAgent``'s
code runs as its ``python_interpreter`` tool call and is on its step span.
OpenInference's smolagents instrumentor never adds a second copy of a call.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "smolagents", reason="needs the smolagents extra: pip install -e '.[dev,smolagents]'"
)

import json
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import ChatMessage
from smolagents.monitoring import LogLevel
from smolagents.utils import AgentGenerationError
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
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.smolagents import SmolagentsRunner
from runnertrace.runners.smolagents.testing import ScriptedModel, Turn, calls, code
from runnertrace.testing import CapturedSpans

CHAT = "chat planner-llm"
STEP = "agent_step planner"
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool
def weather(city: str) -> str:
    """Look up the weather.

    Args:
        city: The city to look up.
    """
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@tool
def flights(city: str) -> str:
    """Look up flights.

    Args:
        city: The city to fly to.
    """
    raise LookupFailed(f"no flights to {city}")


def first_turn(messages: list[ChatMessage]) -> ChatMessage:
    with user["tracer"].start_as_current_span("http.request model"):
        return calls(("weather", {"city": "Oslo"}), ("flights", {"city": "Oslo"}), prefix="c")


ANSWER = calls(("final_answer", {"answer": "Sunny; no flights."}), prefix="a")


def broken_turn(messages: list[ChatMessage]) -> ChatMessage:
    raise ConnectionError("model endpoint reset the connection")


def planner(turns: list[Turn]) -> ToolCallingAgent:
    model = ScriptedModel(turns, model_id="planner-llm", temperature=0.3, max_tokens=200)
    return ToolCallingAgent(
        tools=[weather, flights],
        model=model,
        name="planner",
        instructions="You plan trips.",
        verbosity_level=LogLevel.OFF,
    )


def core(native: Any, name: str = "planner") -> CoreAgent:
    return CoreAgent(name, TracingRunner(SmolagentsRunner(), capture_content=True), native)


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, CHAT)


def steps(spans: CapturedSpans, name: str = STEP) -> list[ReadableSpan]:
    return in_start_order(spans, name)


@pytest.mark.parametrize("mode", MODES)
async def test_the_provider_is_on_chat_and_run_spans(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    spans = [*chats(captured_spans), one(captured_spans, "invoke_agent planner")]
    assert len(spans) == 3
    assert [attr(s, "gen_ai.provider.name") for s in spans] == ["runnertrace"] * 3


def test_the_provider_of_smolagents_model_classes() -> None:
    from smolagents import LiteLLMModel, OpenAIServerModel

    from runnertrace.runners.smolagents.request import provider_of

    class OfflineLiteLLM(LiteLLMModel):  # type: ignore[misc]
        def create_client(self) -> None:  # litellm is not installed here; no call is made
            return None

    openai = OpenAIServerModel(model_id="gpt-x", api_base="http://127.0.0.1:9", api_key="k")
    assert provider_of(openai) == "openai"
    assert provider_of(OfflineLiteLLM(model_id="anthropic/claude-x")) == "anthropic"
    assert provider_of(OfflineLiteLLM(model_id="gpt-x")) is None  # LiteLLM guesses; we do not


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    first, second = chats(captured_spans)
    (instructions,) = json.loads(attr(first, "gen_ai.system_instructions"))
    assert "You plan trips." in instructions["content"]
    assert attr(first, "gen_ai.request.temperature") == 0.3
    assert attr(first, "gen_ai.request.max_tokens") == 200
    assert list(attr(first, "gen_ai.request.stop_sequences")) == ["Observation:", "Calling tools:"]
    tools = json.loads(attr(first, "gen_ai.tool.definitions"))
    assert [t["name"] for t in tools] == ["weather", "flights", "final_answer"]
    assert tools[0]["description"] == "Look up the weather."
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"
    sent = json.loads(attr(second, "gen_ai.input.messages"))
    assert sent[0]["role"] == "user"
    assert "Trip to Oslo?" in sent[0]["parts"][0]["content"]
    said = json.dumps(sent)
    assert "no flights to Oslo" in said  # the failed step's error, fed back
    for span in captured_spans.spans:  # no span shows a Python repr
        assert "<function" not in json.dumps(dict(span.attributes or {}))


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_fed_back_to_the_model_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    failed, ok = assert_tool_failed_and_run_recovered(captured_spans, error="LookupFailed")
    assert json.loads(attr(failed, "gen_ai.tool.call.arguments")) == {"city": "Oslo"}
    assert attr(ok, "gen_ai.tool.call.result") == "sunny in Oslo"
    assert attr(ok, "gen_ai.tool.call.id") == "c_1"
    first_step = steps(captured_spans)[0]
    assert parent_of(captured_spans, ok) == first_step == parent_of(captured_spans, failed)


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span_in_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(AgentGenerationError):
        await run(core(planner([first_turn, broken_turn])), mode)
    # the step that held the failed call is ERROR, as in every runner
    failed = assert_model_call_failed_in_its_step(
        captured_spans, chats(captured_spans), steps(captured_spans)
    )
    assert len(steps(captured_spans)) == 2
    assert "no flights to Oslo" in attr(failed, "gen_ai.input.messages")
    assert attr(steps(captured_spans)[1], "error.type") == "ConnectionError"
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    run_span = one(captured_spans, "invoke_agent planner")
    assert final_output(captured_spans) == "Sunny; no flights."
    # the answer is the last reply's text, not a tool of its own
    assert not captured_spans.by_name("execute_tool final_answer")
    assert run_span.attributes is not None
    assert run_span.attributes["gen_ai.aggregated_usage.input_tokens"] == 22


@pytest.mark.parametrize("mode", MODES)
async def test_a_code_agent_runs_its_code_as_a_tool_with_the_code_on_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    model = ScriptedModel(
        [code("report = weather(city='Oslo')\nprint(report)"), code("final_answer(report)")],
        model_id="coder-llm",
    )
    native = CodeAgent(tools=[weather], model=model, name="coder", verbosity_level=LogLevel.OFF)
    await run(core(native, "coder"), mode)
    first, second = steps(captured_spans, "agent_step coder")
    assert attr(first, "runnertrace.step.code") == "report = weather(city='Oslo')\nprint(report)"
    assert attr(second, "runnertrace.step.code") == "final_answer(report)"
    interpreter = sorted(
        captured_spans.by_name("execute_tool python_interpreter"), key=lambda s: s.start_time or 0
    )
    assert [parent_of(captured_spans, s) for s in interpreter] == [first, second]
    assert "sunny in Oslo" in attr(interpreter[0], "gen_ai.tool.call.result")
    db = one(captured_spans, "db.query weather")  # a tool the code called
    assert parent_of(captured_spans, db) == interpreter[0]
    run_span = one(captured_spans, "invoke_agent coder")
    assert run_span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("mode", MODES)
async def test_failing_code_is_an_error_on_its_interpreter_span_and_the_run_goes_on(
    mode: str, captured_spans: CapturedSpans
) -> None:
    model = ScriptedModel(
        [code("flights(city='Oslo')"), code("final_answer('no flights')")], model_id="coder-llm"
    )
    native = CodeAgent(tools=[flights], model=model, name="coder", verbosity_level=LogLevel.OFF)
    await run(core(native, "coder"), mode)
    failed, ok = sorted(
        captured_spans.by_name("execute_tool python_interpreter"), key=lambda s: s.start_time or 0
    )
    assert failed.status.status_code is StatusCode.ERROR
    (event,) = [e for e in failed.events if e.name == "exception"]
    assert event.attributes is not None
    assert "LookupFailed: no flights to Oslo" in str(event.attributes["exception.message"])
    assert ok.status.status_code is StatusCode.UNSET
    assert one(captured_spans, "invoke_agent coder").status.status_code is StatusCode.UNSET


# -- OpenInference's smolagents instrumentor: never a second copy of a call ---------------------


@pytest.fixture
def instrumentor_spans() -> Iterator[InMemorySpanExporter]:
    """The real OpenInference instrumentor, on a provider of its own."""
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


@pytest.mark.parametrize("mode", MODES)
async def test_with_openinference_active_each_call_appears_once(
    mode: str, captured_spans: CapturedSpans, instrumentor_spans: InMemorySpanExporter
) -> None:
    await run(core(planner([first_turn, ANSWER])), mode)
    names = sorted(s.name for s in captured_spans.spans if not s.name.startswith(("http.", "db.")))
    assert names == sorted(
        [
            "invoke_agent planner",
            STEP,
            STEP,
            CHAT,
            CHAT,
            "execute_tool weather",
            "execute_tool flights",
        ]
    )
    assert instrumentor_spans.get_finished_spans() == ()  # silent in a traced run
    db = one(captured_spans, "db.query weather")
    assert parent_of(captured_spans, db).name == "execute_tool weather"


async def test_with_openinference_active_an_untraced_run_is_its_to_trace(
    instrumentor_spans: InMemorySpanExporter,
) -> None:
    native = planner([first_turn, ANSWER])
    agent = CoreAgent("planner", SmolagentsRunner(), native)
    await run(agent, "run")
    names = {s.name for s in instrumentor_spans.get_finished_spans()}
    assert "planner.run" in names
    assert "SimpleTool" in names  # the weather tool, as OpenInference names it


@pytest.mark.parametrize("mode", MODES)
async def test_without_content_capture_the_code_stays_off_the_step_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    model = ScriptedModel([code("final_answer('secret plan')")], model_id="coder-llm")
    native = CodeAgent(tools=[], model=model, name="coder", verbosity_level=LogLevel.OFF)
    await run(CoreAgent("coder", TracingRunner(SmolagentsRunner()), native), mode)
    (step,) = captured_spans.by_name("agent_step coder")
    assert "runnertrace.step.code" not in (step.attributes or {})
    assert not any("secret plan" in str(dict(s.attributes or {})) for s in captured_spans.spans)
