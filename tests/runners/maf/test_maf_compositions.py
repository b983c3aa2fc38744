"""Microsoft Agent Framework compositions, traced (issue 20), on spans only.

An agent run as a tool (``agent.as_tool()``) is an ``invoke_agent`` span of its own
under the outer ``execute_tool`` span, with its own steps, chat and tool spans, all
carrying the inner agent's ``gen_ai.agent.name``; it is mapped by our middleware,
attached to the inner agent for the call, so it is traced with our private provider
(``trace.type: local``) as well as with an application's. With an application's
provider and Agent Framework's own instrumentation on, each model call shows once
and each token counts once (checked in a subprocess that owns its global provider).

A workflow of agents (core's ``WorkflowBuilder``: a chain, a fan-out) run as a tool
through ``workflow.as_agent().as_tool()`` gives each agent's run its own
``invoke_agent`` span under the tool's span.

A workflow registered as the agent (``workflow.as_agent()``) is the run itself: each
run of one of its agents is a nested run under the run span, and the totals at every
``invoke_agent`` level cover its subtree (``composition_checks.check_totals``). The
ready-made orchestrations of ``agent-framework-orchestrations`` (in the ``maf`` extra):
sequential, concurrent, handoff and group chat, the same way.
"""

from __future__ import annotations

import pytest

pytest.importorskip("agent_framework", reason="needs the maf extra: pip install -e '.[dev,maf]'")

import asyncio
import gc
import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
from contextlib import aclosing
from pathlib import Path
from typing import Any

from agent_framework import Agent, Message, WorkflowBuilder, tool
from agent_framework.orchestrations import (
    ConcurrentBuilder,
    GroupChatBuilder,
    HandoffBuilder,
    SequentialBuilder,
)
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.composition_checks import Level, check_totals
from tests.fidelity_helpers import MODES, in_start_order, one, parent_of, run
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import STATE_KEY, MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, Turn, call, say
from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A

REPO = Path(__file__).resolve().parents[3]
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@tool
async def lookup(topic: str) -> str:
    """Look a topic up."""
    with user["tracer"].start_as_current_span("db.query lookup"):
        return f"{topic}: 42"


def researcher(turns: list[Turn] | None = None, name: str = "researcher") -> Agent:
    """The inner agent: looks the topic up, then answers (7 + 5 input tokens)."""
    script = turns or [
        call(("r1", "lookup", {"topic": "answer"}), input_tokens=7, output_tokens=2),
        say("The answer is 42.", input_tokens=5, output_tokens=1),
    ]
    return Agent(
        ScriptedChatClient(script, model="research-llm"), "You research.", name=name, tools=[lookup]
    )


def coordinator(tools: list[Any], turns: list[Turn]) -> Agent:
    return Agent(
        ScriptedChatClient(turns, model="coord-llm"), "You coordinate.", name="coord", tools=tools
    )


def traced(native: Agent) -> CoreAgent:
    return CoreAgent("coord", TracingRunner(MAFRunner(), capture_content=True), native)


def delegate(call_id: str = "x1", tool_name: str = "researcher") -> list[Any]:
    return call((call_id, tool_name, {"task": "What is the answer?"}), input_tokens=11)


def attr(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    return [s for s in spans.spans if s.name.startswith("chat ")]


def tokens(spans: CapturedSpans) -> tuple[int, int]:
    found = chats(spans)
    return (
        sum(attr(s, "gen_ai.usage.input_tokens") for s in found),
        sum(attr(s, "gen_ai.usage.output_tokens") for s in found),
    )


def scripted_usage(*clients: ScriptedChatClient) -> tuple[int, int]:
    """What the fake models reported for the requests they answered."""
    totals = [0, 0]
    for client in clients:
        for position in range(len(client.calls)):
            turn = client._turns[position]  # noqa: SLF001 - the script is the truth
            for update in turn if isinstance(turn, list) else ():
                for content in update.contents:
                    if content.type == "usage":
                        details = content.usage_details or {}
                        totals[0] += details.get("input_token_count") or 0
                        totals[1] += details.get("output_token_count") or 0
    return totals[0], totals[1]


AS_TOOL_TREE = [
    (
        "invoke_agent coord",
        [
            (
                "agent_step coord",
                [
                    ("chat coord-llm", []),
                    (
                        "execute_tool researcher",
                        [
                            (
                                "invoke_agent researcher",
                                [
                                    (
                                        "agent_step researcher",
                                        [
                                            ("chat research-llm", []),
                                            ("execute_tool lookup", [("db.query lookup", [])]),
                                        ],
                                    ),
                                    ("agent_step researcher", [("chat research-llm", [])]),
                                ],
                            )
                        ],
                    ),
                ],
            ),
            ("agent_step coord", [("chat coord-llm", [])]),
        ],
    )
]


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_run_as_a_tool_is_its_own_run_under_the_tool_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    inner = researcher()
    outer = coordinator([inner.as_tool()], [delegate(), say("It is 42.", input_tokens=13)])
    await run(traced(outer), mode)
    assert captured_spans.tree() == AS_TOOL_TREE
    # every span carries the agent it belongs to
    theirs = {"chat research-llm", "agent_step researcher", "invoke_agent researcher"}
    for span in captured_spans.spans:
        if span.name.startswith(("chat ", "agent_step ", "execute_tool ", "invoke_agent ")):
            agent = "researcher" if span.name in theirs | {"execute_tool lookup"} else "coord"
            assert attr(span, "gen_ai.agent.name") == agent, span.name
    # each model call once, each token once
    assert len(chats(captured_spans)) == len(outer.client.calls) + len(inner.client.calls) == 4  # type: ignore[attr-defined]
    assert tokens(captured_spans) == scripted_usage(outer.client, inner.client) == (36, 13)  # type: ignore[arg-type]
    nested = one(captured_spans, "invoke_agent researcher")
    levels = check_totals(captured_spans.spans, model_calls=4)
    assert level(levels, "coord") == [(0, 4, 2, 36, 2)]  # its subtree: the researcher's too
    assert level(levels, "researcher") == [(1, 2, 2, 12, 1)]
    assert attr(nested, A.AGG_INPUT_TOKENS) == 12
    outer_run = one(captured_spans, "invoke_agent coord")
    assert (attr(outer_run, A.AGG_INPUT_TOKENS), attr(outer_run, A.OWN_INPUT_TOKENS)) == (36, 24)
    assert attr(nested, "gen_ai.request.model") == "research-llm"
    assert "The answer is 42." in attr(nested, "gen_ai.output.messages")
    inner_chat = in_start_order(captured_spans, "chat research-llm")[0]
    assert json.loads(attr(inner_chat, "gen_ai.system_instructions"))[0]["content"] == (
        "You research."
    )
    assert attr(inner_chat, "gen_ai.request.stream") is True  # as_tool() streams the agent
    # the middleware we attached for the call is gone again
    assert inner.middleware is None


@pytest.mark.parametrize("mode", MODES)
async def test_the_inner_agents_own_middleware_runs_once_and_stays(
    mode: str, captured_spans: CapturedSpans
) -> None:
    seen: list[str] = []

    async def counting(context: Any, call_next: Any) -> None:
        seen.append("agent")
        await call_next()

    from agent_framework import agent_middleware

    mine = agent_middleware(counting)
    inner = researcher()
    inner.middleware = [mine]
    outer = coordinator([inner.as_tool()], [delegate(), say("It is 42.")])
    await run(traced(outer), mode)
    assert seen == ["agent"]
    assert inner.middleware == [mine]
    assert len(in_start_order(captured_spans, "chat research-llm")) == 2


def _theirs(span: ReadableSpan) -> bool:
    """A span of Agent Framework's own instrumentation."""
    scope = span.instrumentation_scope
    return scope is not None and scope.name == "agent_framework"


def failing_model(messages: list[Message]) -> Any:
    raise ConnectionError("research endpoint reset the connection")


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_inner_agent_fails_its_own_run_and_the_tool(
    mode: str, captured_spans: CapturedSpans
) -> None:
    inner = researcher([failing_model])
    outer = coordinator([inner.as_tool()], [delegate(), say("Could not find out.")])
    await run(traced(outer), mode)  # Agent Framework feeds the tool's failure back
    nested = one(captured_spans, "invoke_agent researcher")
    assert parent_of(captured_spans, nested).name == "execute_tool researcher"
    assert nested.status.status_code == StatusCode.ERROR
    assert attr(nested, "error.type") == "ConnectionError"
    (inner_chat,) = in_start_order(captured_spans, "chat research-llm")
    assert inner_chat.status.status_code == StatusCode.ERROR
    assert attr(inner_chat, "error.type") == "ConnectionError"
    tool_span = one(captured_spans, "execute_tool researcher")
    assert tool_span.status.status_code == StatusCode.ERROR
    assert len(in_start_order(captured_spans, "chat coord-llm")) == 2
    # the failed run still rolls up: its failed call, and the tool that ran it
    levels = check_totals(captured_spans.spans, model_calls=3)
    assert [(lv.agent, lv.model_calls, lv.errors) for lv in levels] == [
        ("coord", 3, 2),
        ("researcher", 1, 1),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_two_calls_of_the_same_agent_at_once_keep_their_own_children(
    mode: str, captured_spans: CapturedSpans
) -> None:
    inner = researcher(
        [say("first", input_tokens=3, output_tokens=1), say("second", input_tokens=4)]
    )
    both = call(
        ("x1", "researcher", {"task": "one"}),
        ("x2", "researcher", {"task": "two"}),
        input_tokens=11,
    )
    outer = coordinator([inner.as_tool()], [both, say("Done.")])
    await run(traced(outer), mode)
    tools = in_start_order(captured_spans, "execute_tool researcher")
    runs = in_start_order(captured_spans, "invoke_agent researcher")
    assert len(tools) == len(runs) == 2
    assert {parent_of(captured_spans, r).context.span_id for r in runs} == {
        t.context.span_id for t in tools
    }
    inner_chats = in_start_order(captured_spans, "chat research-llm")
    assert len(inner_chats) == len(inner.client.calls) == 2  # type: ignore[attr-defined]
    owners = {
        parent_of(captured_spans, parent_of(captured_spans, c)).context.span_id for c in inner_chats
    }
    assert owners == {r.context.span_id for r in runs}
    assert tokens(captured_spans) == scripted_usage(outer.client, inner.client)  # type: ignore[arg-type]
    assert inner.middleware is None


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_inside_an_agent_tool_nests_twice(
    mode: str, captured_spans: CapturedSpans
) -> None:
    leaf = researcher(name="leaf")
    middle = Agent(
        ScriptedChatClient(
            [delegate("m1", "leaf"), say("Leaf says 42.", input_tokens=2)], model="middle-llm"
        ),
        name="middle",
        tools=[leaf.as_tool()],
    )
    outer = coordinator([middle.as_tool()], [delegate("x1", "middle"), say("42.")])
    await run(traced(outer), mode)
    leaf_run = one(captured_spans, "invoke_agent leaf")
    leaf_tool = parent_of(captured_spans, leaf_run)
    assert leaf_tool.name == "execute_tool leaf"
    assert attr(leaf_tool, "gen_ai.agent.name") == "middle"
    middle_run = parent_of(captured_spans, parent_of(captured_spans, leaf_tool))
    assert middle_run.name == "invoke_agent middle"
    assert parent_of(captured_spans, middle_run).name == "execute_tool middle"
    db = one(captured_spans, "db.query lookup")
    assert attr(parent_of(captured_spans, db), "gen_ai.agent.name") == "leaf"
    assert tokens(captured_spans) == scripted_usage(outer.client, middle.client, leaf.client)  # type: ignore[arg-type]
    levels = check_totals(captured_spans.spans, model_calls=6)
    assert [(lv.agent, lv.depth, lv.model_calls, lv.own_model_calls) for lv in levels] == [
        ("coord", 0, 6, 2),
        ("middle", 1, 4, 2),
        ("leaf", 2, 2, 2),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_of_the_inner_agent_inside_its_own_tool_is_not_taken_for_its_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    agents: dict[str, Agent] = {}

    @tool
    async def ask_again(topic: str) -> str:
        """Ask the researcher again, natively (no runner of ours)."""
        return (await agents["inner"].run(f"Again: {topic}?")).text

    inner = Agent(
        ScriptedChatClient(
            [call(("r1", "ask_again", {"topic": "t"})), say("again"), say("The answer.")],
            model="research-llm",
        ),
        name="researcher",
        tools=[ask_again],
    )
    agents["inner"] = inner
    outer = coordinator([inner.as_tool()], [delegate(), say("42.")])
    await run(traced(outer), mode)
    ours = [s for s in chats(captured_spans) if s.name and not _theirs(s)]
    research = [s for s in ours if s.name == "chat research-llm"]
    assert len(inner.client.calls) == 3  # type: ignore[attr-defined]
    assert len(research) == 2  # the native run inside the tool is not the delegated run
    assert len(captured_spans.by_name("invoke_agent researcher")) == 1
    assert inner.middleware is None


# -- with an application's provider and Agent Framework's instrumentation on -----------------------

PROBE = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider, exporter = TracerProvider(), InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from agent_framework import Agent, WorkflowBuilder, tool
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

@tool
def lookup(topic: str) -> str:
    '''Look a topic up.'''
    with trace.get_tracer("app").start_as_current_span("db.query lookup"):
        return "42"

def agents(kind):
    inner = Agent(ScriptedChatClient([
        call(("r1", "lookup", {"topic": "t"}), input_tokens=7, output_tokens=2),
        say("42.", input_tokens=5, output_tokens=1),
    ], model="research-llm"), name="researcher", tools=[lookup])
    outer = Agent(ScriptedChatClient([
        call(("x1", "researcher", {"task": "?"}), input_tokens=11, output_tokens=3),
        say("It is 42.", input_tokens=13, output_tokens=4),
    ], model="coord-llm"), name="coord", tools=[inner.as_tool()])
    runner = traced(MAFRunner(), TraceConfig(type=kind))
    return CoreAgent("coord", runner, outer)

def pipeline():
    writer = Agent(ScriptedChatClient([say("Draft.", input_tokens=3)], model="w"), name="writer")
    editor = Agent(ScriptedChatClient([say("Final.", input_tokens=4)], model="e"), name="editor")
    workflow = WorkflowBuilder(start_executor=writer).add_chain([writer, editor]).build()
    outer = Agent(ScriptedChatClient([
        call(("x1", "pipeline", {"task": "?"}), input_tokens=11, output_tokens=3),
        say("Done.", input_tokens=13, output_tokens=4),
    ], model="coord-llm"), name="coord", tools=[workflow.as_agent(name="pipeline").as_tool()])
    return CoreAgent("coord", traced(MAFRunner(), TraceConfig(type="app")), outer)

async def go(core, mode):
    requests = [AgentRequestText(prompt="?")]
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
            "id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
            "agent": (s.attributes or {}).get("gen_ai.agent.name"),
            "input": (s.attributes or {}).get("gen_ai.usage.input_tokens"),
        }
        for s in exporter.get_finished_spans()
    ]
    exporter.clear()
    return found

async def main():
    report = {}
    for mode in ("run", "stream"):
        await go(agents("app"), mode)
        report[mode] = spans()
        await go(pipeline(), mode)
        report[f"workflow {mode}"] = spans()
    print(json.dumps(report))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def app_spans() -> dict[str, list[dict[str, Any]]]:
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


@pytest.mark.parametrize("mode", MODES)
def test_with_an_app_provider_each_call_and_token_shows_once(
    mode: str, app_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = app_spans[mode]
    assert [s["name"] for s in spans if s["scope"] == "agent_framework"] == []
    chat = [s for s in spans if s["name"].startswith("chat ")]
    assert sorted((s["name"], s["agent"]) for s in chat) == [
        ("chat coord-llm", "coord"),
        ("chat coord-llm", "coord"),
        ("chat research-llm", "researcher"),
        ("chat research-llm", "researcher"),
    ]
    assert sum(s["input"] for s in chat) == 11 + 13 + 7 + 5
    by_id = {s["id"]: s for s in spans}
    (nested,) = [s for s in spans if s["name"] == "invoke_agent researcher"]
    assert by_id[nested["parent"]]["name"] == "execute_tool researcher"
    (db,) = [s for s in spans if s["name"] == "db.query lookup"]
    assert by_id[db["parent"]]["name"] == "execute_tool lookup"
    assert by_id[db["parent"]]["agent"] == "researcher"


# -- cancellation --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cancelled_inside_the_inner_agents_tool_leaves_nothing_open(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    inside = asyncio.Event()

    @tool
    async def slow(topic: str) -> str:
        """Wait forever."""
        inside.set()
        await asyncio.sleep(10)
        return topic

    inner = Agent(
        ScriptedChatClient([call(("r9", "slow", {"topic": "t"}))], model="research-llm"),
        name="researcher",
        tools=[slow],
    )
    outer = coordinator([inner.as_tool()], [delegate()])
    task = asyncio.create_task(run(traced(outer), mode))
    await inside.wait()
    await cancel_and_settle(task)
    assert tracker.started > 0
    assert tracker.open == {}
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    nested = one(captured_spans, "invoke_agent researcher")
    assert attr(nested, "runnertrace.cancelled") is True
    assert parent_of(captured_spans, nested).name == "execute_tool researcher"
    assert inner.middleware is None


# -- a workflow of agents run as a tool (core's WorkflowBuilder) --------------------------------


def writer_and_editor() -> tuple[Agent, Agent]:
    writer = Agent(
        ScriptedChatClient([say("A draft.", input_tokens=3, output_tokens=2)], model="w-llm"),
        name="writer",
    )
    editor = Agent(
        ScriptedChatClient([say("The final.", input_tokens=4, output_tokens=1)], model="e-llm"),
        name="editor",
    )
    return writer, editor


@pytest.mark.parametrize("mode", MODES)
async def test_a_sequential_workflow_run_as_a_tool_gives_each_agent_its_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    writer, editor = writer_and_editor()
    workflow = WorkflowBuilder(start_executor=writer).add_chain([writer, editor]).build()
    tool_ = workflow.as_agent(name="pipeline").as_tool()
    outer = coordinator([tool_], [delegate("x1", "pipeline"), say("Done.")])
    await run(traced(outer), mode)
    tool_span = one(captured_spans, "execute_tool pipeline")
    assert captured_spans.tree(tool_span) == (
        "execute_tool pipeline",
        [
            ("invoke_agent writer", [("agent_step writer", [("chat w-llm", [])])]),
            ("invoke_agent editor", [("agent_step editor", [("chat e-llm", [])])]),
        ],
    )
    writer_run, editor_run = (
        one(captured_spans, "invoke_agent writer"),
        one(captured_spans, "invoke_agent editor"),
    )
    assert writer_run.end_time is not None and editor_run.start_time is not None
    assert writer_run.end_time <= editor_run.start_time  # one after the other
    assert "The final." in attr(editor_run, "gen_ai.output.messages")
    assert attr(one(captured_spans, "chat e-llm"), "gen_ai.agent.name") == "editor"
    clients = (outer.client, writer.client, editor.client)
    assert tokens(captured_spans) == scripted_usage(*clients)  # type: ignore[arg-type]
    levels = check_totals(captured_spans.spans, model_calls=4)
    assert level(levels, "coord") == [(0, 4, 2, 11 + 10 + 3 + 4, 1)]
    assert level(levels, "writer") == [(1, 1, 1, 3, 0)]
    assert level(levels, "editor") == [(1, 1, 1, 4, 0)]
    assert writer.middleware is None and editor.middleware is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_fan_out_workflow_keeps_each_branch_under_the_tool(
    mode: str, captured_spans: CapturedSpans
) -> None:
    writer, editor = writer_and_editor()
    critic = Agent(
        ScriptedChatClient([say("Too short.", input_tokens=6)], model="c-llm"), name="critic"
    )
    workflow = (
        WorkflowBuilder(start_executor=writer, output_from="all")
        .add_fan_out_edges(writer, [editor, critic])
        .build()
    )
    tool_ = workflow.as_agent(name="pipeline").as_tool()
    outer = coordinator([tool_], [delegate("x1", "pipeline"), say("Done.")])
    await run(traced(outer), mode)
    tool_span = one(captured_spans, "execute_tool pipeline")
    runs = [s for s in captured_spans.children(tool_span)]
    assert sorted(s.name for s in runs) == [
        "invoke_agent critic",
        "invoke_agent editor",
        "invoke_agent writer",
    ]
    for name, model in (("writer", "w-llm"), ("editor", "e-llm"), ("critic", "c-llm")):
        (chat,) = captured_spans.by_name(f"chat {model}")
        assert attr(chat, "gen_ai.agent.name") == name
        assert parent_of(captured_spans, parent_of(captured_spans, chat)).name == (
            f"invoke_agent {name}"
        )
    clients = (outer.client, writer.client, editor.client, critic.client)
    assert tokens(captured_spans) == scripted_usage(*clients)  # type: ignore[arg-type]
    levels = check_totals(captured_spans.spans, model_calls=5)
    assert level(levels, "coord") == [(0, 5, 2, 11 + 10 + 3 + 4 + 6, 1)]


@pytest.mark.parametrize("mode", MODES)
def test_with_an_app_provider_a_workflows_calls_show_once(
    mode: str, app_spans: dict[str, list[dict[str, Any]]]
) -> None:
    spans = app_spans[f"workflow {mode}"]
    # Agent Framework's one span is the build's, made before any run (untraced code)
    assert [s["name"] for s in spans if s["scope"] == "agent_framework"] == ["workflow.build"]
    chat = sorted(
        (s["name"], s["agent"], s["input"]) for s in spans if s["name"].startswith("chat")
    )
    assert chat == [
        ("chat coord-llm", "coord", 11),
        ("chat coord-llm", "coord", 13),
        ("chat e", "editor", 4),
        ("chat w", "writer", 3),
    ]
    by_id = {s["id"]: s for s in spans}
    for name in ("invoke_agent writer", "invoke_agent editor"):
        (run_span,) = [s for s in spans if s["name"] == name]
        assert by_id[run_span["parent"]]["name"] == "execute_tool pipeline"


# -- a workflow registered as the agent (workflow.as_agent()) -----------------------------------
#
# The workflow's run is the run (``invoke_agent pipeline``); each run of one of its agents is
# a nested run under it, with its own steps, chat and tool spans; in stream mode the agents'
# events are the run's stream. The ready-made orchestrations (agent-framework-orchestrations)
# are workflows too: their participants (and a group chat's orchestrator agent) nest the same.


def pipeline(workflow: Any) -> CoreAgent:
    return CoreAgent(
        "pipeline",
        TracingRunner(MAFRunner(), capture_content=True),
        workflow.as_agent(name="pipeline"),
    )


async def drive(core: CoreAgent, mode: str) -> tuple[str | None, list[ev.StreamEvent]]:
    """One run; the run-mode reply's text, or the stream's events."""
    requests = [AgentRequestText(prompt="Write it.")]
    if mode == "run":
        reply = await core.runner.run(core, Session("w1"), requests)
        return str(getattr(reply, "text", reply)), []
    return None, [e async for e in core.runner.stream(core, Session("w1"), requests)]


def runs_under(spans: CapturedSpans, name: str = "invoke_agent pipeline") -> list[ReadableSpan]:
    """The nested runs directly under the workflow's run span, in start order."""
    return [s for s in spans.children(one(spans, name)) if s.name.startswith("invoke_agent ")]


def answered(*clients: Any) -> int:
    return sum(len(c.calls) for c in clients)


def texts(events: list[ev.StreamEvent]) -> list[str]:
    """The streamed text, one entry per message, in the order the messages started."""
    by_message: dict[str, list[str]] = {}
    for event in events:
        if isinstance(event, ev.MessageStart):
            by_message[event.message_id] = []
        elif isinstance(event, ev.TextDelta):
            by_message[event.message_id].append(event.delta)
    return ["".join(parts) for parts in by_message.values() if parts]


def level(levels: list[Level], agent: str) -> list[tuple[int, int, int, int, int]]:
    """(depth, model calls, own model calls, input tokens, tool calls) of each run of ``agent``."""
    return [
        (lv.depth, lv.model_calls, lv.own_model_calls, lv.input_tokens, lv.tool_calls)
        for lv in levels
        if lv.agent == agent
    ]


def researching_writer() -> tuple[Agent, Agent]:
    writer = Agent(
        ScriptedChatClient(
            [
                call(("w1", "lookup", {"topic": "otters"}), input_tokens=3, output_tokens=2),
                say("A draft.", input_tokens=4, output_tokens=2),
            ],
            model="w-llm",
        ),
        "You write.",
        name="writer",
        tools=[lookup],
    )
    editor = Agent(
        ScriptedChatClient([say("The final.", input_tokens=6, output_tokens=1)], model="e-llm"),
        "You edit.",
        name="editor",
    )
    return writer, editor


CHAIN_TREE = [
    (
        "invoke_agent pipeline",
        [
            (
                "invoke_agent writer",
                [
                    (
                        "agent_step writer",
                        [
                            ("chat w-llm", []),
                            ("execute_tool lookup", [("db.query lookup", [])]),
                        ],
                    ),
                    ("agent_step writer", [("chat w-llm", [])]),
                ],
            ),
            ("invoke_agent editor", [("agent_step editor", [("chat e-llm", [])])]),
        ],
    )
]


@pytest.mark.parametrize("mode", MODES)
async def test_a_registered_workflow_is_the_run_and_each_agent_a_nested_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    writer, editor = researching_writer()
    workflow = WorkflowBuilder(start_executor=writer).add_chain([writer, editor]).build()
    reply, events = await drive(pipeline(workflow), mode)
    assert captured_spans.tree() == CHAIN_TREE
    for span in captured_spans.spans:
        if span.name not in ("invoke_agent pipeline", "db.query lookup"):  # (the user's span)
            owner = "editor" if span.name.endswith(("editor", "e-llm")) else "writer"
            assert attr(span, "gen_ai.agent.name") == owner, span.name
    levels = check_totals(captured_spans.spans, model_calls=answered(writer.client, editor.client))
    assert level(levels, "pipeline") == [(0, 3, 0, 13, 1)]
    assert level(levels, "writer") == [(1, 2, 2, 7, 1)]
    assert level(levels, "editor") == [(1, 1, 1, 6, 0)]
    root = one(captured_spans, "invoke_agent pipeline")
    assert attr(root, A.NESTED_RUNS) == 2
    assert attr(root, A.AGG_INPUT_TOKENS) == 13 and attr(root, A.OWN_INPUT_TOKENS) == 0
    assert attr(one(captured_spans, "invoke_agent editor"), A.AGG_INPUT_TOKENS) == 6
    writer_run, editor_run = runs_under(captured_spans)
    assert writer_run.end_time is not None and editor_run.start_time is not None
    assert writer_run.end_time <= editor_run.start_time
    assert "The final." in attr(editor_run, "gen_ai.output.messages")
    # the editor was sent what the writer wrote
    ((sent, _),) = editor.client.calls  # type: ignore[attr-defined]
    assert [m.text for m in sent if m.text] == ["Write it.", "A draft."]
    if mode == "run":
        assert reply == "A draft.The final."  # the workflow's outputs (both agents by default)
    else:  # the agents' events are the stream, in order
        assert texts(events) == ["A draft.", "The final."]
        assert [e.tool_call_id for e in events if isinstance(e, ev.ToolCallResult)] == ["w1"]
    # the middleware we attached for the run is gone again
    assert writer.middleware is None and editor.middleware is None


@pytest.mark.parametrize("mode", MODES)
async def test_an_untraced_workflow_streams_its_agents_and_makes_no_span(
    mode: str, captured_spans: CapturedSpans
) -> None:
    writer, editor = researching_writer()
    workflow = WorkflowBuilder(start_executor=writer).add_chain([writer, editor]).build()
    runner = MAFRunner()
    core = CoreAgent("pipeline", runner, workflow.as_agent(name="pipeline"))
    reply, events = await drive(core, mode)
    assert captured_spans.names() == ["db.query lookup"]  # the tool's own span only
    if mode == "run":
        assert reply == "A draft.The final."
    else:
        assert texts(events) == ["A draft.", "The final."]
    assert answered(writer.client, editor.client) == 3
    assert writer.middleware is None and editor.middleware is None


# -- the orchestrations (agent-framework-orchestrations) ----------------------------------------


def member(name: str, *turns: Turn, **options: Any) -> Agent:
    return Agent(
        ScriptedChatClient(list(turns), model=f"{name}-llm"),
        f"You are {name}.",
        name=name,
        **options,
    )


@pytest.mark.parametrize("mode", MODES)
async def test_a_sequential_orchestration_runs_each_participant_as_a_nested_run_in_turn(
    mode: str, captured_spans: CapturedSpans
) -> None:
    writer = member("writer", say("A draft.", input_tokens=3, output_tokens=2))
    editor = member("editor", say("The final.", input_tokens=5, output_tokens=1))
    workflow = SequentialBuilder(participants=[writer, editor]).build()
    reply, events = await drive(pipeline(workflow), mode)
    assert captured_spans.tree() == [
        (
            "invoke_agent pipeline",
            [
                ("invoke_agent writer", [("agent_step writer", [("chat writer-llm", [])])]),
                ("invoke_agent editor", [("agent_step editor", [("chat editor-llm", [])])]),
            ],
        )
    ]
    first, second = runs_under(captured_spans)
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time
    levels = check_totals(captured_spans.spans, model_calls=answered(writer.client, editor.client))
    assert level(levels, "pipeline") == [(0, 2, 0, 8, 0)]
    assert level(levels, "writer") == [(1, 1, 1, 3, 0)]
    assert level(levels, "editor") == [(1, 1, 1, 5, 0)]
    assert reply == "The final." if mode == "run" else texts(events) == ["A draft.", "The final."]


@tool
async def gather(topic: str) -> str:
    """Gather notes (yields to the loop, so the branches interleave)."""
    for _ in range(3):
        await asyncio.sleep(0)
    return f"notes on {topic}"


@pytest.mark.parametrize("mode", MODES)
async def test_a_concurrent_orchestration_runs_its_participants_as_concurrent_nested_runs(
    mode: str, captured_spans: CapturedSpans
) -> None:
    def analyst(name: str, tokens: int) -> Agent:
        return member(
            name,
            call((f"{name}1", "gather", {"topic": name}), input_tokens=tokens, output_tokens=1),
            say(f"{name} agrees.", input_tokens=tokens + 1, output_tokens=2),
            tools=[gather],
        )

    left, right = analyst("left", 3), analyst("right", 7)
    workflow = ConcurrentBuilder(participants=[left, right]).build()
    reply, events = await drive(pipeline(workflow), mode)
    runs = runs_under(captured_spans)
    assert sorted(r.name for r in runs) == ["invoke_agent left", "invoke_agent right"]
    a, b = runs
    assert a.start_time is not None and b.start_time is not None
    assert a.end_time is not None and b.end_time is not None
    assert a.start_time < b.end_time and b.start_time < a.end_time  # side by side
    for run_span in runs:  # each keeps its own steps, calls and tools
        name = str(attr(run_span, "gen_ai.agent.name"))
        assert captured_spans.tree(run_span) == (
            f"invoke_agent {name}",
            [
                (f"agent_step {name}", [(f"chat {name}-llm", []), ("execute_tool gather", [])]),
                (f"agent_step {name}", [(f"chat {name}-llm", [])]),
            ],
        )
    levels = check_totals(captured_spans.spans, model_calls=answered(left.client, right.client))
    assert level(levels, "pipeline") == [(0, 4, 0, 3 + 4 + 7 + 8, 2)]
    assert level(levels, "left") == [(1, 2, 2, 7, 1)]
    assert level(levels, "right") == [(1, 2, 2, 15, 1)]
    if mode == "run":
        assert reply == "left agrees.right agrees."  # the aggregator's output
    else:
        assert sorted(texts(events)) == ["left agrees.", "right agrees."]


@pytest.mark.parametrize("mode", MODES)
async def test_a_handoff_orchestration_runs_each_agent_it_hands_to_as_a_nested_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    options = {"require_per_service_call_history_persistence": True}
    triage = member("triage", call(("h1", "handoff_to_refunds", {}), input_tokens=4), **options)
    refunds = member("refunds", say("Refunded.", input_tokens=9, output_tokens=2), **options)
    workflow = (
        HandoffBuilder(participants=[triage, refunds])
        .with_start_agent(triage)
        .with_termination_condition(lambda talk: any(m.text == "Refunded." for m in talk))
        .build()
    )
    reply, events = await drive(pipeline(workflow), mode)
    assert captured_spans.tree() == [
        (
            "invoke_agent pipeline",
            [
                (
                    "invoke_agent triage",
                    [
                        (
                            "agent_step triage",
                            [("chat triage-llm", []), ("execute_tool handoff_to_refunds", [])],
                        )
                    ],
                ),
                ("invoke_agent refunds", [("agent_step refunds", [("chat refunds-llm", [])])]),
            ],
        )
    ]
    # Agent Framework answers the handoff tool itself (a middleware of its own): the
    # result is the response's
    handoff = one(captured_spans, "execute_tool handoff_to_refunds")
    assert json.loads(attr(handoff, "gen_ai.tool.call.result")) == {"handoff_to": "refunds"}
    assert attr(handoff, "gen_ai.agent.name") == "triage"
    first, second = runs_under(captured_spans)
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time
    # the handoff agents are Agent Framework's clones: the participants themselves never ran
    assert triage.client.calls and refunds.client.calls  # type: ignore[attr-defined]
    levels = check_totals(captured_spans.spans, model_calls=answered(triage.client, refunds.client))
    assert level(levels, "pipeline") == [(0, 2, 0, 13, 1)]
    assert level(levels, "triage") == [(1, 1, 1, 4, 1)]
    assert level(levels, "refunds") == [(1, 1, 1, 9, 0)]
    assert reply == "Refunded." if mode == "run" else texts(events) == ["Refunded."]


def choose(speaker: str | None, final: str | None = None) -> list[Any]:
    """The group chat manager's structured decision."""
    decision = {"terminate": speaker is None, "reason": "turns", "next_speaker": speaker}
    return say(json.dumps({**decision, "final_message": final}), input_tokens=2, output_tokens=1)


@pytest.mark.parametrize("mode", MODES)
async def test_a_group_chat_runs_the_manager_and_each_speaker_as_nested_runs_in_turn(
    mode: str, captured_spans: CapturedSpans
) -> None:
    manager = member("manager", choose("alice"), choose("bob"), choose(None, "We agree."))
    alice = member("alice", say("I say yes.", input_tokens=5, output_tokens=3))
    bob = member("bob", say("Me too.", input_tokens=8, output_tokens=2))
    workflow = GroupChatBuilder(
        participants=[alice, bob], orchestrator_agent=manager, max_rounds=5
    ).build()
    reply, events = await drive(pipeline(workflow), mode)
    runs = runs_under(captured_spans)
    order = [str(attr(r, "gen_ai.agent.name")) for r in runs]
    assert order == ["manager", "alice", "manager", "bob", "manager"]
    for before, after in itertools.pairwise(runs):
        assert before.end_time is not None and after.start_time is not None
        assert before.end_time <= after.start_time
    for run_span, name in zip(runs, order, strict=True):
        assert captured_spans.tree(run_span) == (
            f"invoke_agent {name}",
            [(f"agent_step {name}", [(f"chat {name}-llm", [])])],
        )
    clients = (manager.client, alice.client, bob.client)
    levels = check_totals(captured_spans.spans, model_calls=answered(*clients))
    assert level(levels, "pipeline") == [(0, 5, 0, 2 + 5 + 2 + 8 + 2, 0)]
    assert level(levels, "manager") == [(1, 1, 1, 2, 0)] * 3
    assert level(levels, "alice") == [(1, 1, 1, 5, 0)]
    assert level(levels, "bob") == [(1, 1, 1, 8, 0)]
    assert attr(one(captured_spans, "invoke_agent pipeline"), A.NESTED_RUNS) == 5
    if mode == "run":
        assert reply == "We agree."  # the manager's final message: the workflow's output
    else:  # every agent's messages, the manager's decisions included
        assert texts(events)[1::2] == ["I say yes.", "Me too."]


# -- failure and cancellation inside a workflow --------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_branch_fails_the_run_and_ends_its_sibling_cancelled(
    mode: str, captured_spans: CapturedSpans
) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)

    @tool
    async def wait_long(topic: str) -> str:
        """Wait long enough for the sibling to fail (bounded: never a hang)."""
        for _ in range(10_000):
            await asyncio.sleep(0)
        return topic

    failing = member("failing", failing_model)
    waiting = member("waiting", call(("s1", "wait_long", {"topic": "t"})), tools=[wait_long])
    workflow = ConcurrentBuilder(participants=[failing, waiting]).build()
    with pytest.raises(ConnectionError, match="research endpoint reset"):
        await drive(pipeline(workflow), mode)
    assert tracker.open == {}
    root = one(captured_spans, "invoke_agent pipeline")
    assert root.status.status_code == StatusCode.ERROR
    assert attr(root, "error.type") == "ConnectionError"
    failed = one(captured_spans, "invoke_agent failing")
    assert failed.status.status_code == StatusCode.ERROR
    assert attr(failed, "error.type") == "ConnectionError"
    assert attr(failed, "runnertrace.cancelled") is None
    # the sibling the workflow cancelled is cancelled, with what it left open
    cancelled = one(captured_spans, "invoke_agent waiting")
    assert attr(cancelled, "runnertrace.cancelled") is True
    for name in ("execute_tool wait_long", "agent_step waiting"):
        assert attr(one(captured_spans, name), "runnertrace.cancelled") is True, name
    assert parent_of(captured_spans, cancelled) == root
    levels = check_totals(captured_spans.spans, model_calls=2)
    assert level(levels, "pipeline")[0][1] == 2
    # the failed model call; the cancelled tool raised nothing (as on every runner: the
    # kit's nested-run lifecycle ends a cancelled run without an error it did not raise)
    assert attr(root, A.AGG_ERRORS) == 1
    assert one(captured_spans, "execute_tool wait_long").status.status_code != StatusCode.ERROR
    assert failing.middleware is None and waiting.middleware is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_workflow_run_cancelled_inside_an_agents_tool_leaves_nothing_open(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    inside = asyncio.Event()

    @tool
    async def slow(topic: str) -> str:
        """Wait forever."""
        inside.set()
        await asyncio.Event().wait()
        return topic

    writer = member("writer", call(("r9", "slow", {"topic": "t"})), tools=[slow])
    editor = member("editor", say("Never."))
    workflow = SequentialBuilder(participants=[writer, editor]).build()
    task = asyncio.create_task(drive(pipeline(workflow), mode))
    await inside.wait()
    await cancel_and_settle(task)
    assert tracker.started > 0
    assert tracker.open == {}
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    nested = one(captured_spans, "invoke_agent writer")
    assert attr(nested, "runnertrace.cancelled") is True
    assert attr(one(captured_spans, "invoke_agent pipeline"), "runnertrace.cancelled") is True
    assert captured_spans.by_name("invoke_agent editor") == []
    assert writer.middleware is None and editor.middleware is None


# -- a registered workflow with an application's provider -----------------------------------------

WORKFLOW_PROBE = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider, exporter = TracerProvider(), InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from agent_framework import Agent, WorkflowBuilder, tool
from agent_framework.observability import OBSERVABILITY_SETTINGS
from agent_framework.orchestrations import (
    ConcurrentBuilder, GroupChatBuilder, HandoffBuilder, SequentialBuilder,
)
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, call, say
from runnertrace.tracing.config import TraceConfig
from tests.composition_checks import check_totals

assert OBSERVABILITY_SETTINGS.ENABLED  # Agent Framework's own spans are on

@tool
def lookup(topic: str) -> str:
    '''Look a topic up.'''
    with trace.get_tracer("app").start_as_current_span("db.query lookup"):
        return "42"

def member(name, *turns, **options):
    return Agent(ScriptedChatClient(list(turns), model=name + "-llm"), name=name, **options)

def choose(who, final=None):
    decision = {"terminate": who is None, "reason": "r", "next_speaker": who}
    return say(json.dumps({**decision, "final_message": final}), input_tokens=2, output_tokens=1)

def build(kind):
    if kind == "chain":
        writer = member("writer", call(("w1", "lookup", {"topic": "t"}), input_tokens=3),
                        say("Draft.", input_tokens=4), tools=[lookup])
        editor = member("editor", say("Final.", input_tokens=6))
        return WorkflowBuilder(start_executor=writer).add_chain([writer, editor]).build(), 3
    pair = [member("a", say("A.")), member("b", say("B."))]
    if kind == "sequential":
        return SequentialBuilder(participants=pair).build(), 2
    if kind == "concurrent":
        return ConcurrentBuilder(participants=pair).build(), 2
    if kind == "handoff":
        options = {"require_per_service_call_history_persistence": True}
        triage = member("triage", call(("h1", "handoff_to_refunds", {})), **options)
        refunds = member("refunds", say("Refunded."), **options)
        flow = (HandoffBuilder(participants=[triage, refunds]).with_start_agent(triage)
                .with_termination_condition(lambda talk: any(m.text == "Refunded." for m in talk)))
        return flow.build(), 2
    manager = member("manager", choose("alice"), choose(None, "Done."))
    flow = GroupChatBuilder(participants=[member("alice", say("Yes."))], orchestrator_agent=manager)
    return flow.build(), 3

async def go(core, mode):
    requests = [AgentRequestText(prompt="?")]
    if mode == "run":
        await core.runner.run(core, Session(mode), requests)
    else:
        async for _ in core.runner.stream(core, Session(mode), requests):
            pass

def shapes(spans):
    return [
        {
            "name": s.name,
            "scope": s.instrumentation_scope.name,
            "id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
        }
        for s in spans
    ]

async def main():
    report = {}
    for kind in ("chain", "sequential", "concurrent", "handoff", "group chat"):
        for mode in ("run", "stream"):
            for tracing in ("app", None):
                workflow, calls = build(kind)
                agent = workflow.as_agent(name="pipeline")
                runner = traced(MAFRunner(), TraceConfig(type="app")) if tracing else MAFRunner()
                exporter.clear()
                await go(CoreAgent("pipeline", runner, agent), mode)
                provider.force_flush()  # ends the calls that waited for the price table
                spans = exporter.get_finished_spans()
                key = f"{kind} {mode} {tracing or 'untraced'}"
                report[key] = {"spans": shapes(spans)}
                if tracing:
                    levels = check_totals(spans, model_calls=calls)
                    report[key]["levels"] = [(lv.agent, lv.depth, lv.model_calls) for lv in levels]
    print(json.dumps(report))

asyncio.run(main())
"""

KINDS = ["chain", "sequential", "concurrent", "handoff", "group chat"]


@pytest.fixture(scope="module")
def app_workflow_spans() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNERTRACE_", "OTEL_"))}
    env.pop("ENABLE_INSTRUMENTATION", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WORKFLOW_PROBE)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_with_an_app_provider_a_registered_workflow_shows_each_call_once(
    kind: str, mode: str, app_workflow_spans: dict[str, Any]
) -> None:
    traced_run = app_workflow_spans[f"{kind} {mode} app"]
    spans = traced_run["spans"]
    # Agent Framework's own spans (workflow, executors, edges, agents, chats) stay quiet:
    # ours stand for them; totals and each call once were checked in the probe
    assert [s["name"] for s in spans if s["scope"] == "agent_framework"] == []
    by_id = {s["id"]: s for s in spans}
    (root,) = [s for s in spans if s["name"] == "invoke_agent pipeline"]
    assert root["parent"] is None
    nested = [s for s in spans if s["name"].startswith("invoke_agent ") and s is not root]
    assert nested and {by_id[s["parent"]]["name"] for s in nested} == {"invoke_agent pipeline"}
    assert traced_run["levels"][0][:2] == ["pipeline", 0]  # the outermost level
    for db in [s for s in spans if s["name"] == "db.query lookup"]:
        assert by_id[db["parent"]]["name"] == "execute_tool lookup"
    # without our runner, the same run makes Agent Framework's own spans (what ours replace)
    untraced = app_workflow_spans[f"{kind} {mode} untraced"]["spans"]
    assert {"workflow.run", "invoke_agent"} <= {s["name"].split(" ")[0] for s in untraced}


@pytest.mark.parametrize("index", range(7))
async def test_closing_a_workflows_stream_at_every_event_leaves_nothing_open(
    index: int, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)

    @tool
    async def slow(topic: str) -> str:
        """Wait long enough to be cancelled (bounded: a stream that is not live fails
        the checks below instead of waiting forever)."""
        for _ in range(10_000):
            await asyncio.sleep(0)
        return topic

    writer = member("writer", call(("r9", "slow", {"topic": "t"})), say("Late."), tools=[slow])
    editor = member("editor", say("Never."))
    core = pipeline(SequentialBuilder(participants=[writer, editor]).build())
    session = Session("w1")
    stream = core.runner.stream(core, session, [AgentRequestText(prompt="Write it.")])
    async with aclosing(stream) as events:  # type: ignore[type-var]
        seen = 0
        async for _ in events:
            seen += 1
            if seen > index:
                break
    # the writer streams 7 events, then waits in its tool: each index stops inside
    assert seen == index + 1
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
    assert tracker.started > 0 and tracker.open == {}
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert attr(one(captured_spans, "invoke_agent pipeline"), "runnertrace.cancelled") is True
    nested = one(captured_spans, "invoke_agent writer")
    assert attr(nested, "runnertrace.cancelled") is True
    assert attr(one(captured_spans, "execute_tool slow"), "runnertrace.cancelled") is True
    assert captured_spans.by_name("invoke_agent editor") == []
    assert session.get(STATE_KEY) is None  # a run stopped early saves nothing
    assert writer.middleware is None and editor.middleware is None


async def test_an_agent_whose_output_is_not_the_workflows_still_streams_live(
    captured_spans: CapturedSpans,
) -> None:
    received: list[ev.StreamEvent] = []
    seen_in_tool: list[int] = []

    @tool
    async def slow(topic: str) -> str:
        """Give the consumer its turns, and note what it had by then."""
        for _ in range(50):
            await asyncio.sleep(0)
        seen_in_tool.append(len(received))
        return topic

    # a sequential workflow's output is its last participant's: the writer's is not
    writer = member("writer", call(("r1", "slow", {"topic": "t"})), say("Draft."), tools=[slow])
    editor = member("editor", say("Final."))
    core = pipeline(SequentialBuilder(participants=[writer, editor]).build())
    async for event in core.runner.stream(core, Session("w1"), [AgentRequestText(prompt="Go")]):
        received.append(event)
    # while the writer's tool ran, its model call had reached the consumer
    assert seen_in_tool == [7]
    assert [type(e).__name__ for e in received[:7]] == [
        "StepStart",
        "MessageStart",
        "ToolCallStart",
        "ToolCallArgs",
        "ToolCallArgs",
        "ToolCallEnd",
        "MessageEnd",
    ]
    assert texts(received) == ["Draft.", "Final."]
