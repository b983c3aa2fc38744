"""CrewAIRunner against real CrewAI crews driven by a scripted ReAct model (offline)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
pytest.importorskip("crewai", reason="the crewai extra lives in its own venv (.ci/extra-crewai)")

# CrewAI warns about its own deprecated fields on every crew it builds.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from crewai import Agent as CrewAgent  # noqa: E402
from crewai.events.event_bus import crewai_event_bus  # noqa: E402
from crewai.events.types.crew_events import CrewKickoffStartedEvent  # noqa: E402
from crewai.events.types.tool_usage_events import ToolUsageFinishedEvent  # noqa: E402
from crewai.tools import tool  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace._internal.imports import MissingExtraError  # noqa: E402
from runnertrace.core import Runtime, Session, ToolContext, observing  # noqa: E402
from runnertrace.core import events as ev  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.core.models import (  # noqa: E402
    AgentReplyText,
    AgentRequestAny,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.runners.crewai import STATE_KEY, CrewAIModule, CrewAIRunner  # noqa: E402
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final  # noqa: E402
from runnertrace.testing import CapturedSpans  # noqa: E402
from runnertrace.tracing import attributes as A  # noqa: E402
from runnertrace.tracing.config import load_settings  # noqa: E402

ANSWER = "3 times 4 is 12."
PROMPT = [AgentRequestText(prompt="What is 3 times 4?")]
TOOL_SESSIONS: list[str] = []


@pytest.fixture(autouse=True)
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """CrewAI writes under $HOME and phones home unless told not to."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


@tool("multiply")
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    TOOL_SESSIONS.append(ToolContext.get().session.id)
    return a * b


def two_step(runs: int = 1) -> list[Any]:
    return [action("multiply", a=3, b=4), final(ANSWER)] * runs


def calc(turns: Sequence[Any], **kwargs: Any) -> CrewAgent:
    return CrewAgent(
        role="calc",
        goal="Answer arithmetic questions.",
        backstory="You are precise.",
        llm=ScriptedLLM(list(turns)),
        tools=[multiply],
        **kwargs,
    )


async def collect(agent: Agent, session: Session, requests: Any = PROMPT) -> list[ev.StreamEvent]:
    return [e async for e in agent.runner.stream(agent, session, requests)]


def shape(events: Sequence[ev.StreamEvent]) -> list[tuple[str, Any]]:
    """Event types with what identifies them; consecutive text (reasoning) deltas merged."""
    out: list[tuple[str, Any]] = []
    for e in events:
        if isinstance(e, (ev.TextDelta, ev.ReasoningDelta)) and out and out[-1][0] == e.type:
            continue
        label = getattr(e, "step_name", None) or getattr(e, "tool_name", None)
        out.append((e.type, label))
    return out


EXPECTED = [
    ("step_start", "task"),
    ("step_start", "calc"),
    # A ReAct reply's scaffolding is its reasoning; only the final answer is text.
    ("message_start", None),
    ("reasoning_start", None),
    ("reasoning_delta", None),
    ("reasoning_end", None),
    ("tool_call_start", "multiply"),
    ("tool_call_args", None),
    ("tool_call_end", None),
    ("message_end", None),
    ("tool_call_result", None),
    ("message_start", None),
    ("reasoning_start", None),
    ("reasoning_delta", None),
    ("reasoning_end", None),
    ("text_delta", None),
    ("message_end", None),
    ("step_end", "calc"),
    ("step_end", "task"),
]


def assert_paired(events: Sequence[ev.StreamEvent]) -> None:
    """Every message and tool call that starts ends, in order, and results follow calls."""
    open_messages: set[str] = set()
    calls: dict[str, str] = {}
    for e in events:
        if isinstance(e, ev.MessageStart):
            open_messages.add(e.message_id)
        elif isinstance(e, ev.TextDelta):
            assert e.message_id in open_messages
        elif isinstance(e, ev.MessageEnd):
            open_messages.remove(e.message_id)
        elif isinstance(e, ev.ToolCallStart):
            calls[e.tool_call_id] = "started"
        elif isinstance(e, ev.ToolCallEnd):
            assert calls[e.tool_call_id] == "started"
            calls[e.tool_call_id] = "asked"
        elif isinstance(e, ev.ToolCallResult):
            assert calls.pop(e.tool_call_id) == "asked"
    assert not open_messages and not calls


# -- events ----------------------------------------------------------------------------------
async def test_stream_events_follow_the_crew() -> None:
    agent = Agent("calc", CrewAIRunner(), calc(two_step()))
    events = await collect(agent, Session("s1"))
    assert shape(events) == EXPECTED
    assert_paired(events)
    args = "".join(e.delta for e in events if isinstance(e, ev.ToolCallArgs))
    assert json.loads(args) == {"a": 3, "b": 4}
    (result,) = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert (result.content, result.is_error) == ("12", False)
    text = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
    assert text == ANSWER  # the reply run mode gives, without the ReAct scaffolding
    thought = "".join(e.delta for e in events if isinstance(e, ev.ReasoningDelta))
    assert thought.startswith("Thought: I should use multiply.")
    assert thought.endswith("Final Answer:")
    assert sum(isinstance(e, ev.TextDelta) for e in events) > 4  # streamed word by word
    assert [e.agent_name for e in events if isinstance(e, ev.StepStart)] == [None, "calc"]


async def test_run_mode_reports_the_same_events_to_an_observer() -> None:
    agent = Agent("calc", CrewAIRunner(), calc(two_step()))
    seen: list[ev.StreamEvent] = []
    with observing(seen.append):
        reply = await agent.runner.run(agent, Session("s1"), PROMPT)
    assert reply == AgentReplyText(text=ANSWER, prompt=PROMPT[0].prompt)
    assert shape(seen) == EXPECTED
    assert sum(isinstance(e, ev.TextDelta) for e in seen) == 1  # the final answer, once
    assert_paired(seen)
    assert TOOL_SESSIONS[-1] == "s1"  # the tool context reaches CrewAI's thread


async def test_concurrent_runs_see_only_their_own_events_in_order() -> None:
    """20 runs of one shared agent at once: each stream holds its own crew's events,
    in emission order, whatever CrewAI's threads interleave."""

    def turn(messages: Any) -> str:
        text = json.dumps(messages)
        (n,) = re.findall(r"number (\d+)", text)[:1]
        if len(messages) > 2:  # the tool's observation came back
            return final(f"double of {n} is {int(n) * 2}")
        return action("multiply", a=int(n), b=2)

    native = calc([turn] * 40)
    agent = Agent("calc", CrewAIRunner(), native)
    streams = await asyncio.gather(
        *(
            collect(agent, Session(f"s{n}"), [AgentRequestText(prompt=f"Double number {n}")])
            for n in range(20)
        )
    )
    for n, events in enumerate(streams):
        assert shape(events) == EXPECTED, n
        assert_paired(events)
        args = "".join(e.delta for e in events if isinstance(e, ev.ToolCallArgs))
        assert json.loads(args) == {"a": n, "b": 2}
        (result,) = [e for e in events if isinstance(e, ev.ToolCallResult)]
        assert result.content == str(n * 2)
        text = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
        assert text.endswith(f"double of {n} is {n * 2}")


async def test_concurrent_traced_runs_keep_their_own_traces(
    captured_spans: CapturedSpans,
) -> None:
    def turn(messages: Any) -> str:
        text = json.dumps(messages)
        (n,) = re.findall(r"number (\d+)", text)[:1]
        return final(n) if len(messages) > 2 else action("multiply", a=int(n), b=2)

    agent = Agent("calc", TracingRunner(CrewAIRunner(), capture_content=True), calc([turn] * 40))
    replies = await asyncio.gather(
        *(
            agent.runner.run(agent, Session(f"s{n}"), [AgentRequestText(prompt=f"number {n}")])
            for n in range(20)
        )
    )
    assert [r.text for r in replies] == [str(n) for n in range(20)]  # type: ignore[union-attr]
    traces: dict[int, list[Any]] = {}
    for span in captured_spans.spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    assert len(traces) == 20
    for spans in traces.values():
        names = sorted(s.name for s in spans)
        assert names.count("chat scripted") == 2 and names.count("execute_tool multiply") == 1
        (root,) = [s for s in spans if s.parent is None]
        (tool_span,) = [s for s in spans if s.name == "execute_tool multiply"]
        n = int(root.attributes[A.CONVERSATION_ID][1:])
        assert json.loads(tool_span.attributes[A.TOOL_ARGUMENTS]) == {"a": n, "b": 2}
        assert tool_span.attributes[A.TOOL_RESULT] == str(n * 2)


# -- session, options, context ---------------------------------------------------------------
async def test_the_session_carries_the_conversation_across_runs() -> None:
    native = calc([final("Noted: your name is Ada."), final("Your name is Ada.")])
    agent = Agent("calc", CrewAIRunner(), native)
    session = Session("s1")
    await agent.runner.run(agent, session, [AgentRequestText(prompt="My name is Ada.")])
    reply = await agent.runner.run(agent, session, [AgentRequestText(prompt="My name?")])
    assert reply.text == "Your name is Ada."  # type: ignore[union-attr]
    assert session.get(STATE_KEY)["calc"] == [
        {"request": "My name is Ada.", "reply": "Noted: your name is Ada."},
        {"request": "My name?", "reply": "Your name is Ada."},
    ]
    second = json.dumps(native.llm.calls[1])  # type: ignore[union-attr]
    assert "My name is Ada." in second and "Noted: your name is Ada." in second


async def test_a_failed_run_saves_nothing() -> None:
    agent = Agent("calc", CrewAIRunner(), calc([RuntimeError("down")], max_retry_limit=0))
    session = Session("s1")
    with pytest.raises(RuntimeError, match="down"):
        await agent.runner.run(agent, session, PROMPT)
    assert session.get(STATE_KEY) is None


async def test_braces_in_a_request_are_not_crewai_placeholders() -> None:
    native = calc([final("ok")])
    agent = Agent("calc", CrewAIRunner(), native)
    with observing(lambda e: None):  # traced path: our before_kickoff callback is in place
        await agent.runner.run(agent, Session("s1"), [AgentRequestText(prompt="Say {name}")])
    assert "Say {name}" in json.dumps(native.llm.calls[0])  # type: ignore[union-attr]


async def test_structured_requests_become_json_and_images_are_refused() -> None:
    native = calc([final("ok")])
    agent = Agent("calc", CrewAIRunner(), native)
    await agent.runner.run(agent, Session("s1"), [AgentRequestAny(content={"city": "Oslo"})])
    assert '{\\"city\\": \\"Oslo\\"}' in json.dumps(native.llm.calls[0])  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="'text' and 'any' requests; got a 'image' request"):
        await agent.runner.run(agent, Session("s2"), [AgentRequestImage(image_data="aGk=")])


async def test_framework_context_is_ignored_with_one_warning_per_runner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    agent = Agent("calc", CrewAIRunner(), calc([final("a"), final("b")]))
    session = Session("s1")
    session.set_framework_context({"tier": "gold"})
    await agent.runner.run(agent, session, PROMPT)
    await collect(agent, session)
    warned = [r for r in caplog.records if "does not support a framework context" in r.message]
    assert len(warned) == 1
    assert session.load_framework_context() == {"tier": "gold"}


@pytest.mark.parametrize("key", ["agents", "tasks", "memory", "stream"])
def test_reserved_run_options_are_rejected(key: str) -> None:
    native = calc([])
    module = CrewAIModule([native], runtime=Runtime(settings=load_settings()))
    with pytest.raises(ValueError, match=f"run option '{key}' is reserved by CrewAIRunner: "):
        module.run_options(native, **{key: None})


def kickoff_watch() -> Iterator[list[Any]]:
    """The crews that start while the block runs (a user's own bus handler)."""
    crews: list[Any] = []
    with crewai_event_bus.scoped_handlers():

        @crewai_event_bus.on(CrewKickoffStartedEvent)
        def started(source: Any, event: Any) -> None:
            crews.append(source)

        yield crews
        crewai_event_bus.flush()


@pytest.fixture
def crews() -> Iterator[list[Any]]:
    yield from kickoff_watch()


async def test_declared_options_build_the_crew_and_verbose_defaults_to_off(
    crews: list[Any],
) -> None:
    native = calc([final("a"), final("b")])
    module = CrewAIModule([native], runtime=Runtime(settings=load_settings()))
    agent = module.get(native)
    await agent.runner.run(agent, Session("s1"), PROMPT)
    module.run_options(native, verbose=True, max_rpm=50)
    await agent.runner.run(agent, Session("s1"), PROMPT)
    crewai_event_bus.flush()
    assert [(c.verbose, c.max_rpm) for c in crews] == [(False, None), (True, 50)]
    assert crews[0] is not crews[1]  # a crew per run
    assert crews[0].agents[0] is native  # one run at a time: the user's agent itself


# CrewAI warns that the factory's closure (a task_callback) cannot be checkpointed.
@pytest.mark.filterwarnings("ignore:function callbacks cannot be serialized")
async def test_a_run_options_factory_sees_the_session_and_wins_per_key(
    crews: list[Any],
) -> None:
    finished: list[str] = []

    def factory(agent: Agent, session: Session, requests: Any) -> dict[str, Any]:
        return {"max_rpm": 7, "task_callback": lambda out: finished.append(session.id)}

    native = calc(two_step())
    module = CrewAIModule([native], runtime=Runtime(settings=load_settings()))
    module.run_options(native, factory, max_rpm=99)
    agent = module.get(native)
    await collect(agent, Session("guest-1"))
    crewai_event_bus.flush()
    assert finished == ["guest-1"]
    assert [c.max_rpm for c in crews] == [7]


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_users_event_handler_fires_exactly_once(
    mode: str, traced: bool, captured_spans: CapturedSpans
) -> None:
    seen: list[str] = []
    with crewai_event_bus.scoped_handlers():

        @crewai_event_bus.on(ToolUsageFinishedEvent)
        def finished(source: Any, event: Any) -> None:
            seen.append(str(event.output))

        runner = TracingRunner(CrewAIRunner()) if traced else CrewAIRunner()
        agent = Agent("calc", runner, calc(two_step()))
        if mode == "run":
            await runner.run(agent, Session("s1"), PROMPT)
        else:
            await collect(agent, Session("s1"))
        crewai_event_bus.flush()
    assert seen == ["12"]
    assert bool(captured_spans.spans) is traced


# -- traced ----------------------------------------------------------------------------------
EXPECTED_TREE = [
    (
        "invoke_agent calc",
        [
            (
                "agent_step task",
                [
                    (
                        "agent_step calc",
                        [  # a ReAct reply's scaffolding: the chat's reasoning
                            ("chat scripted", [("reasoning", [])]),
                            ("execute_tool multiply", []),
                            ("chat scripted", [("reasoning", [])]),
                        ],
                    )
                ],
            )
        ],
    )
]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_runs_build_the_span_tree(mode: str, captured_spans: CapturedSpans) -> None:
    runner = TracingRunner(CrewAIRunner())
    agent = Agent("calc", runner, calc(two_step()))
    if mode == "run":
        await runner.run(agent, Session("s1"), PROMPT)
    else:
        await collect(agent, Session("s1"))
    assert captured_spans.tree() == EXPECTED_TREE
    run_span = captured_spans.by_name("invoke_agent calc")[0]
    assert run_span.attributes[A.FRAMEWORK] == "crewai"
    (step,) = captured_spans.by_name("agent_step calc")
    assert step.attributes[A.AGENT_NAME] == "calc"
    chats = captured_spans.by_name("chat scripted")
    assert all(c.attributes[A.PROVIDER] == "scripted" for c in chats)
    assert all(c.attributes["gen_ai.usage.input_tokens"] > 0 for c in chats)


# -- module and import guard ------------------------------------------------------------------
def test_module_names_agents_by_role_or_given_name() -> None:
    runtime = Runtime(settings=load_settings())
    first, second = calc([]), calc([])
    module = CrewAIModule([first, ("second", second)], runtime=runtime)
    assert runtime.agents().names() == ["calc", "second"]
    assert module.get(second).name == "second"
    assert runtime.agents().get("calc").framework == "crewai"


async def test_a_native_that_is_not_a_crewai_agent_is_refused() -> None:
    agent = Agent("x", CrewAIRunner(), object())
    with pytest.raises(TypeError, match="agent 'x' is not a CrewAI Agent"):
        await agent.runner.run(agent, Session("s1"), PROMPT)


@pytest.mark.parametrize(
    "module", ["runnertrace.runners.crewai", "runnertrace.runners.crewai.testing"]
)
def test_missing_extra_names_the_install_command(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n == "crewai" or n.startswith("crewai.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the package were not installed
    package = "runnertrace.runners.crewai"
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)  # the package is imported afresh, first
    with pytest.raises(MissingExtraError, match=r"pip install 'runnertrace\[crewai\]'"):
        importlib.import_module(module)


KICKOFFS: list[Any] = []


def count_kickoff(inputs: Any) -> Any:
    """A user's before_kickoff callback (module level: CrewAI warns about closures)."""
    KICKOFFS.append(inputs)
    return inputs


@pytest.mark.parametrize("traced", [False, True])
async def test_a_declared_before_kickoff_callback_runs_once_next_to_ours(
    traced: bool, captured_spans: CapturedSpans
) -> None:
    KICKOFFS.clear()
    native = calc(two_step())
    runner = TracingRunner(CrewAIRunner()) if traced else CrewAIRunner()
    agent = Agent("calc", runner, native)
    agent.declare_run_options(before_kickoff_callbacks=[count_kickoff])
    await collect(agent, Session("s1"))
    assert len(KICKOFFS) == 1
    assert bool(captured_spans.by_name("execute_tool multiply")) is traced
