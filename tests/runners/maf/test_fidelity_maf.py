"""Trace fidelity for Microsoft Agent Framework, on spans only (tests/test_fidelity.py's matrix).

The shared scenario, per mode: the model (``ScriptedChatClient``, a real Agent
Framework client with only the provider call scripted) calls two tools; one raises,
and Agent Framework feeds the failure back to the model (its default); a user span
opens inside a tool and another inside the model call; the second model call
answers. Agent Framework does not retry a model call that raised, so a failing
model call ends the run: its chat span fails in the step that held it. A tool that
raises ``MiddlewareFailure`` fails the run. A sub-agent run inside a tool nests
under that tool. Agent Framework's own spans (on by default, to the global
provider) are suppressed for the calls a traced run covers, a sub-agent from
``as_tool()`` included (ours cover it: tests/runners/maf/test_maf_compositions.py): checked in
a subprocess that owns its global provider, so each call is counted where both
vocabularies land.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("agent_framework", reason="needs the maf extra: pip install -e '.[dev,maf]'")

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from agent_framework import Agent, Message, MiddlewareFailure, tool
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

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, Turn, call, say
from runnertrace.testing import CapturedSpans

CHAT = "chat planner-llm"
REPO = Path(__file__).resolve().parents[3]
# The user's own tracer, on the same provider as ours; set per test by the fixture below.
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


def first_turn(messages: list[Message]) -> Any:
    with user["tracer"].start_as_current_span("http.request model"):
        return call(("c1", "weather", {"city": "Oslo"}), ("c2", "flights", {"city": "Oslo"}))


def broken_turn(messages: list[Message]) -> Any:
    raise ConnectionError("model endpoint reset the connection")


@tool
async def weather(city: str) -> str:
    """Look up the weather."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"sunny in {city}"


@tool
async def flights(city: str) -> str:
    """Look up flights."""
    raise LookupFailed(f"no flights to {city}")


def planner(turns: list[Turn], tools: list[Any] | None = None, name: str = "planner") -> Agent:
    return Agent(
        ScriptedChatClient(turns, model="planner-llm"),
        "You plan trips.",
        name=name,
        tools=tools if tools is not None else [weather, flights],
        default_options={"temperature": 0.3, "max_tokens": 200},
    )


def core(native: Agent, name: str = "planner") -> CoreAgent:
    return CoreAgent(name, TracingRunner(MAFRunner(), capture_content=True), native)


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, CHAT)


def steps(spans: CapturedSpans) -> list[ReadableSpan]:
    return in_start_order(spans, "agent_step planner")


@pytest.mark.parametrize("mode", MODES)
async def test_chat_spans_show_what_the_model_was_sent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, say("Sunny; no flights.")])), mode)
    first, second = chats(captured_spans)
    assert json.loads(attr(first, "gen_ai.system_instructions")) == [
        {"type": "text", "content": "You plan trips."}
    ]
    assert attr(first, "gen_ai.request.temperature") == 0.3
    assert attr(first, "gen_ai.request.max_tokens") == 200
    tools = json.loads(attr(first, "gen_ai.tool.definitions"))
    assert [(t["name"], t["description"]) for t in tools] == [
        ("weather", "Look up the weather."),
        ("flights", "Look up flights."),
    ]
    assert tools[0]["parameters"]["properties"]["city"]["type"] == "string"
    assert attr(first, "gen_ai.provider.name") == "scripted"
    sent = json.loads(attr(second, "gen_ai.input.messages"))
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Trip to Oslo?"}]}
    calls = [p for m in sent for p in m["parts"] if p["type"] == "tool_call"]
    assert [(p["id"], p["name"], p["arguments"]) for p in calls] == [
        ("c1", "weather", {"city": "Oslo"}),
        ("c2", "flights", {"city": "Oslo"}),
    ]
    responses = {p["id"]: p for m in sent for p in m["parts"] if p["type"] == "tool_call_response"}
    assert (responses["c1"]["name"], responses["c1"]["response"]) == ("weather", "sunny in Oslo")
    assert responses["c2"]["name"] == "flights"
    assert responses["c2"]["response"].startswith("Error")  # the failure, fed back to the model


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_fed_back_to_the_model_is_an_error_on_its_own_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, say("Sunny; no flights.")])), mode)
    failed, ok = assert_tool_failed_and_run_recovered(captured_spans)
    assert json.loads(attr(failed, "gen_ai.tool.call.arguments")) == {"city": "Oslo"}
    assert attr(ok, "gen_ai.tool.call.result") == "sunny in Oslo"
    first_step, second_step = steps(captured_spans)
    assert parent_of(captured_spans, failed) == parent_of(captured_spans, ok) == first_step
    assert parent_of(captured_spans, chats(captured_spans)[1]) == second_step


@pytest.mark.parametrize("mode", MODES)
async def test_a_middleware_failure_in_a_tool_fails_its_span_and_the_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    @tool
    def hotels(city: str) -> str:
        """Book a hotel."""
        raise MiddlewareFailure(f"no hotels in {city}")

    with pytest.raises(MiddlewareFailure):
        await run(core(planner([call(("h1", "hotels", {"city": "Oslo"}))], [hotels])), mode)
    failed = one(captured_spans, "execute_tool hotels")
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "MiddlewareFailure"
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_what_runs_inside_a_call_nests_under_its_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, say("Sunny; no flights.")])), mode)
    assert_user_spans_nest(captured_spans, chats(captured_spans)[0])


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_is_an_error_on_its_chat_span_in_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    # Agent Framework does not retry a model request that raised: the run ends.
    with pytest.raises(ConnectionError):
        await run(core(planner([first_turn, broken_turn])), mode)
    failed = assert_model_call_failed_in_its_step(
        captured_spans, chats(captured_spans), steps(captured_spans)
    )
    # the failed request still shows what it was sent, the fed-back results included
    assert "sunny in Oslo" in attr(failed, "gen_ai.input.messages")
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("mode", MODES)
async def test_the_run_span_records_the_final_output(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(planner([first_turn, say("Sunny; no flights.")])), mode)
    run_span = one(captured_spans, "invoke_agent planner")
    assert final_output(captured_spans) == "Sunny; no flights."
    per_chat = sum(attr(c, "gen_ai.usage.input_tokens") for c in chats(captured_spans))
    assert attr(run_span, "gen_ai.aggregated_usage.input_tokens") == per_chat == 20


@pytest.mark.parametrize("mode", MODES)
async def test_a_sub_agent_run_inside_a_tool_nests_under_it_with_its_own_name(
    mode: str, captured_spans: CapturedSpans
) -> None:
    expert = core(
        Agent(ScriptedChatClient([say("No flights.")], model="planner-llm"), "You know Oslo."),
        "expert",
    )

    @tool
    async def ask_expert() -> str:
        """Ask the Oslo expert."""
        requests = [AgentRequestText(prompt="Flights to Oslo?")]
        return str(await expert.runner.run(expert, Session("inner"), requests))

    native = planner([call(("x1", "ask_expert", {})), say("Sunny; no flights.")], [ask_expert])
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


# -- Agent Framework's own instrumentation: never a second copy of a call --------------------------

PROBE = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# The application's global provider: Agent Framework's spans go there, and so do
# ours with the "app" backend, so a duplicate would show up in one exporter.
provider, exporter = TracerProvider(), InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from agent_framework import Agent, tool
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

@tool
def multiply(a: int, b: int) -> int:
    '''Multiply two numbers.'''
    return a * b

def agent(runner):
    client = ScriptedChatClient(
        [call(("c1", "multiply", {"a": 6, "b": 7})), say("42.")], model="calc-llm"
    )
    return CoreAgent("calc", runner, Agent(client, name="calc", tools=[multiply]))

def delegating(runner):
    # A sub-agent through Agent Framework's own as_tool(): a nested run of ours covers it.
    expert = Agent(ScriptedChatClient([say("None.")], model="expert-llm"), name="expert")
    client = ScriptedChatClient(
        [call(("x1", "expert", {"task": "Flights?"})), say("No flights.")], model="calc-llm"
    )
    return CoreAgent("calc", runner, Agent(client, name="calc", tools=[expert.as_tool()]))

async def go(core, mode):
    requests = [AgentRequestText(prompt="6 times 7?")]
    if mode == "run":
        await core.runner.run(core, Session(mode), requests)
    else:
        async for _ in core.runner.stream(core, Session(mode), requests):
            pass

def spans():
    # The process's first priced calls end once the price table is loaded: a flush ends them.
    provider.force_flush()
    found = [
        {
            "name": s.name,
            "scope": s.instrumentation_scope.name,
            "trace": s.context.trace_id,
            "id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]
    exporter.clear()
    return found

async def main():
    report = {}
    for mode in ("run", "stream"):
        await go(agent(MAFRunner()), mode)
        report[f"untraced {mode}"] = spans()
        await go(agent(traced(MAFRunner(), TraceConfig(type="app"))), mode)
        report[f"traced {mode}"] = spans()
        await asyncio.gather(
            go(agent(traced(MAFRunner(), TraceConfig(type="app"))), mode),
            go(agent(MAFRunner()), mode),
        )
        report[f"side by side {mode}"] = spans()
        await go(delegating(traced(MAFRunner(), TraceConfig(type="app"))), mode)
        report[f"sub-agent {mode}"] = spans()
    print(json.dumps(report))

asyncio.run(main())
"""

OURS = sorted(
    [
        *("invoke_agent calc", "agent_step calc", "agent_step calc"),
        *("chat calc-llm", "chat calc-llm", "execute_tool multiply"),
    ]
)
THEIRS = sorted(["invoke_agent calc", "chat calc-llm", "chat calc-llm", "execute_tool multiply"])


@pytest.fixture(scope="module")
def native_spans() -> dict[str, list[dict[str, Any]]]:
    """What lands in an application's global provider, per case (one subprocess)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNERTRACE_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, list[dict[str, Any]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def names(spans: list[dict[str, Any]], framework: bool) -> list[str]:
    return sorted(s["name"] for s in spans if (s["scope"] == "agent_framework") is framework)


@pytest.mark.parametrize("mode", MODES)
def test_untraced_runs_keep_agent_frameworks_own_spans(
    mode: str, native_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = native_spans[f"untraced {mode}"]
    assert names(spans, framework=True) == THEIRS  # so the checks below can fail
    assert names(spans, framework=False) == []


@pytest.mark.parametrize("mode", MODES)
def test_each_call_appears_once_in_a_traced_run_with_agent_framework_instrumented(
    mode: str, native_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = native_spans[f"traced {mode}"]
    assert names(spans, framework=True) == []
    assert names(spans, framework=False) == OURS


@pytest.mark.parametrize("mode", MODES)
def test_the_suppression_is_per_run_not_per_process(
    mode: str, native_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = native_spans[f"side by side {mode}"]
    assert names(spans, framework=True) == THEIRS  # the untraced run's, complete
    assert names(spans, framework=False) == OURS  # the traced run's, once
    traces = {s["trace"] for s in spans if s["scope"] == "agent_framework"}
    assert len(traces) == 1
    assert traces.isdisjoint(s["trace"] for s in spans if s["scope"] != "agent_framework")


@pytest.mark.parametrize("mode", MODES)
def test_a_sub_agent_from_as_tool_is_ours_once_nested_under_our_tool_span(
    mode: str, native_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = native_spans[f"sub-agent {mode}"]
    assert names(spans, framework=True) == []
    assert names(spans, framework=False) == sorted(
        [
            *[o.replace("multiply", "expert") for o in OURS],
            *("invoke_agent expert", "agent_step expert", "chat expert-llm"),
        ]
    )
    by_id = {s["id"]: s for s in spans}
    (inner,) = [s for s in spans if s["name"] == "invoke_agent expert"]
    assert by_id[inner["parent"]]["name"] == "execute_tool expert"
