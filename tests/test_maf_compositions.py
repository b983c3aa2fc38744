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
``invoke_agent`` span under the tool's span. The ready-made orchestrations
(``SequentialBuilder``, ``ConcurrentBuilder``, ``HandoffBuilder``...) live in
``agent-framework-orchestrations``, which the ``maf`` extra does not install; they
are not covered here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("agent_framework", reason="needs the maf extra: pip install -e '.[dev,maf]'")

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from agent_framework import Agent, Message, WorkflowBuilder, tool
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.fidelity_helpers import MODES, in_start_order, one, parent_of, run
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf_testing import ScriptedChatClient, Turn, call, say
from runnertrace.testing import CapturedSpans

REPO = Path(__file__).resolve().parent.parent
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
    assert attr(nested, "gen_ai.aggregated_usage.input_tokens") == 12
    assert attr(one(captured_spans, "invoke_agent coord"), "gen_ai.aggregated_usage.input_tokens")
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
    ours = [s for s in chats(captured_spans) if s.instrumentation_scope.name != "agent_framework"]
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
from runnertrace.runners.maf_testing import ScriptedChatClient, call, say

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
