"""Trace fidelity for Google ADK, on spans only (the matrix of tests/test_fidelity.py).

The shared scenario, per mode: the model (``ScriptedAdkLlm``, a real ``BaseLlm``)
calls two tools; ``flights`` raises, and the agent's ``on_tool_error_callback``
feeds the error back to the model (ADK's way; without such a callback a raising
tool fails the run); a user span opens inside a tool and another inside the
model call; the second model call answers. ADK does not retry a model call that
raised, so a failing model call ends the run: its chat span fails in the step
that held it. A transfer to a sub-agent records the handoff. ADK's own
OpenTelemetry spans (sent to the global provider, which runnertrace reuses) never
add a second copy of a call: checked in a child process, since a global provider
can be set only once per process.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("google.adk", reason="needs the adk extra: pip install -e '.[dev,adk]'")

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
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
from tests.tracing_helpers import OpenSpanTracker, assert_nothing_left_open, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn, answer
from runnertrace.testing import CapturedSpans

REPO = Path(__file__).resolve().parents[3]
CHAT = "chat planner-llm"
# The user's own tracer, on the same provider as ours; set per test by the fixture below.
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


def first_turn(request: LlmRequest) -> Turn:
    with user["tracer"].start_as_current_span("http.request model"):
        return Turn(
            calls=[("weather", {"city": "Oslo"}, "c1"), ("flights", {"city": "Oslo"}, "c2")]
        )


SECOND = answer("Sunny; no flights.")


async def weather(city: str) -> str:
    """Look up the weather."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def feed_back(
    tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
) -> dict[str, Any]:
    """The agent's on_tool_error callback: the model gets the error to work with."""
    return {"error": f"{type(error).__name__}: {error}"}


def planner(script: list[Any], *, fed_back: bool = True, **kw: Any) -> LlmAgent:
    return LlmAgent(
        name="planner",
        model=ScriptedAdkLlm(model="planner-llm", script=script),
        instruction="You plan trips.",
        tools=[weather, flights],
        generate_content_config=types.GenerateContentConfig(temperature=0.3, max_output_tokens=200),
        on_tool_error_callback=feed_back if fed_back else None,
        **kw,
    )


def core(native: LlmAgent, name: str = "planner") -> CoreAgent:
    return CoreAgent(name, TracingRunner(GoogleADKRunner(), capture_content=True), native)


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, CHAT)


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("gemini-2.5-flash", "gcp.gemini"),
        ("anthropic/claude-x", "anthropic"),
        ("planner-llm", None),
    ],
)
@pytest.mark.parametrize("mode", MODES)
async def test_the_provider_is_on_chat_and_run_spans_when_the_model_names_one(
    mode: str, model: str, provider: str | None, captured_spans: CapturedSpans
) -> None:
    native = planner([first_turn, SECOND])
    native.model = ScriptedAdkLlm(model=model, script=[first_turn, SECOND])
    await run(core(native), mode)
    chat_spans = in_start_order(captured_spans, f"chat {model}")
    assert len(chat_spans) == 2
    run_span = one(captured_spans, "invoke_agent planner")
    for span in (*chat_spans, run_span):
        assert (span.attributes or {}).get("gen_ai.provider.name") == provider


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, SECOND])), mode)
    first, second = chats(captured_spans)
    (instructions,) = json.loads(attr(first, "gen_ai.system_instructions"))
    assert instructions["type"] == "text"
    assert instructions["content"].startswith("You plan trips.")  # ADK appends its own line
    assert attr(first, "gen_ai.request.temperature") == 0.3
    assert attr(first, "gen_ai.request.max_tokens") == 200
    tools = json.loads(attr(first, "gen_ai.tool.definitions"))
    assert [(t["name"], t["description"]) for t in tools] == [
        ("weather", "Look up the weather."),
        ("flights", "Look up flights."),
    ]
    assert tools[0]["parameters"]["properties"]["city"]["type"] in ("string", "STRING")
    sent = json.loads(attr(second, "gen_ai.input.messages"))
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
    calls = [p for m in sent for p in m["parts"] if p["type"] == "tool_call"]
    assert [(p["id"], p["name"]) for p in calls] == [("c1", "weather"), ("c2", "flights")]
    responses = {p["id"]: p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"}
    assert responses["c1"]["response"] == {"result": "sunny in Oslo"}
    # the error, fed back (by the agent's on_tool_error callback)
    assert responses["c2"]["response"] == {"error": "LookupFailed: no flights to Oslo"}
    assert attr(first, "gen_ai.usage.input_tokens") == 10


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_fed_back_to_the_model_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, SECOND])), mode)
    failed, ok = assert_tool_failed_and_run_recovered(captured_spans)
    assert json.loads(attr(failed, "gen_ai.tool.call.arguments")) == {"city": "Oslo"}
    assert attr(ok, "gen_ai.tool.call.result") == "sunny in Oslo"


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_exception_no_callback_handles_fails_its_span_and_the_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(LookupFailed):
        await run(core(planner([first_turn, SECOND], fed_back=False)), mode)
    failed = one(captured_spans, "execute_tool flights")
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "LookupFailed"
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, SECOND])), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span_in_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    # ADK does not retry a model call that raised: the run ends.
    broken = ConnectionError("model endpoint reset the connection")
    with pytest.raises(ConnectionError):
        await run(core(planner([first_turn, broken])), mode)
    steps = in_start_order(captured_spans, "agent_step planner")
    failed = assert_model_call_failed_in_its_step(captured_spans, chats(captured_spans), steps)
    # the failed request still shows what it was sent, the fed-back tool error included
    assert "no flights to Oslo" in attr(failed, "gen_ai.input.messages")


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, SECOND])), mode)
    assert final_output(captured_spans) == "Sunny; no flights."


@pytest.mark.parametrize("mode", MODES)
async def test_a_transfer_to_a_sub_agent_is_a_handoff_with_the_agents_own_spans(
    mode: str, captured_spans: CapturedSpans
) -> None:
    expert = LlmAgent(
        name="expert",
        model=ScriptedAdkLlm(model="expert-llm", script=[answer("Fly on Tuesday.")]),
        instruction="You know Oslo.",
    )
    transfer = Turn(calls=[("transfer_to_agent", {"agent_name": "expert"}, "t1")])
    native = LlmAgent(
        name="planner",
        model=ScriptedAdkLlm(model="planner-llm", script=[transfer]),
        instruction="You plan trips.",
        sub_agents=[expert],
    )
    await run(core(native), mode)
    (inner,) = captured_spans.by_name("chat expert-llm")
    assert attr(inner, "gen_ai.agent.name") == "expert"
    assert json.loads(attr(inner, "gen_ai.system_instructions"))[0]["content"].startswith(
        "You know Oslo."
    )
    step = parent_of(captured_spans, inner)
    assert step.name == "agent_step expert"
    assert attr(step, "runnertrace.handoff.source") == "planner"
    assert attr(step, "runnertrace.handoff.target") == "expert"
    assert one(captured_spans, "execute_tool transfer_to_agent").status.status_code is (
        StatusCode.UNSET
    )
    run_span = one(captured_spans, "invoke_agent planner")
    output = json.loads(attr(run_span, "gen_ai.output.messages"))
    assert output[0]["parts"][0]["content"] == "Fly on Tuesday."


@pytest.mark.parametrize("mode", MODES)
async def test_a_nested_run_inside_a_tool_nests_under_it_with_its_own_name(
    mode: str, captured_spans: CapturedSpans
) -> None:
    expert = core(
        LlmAgent(
            name="expert",
            model=ScriptedAdkLlm(model="expert-llm", script=[answer("Fly on Tuesday.")]),
        ),
        "expert",
    )

    async def ask_expert() -> str:
        """Ask the expert."""
        requests = [AgentRequestText(prompt="Flights to Oslo?")]
        return str(await expert.runner.run(expert, Session("inner"), requests))

    native = LlmAgent(
        name="planner",
        model=ScriptedAdkLlm(
            model="planner-llm", script=[Turn(calls=[("ask_expert", {}, "x1")]), SECOND]
        ),
        tools=[ask_expert],
    )
    await run(core(native), mode)
    inner = one(captured_spans, "invoke_agent expert")
    assert parent_of(captured_spans, inner).name == "execute_tool ask_expert"
    assert attr(one(captured_spans, "execute_tool ask_expert"), "gen_ai.tool.call.result") == (
        "Fly on Tuesday."
    )


# -- closing and cancelling ---------------------------------------------------------------------


@pytest.fixture
def tracker(captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture) -> OpenSpanTracker:
    return OpenSpanTracker.on(captured_spans, caplog)


def traced_stream() -> Any:
    agent = core(planner([first_turn, SECOND]))
    return agent.runner.stream(agent, Session("s1"), [AgentRequestText(prompt="Trip?")])


N_EVENTS = 18  # the scenario's stream, checked below


async def test_the_scenario_stream_has_the_expected_length() -> None:
    assert len([e async for e in traced_stream()]) == N_EVENTS


@pytest.mark.parametrize("index", range(0, N_EVENTS, 2))
async def test_closing_the_stream_at_any_index_leaves_nothing_open(
    index: int, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    stream = traced_stream()
    for _ in range(index + 1):
        await anext(stream)
    await stream.aclose()
    assert_nothing_left_open(tracker, caplog)


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cancelled_inside_a_tool_leaves_nothing_open(
    mode: str, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    inside = asyncio.Event()

    async def slow(city: str) -> str:
        """Wait forever."""
        inside.set()
        await asyncio.sleep(10)
        return city

    native = LlmAgent(
        name="planner",
        model=ScriptedAdkLlm(
            model="planner-llm", script=[Turn(calls=[("slow", {"city": "Oslo"}, "c9")])]
        ),
        tools=[slow],
    )
    task = asyncio.create_task(run(core(native), mode))
    await inside.wait()
    await cancel_and_settle(task)
    assert_nothing_left_open(tracker, caplog)


# -- ADK's own OpenTelemetry spans: never a second copy of a call ---------------------------------

ADK_OWN_SPANS = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

app = TracerProvider()
exporter = InMemorySpanExporter()
app.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(app)  # ADK's spans and (reused) ours go here

from google.adk.agents import LlmAgent
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn, answer

def weather(city: str) -> str:
    '''Look up the weather.'''
    with trace.get_tracer("user-code").start_as_current_span("db.query weather"):
        return f"sunny in {city}"

def agent(runner):
    llm = ScriptedAdkLlm(
        model="planner-llm",
        script=[Turn(calls=[("weather", {"city": "Oslo"}, "c1")]), answer("Sunny.")],
    )
    native = LlmAgent(name="planner", model=llm, tools=[weather])
    return Agent("planner", runner, native)

async def go(runner, mode):
    a = agent(runner)
    requests = [AgentRequestText(prompt="Trip?")]
    if mode == "run":
        await a.runner.run(a, Session("s1"), requests)
    else:
        async for _ in a.runner.stream(a, Session("s1"), requests):
            pass
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (db,) = [s for s in spans if s.name == "db.query weather"]
    parent = by_id.get(db.parent.span_id) if db.parent else None
    names = sorted(s.name for s in spans if s is not db)
    exporter.clear()
    return {"names": names, "db parent": parent.name if parent else None}

async def main():
    out = {}
    for mode in ("run", "stream"):
        out["untraced " + mode] = await go(GoogleADKRunner(), mode)
        tracing = traced(GoogleADKRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
        out["traced " + mode] = await go(tracing, mode)
        out["untraced again " + mode] = await go(GoogleADKRunner(), mode)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_adks_own_spans_are_suppressed_in_traced_runs_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ADK_OWN_SPANS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**_clean_env(), "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [
        "agent_step planner",
        "agent_step planner",
        "chat planner-llm",
        "chat planner-llm",
        "execute_tool weather",
        "invoke_agent planner",
    ]
    for mode in MODES:
        # untraced, ADK's own spans are there (so the traced check below can fail)
        adk = seen[f"untraced {mode}"]
        assert "execute_tool weather" in adk["names"] and "invoke_agent planner" in adk["names"]
        assert sum(name.startswith("generate_content") for name in adk["names"]) == 2
        assert adk["db parent"] == "execute_tool weather"  # ADK's
        # traced: each model call and tool call exactly once, ours; a span opened in
        # the tool nests under our execute_tool span
        assert seen[f"traced {mode}"] == {"names": ours, "db parent": "execute_tool weather"}
        assert seen[f"untraced again {mode}"] == adk  # nothing global was changed


def _clean_env() -> dict[str, str]:
    import os

    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OTEL_", "PYTEST_", "GOOGLE_", "ADK_"))
    }
