"""smolagents managed agents, nested, traced (issue 20): spans only.

A manager (a ``ToolCallingAgent`` or a ``CodeAgent``) delegates to a managed
``analyst``, which delegates to its own managed ``researcher``, whose tool opens an
app span. Each member's run must be an ``invoke_agent`` span of its own under the
manager's ``execute_tool`` for that call, holding its own steps, chat spans and
tool spans with its own ``gen_ai.agent.name``; each model call appears once, the
tokens on the chat spans add up to what the fake models reported, and the user's
agent objects are left as they were. Each run's totals cover its subtree (the
members it ran included), its own work beside them (``check_totals`` at every
level). With OpenInference's smolagents instrumentor on the same provider, nothing
is recorded twice.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole.
import pytest

pytest.importorskip(
    "smolagents", reason="needs the smolagents extra: pip install -e '.[dev,smolagents]'"
)

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from smolagents import CodeAgent, MultiStepAgent, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel
from tests.composition_checks import check_totals, rows
from tests.contract.runner_cases import CASES
from tests.contract.test_runner_every_method import (
    Target,
    break_target,
    internal_faults,
    shape,
    targets,
)
from tests.fidelity_helpers import MODES, one, parent_of, run
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace._internal.errors import internal_log
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.smolagents import SmolagentsRunner
from runnertrace.runners.smolagents.testing import ScriptedModel, calls, code, delegate
from runnertrace.testing import CapturedSpans, tolerate_internal_errors
from runnertrace.tracing import attributes as A

user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool
def lookup(city: str) -> str:
    """Look a city's weather up.

    Args:
        city: The city to look up.
    """
    with user["tracer"].start_as_current_span("db.query lookup"):
        if city == "Atlantis":
            raise LookupError(f"no weather for {city}")
        return f"sunny in {city}"


def answer(text: str, prefix: str) -> Any:
    return calls(("final_answer", {"answer": text}), prefix=prefix)


def team(
    manager_kind: str, *more: MultiStepAgent
) -> tuple[MultiStepAgent, dict[str, ScriptedModel]]:
    """The three agents (and ``more`` members for the manager), each with its own
    scripted model (distinct token counts)."""
    models = {
        "researcher": ScriptedModel(
            [calls(("lookup", {"city": "Oslo"}), prefix="r"), answer("sunny in Oslo", "rf")],
            model_id="researcher-llm",
            input_tokens=5,
            output_tokens=3,
        ),
        "analyst": ScriptedModel(
            [delegate("researcher", "Weather in Oslo?"), answer("Oslo is sunny.", "af")],
            model_id="analyst-llm",
            input_tokens=13,
            output_tokens=4,
        ),
    }
    researcher = ToolCallingAgent(
        tools=[lookup],
        model=models["researcher"],
        name="researcher",
        description="Looks the weather up.",
        verbosity_level=LogLevel.OFF,
    )
    analyst = ToolCallingAgent(
        tools=[],
        model=models["analyst"],
        name="analyst",
        description="Analyses the weather.",
        managed_agents=[researcher],
        verbosity_level=LogLevel.OFF,
    )
    manager: MultiStepAgent
    if manager_kind == "tool_calling":
        models["boss"] = ScriptedModel(
            [delegate("analyst", "How is Oslo?"), answer("Oslo: sunny.", "bf")],
            model_id="boss-llm",
            input_tokens=17,
            output_tokens=6,
        )
        manager = ToolCallingAgent(
            tools=[],
            model=models["boss"],
            name="boss",
            managed_agents=[analyst, *more],
            verbosity_level=LogLevel.OFF,
        )
    else:
        models["boss"] = ScriptedModel(
            [code('report = analyst(task="How is Oslo?")\nfinal_answer(report)')],
            model_id="boss-llm",
            input_tokens=17,
            output_tokens=6,
        )
        manager = CodeAgent(
            tools=[],
            model=models["boss"],
            name="boss",
            managed_agents=[analyst],
            verbosity_level=LogLevel.OFF,
        )
    return manager, models


def traced(native: MultiStepAgent) -> CoreAgent:
    return CoreAgent("boss", TracingRunner(SmolagentsRunner(), capture_content=True), native)


MEMBERS = {
    # the member's run and the manager's call it runs in
    "tool_calling": {"analyst": "execute_tool analyst", "researcher": "execute_tool researcher"},
    "code": {"analyst": "execute_tool python_interpreter", "researcher": "execute_tool researcher"},
}
MANAGERS = list(MEMBERS)


def under(spans: CapturedSpans, root: ReadableSpan) -> Iterator[ReadableSpan]:
    """Every span below ``root`` that is not below a nested ``invoke_agent``."""
    children = [s for s in spans.spans if s.parent and s.parent.span_id == root.context.span_id]
    for child in children:
        yield child
        if not child.name.startswith("invoke_agent"):
            yield from under(spans, child)


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


def levels(
    spans: CapturedSpans, models: dict[str, ScriptedModel]
) -> list[tuple[str, int, int, int, int, int]]:
    """Per run, outermost first: (agent, depth, model calls, tool calls, input tokens, own
    input tokens), once ``check_totals`` held at every level with each call once."""
    found = check_totals(spans.spans, model_calls=sum(len(m.received) for m in models.values()))
    print(rows(found))  # the note's per-level figures (pytest -s)
    return [
        (lv.agent, lv.depth, lv.model_calls, lv.tool_calls, lv.input_tokens, lv.own_input_tokens)
        for lv in found
    ]


# Each level's totals cover its subtree: boss 17 a call, analyst 13, researcher 5.
LEVELS = {
    "tool_calling": [
        ("boss", 0, 6, 3, 2 * 17 + 2 * 13 + 2 * 5, 2 * 17),
        ("analyst", 1, 4, 2, 2 * 13 + 2 * 5, 2 * 13),
        ("researcher", 2, 2, 1, 2 * 5, 2 * 5),
    ],
    "code": [
        ("boss", 0, 5, 3, 17 + 2 * 13 + 2 * 5, 17),
        ("analyst", 1, 4, 2, 2 * 13 + 2 * 5, 2 * 13),
        ("researcher", 2, 2, 1, 2 * 5, 2 * 5),
    ],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_each_managed_agent_is_a_run_under_its_managers_tool_call(
    manager_kind: str, mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team(manager_kind)
    await run(traced(manager), mode)
    for member, call in MEMBERS[manager_kind].items():
        member_run = one(captured_spans, f"invoke_agent {member}")
        assert parent_of(captured_spans, member_run).name == call
        own = list(under(captured_spans, member_run))
        # its own steps, chats and tools, all carrying its name
        assert {
            attr(s, "gen_ai.agent.name")
            for s in own
            if s.name.startswith(("agent", "chat", "execute"))
        } == {member}
        chats = [s for s in own if s.name.startswith("chat ")]
        assert [s.name for s in chats] == [f"chat {member}-llm"] * len(models[member].received)
        assert all(parent_of(captured_spans, c).name == f"agent_step {member}" for c in chats)
    boss = one(captured_spans, "invoke_agent boss")
    assert boss.parent is None
    boss_chats = [s for s in under(captured_spans, boss) if s.name.startswith("chat ")]
    assert len(boss_chats) == len(models["boss"].received)
    assert levels(captured_spans, models) == LEVELS[manager_kind]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_every_call_once_and_every_token_counted_once(
    manager_kind: str, mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team(manager_kind)
    await run(traced(manager), mode)
    chats = [s for s in captured_spans.spans if s.name.startswith("chat ")]
    reported = {name: len(model.received) for name, model in models.items()}
    assert len(chats) == sum(reported.values())
    for name, model in models.items():
        mine = [c for c in chats if c.name == f"chat {model.model_id}"]
        assert len(mine) == reported[name]
        inputs = sum(usage[0] for usage in model.reported)  # what the fake reported
        outputs = sum(usage[1] for usage in model.reported)
        assert sum(attr(c, "gen_ai.usage.input_tokens") for c in mine) == inputs
        assert sum(attr(c, "gen_ai.usage.output_tokens") for c in mine) == outputs
    # the lookup ran once, so its tool span is there once
    assert len(captured_spans.by_name("execute_tool lookup")) == 1
    assert levels(captured_spans, models) == LEVELS[manager_kind]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_an_app_span_in_a_members_tool_nests_under_that_tool(
    manager_kind: str, mode: str, captured_spans: CapturedSpans
) -> None:
    manager, _ = team(manager_kind)
    await run(traced(manager), mode)
    db = one(captured_spans, "db.query lookup")
    tool_span = parent_of(captured_spans, db)
    assert tool_span.name == "execute_tool lookup"
    assert attr(tool_span, "gen_ai.agent.name") == "researcher"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_the_users_agents_are_left_as_they_were(
    manager_kind: str, mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team(manager_kind)
    analyst = manager.managed_agents["analyst"]
    researcher = analyst.managed_agents["researcher"]
    agents = {"boss": manager, "analyst": analyst, "researcher": researcher}
    before = {name: (a.step_callbacks, a.logger, a.stream_outputs) for name, a in agents.items()}
    await run(traced(manager), mode)
    for name, agent in agents.items():
        assert agent.model is models[name]
        assert (agent.step_callbacks, agent.logger, agent.stream_outputs) == before[name]
        assert "run" not in vars(agent)
        assert "execute_tool_call" not in vars(agent)


# -- OpenInference's smolagents instrumentor, on the same provider: still once each --------------


@pytest.fixture
def openinference(captured_spans: CapturedSpans) -> Iterator[None]:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_with_openinference_on_nothing_is_recorded_twice(
    manager_kind: str, mode: str, captured_spans: CapturedSpans, openinference: None
) -> None:
    manager, models = team(manager_kind)
    await run(traced(manager), mode)
    ours = {"invoke_agent", "agent_step", "chat", "execute_tool", "db.query"}
    assert {s.name.split(" ")[0] for s in captured_spans.spans} <= ours
    chats = [s for s in captured_spans.spans if s.name.startswith("chat ")]
    assert len(chats) == sum(len(m.received) for m in models.values())
    assert len(captured_spans.by_name("invoke_agent researcher")) == 1
    assert parent_of(captured_spans, one(captured_spans, "db.query lookup")).name == (
        "execute_tool lookup"
    )
    assert levels(captured_spans, models) == LEVELS[manager_kind]  # no span of theirs counts


def member_tree(researcher_steps: list[Any]) -> tuple[str, list[Any]]:
    return (
        "invoke_agent analyst",
        [
            (
                "agent_step analyst",
                [
                    ("chat analyst-llm", []),
                    ("execute_tool researcher", [("invoke_agent researcher", researcher_steps)]),
                ],
            ),
            ("agent_step analyst", [("chat analyst-llm", [])]),
        ],
    )


RESEARCHER = [
    (
        "agent_step researcher",
        [("chat researcher-llm", []), ("execute_tool lookup", [("db.query lookup", [])])],
    ),
    ("agent_step researcher", [("chat researcher-llm", [])]),
]
TREES = {
    "tool_calling": [
        (
            "invoke_agent boss",
            [
                (
                    "agent_step boss",
                    [
                        ("chat boss-llm", []),
                        ("execute_tool analyst", [member_tree(RESEARCHER)]),
                    ],
                ),
                ("agent_step boss", [("chat boss-llm", [])]),
            ],
        )
    ],
    "code": [
        (
            "invoke_agent boss",
            [
                (
                    "agent_step boss",
                    [
                        ("chat boss-llm", []),
                        ("execute_tool python_interpreter", [member_tree(RESEARCHER)]),
                    ],
                )
            ],
        )
    ],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
async def test_the_whole_tree_nests_member_runs_in_the_calls_that_ran_them(
    manager_kind: str, mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team(manager_kind)
    await run(traced(manager), mode)
    assert captured_spans.tree() == TREES[manager_kind]
    assert levels(captured_spans, models) == LEVELS[manager_kind]


@pytest.mark.parametrize("mode", MODES)
async def test_a_member_that_fails_ends_its_run_in_error_and_the_manager_goes_on(
    mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team("tool_calling")
    models["researcher"].turns = [ConnectionError("model endpoint reset the connection")]
    models["analyst"].turns.insert(1, answer("No weather today.", "ax"))
    del models["analyst"].turns[2:]
    await run(traced(manager), mode)
    failed = one(captured_spans, "invoke_agent researcher")
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "AgentGenerationError"
    (chat,) = captured_spans.by_name("chat researcher-llm")
    assert chat.status.status_code is StatusCode.ERROR
    assert attr(chat, "error.type") == "ConnectionError"
    call = parent_of(captured_spans, failed)
    assert call.name == "execute_tool researcher"
    assert call.status.status_code is StatusCode.ERROR
    assert one(captured_spans, "invoke_agent analyst").status.status_code is StatusCode.UNSET
    assert one(captured_spans, "invoke_agent boss").status.status_code is StatusCode.UNSET
    # the failed member's run counts in the totals above it, its error too
    found = check_totals(captured_spans.spans, model_calls=5)
    assert [(lv.agent, lv.model_calls, lv.tool_calls, lv.errors) for lv in found] == [
        ("boss", 5, 2, 2),  # the failed chat and the analyst's call that ran the member
        ("analyst", 3, 1, 2),
        ("researcher", 1, 0, 1),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_an_untraced_run_records_nothing_and_answers_the_same(
    mode: str, captured_spans: CapturedSpans
) -> None:
    manager, models = team("tool_calling")
    agent = CoreAgent("boss", SmolagentsRunner(), manager)
    reply = await agent.runner.run(agent, Session("s1"), [AgentRequestText(prompt="Oslo?")])
    assert str(reply) == "Oslo: sunny."
    assert [s.name for s in captured_spans.spans] == ["db.query lookup"]  # the app's own span
    assert [len(m.received) for m in models.values()] == [2, 2, 2]


async def cancel_inside_a_member(mode: str, captured_spans: CapturedSpans) -> OpenSpanTracker:
    """Run the team and cancel it while the researcher's tool runs; wait until the
    researcher has stopped. Returns what tracked the spans open."""
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    release = threading.Event()
    reached = asyncio.Event()
    loop = asyncio.get_running_loop()

    @tool
    def slow(city: str) -> str:
        """Block until released.

        Args:
            city: Any city.
        """
        loop.call_soon_threadsafe(reached.set)
        release.wait(5)
        return city

    manager, models = team("tool_calling")
    researcher = manager.managed_agents["analyst"].managed_agents["researcher"]
    researcher.tools["lookup"] = slow
    slow.name = "lookup"
    task = asyncio.create_task(run(traced(manager), mode))
    await reached.wait()
    await cancel_and_settle(task)
    assert not tracker.open  # the member runs (both) ended with the run
    release.set()
    for _ in range(300):  # the member stops at its next step, reporting nothing
        if researcher.interrupt_switch:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert researcher.interrupt_switch
    assert len(models["researcher"].received) == 1
    return tracker


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cancelled_inside_a_member_leaves_nothing_open(
    mode: str, captured_spans: CapturedSpans
) -> None:
    tracker = await cancel_inside_a_member(mode, captured_spans)
    cancelled = one(captured_spans, "invoke_agent researcher")
    assert attr(cancelled, "runnertrace.cancelled") is True
    assert not tracker.open


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cancelled_inside_a_member_still_counts_its_members(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await cancel_inside_a_member(mode, captured_spans)
    # the cancelled runs' totals still add up, each into the run above it
    found = check_totals(captured_spans.spans, model_calls=3)
    assert [(lv.agent, lv.depth, lv.model_calls) for lv in found] == [
        ("boss", 0, 3),
        ("analyst", 1, 2),
        ("researcher", 2, 1),
    ]


class Meeting(ToolCallingAgent):  # type: ignore[misc]
    """A member that starts only once the other one was called too: both manager's
    tool calls are running (both tool scopes open) before either member runs."""

    both: threading.Barrier

    def __call__(self, task: str, **kwargs: Any) -> Any:
        self.both.wait()
        return super().__call__(task, **kwargs)


@pytest.mark.parametrize("mode", MODES)
async def test_members_called_in_parallel_each_nest_under_their_own_call(
    mode: str, captured_spans: CapturedSpans
) -> None:
    critic_model = ScriptedModel(
        [answer("Fine.", "cf")], model_id="critic-llm", input_tokens=2, output_tokens=1
    )
    critic = Meeting(
        tools=[],
        model=critic_model,
        name="critic",
        description="Criticises.",
        verbosity_level=LogLevel.OFF,
    )
    manager, models = team("tool_calling", critic)
    models["critic"] = critic_model
    analyst = manager.managed_agents["analyst"]
    analyst.__class__ = Meeting  # the same agent, meeting the critic first
    critic.both = analyst.both = threading.Barrier(2, timeout=5)
    models["boss"].turns[0] = calls(
        ("analyst", {"task": "How is Oslo?"}), ("critic", {"task": "Judge."}), prefix="ask"
    )
    await run(traced(manager), mode)
    for member in ("analyst", "critic"):
        member_run = one(captured_spans, f"invoke_agent {member}")
        assert parent_of(captured_spans, member_run).name == f"execute_tool {member}"
        own = [s for s in under(captured_spans, member_run) if s.name.startswith("chat ")]
        assert [s.name for s in own] == [f"chat {member}-llm"] * len(models[member].received)
    researcher = one(captured_spans, "invoke_agent researcher")
    assert parent_of(captured_spans, researcher).name == "execute_tool researcher"
    chats = [s for s in captured_spans.spans if s.name.startswith("chat ")]
    assert len(chats) == sum(len(m.received) for m in models.values())
    assert sum(attr(c, "gen_ai.usage.input_tokens") for c in chats) == sum(
        u[0] for m in models.values() for u in m.reported
    )
    # both members' runs count in the boss's totals (critic: one call of 2 tokens)
    assert levels(captured_spans, models) == [
        ("boss", 0, 7, 4, 2 * 17 + 2 * 13 + 2 * 5 + 2, 2 * 17),
        ("analyst", 1, 4, 2, 2 * 13 + 2 * 5, 2 * 13),
        ("researcher", 2, 2, 1, 2 * 5, 2 * 5),
        ("critic", 1, 1, 0, 2, 2),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_members_run_span_records_its_task_and_its_answer(
    mode: str, captured_spans: CapturedSpans
) -> None:
    manager, _ = team("tool_calling")
    await run(traced(manager), mode)
    member_run = one(captured_spans, "invoke_agent researcher")
    (sent,) = json.loads(attr(member_run, "gen_ai.input.messages"))
    assert "Weather in Oslo?" in sent["parts"][0]["content"]  # in smolagents' task template
    (answered,) = json.loads(attr(member_run, "gen_ai.output.messages"))
    assert answered["parts"][0]["content"] == "sunny in Oslo"
    # each run's totals cover its subtree; its own work is beside them when it nested runs
    assert attr(member_run, A.AGG_INPUT_TOKENS) == 10  # two calls, 5 each
    assert A.OWN_INPUT_TOKENS not in (member_run.attributes or {})  # nothing nested: own == all
    analyst = one(captured_spans, "invoke_agent analyst")
    assert (attr(analyst, A.AGG_INPUT_TOKENS), attr(analyst, A.OWN_INPUT_TOKENS)) == (36, 26)
    assert (attr(analyst, A.NESTED_RUNS), attr(analyst, A.AGG_MODEL_CALLS)) == (1, 4)
    boss = one(captured_spans, "invoke_agent boss")
    assert (attr(boss, A.AGG_INPUT_TOKENS), attr(boss, A.OWN_INPUT_TOKENS)) == (70, 34)
    assert (attr(boss, A.NESTED_RUNS), attr(boss, A.AGG_MODEL_CALLS)) == (2, 6)


# -- a fault in any method of the mapping, in a team ---------------------------------------------
# The contract suite (tests/test_runner_every_method.py) breaks each method of the mapper,
# the stand-ins and the nesting under its one-agent scenario; here the same targets (found
# by the same reflection) are broken under the team, which reaches what that scenario does
# not: the members' runs, a CodeAgent's code and its tools' scope, a tool that fails.

SMOLAGENTS = next(c for c in CASES if c.name == "smolagents")
TEAM_TARGETS = [  # the install step and the silencing are the suite's (one agent is enough)
    pytest.param(t, id=t.label)
    for t in targets(SMOLAGENTS)
    if t.label.startswith(("mapper.", "adapter.", "nesting."))
]


async def team_outcome(manager_kind: str, wrap: Any, mode: str) -> tuple[str, list[Any]]:
    """One run of the team (the researcher's first lookup fails): its reply (run mode)
    or its stream's events as a consumer reads them (stream mode)."""
    manager, models = team(manager_kind)
    models["researcher"].turns.insert(0, calls(("lookup", {"city": "Atlantis"}), prefix="rx"))
    agent = CoreAgent("boss", wrap(SmolagentsRunner()), manager)
    requests = [AgentRequestText(prompt="Oslo?")]
    if mode == "run":
        return str(await agent.runner.run(agent, Session("s1"), requests)), []
    return "", shape([e async for e in agent.runner.stream(agent, Session("s1"), requests)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("manager_kind", MANAGERS)
@pytest.mark.parametrize("target", TEAM_TARGETS)
async def test_a_fault_in_any_method_costs_the_team_telemetry_only(
    target: Target,
    manager_kind: str,
    mode: str,
    captured_spans: CapturedSpans,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    healthy = (
        await team_outcome(manager_kind, lambda runner: runner, mode) if mode == "run" else None
    )
    broken = break_target(target, monkeypatch)
    internal_log.reset()
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        untraced = await team_outcome(manager_kind, lambda runner: runner, mode)
        reached_untraced = broken.calls
        traced = await team_outcome(manager_kind, TracingRunner, mode)
    if broken.calls == 0:
        pytest.skip(f"{target.label} is not reached by the team in {mode} mode")
    if mode == "run":
        assert reached_untraced == 0, "untraced run mode reached the mapping"
        assert traced == healthy
    else:
        assert traced[1] == untraced[1]
    assert 1 <= len(internal_faults(caplog)) <= 2, internal_faults(caplog)
    assert tracker.open == {}


# -- an app-wide SDK provider with OpenInference on it (a process of its own) ---------------------

APP_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

app = TracerProvider()
exporter = InMemorySpanExporter()
app.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(app)  # OpenInference's spans and (reused) ours go here

from openinference.instrumentation.smolagents import SmolagentsInstrumentor
SmolagentsInstrumentor().instrument()

import tests.runners.smolagents.test_smolagents_compositions as case
from tests.composition_checks import check_totals
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.smolagents import SmolagentsRunner
from runnertrace.tracing.config import TraceConfig

case.user["tracer"] = trace.get_tracer("user-code")

async def go(runner, kind, mode):
    manager, models = case.team(kind)
    a = Agent("boss", runner, manager)
    requests = [AgentRequestText(prompt="Oslo?")]
    if mode == "run":
        await a.runner.run(a, Session("s1"), requests)
    else:
        async for _ in a.runner.stream(a, Session("s1"), requests):
            pass
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    def parent(name):
        (span,) = [s for s in spans if s.name == name]
        return by_id[span.parent.span_id].name if span.parent else None
    out = {
        "names": sorted(s.name for s in spans),
        "calls": sum(len(m.received) for m in models.values()),
        "input tokens": sum(u[0] for m in models.values() for u in m.reported),
        "chat input tokens": sum(
            s.attributes.get("gen_ai.usage.input_tokens", 0)
            for s in spans if s.name.startswith("chat ")
        ),
        "db parent": parent("db.query lookup"),
    }
    if any(s.name == "invoke_agent researcher" for s in spans):
        out["researcher parent"] = parent("invoke_agent researcher")
        out["analyst parent"] = parent("invoke_agent analyst")
        levels = check_totals(spans, model_calls=out["calls"])
        out["levels"] = [
            [lv.agent, lv.depth, lv.model_calls, lv.tool_calls, lv.input_tokens,
             lv.own_input_tokens] for lv in levels
        ]
    exporter.clear()
    return out

async def main():
    out = {}
    for kind in ("tool_calling", "code"):
        for mode in ("run", "stream"):
            out[f"untraced {kind} {mode}"] = await go(SmolagentsRunner(), kind, mode)
            tracing = traced(SmolagentsRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
            out[f"traced {kind} {mode}"] = await go(tracing, kind, mode)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_with_an_app_provider_and_openinference_on_it_each_call_once(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OTEL_", "PYTEST_"))
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APP_PROVIDER)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**env, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for kind in MANAGERS:
        for mode in MODES:
            untraced = seen[f"untraced {kind} {mode}"]
            # untraced, the spans are OpenInference's (so the check below can fail)
            assert not any(n.startswith("invoke_agent") for n in untraced["names"])
            assert any(n.startswith("boss") for n in untraced["names"]), untraced["names"]
            got = seen[f"traced {kind} {mode}"]
            ours = ("invoke_agent ", "agent_step ", "chat ", "execute_tool ", "db.query ")
            assert all(n.startswith(ours) for n in got["names"]), got["names"]
            chats = [n for n in got["names"] if n.startswith("chat ")]
            assert len(chats) == got["calls"]
            assert got["chat input tokens"] == got["input tokens"]
            assert got["db parent"] == "execute_tool lookup"
            assert got["researcher parent"] == "execute_tool researcher"
            assert got["analyst parent"] == MEMBERS[kind]["analyst"]
            assert [tuple(level) for level in got["levels"]] == LEVELS[kind]
