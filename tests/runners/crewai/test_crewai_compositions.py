"""CrewAI on its real model client and in multi-agent crews, asserted on spans.

The model is CrewAI's own ``LLM("openai/...")`` (native function calling) talking
to the loopback OpenAI-compatible server (tests/fake_openai_server.py), which
streams, returns tool calls, reports usage and fails with HTTP 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
pytest.importorskip("crewai", reason="the crewai extra lives in its own venv (.ci/extra-crewai)")

# CrewAI warns about its own deprecated fields on every crew it builds.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from crewai import LLM, Crew, Process, Task  # noqa: E402
from crewai import Agent as CrewAgent  # noqa: E402
from crewai.tools import tool  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from tests.composition_checks import check_totals  # noqa: E402
from tests.contract.runner_cases import CASES  # noqa: E402
from tests.contract.test_runner_contract import settle  # noqa: E402
from tests.contract.test_runner_every_method import (  # noqa: E402
    Target,
    break_target,
    internal_faults,
    targets,
)
from tests.contract.test_runner_every_method import shape as event_shape  # noqa: E402
from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply  # noqa: E402
from tests.fidelity_helpers import MODES, in_start_order, one, parent_of  # noqa: E402
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace._internal.errors import internal_log  # noqa: E402
from runnertrace.core import Runtime, Session  # noqa: E402
from runnertrace.core import events as ev  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.runners.crewai import CrewAIModule, CrewAIRunner  # noqa: E402
from runnertrace.runners.crewai import runner as crewai_runner  # noqa: E402
from runnertrace.runners.crewai.adapter import kickoff_callback  # noqa: E402
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final  # noqa: E402
from runnertrace.testing import CapturedSpans, tolerate_internal_errors  # noqa: E402
from runnertrace.tracing import attributes as A  # noqa: E402

CHAT = f"chat {FakeOpenAIServer.model}"
ANSWER = "Paris is sunny."
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, captured_spans: CapturedSpans) -> None:
    """CrewAI writes under $HOME and phones home unless told not to; the user's
    tracer is on the same provider as ours."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool("get_weather")
def get_weather(city: str) -> str:
    """The weather in a city."""
    with user["tracer"].start_as_current_span("db.query weather"):
        return f"{city}: sunny"


def weather_call(call_id: str = "call_1", city: str = "Paris") -> FakeToolCall:
    return FakeToolCall(call_id, "get_weather", {"city": city})


def llm(server: FakeOpenAIServer) -> LLM:
    return LLM(model=f"openai/{server.model}", base_url=server.base_url, api_key="sk-loopback")


def assistant(server: FakeOpenAIServer, *, retries: int = 2) -> CrewAgent:
    return CrewAgent(
        role="assistant",
        goal="Answer weather questions.",
        backstory="You know the weather.",
        llm=llm(server),
        tools=[get_weather],
        max_retry_limit=retries,
    )


async def run(native: Any, mode: str, name: str = "assistant") -> list[ev.StreamEvent]:
    """One traced run in ``mode``; the stream's events (none in run mode)."""
    runner = TracingRunner(CrewAIRunner(), capture_content=True)
    agent = Agent(name, runner, native)
    requests = [AgentRequestText(prompt="Weather in Paris?")]
    if mode == "run":
        await runner.run(agent, Session("s1"), requests)
        return []
    return [e async for e in runner.stream(agent, Session("s1"), requests)]


def output_parts(span: Any) -> list[dict[str, Any]]:
    (message,) = json.loads(span.attributes[A.OUTPUT_MESSAGES])
    parts: list[dict[str, Any]] = message["parts"]
    return parts


# -- item 4: the native function-calling path ---------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_a_native_tool_call_has_its_scope_and_its_arguments(
    mode: str, captured_spans: CapturedSpans
) -> None:
    replies = [Reply(tool_calls=[weather_call()]), Reply(text=ANSWER)]
    with FakeOpenAIServer(replies) as server:
        await run(assistant(server), mode)
    (tool_span,) = captured_spans.by_name("execute_tool get_weather")  # one span per call
    assert tool_span.attributes[A.TOOL_CALL_ID] == "call_1"
    assert json.loads(tool_span.attributes[A.TOOL_ARGUMENTS]) == {"city": "Paris"}
    # the user's span inside the tool nests under execute_tool
    assert parent_of(captured_spans, one(captured_spans, "db.query weather")) == tool_span
    asking, answering = in_start_order(captured_spans, CHAT)
    assert output_parts(asking) == [
        {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
    ]
    assert output_parts(answering) == [{"type": "text", "content": ANSWER}]
    assert parent_of(captured_spans, tool_span) == parent_of(captured_spans, asking)
    assert sum(c.attributes[A.INPUT_TOKENS] for c in (asking, answering)) == 22


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_calls_keep_their_own_arguments_and_scopes(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """Two calls in one response: CrewAI runs them in its thread pool. In stream mode
    its chunk events carry the arguments so far; each call is one span, once."""
    calls = [weather_call("call_a", "Paris"), weather_call("call_b", "Oslo")]
    replies = [Reply(tool_calls=calls, chunk_size=4), Reply(text=ANSWER)]
    with FakeOpenAIServer(replies) as server:
        events = await run(assistant(server), mode)
    spans = captured_spans.by_name("execute_tool get_weather")
    arguments = {s.attributes[A.TOOL_CALL_ID]: s.attributes[A.TOOL_ARGUMENTS] for s in spans}
    assert {k: json.loads(v) for k, v in arguments.items()} == {
        "call_a": {"city": "Paris"},
        "call_b": {"city": "Oslo"},
    }
    streamed: dict[str, str] = {}
    for event in events:
        if isinstance(event, ev.ToolCallArgs):
            streamed[event.tool_call_id] = streamed.get(event.tool_call_id, "") + event.delta
    if mode == "stream":
        assert streamed == arguments
    # the two calls ran in CrewAI's thread pool: each user span under its own call
    lookups = captured_spans.by_name("db.query weather")
    assert sorted(parent_of(captured_spans, s).attributes[A.TOOL_CALL_ID] for s in lookups) == [
        "call_a",
        "call_b",
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_call_has_its_real_error_type_and_fails_its_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    replies = [Reply(tool_calls=[weather_call()]), Reply(status=500, text="upstream down")]
    with (
        FakeOpenAIServer(replies) as server,
        pytest.raises(Exception, match="upstream down") as raised,
    ):
        await run(assistant(server, retries=0), mode)
    assert type(raised.value).__name__ == "InternalServerError"
    _asking, failed = in_start_order(captured_spans, CHAT)
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[A.ERROR_TYPE] == "InternalServerError"
    step = parent_of(captured_spans, failed)
    assert step.name == "agent_step assistant"
    assert step.status.status_code is StatusCode.ERROR
    assert step.attributes[A.ERROR_TYPE] == "InternalServerError"
    # the tool call that succeeded before is not blamed
    tool_span = one(captured_spans, "execute_tool get_weather")
    assert tool_span.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("mode", MODES)
async def test_a_react_reply_streams_as_run_mode_replies_it(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """The ReAct path: the text is the final answer only, in deltas and on the run span;
    the scaffolding (thought, action, the marker) is the chat's reasoning."""
    native = CrewAgent(
        role="assistant",
        goal="Answer weather questions.",
        backstory="You know the weather.",
        llm=ScriptedLLM([action("get_weather", city="Paris"), final(ANSWER)]),
        tools=[get_weather],
    )
    events = await run(native, mode)
    if mode == "stream":
        assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == ANSWER
    run_span = one(captured_spans, "invoke_agent assistant")
    assert output_parts(run_span) == [{"type": "text", "content": ANSWER}]
    asking, answering = in_start_order(captured_spans, "chat scripted")
    assert [p["type"] for p in output_parts(asking)] == ["tool_call"]
    assert output_parts(answering) == [{"type": "text", "content": ANSWER}]
    thoughts = [
        json.loads(s.attributes[A.OUTPUT_MESSAGES]) for s in captured_spans.by_name("reasoning")
    ]
    reasoning = [m[0]["parts"][0]["content"] for m in thoughts]
    assert any("Action: get_weather" in r for r in reasoning)
    assert any(r.endswith("Final Answer:") for r in reasoning)


# -- a crew registered as a Crew ----------------------------------------------------------------
def trip_crew(server: FakeOpenAIServer) -> Crew:
    """Two agents over two tasks, in CrewAI's sequential process: the researcher calls
    the tool, the writer answers from the researcher's output (the task's context)."""
    researcher = CrewAgent(
        role="researcher",
        goal="Find the weather.",
        backstory="You look things up.",
        llm=llm(server),
        tools=[get_weather],
    )
    writer = CrewAgent(
        role="writer", goal="Write the answer.", backstory="You write.", llm=llm(server)
    )
    research = Task(
        description="Research: {request}", expected_output="The weather.", agent=researcher
    )
    write = Task(
        description="Answer: {request}",
        expected_output="One sentence.",
        agent=writer,
        context=[research],
    )
    return Crew(agents=[researcher, writer], tasks=[research, write], process=Process.sequential)


def crew_replies() -> list[Reply]:
    return [
        Reply(tool_calls=[weather_call()], prompt_tokens=30, completion_tokens=5),
        Reply(text="Paris: sunny", prompt_tokens=40, completion_tokens=3),
        Reply(text=ANSWER, prompt_tokens=50, completion_tokens=4),
    ]


def steps_of(spans: CapturedSpans, span: Any) -> list[str]:
    """The names of the steps ``span`` nests in, innermost first."""
    names: list[str] = []
    while span.parent is not None:
        span = parent_of(spans, span)
        if span.name.startswith("agent_step"):
            names.append(span.name)
    return names


@pytest.mark.parametrize("mode", MODES)
async def test_a_sequential_crew_traces_each_agent_over_its_task(
    mode: str, captured_spans: CapturedSpans
) -> None:
    with FakeOpenAIServer(crew_replies()) as server:
        crew = trip_crew(server)
        module = CrewAIModule([("trip", crew)], Runtime())
        (agent,) = module.agents
        assert agent.name == "trip"
        events = await run(agent.native, mode, name="trip")
        sent = list(server.requests)
    assert all("Weather in Paris?" in json.dumps(body["messages"]) for body in sent)
    chats = in_start_order(captured_spans, CHAT)
    assert len(chats) == len(sent) == 3  # every model call once
    roles = [c.attributes[A.AGENT_NAME] for c in chats]
    assert roles == ["researcher", "researcher", "writer"]
    assert [steps_of(captured_spans, c) for c in chats] == [
        ["agent_step researcher", "agent_step task"],
        ["agent_step researcher", "agent_step task"],
        ["agent_step writer", "agent_step task"],
    ]
    assert output_parts(chats[2]) == [{"type": "text", "content": ANSWER}]
    tasks = in_start_order(captured_spans, "agent_step task")
    assert [t.attributes[A.STEP_INDEX] for t in tasks] == [0, 1]
    assert parent_of(captured_spans, parent_of(captured_spans, chats[2])) == tasks[1]
    tool_span = one(captured_spans, "execute_tool get_weather")
    assert tool_span.attributes[A.AGENT_NAME] == "researcher"
    assert parent_of(captured_spans, tool_span).name == "agent_step researcher"
    # tokens counted once: per call, and summed on the run span
    assert sum(c.attributes[A.INPUT_TOKENS] for c in chats) == 120
    run_span = one(captured_spans, "invoke_agent trip")
    assert run_span.attributes[A.AGG_INPUT_TOKENS] == 120
    assert output_parts(run_span) == [{"type": "text", "content": ANSWER}]
    if mode == "stream":
        text = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
        assert text == f"Paris: sunny{ANSWER}"  # each agent's reply, as it streamed


async def test_a_registered_crew_refuses_run_options() -> None:
    with FakeOpenAIServer([]) as server:
        agent = Agent("trip", CrewAIRunner(), trip_crew(server))
        agent.declare_run_options(verbose=True)
        with pytest.raises(ValueError, match="runs as built"):
            await agent.runner.run(agent, Session("s1"), [AgentRequestText(prompt="x")])


@tool("ask_expert")
def ask_expert(question: str) -> str:
    """Ask a crew of experts (a crew kicked off inside the tool)."""
    expert = CrewAgent(
        role="expert", goal="Know.", backstory="You know.", llm=ScriptedLLM([final("42")])
    )
    task = Task(description=question, expected_output="A number.", agent=expert)
    return str(Crew(agents=[expert], tasks=[task]).kickoff().raw)


@pytest.mark.parametrize("mode", MODES)
async def test_a_crew_run_inside_a_tool_is_not_ours(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """Its events reach our sink (the sink is in the context it inherits) but name
    another crew's agent: the run's trace has our calls only."""
    replies = [
        Reply(tool_calls=[FakeToolCall("call_e", "ask_expert", {"question": "Meaning?"})]),
        Reply(text=ANSWER),
    ]
    with FakeOpenAIServer(replies) as server:
        native = CrewAgent(
            role="assistant",
            goal="Answer.",
            backstory="You ask.",
            llm=llm(server),
            tools=[ask_expert],
        )
        await run(native, mode)
    assert captured_spans.by_name("chat scripted") == []
    assert len(captured_spans.by_name(CHAT)) == 2
    assert [s.name for s in captured_spans.spans if s.name.startswith("agent_step")] == [
        "agent_step assistant",
        "agent_step task",
    ]
    assert one(captured_spans, "execute_tool ask_expert").attributes[A.TOOL_CALL_ID] == "call_e"


# -- delegation: a coworker's work is a nested run under the delegation's tool call -------------
def shape(spans: CapturedSpans, span: Any) -> tuple[str, list[Any]]:
    """``(name, [children...])`` in start order, without reasoning spans (a ReAct reply's
    scaffolding, under each chat span)."""
    kids = [c for c in spans.children(span) if c.name != "reasoning"]
    return (span.name, [shape(spans, c) for c in kids])


def delegating_crew(manager_llm: Any, researcher_llm: Any, **researcher: Any) -> Crew:
    """A hierarchical crew of one coworker: CrewAI's manager delegates the task to it."""
    coworker = CrewAgent(
        role="researcher",
        goal="Find the weather.",
        backstory="You look things up.",
        llm=researcher_llm,
        tools=[get_weather],
        **researcher,
    )
    task = Task(description="Answer: {request}", expected_output="One sentence.")
    return Crew(
        agents=[coworker], tasks=[task], process=Process.hierarchical, manager_llm=manager_llm
    )


def delegation_tree(tool: str, chat: str) -> tuple[str, list[Any]]:
    """The trace of a hierarchical crew whose manager delegates once (``tool``: CrewAI's
    delegation tool, by the name the model called it) and then answers."""
    return (
        "invoke_agent trip",
        [
            (
                "agent_step task",
                [
                    (
                        "agent_step Crew Manager",
                        [
                            (chat, []),
                            (
                                f"execute_tool {tool}",
                                [
                                    (
                                        "invoke_agent researcher",
                                        [
                                            (
                                                "agent_step researcher",
                                                [
                                                    (chat, []),
                                                    (
                                                        "execute_tool get_weather",
                                                        [("db.query weather", [])],
                                                    ),
                                                    (chat, []),
                                                ],
                                            )
                                        ],
                                    )
                                ],
                            ),
                            (chat, []),
                        ],
                    )
                ],
            )
        ],
    )


REACT_DELEGATION = "Delegate work to coworker"
REACT_DELEGATION_TREE = delegation_tree(REACT_DELEGATION, "chat scripted")


def react_delegation_script() -> list[Any]:
    """The manager's and the coworker's turns (one model for both, in call order)."""
    return [
        action(REACT_DELEGATION, task="Find the weather", context="Paris", coworker="researcher"),
        action("get_weather", city="Paris"),
        final("Paris: sunny"),
        final(ANSWER),
    ]


def react_delegating_crew() -> Crew:
    model = ScriptedLLM(react_delegation_script())
    return delegating_crew(model, model)


@pytest.mark.parametrize("mode", MODES)
async def test_a_hierarchical_crews_delegation_is_a_nested_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """The manager delegates to a coworker (CrewAI's delegation tool, natively called):
    the coworker's work is ``invoke_agent researcher`` under the delegation's
    ``execute_tool``, in the crew's trace and conversation; every call is one chat
    span; the crew's run counts all four calls, the coworker's its own two."""
    delegate = {"task": "Find the weather", "context": "Paris", "coworker": "researcher"}
    replies = [
        Reply(tool_calls=[FakeToolCall("call_d", "delegate_work_to_coworker", delegate)]),
        Reply(tool_calls=[weather_call()], prompt_tokens=20, completion_tokens=2),
        Reply(text="Paris: sunny", prompt_tokens=30, completion_tokens=3),
        Reply(text=ANSWER, prompt_tokens=40, completion_tokens=4),
    ]
    with FakeOpenAIServer(replies) as server:
        events = await run(delegating_crew(llm(server), llm(server)), mode, name="trip")
        calls = len(server.requests)
    run_span = one(captured_spans, "invoke_agent trip")
    assert shape(captured_spans, run_span) == delegation_tree("delegate_work_to_coworker", CHAT)
    trip, researcher = check_totals(captured_spans.spans, model_calls=calls)
    assert (trip.agent, trip.model_calls, trip.own_model_calls) == ("trip", 4, 2)
    assert (researcher.agent, researcher.model_calls, researcher.depth) == ("researcher", 2, 1)
    assert (trip.input_tokens, trip.own_input_tokens, researcher.input_tokens) == (101, 51, 50)
    assert run_span.attributes[A.NESTED_RUNS] == 1
    delegation = one(captured_spans, "execute_tool delegate_work_to_coworker")
    assert json.loads(delegation.attributes[A.TOOL_ARGUMENTS]) == delegate
    assert delegation.attributes[A.AGENT_NAME] == "Crew Manager"
    nested = one(captured_spans, "invoke_agent researcher")
    assert nested.attributes[A.CONVERSATION_ID] == run_span.attributes[A.CONVERSATION_ID]
    assert nested.attributes["runnertrace.mode"] == mode
    (asked,) = json.loads(nested.attributes[A.INPUT_MESSAGES])
    assert asked["parts"] == [{"type": "text", "content": "Find the weather"}]
    assert output_parts(nested) == [{"type": "text", "content": "Paris: sunny"}]
    assert nested.status.status_code is StatusCode.UNSET
    ordered = in_start_order(captured_spans, CHAT)
    names = [c.attributes[A.AGENT_NAME] for c in ordered]
    assert names == ["Crew Manager", "researcher", "researcher", "Crew Manager"]
    assert one(captured_spans, "execute_tool get_weather").attributes[A.AGENT_NAME] == "researcher"
    assert run_span.attributes.get(A.MALFORMED) is None
    if mode == "stream":  # the coworker's run is traced, not yielded: the stream is the crew's
        assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == ANSWER
        assert [e.agent_name for e in events if isinstance(e, ev.StepStart)] == [
            None,
            "Crew Manager",
        ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_react_delegation_is_a_nested_run_with_the_coworkers_tool_call(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """On the ReAct path the coworker's tool call runs inside the manager's delegation
    call: it is its own span, in the coworker's run, with the user's span inside."""
    await run(react_delegating_crew(), mode, name="trip")
    run_span = one(captured_spans, "invoke_agent trip")
    assert shape(captured_spans, run_span) == REACT_DELEGATION_TREE
    trip, researcher = check_totals(captured_spans.spans, model_calls=4)
    assert (trip.model_calls, trip.own_model_calls, researcher.model_calls) == (4, 2, 2)
    assert (trip.tool_calls, researcher.tool_calls) == (2, 1)
    lookup = one(captured_spans, "execute_tool get_weather")
    assert lookup.attributes[A.AGENT_NAME] == "researcher"
    names = [c.attributes[A.AGENT_NAME] for c in in_start_order(captured_spans, "chat scripted")]
    assert names == ["Crew Manager", "researcher", "researcher", "Crew Manager"]
    assert run_span.attributes.get(A.MALFORMED) is None
    assert one(captured_spans, "invoke_agent researcher").attributes.get(A.MALFORMED) is None


async def test_an_untraced_stream_yields_the_crews_events_only(
    captured_spans: CapturedSpans,
) -> None:
    """Untraced, a coworker's work has no run to go to: the stream is the crew's, as
    traced, and nothing of ours is traced."""
    agent = Agent("trip", CrewAIRunner(), react_delegating_crew())
    requests = [AgentRequestText(prompt="Weather in Paris?")]
    events = [e async for e in agent.runner.stream(agent, Session("s1"), requests)]
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == ANSWER
    assert [e.step_name for e in events if isinstance(e, ev.StepStart)] == ["task", "Crew Manager"]
    tools = [e.tool_name for e in events if isinstance(e, ev.ToolCallStart)]
    assert tools == [REACT_DELEGATION]
    assert captured_spans.names() == ["db.query weather"]  # the user's own span only


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_coworker_is_a_failed_nested_run_and_the_manager_goes_on(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """The coworker's model call fails: CrewAI ends the coworker's execution with an
    error and hands the delegation its message; the nested run is ERROR with the
    exception, its error counts at both levels, and the manager answers."""
    model = ScriptedLLM(
        [
            action(REACT_DELEGATION, task="Find it", context="Paris", coworker="researcher"),
            ConnectionError("the coworker's model is down"),
            final(ANSWER),
        ]
    )
    await run(delegating_crew(model, model, max_retry_limit=0), mode, name="trip")
    nested = one(captured_spans, "invoke_agent researcher")
    assert nested.status.status_code is StatusCode.ERROR
    assert nested.attributes[A.ERROR_TYPE] == "ConnectionError"
    assert parent_of(captured_spans, nested).name == f"execute_tool {REACT_DELEGATION}"
    trip, researcher = check_totals(captured_spans.spans, model_calls=3)
    assert (trip.errors, researcher.errors, researcher.model_calls) == (1, 1, 1)
    run_span = one(captured_spans, "invoke_agent trip")
    assert run_span.status.status_code is StatusCode.UNSET
    assert output_parts(run_span) == [{"type": "text", "content": ANSWER}]


async def test_a_coworker_working_when_the_run_is_cancelled_ends_cancelled(
    captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    inside, release = threading.Event(), threading.Event()

    @tool("get_weather")
    def slow_weather(city: str) -> str:
        """The weather in a city (slow)."""
        inside.set()
        release.wait(30)
        return "sunny"

    model = ScriptedLLM(react_delegation_script())
    crew = delegating_crew(model, model)
    crew.agents[0].tools = [slow_weather]
    task = asyncio.create_task(run(crew, "run", name="trip"))
    try:
        assert await asyncio.to_thread(inside.wait, 30)  # the coworker's tool is running
        await cancel_and_settle(task)
    finally:
        release.set()  # the crew's thread (which cancelling cannot stop) finishes
    nested = one(captured_spans, "invoke_agent researcher")
    assert nested.attributes[A.CANCELLED] is True
    assert parent_of(captured_spans, nested).name == f"execute_tool {REACT_DELEGATION}"
    run_span = one(captured_spans, "invoke_agent trip")
    assert run_span.attributes[A.CANCELLED] is True
    assert run_span.attributes[A.NESTED_RUNS] == 1
    # the manager's call and the coworker's, rolled up when its run was cancelled
    assert (run_span.attributes[A.AGG_MODEL_CALLS], run_span.attributes[A.OWN_MODEL_CALLS]) == (
        2,
        1,
    )
    assert tracker.open == {}
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]


async def test_concurrent_runs_of_one_crew_keep_their_own_traces(
    captured_spans: CapturedSpans,
) -> None:
    """A run of a crew that is already running takes a copy (a crew's id finds its
    run's mapping): each run's trace has its own two agents' calls."""
    model = ScriptedLLM([final("Noted.")] * 4)
    agents = [
        CrewAgent(role=role, goal="Do it.", backstory="You do.", llm=model)
        for role in ("first", "second")
    ]
    tasks = [
        Task(description="Step: {request}", expected_output="Done.", agent=agent)
        for agent in agents
    ]
    crew = Crew(agents=agents, tasks=tasks)
    runner = TracingRunner(CrewAIRunner())
    agent = Agent("pair", runner, crew)
    requests = [AgentRequestText(prompt="Go.")]
    await asyncio.gather(*(runner.run(agent, Session(f"s{n}"), requests) for n in range(2)))
    assert len(model.calls) == 4
    runs = captured_spans.by_name("invoke_agent pair")
    assert len(runs) == 2
    for run_span in runs:
        mine = [
            s
            for s in captured_spans.by_name("chat scripted")
            if root_of(captured_spans, s) == run_span
        ]
        assert [s.attributes[A.AGENT_NAME] for s in in_start_order_of(mine)] == ["first", "second"]
    assert crew.stream is False and all(
        c is not kickoff_callback for c in crew.before_kickoff_callbacks
    )


@pytest.mark.parametrize("mode", MODES)
async def test_an_install_that_fails_half_way_leaves_the_users_crew_as_it_was(
    mode: str,
    captured_spans: CapturedSpans,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The install step faults after our callback is on the user's crew: the run goes
    on plain (one log line) and the crew is given back without it, not streaming."""
    attach = crewai_runner.attach_sink

    def attach_then_fail(crew: Crew, sink: Any) -> None:
        attach(crew, sink)
        raise KeyError("an attribute a CrewAI release renamed")

    monkeypatch.setattr(crewai_runner, "attach_sink", attach_then_fail)
    native = CrewAgent(
        role="solo", goal="Do it.", backstory="You do.", llm=ScriptedLLM([final("Done.")])
    )
    crew = Crew(
        agents=[native],
        tasks=[Task(description="{request}", expected_output="Done.", agent=native)],
    )
    runner = TracingRunner(CrewAIRunner())
    agent = Agent("solo", runner, crew)
    requests = [AgentRequestText(prompt="Go.")]
    with tolerate_internal_errors():
        if mode == "run":
            reply = await runner.run(agent, Session("s1"), requests)
        else:
            events = [e async for e in runner.stream(agent, Session("s1"), requests)]
            reply = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
    assert str(reply) == "Done."
    faults = [r.getMessage() for r in caplog.records if "internal error in" in r.getMessage()]
    assert len(faults) == 1 and "crewai install" in faults[0], faults
    assert crew.before_kickoff_callbacks == [] and crew.stream is False
    assert captured_spans.by_name("chat scripted") == []  # the plain run: nothing of ours


def root_of(spans: CapturedSpans, span: Any) -> Any:
    while span.parent is not None:
        span = parent_of(spans, span)
    return span


def in_start_order_of(spans: list[Any]) -> list[Any]:
    return sorted(spans, key=lambda s: s.start_time or 0)


# -- async_execution tasks: branches of the crew's run ------------------------------------------
def async_crew() -> Crew:
    """Two ``async_execution`` tasks (Paris, Oslo), whose agents' first model calls wait
    for each other (so both are in flight at once), then a task that waits for both."""
    both = threading.Barrier(2, timeout=10)  # a deadlock guard: a lone call fails the run

    def met(text: str) -> Any:
        def turn(messages: Any) -> str:
            both.wait()
            return text

        return turn

    def member(role: str, city: str) -> CrewAgent:
        turns = [met(action("get_weather", city=city)), final(f"{city}: sunny")]
        return CrewAgent(
            role=role,
            goal="Look it up.",
            backstory="b",
            llm=ScriptedLLM(turns),
            tools=[get_weather],
        )

    paris, oslo = member("paris", "Paris"), member("oslo", "Oslo")
    writer = CrewAgent(
        role="writer", goal="Write.", backstory="b", llm=ScriptedLLM([final(ANSWER)])
    )
    looked_up = [
        Task(
            description=f"{who.role}: {{request}}",
            expected_output="x",
            agent=who,
            async_execution=True,
        )
        for who in (paris, oslo)
    ]
    answer = Task(
        description="Answer: {request}", expected_output="x", agent=writer, context=looked_up
    )
    return Crew(agents=[paris, oslo, writer], tasks=[*looked_up, answer])


def _looked_up(role: str) -> tuple[str, list[Any]]:
    chat: tuple[str, list[Any]] = ("chat scripted", [])
    tool_: tuple[str, list[Any]] = ("execute_tool get_weather", [("db.query weather", [])])
    return ("agent_step task", [(f"agent_step {role}", [chat, tool_, chat])])


# The async tasks' subtrees in their agents' order (their start order is the threads').
ASYNC_TREE = (
    "invoke_agent trip",
    [
        _looked_up("oslo"),
        _looked_up("paris"),
        ("agent_step task", [("agent_step writer", [("chat scripted", [])])]),
    ],
)


def async_shape(spans: CapturedSpans, run_span: Any) -> tuple[str, list[Any]]:
    """The run's tree, its two async tasks in their agents' order."""
    name, tasks = shape(spans, run_span)
    return name, [*sorted(tasks[:2]), *tasks[2:]]


def subtree(spans: CapturedSpans, span: Any) -> list[Any]:
    found: list[Any] = []
    for child in spans.children(span):
        found += [child, *subtree(spans, child)]
    return found


@pytest.mark.parametrize("mode", MODES)
async def test_async_tasks_are_branches_that_overlap_and_the_waiting_task_follows(
    mode: str, captured_spans: CapturedSpans
) -> None:
    events = await run(async_crew(), mode, name="trip")
    run_span = one(captured_spans, "invoke_agent trip")
    assert async_shape(captured_spans, run_span) == ASYNC_TREE
    (crew,) = check_totals(captured_spans.spans, model_calls=5)
    assert (crew.model_calls, crew.tool_calls, crew.nested_runs) == (5, 2, 0)
    assert run_span.attributes.get(A.MALFORMED) is None
    first, second, waiting = in_start_order(captured_spans, "agent_step task")
    assert {first.attributes[A.STEP_INDEX], second.attributes[A.STEP_INDEX]} == {0, 1}
    assert waiting.attributes[A.STEP_INDEX] == 2
    # each branch holds its own agent's work, with that agent's name
    by_agent: dict[str, Any] = {}
    for task_span in (first, second):
        (agent_step,) = captured_spans.children(task_span)
        role = agent_step.name.removeprefix("agent_step ")
        inside = subtree(captured_spans, agent_step)
        assert {s.attributes.get(A.AGENT_NAME) for s in inside if s.name != "db.query weather"} == {
            role
        }
        by_agent[role] = next(s for s in inside if s.name == "chat scripted")
    # both first calls were in flight at once (each waited for the other in its call)
    paris, oslo = by_agent["paris"], by_agent["oslo"]
    assert paris.start_time < oslo.end_time and oslo.start_time < paris.end_time
    # the task that waits for them starts after both ended
    assert max(first.end_time, second.end_time) <= waiting.start_time
    if mode == "stream":
        starts = sorted(
            (e.step_name, e.branch or "") for e in events if isinstance(e, ev.StepStart)
        )
        assert [s for s in starts if s[0] == "task"] == [
            ("task", ""),
            ("task", "task 0"),
            ("task", "task 1"),
        ]
        branches = {e.step_name: e.branch for e in events if isinstance(e, ev.StepStart)}
        messages = [e.branch for e in events if isinstance(e, ev.MessageStart)]
        assert sorted(messages, key=str) == sorted(
            [branches["paris"]] * 2 + [branches["oslo"]] * 2 + [None], key=str
        )
        assert branches["writer"] is None and {branches["paris"], branches["oslo"]} == {
            "task 0",
            "task 1",
        }


# -- the same compositions under the application's own provider ---------------------------------
def assistant_crew() -> CrewAgent:
    """One agent whose tool opens the user's span."""
    return CrewAgent(
        role="assistant",
        goal="Answer weather questions.",
        backstory="You know the weather.",
        llm=ScriptedLLM([action("get_weather", city="Paris"), final(ANSWER)]),
        tools=[get_weather],
    )


ASSISTANT_TREE: tuple[str, list[Any]] = (
    "invoke_agent trip",
    [
        (
            "agent_step task",
            [
                (
                    "agent_step assistant",
                    [
                        ("chat scripted", []),
                        ("execute_tool get_weather", [("db.query weather", [])]),
                        ("chat scripted", []),
                    ],
                )
            ],
        )
    ],
)

# name -> (the native to run, its tree, the tree as drawn from the spans, its model calls)
COMPOSITIONS: dict[str, tuple[Any, Any, Any, int]] = {
    "one agent": (assistant_crew, ASSISTANT_TREE, shape, 2),
    "async tasks": (async_crew, ASYNC_TREE, async_shape, 5),
    "delegation": (react_delegating_crew, REACT_DELEGATION_TREE, shape, 4),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("composition", COMPOSITIONS)
async def test_each_composition_with_the_private_provider(
    composition: str, mode: str, captured_spans: CapturedSpans
) -> None:
    make, tree, draw, calls = COMPOSITIONS[composition]
    await run(make(), mode, name="trip")
    assert draw(captured_spans, one(captured_spans, "invoke_agent trip")) == tree
    check_totals(captured_spans.spans, model_calls=calls)


APP_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

app = TracerProvider()
exporter = InMemorySpanExporter()
app.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(app)  # ours, OpenInference's and the user's spans all go here

from openinference.instrumentation.crewai import CrewAIInstrumentor
CrewAIInstrumentor().instrument()

import tests.runners.crewai.test_crewai_compositions as case
from tests.composition_checks import check_totals, rows
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.crewai import CrewAIRunner
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import TraceConfig

case.user["tracer"] = trace.get_tracer("user-code")
spans = CapturedSpans(exporter, app)

async def go(runner, native, mode):
    agent = Agent("trip", runner, native)
    requests = [AgentRequestText(prompt="Weather in Paris?")]
    if mode == "run":
        await runner.run(agent, Session("s1"), requests)
    else:
        async for _ in runner.stream(agent, Session("s1"), requests):
            pass

async def main():
    out = {}
    for name, (make, _, draw, calls) in case.COMPOSITIONS.items():
        for mode in ("run", "stream"):
            await go(CrewAIRunner(), make(), mode)
            untraced = sorted({s.instrumentation_scope.name for s in spans.spans})
            spans.clear()
            await go(traced(CrewAIRunner(), TraceConfig(type="app")), make(), mode)
            (root,) = [s for s in spans.spans if s.name == "invoke_agent trip"]
            by_id = {s.context.span_id: s for s in spans.spans}
            out[f"{name} {mode}"] = {
                "untraced scopes": untraced,
                "tree": draw(spans, root),
                "roots": [s.name for s in spans.roots()],
                "theirs": [
                    s.name for s in spans.spans
                    if s.instrumentation_scope.name not in ("runnertrace", "user-code")
                ],
                "db parents": [
                    by_id[s.parent.span_id].name for s in spans.by_name("db.query weather")
                ],
                "levels": rows(check_totals(spans.spans, model_calls=calls)),
            }
            spans.clear()
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def app_provider(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each composition, untraced then traced, in a process whose global provider is the
    application's, with OpenInference's CrewAI instrumentor on it."""
    repo = Path(__file__).resolve().parents[3]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OTEL_", "PYTEST_"))
    }
    home = tmp_path_factory.mktemp("home")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APP_PROVIDER)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
        env={
            **env,
            "HOME": str(home),
            "CREWAI_STORAGE_DIR": str(home / "crewai"),
            "CREWAI_DISABLE_TELEMETRY": "true",
            "CREWAI_TRACING_ENABLED": "false",
            "CREWAI_DISABLE_VERSION_CHECK": "true",
        },
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def as_tree(value: Any) -> Any:
    """A tree read back from JSON (tuples became lists)."""
    name, children = value
    return (name, [as_tree(c) for c in children])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("composition", COMPOSITIONS)
def test_each_composition_under_an_app_provider_is_the_private_providers_tree(
    composition: str, mode: str, app_provider: dict[str, Any]
) -> None:
    """The same tree as with our private provider, one trace, every model call one chat
    span of ours with the totals of its subtree at each level (checked in the process);
    OpenInference's instrumentor is live (an untraced run is its to trace) but adds
    nothing to a traced run, in stream mode neither (its kickoff span); the user's
    span in a tool nests under our execute_tool."""
    seen = app_provider[f"{composition} {mode}"]
    assert "openinference.instrumentation.crewai" in seen["untraced scopes"]
    assert as_tree(seen["tree"]) == COMPOSITIONS[composition][1]
    assert seen["roots"] == ["invoke_agent trip"]
    assert seen["theirs"] == []
    assert seen["db parents"] == ["execute_tool get_weather"] * len(seen["db parents"])
    assert seen["db parents"]


def test_under_an_app_provider_the_delegations_totals_hold_at_each_level(
    app_provider: dict[str, Any],
) -> None:
    for mode in MODES:
        trip, researcher = app_provider[f"delegation {mode}"]["levels"].splitlines()
        assert trip.startswith("trip: 4 calls (2 own)")
        assert researcher.startswith("  researcher: 2 calls (2 own)")


# -- a fault anywhere, where the contract's one-tool scenario does not reach ---------------------
@tool("get_flights")
def get_flights(city: str) -> str:
    """The flights to a city."""
    raise LookupError(f"no flights to {city}")


def failing_agent() -> CrewAgent:
    """A tool that fails, then a model call that fails the run (no retry)."""
    model = ScriptedLLM(
        [action("get_flights", city="Oslo"), ConnectionError("model endpoint reset")]
    )
    return CrewAgent(
        role="planner",
        goal="Plan trips.",
        backstory="You plan trips.",
        llm=model,
        tools=[get_flights],
        max_retry_limit=0,
    )


FAULT_SCENARIOS: dict[str, Any] = {
    "delegation": react_delegating_crew,  # a coworker: the nesting
    "failures": failing_agent,  # a failed tool, a failed model call, a failed run
}


async def outcome(native: Any, wrap: Any, mode: str) -> tuple[Any, list[ev.StreamEvent]]:
    """One run's reply (run mode) or events (stream mode); a failed run's outcome is its
    error, by class and message, after the events it streamed."""
    agent = Agent("trip", wrap(CrewAIRunner()), native)
    requests = [AgentRequestText(prompt="Weather in Paris?")]
    events: list[ev.StreamEvent] = []
    try:
        if mode == "run":
            return await agent.runner.run(agent, Session("s1"), requests), events
        async for event in agent.runner.stream(agent, Session("s1"), requests):
            events.append(event)
    except Exception as exc:  # the failed run's outcome, compared below
        return f"{type(exc).__name__}: {exc}", events
    return None, events


def _fault_params() -> list[Any]:
    (case,) = (c for c in CASES if c.name == "crewai")
    return [
        pytest.param(scenario, target, id=f"{scenario}-{target.label}")
        for scenario in FAULT_SCENARIOS
        for target in targets(case)
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("scenario", "target"), _fault_params())
async def test_a_fault_in_any_part_costs_telemetry_only_in_a_delegation_and_in_failures(
    scenario: str,
    target: Target,
    mode: str,
    captured_spans: CapturedSpans,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """tests/contract/test_runner_every_method.py breaks each reflected target on one
    agent with one tool, where a coworker, a failing tool or model call and a failed
    run never happen (those targets skip there); here the same targets are broken on
    the two scenarios that reach them. Run mode: the traced outcome is the healthy one
    (and untraced run mode reaches nothing of ours); stream mode: the traced and the
    untraced stream agree under the same fault. At most one line per boundary is
    logged, and no span stays open."""
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    make = FAULT_SCENARIOS[scenario]

    def plain(runner: Any) -> Any:
        return runner

    healthy, _ = await outcome(make(), plain, mode)
    broken = break_target(target, monkeypatch)
    internal_log.reset()  # each test counts its own lines
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        _, untraced_events = await outcome(make(), plain, mode)
        reached_untraced = broken.calls
        reply, events = await outcome(make(), TracingRunner, mode)
    await settle()
    if broken.calls == 0:
        pytest.skip(f"{target.label} is not reached by the {scenario} scenario in {mode} mode")
    if mode == "run":
        assert reached_untraced == 0, "untraced run mode reached the mapping"
        assert reply == healthy
    else:
        assert event_shape(events) == event_shape(untraced_events)
    logged = internal_faults(caplog)
    assert 1 <= len(logged) <= 2, logged  # one per boundary it crossed: mapping, install
    assert tracker.open == {}
