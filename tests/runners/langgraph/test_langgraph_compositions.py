"""LangGraph's multi-agent compositions, traced: who did what, under whom, counted once.

Each composition is a real graph: prebuilt agents (``create_react_agent``) as
subgraph nodes, a plain ``StateGraph`` supervisor routing between two of them, and
a node fanning out with ``Send`` to two runs of one agent subgraph at once. Every
agent has its own offline ``ScriptedChatModel`` and keeps a log of the usage it
reported. The assertions are on spans only: each agent's steps, chat and tool spans
under the right parent with the right ``gen_ai.agent.name``; every model call
exactly once; the chat spans' input tokens equal to what the fakes reported; no
span left incomplete and no malformed-stream anomaly.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole.
import pytest

pytest.importorskip(
    "langgraph", reason="needs the langgraph extra: pip install -e '.[dev,langgraph]'"
)

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import Send
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.composition_checks import assert_answered_once, assert_no_anomalies, check_totals, rows
from tests.fidelity_helpers import (
    MODES,
    agent_of,
    attrs,
    chat_spans,
    in_start_order,
    in_step,
    one,
    parent_of,
    run,
    times,
)
from tests.tracing_helpers import OpenSpanTracker

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent
from runnertrace.runners.langgraph import LangGraphRunner
from runnertrace.runners.langgraph.testing import ScriptedChatModel
from runnertrace.testing import CapturedSpans

# create_react_agent is deprecated in favour of langchain.agents.create_agent,
# which needs the full `langchain` package; the prebuilt agent is what we drive.
pytestmark = [
    pytest.mark.filterwarnings("ignore:create_react_agent has been moved"),
    pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning"),
]

TOOL_SECONDS = 0.05  # each tool's latency: long enough for Send branches to overlap
USER: dict[str, Any] = {}  # the user's tracer, on the test's span capture


@contextmanager
def user_span(name: str) -> Iterator[None]:
    """A span the user's code (or an HTTP client) opens inside a tool or a model call."""
    with USER["tracer"].start_as_current_span(name):
        yield


class Fake:
    """One agent's scripted model, with the usage of every reply it gave."""

    def __init__(self, name: str, replies: Sequence[AIMessage] | None = None) -> None:
        self.reported: list[int] = []
        self.model = ScriptedChatModel(responses=[self.respond] * 8, model_name=f"{name}-llm")
        self._replies = list(replies or [])

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        reply = self.reply(messages)
        assert reply.usage_metadata is not None
        self.reported.append(reply.usage_metadata["input_tokens"])
        return reply

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        return self._replies.pop(0)


def usage(input_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": 3, "total_tokens": input_tokens + 3}


def lookup_call(city: str, input_tokens: int) -> AIMessage:
    call = {"name": "lookup", "args": {"city": city}, "id": f"call-{city}"}
    return AIMessage(content="", tool_calls=[call], usage_metadata=usage(input_tokens))


def answer(text: str, input_tokens: int) -> AIMessage:
    return AIMessage(content=text, usage_metadata=usage(input_tokens))


@tool
async def lookup(city: str) -> str:
    """Notes on a city."""
    with user_span(f"db.query {city}"):
        await asyncio.sleep(TOOL_SECONDS)
    return f"notes on {city}"


def react(name: str, fake: Fake, tools: Sequence[Any] = (lookup,)) -> Any:
    return create_react_agent(fake.model, list(tools), name=name)


def core(graph: Any) -> Agent:
    return Agent(graph.name, TracingRunner(LangGraphRunner(), capture_content=True), graph)


# -- span helpers ---------------------------------------------------------------------------------
def assert_counted_once(spans: CapturedSpans, fakes: Sequence[Fake]) -> None:
    """Every call a fake answered is one chat span of its model, its tokens once."""
    for fake in fakes:  # each call the model saw is one the fake answered with usage
        assert len(fake.model.calls) == len(fake.reported), fake.model.model_name
    assert_answered_once(spans.spans, {f.model.model_name: f.reported for f in fakes})


@pytest.fixture(autouse=True)
def _warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")


@pytest.fixture(autouse=True)
def _user_tracer(captured_spans: CapturedSpans) -> None:
    USER["tracer"] = captured_spans.provider.get_tracer("user-code")


# -- a subgraph ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_a_subgraph_agents_steps_nest_in_its_node_step(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fake = Fake("researcher", [lookup_call("Oslo", 11), answer("Oslo is cold.", 13)])
    team = StateGraph(MessagesState)
    team.add_node("researcher", react("researcher", fake))
    team.add_edge(START, "researcher")
    team.add_edge("researcher", END)
    await run(core(team.compile(name="team")), mode)

    assert_counted_once(captured_spans, [fake])
    run_span = one(captured_spans, "invoke_agent team")
    node_step = one(captured_spans, "agent_step researcher")
    assert parent_of(captured_spans, node_step) is run_span
    assert agent_of(node_step) == "team"  # the root graph's node
    chats = in_start_order(captured_spans, "chat researcher-llm")
    model_steps = [in_step(captured_spans, c, "researcher/agent", "researcher") for c in chats]
    assert len({s.context.span_id for s in model_steps}) == 2  # one step per call
    tool_span = one(captured_spans, "execute_tool lookup")
    tools_step = in_step(captured_spans, tool_span, "researcher/tools", "researcher")
    for step in (*model_steps, tools_step):
        assert parent_of(captured_spans, step) is node_step
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == 11 + 13
    assert levels_of(captured_spans, 2) == [("team", 0, 2, 1, 24, 24)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- a supervisor over two agents ------------------------------------------------------------------
class TeamState(MessagesState):
    next: str


def supervisor_graph(boss: Fake, researcher: Fake, writer: Fake) -> Any:
    async def supervise(state: TeamState) -> dict[str, Any]:
        reply = await boss.model.ainvoke(state["messages"])
        return {"next": str(reply.text)}

    graph = StateGraph(TeamState)
    graph.add_node("supervisor", supervise)
    graph.add_node("researcher", react("researcher", researcher))
    graph.add_node("writer", react("writer", writer, tools=()))
    graph.add_edge(START, "supervisor")
    graph.add_conditional_edges(
        "supervisor",
        lambda state: END if state["next"] == "FINISH" else state["next"],
        ["researcher", "writer", END],
    )
    graph.add_edge("researcher", "supervisor")
    graph.add_edge("writer", "supervisor")
    return graph.compile(name="team")


@pytest.mark.parametrize("mode", MODES)
async def test_a_supervisors_agents_each_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    boss = Fake("boss", [answer("researcher", 3), answer("writer", 5), answer("FINISH", 7)])
    researcher = Fake("researcher", [lookup_call("Oslo", 11), answer("Oslo is cold.", 13)])
    writer = Fake("writer", [answer("A cold trip.", 17)])
    await run(core(supervisor_graph(boss, researcher, writer)), mode)

    assert_counted_once(captured_spans, [boss, researcher, writer])
    run_span = one(captured_spans, "invoke_agent team")
    # The run's own line: supervisor, researcher, supervisor, writer, supervisor.
    top = [
        s for s in captured_spans.spans if s.parent and s.parent.span_id == run_span.context.span_id
    ]
    order = [s.name for s in sorted(top, key=lambda s: s.start_time or 0)]
    assert order == [
        f"agent_step {n}"
        for n in ("supervisor", "researcher", "supervisor", "writer", "supervisor")
    ]
    for chat in in_start_order(captured_spans, "chat boss-llm"):
        assert (
            parent_of(captured_spans, in_step(captured_spans, chat, "supervisor", "team"))
            is run_span
        )
    for name in ("researcher", "writer"):
        node_step = one(captured_spans, f"agent_step {name}")
        for chat in in_start_order(captured_spans, f"chat {name}-llm"):
            step = in_step(captured_spans, chat, f"{name}/agent", name)
            assert parent_of(captured_spans, step) is node_step
    tool_span = one(captured_spans, "execute_tool lookup")
    tools_step = in_step(captured_spans, tool_span, "researcher/tools", "researcher")
    assert parent_of(captured_spans, tools_step) is one(captured_spans, "agent_step researcher")
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == 3 + 5 + 7 + 11 + 13 + 17
    assert levels_of(captured_spans, 6) == [("team", 0, 6, 1, 56, 56)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- Send: parallel branches -----------------------------------------------------------------------
CITIES = {"Oslo": (11, 13), "Rome": (17, 19)}  # city -> input tokens of its two calls


class CityFake(Fake):
    """One model shared by every ``Send`` branch: it answers by the city it is asked about."""

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        city = str(messages[0].text).split()[-1]
        first, second = CITIES[city]
        with user_span(f"http.request {city}"):
            pass
        if messages[-1].type == "tool":
            return answer(f"{city} done", second)
        return lookup_call(city, first)


def fan_out_graph(fake: Fake) -> Any:
    def fan_out(state: MessagesState) -> list[Send]:
        return [Send("worker", {"messages": [HumanMessage(f"research {c}")]}) for c in CITIES]

    graph = StateGraph(MessagesState)
    graph.add_node("plan", lambda state: {})
    graph.add_node("worker", react("worker", fake))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out, ["worker"])
    graph.add_edge("worker", END)
    return graph.compile(name="fanout")


def branch_step(spans: CapturedSpans, span: ReadableSpan, run_span: ReadableSpan) -> ReadableSpan:
    """The step right under the run span that ``span`` is in."""
    while (parent := parent_of(spans, span)) is not run_span:
        span = parent
    return span


@pytest.mark.parametrize("mode", MODES)
async def test_send_branches_overlap_and_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fake = CityFake("worker")
    await run(core(fan_out_graph(fake)), mode)

    assert_counted_once(captured_spans, [fake])
    run_span = one(captured_spans, "invoke_agent fanout")
    branches = captured_spans.by_name("agent_step worker")
    assert len(branches) == 2
    for branch in branches:
        assert parent_of(captured_spans, branch) is run_span
    (a, b) = (times(s) for s in branches)
    assert a[0] < b[1] and b[0] < a[1]  # the two Send branches ran at once
    chats = chat_spans(captured_spans)
    tools = captured_spans.by_name("execute_tool lookup")
    seen: set[int] = set()
    for city in CITIES:
        mine = [c for c in chats if f"research {city}" in str(attrs(c)["gen_ai.input.messages"])]
        (tool_span,) = [t for t in tools if city in str(attrs(t)["gen_ai.tool.call.arguments"])]
        assert len(mine) == 2
        steps = [in_step(captured_spans, c, "worker/agent", "worker") for c in mine]
        assert len({s.context.span_id for s in steps}) == 2  # one step per call
        in_step(captured_spans, tool_span, "worker/tools", "worker")
        # What the city's tool and model calls opened nests under those very calls.
        assert parent_of(captured_spans, one(captured_spans, f"db.query {city}")) is tool_span
        http = captured_spans.by_name(f"http.request {city}")
        assert {parent_of(captured_spans, h).context.span_id for h in http} == {
            c.context.span_id for c in mine
        }
        owners = {
            branch_step(captured_spans, s, run_span).context.span_id for s in [*mine, tool_span]
        }
        assert len(owners) == 1  # the city's calls and its tool: all in one branch
        seen |= owners
    assert seen == {s.context.span_id for s in branches}  # each branch has its own city
    total = sum(sum(tokens) for tokens in CITIES.values())
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == total
    assert levels_of(captured_spans, 4) == [("fanout", 0, 4, 2, total, total)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- what is not a branch: a prebuilt agent's per-call tool tasks --------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_a_root_agents_parallel_tool_calls_share_one_step_on_the_runs_line(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    calls = [{"name": "lookup", "args": {"city": city}, "id": f"call-{city}"} for city in CITIES]
    both = AIMessage(content="", tool_calls=calls, usage_metadata=usage(23))
    fake = Fake("solo", [both, answer("Both noted.", 29)])
    await run(core(react("solo", fake)), mode)

    assert_counted_once(captured_spans, [fake])
    run_span = one(captured_spans, "invoke_agent solo")
    tools_step = one(captured_spans, "agent_step tools")  # one step for both calls
    assert parent_of(captured_spans, tools_step) is run_span
    tool_spans = captured_spans.by_name("execute_tool lookup")
    assert len(tool_spans) == 2
    for tool_span in tool_spans:
        assert parent_of(captured_spans, tool_span) is tools_step
    (a, b) = (times(s) for s in tool_spans)
    assert a[0] < b[1] and b[0] < a[1]  # the two calls ran at once
    model_steps = in_start_order(captured_spans, "agent_step agent")
    assert [parent_of(captured_spans, s) for s in model_steps] == [run_span, run_span]
    assert levels_of(captured_spans, 2) == [("solo", 0, 2, 2, 23 + 29, 23 + 29)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- parallel edges: two agents in one superstep ---------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_agents_on_parallel_edges_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fakes = {
        name: Fake(name, [lookup_call(city, tokens[0]), answer(f"{city} done", tokens[1])])
        for name, (city, tokens) in zip(("north", "south"), CITIES.items(), strict=True)
    }
    graph = StateGraph(MessagesState)
    for name, fake in fakes.items():
        graph.add_node(name, react(name, fake))
        graph.add_edge(START, name)
        graph.add_edge(name, END)
    await run(core(graph.compile(name="pair")), mode)

    assert_counted_once(captured_spans, list(fakes.values()))
    run_span = one(captured_spans, "invoke_agent pair")
    node_steps = [one(captured_spans, f"agent_step {name}") for name in fakes]
    (a, b) = (times(s) for s in node_steps)
    assert a[0] < b[1] and b[0] < a[1]  # the two agents ran at once
    for name, node_step in zip(fakes, node_steps, strict=True):
        assert parent_of(captured_spans, node_step) is run_span
        for chat in in_start_order(captured_spans, f"chat {name}-llm"):
            step = in_step(captured_spans, chat, f"{name}/agent", name)
            assert parent_of(captured_spans, step) is node_step
    for tool_span in captured_spans.by_name("execute_tool lookup"):
        city = "Oslo" if "Oslo" in str(attrs(tool_span)["gen_ai.tool.call.arguments"]) else "Rome"
        name = "north" if city == "Oslo" else "south"
        step = in_step(captured_spans, tool_span, f"{name}/tools", name)
        assert parent_of(captured_spans, step) is one(captured_spans, f"agent_step {name}")
    total = sum(sum(tokens) for tokens in CITIES.values())
    assert levels_of(captured_spans, 4) == [("pair", 0, 4, 2, total, total)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- a failing Send branch -------------------------------------------------------------------------
class SlowOsloModel(ScriptedChatModel):
    """Answers calls about Oslo only after a pause, so they are in flight while the
    other branch fails (the pause is before the scripted turn is played)."""

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await self._pause(messages)
        return await super()._agenerate(messages, *args, **kwargs)

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await self._pause(messages)
        async for chunk in super()._astream(messages, *args, **kwargs):
            yield chunk

    @staticmethod
    async def _pause(messages: list[BaseMessage]) -> None:
        if "Oslo" in str(messages[0].text):
            await asyncio.sleep(TOOL_SECONDS)


class RomeFails(CityFake):
    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        if "Rome" in str(messages[0].text):
            raise BranchError("Rome is unreachable")
        return super().reply(messages)


class BranchError(RuntimeError):
    """What the failing branch's model call raises."""


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_send_branch_does_not_end_the_other_branchs_call_with_its_error(
    mode: str, captured_spans: CapturedSpans
) -> None:
    fake = RomeFails("worker")
    fake.model = SlowOsloModel(responses=[fake.respond] * 8, model_name="worker-llm")
    with pytest.raises(BranchError):
        await run(core(fan_out_graph(fake)), mode)

    chats = chat_spans(captured_spans)
    (rome,) = [c for c in chats if "research Rome" in str(attrs(c)["gen_ai.input.messages"])]
    (oslo,) = [c for c in chats if "research Oslo" in str(attrs(c)["gen_ai.input.messages"])]
    assert attrs(rome)["error.type"] == "BranchError"
    # Oslo's call was cut short by LangGraph cancelling its branch, not by Rome's error.
    assert attrs(oslo).get("error.type") == "CancelledError"
    assert times(oslo)[0] < times(rome)[1]  # it was in flight when Rome failed
    (level,) = check_totals(captured_spans.spans, model_calls=2)
    assert (level.agent, level.model_calls, level.errors) == ("fanout", 2, 2)


# -- with OpenInference's LangChain instrumentor on the same provider ------------------------------
def supervisor_case() -> tuple[Any, list[Fake]]:
    boss = Fake("boss", [answer("researcher", 3), answer("FINISH", 7)])
    researcher = Fake("researcher", [lookup_call("Oslo", 11), answer("Oslo is cold.", 13)])
    writer = Fake("writer")
    return supervisor_graph(boss, researcher, writer), [boss, researcher]


def send_case() -> tuple[Any, list[Fake]]:
    fake = CityFake("worker")
    return fan_out_graph(fake), [fake]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [supervisor_case, send_case], ids=["supervisor", "send"])
async def test_each_call_of_a_composition_is_ours_once_with_openinference_active(
    mode: str, case: Any, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    instrumentation = pytest.importorskip("openinference.instrumentation.langchain")
    instrumentor = instrumentation.LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        graph, fakes = case()
        await run(core(graph), mode)
        theirs = [
            s.name
            for s in captured_spans.spans
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name.startswith("openinference")
        ]
        assert theirs == []
        assert_counted_once(captured_spans, fakes)
        check_totals(captured_spans.spans, model_calls=sum(len(f.reported) for f in fakes))
        assert_no_anomalies(captured_spans.spans, caplog.text)
        # the instrumentor is live: an untraced run of the same composition is its to trace
        captured_spans.clear()
        graph, fakes = case()
        await graph.ainvoke({"messages": [HumanMessage("research Oslo")]})
        assert any(s.name == "ScriptedChatModel" for s in captured_spans.spans)
    finally:
        instrumentor.uninstrument()


# -- Send inside a subgraph ------------------------------------------------------------------------
def subgraph_send_graph(fake: Fake) -> Any:
    """A root graph whose one node is the ``Send`` fan-out graph: its branches run inside
    the subgraph, their tasks two namespaces deep."""
    graph = StateGraph(MessagesState)
    graph.add_node("team", fan_out_graph(fake))
    graph.add_edge(START, "team")
    graph.add_edge("team", END)
    return graph.compile(name="outer")


def enclosing(spans: CapturedSpans, span: ReadableSpan, name: str) -> ReadableSpan:
    """The nearest ancestor of ``span`` called ``name``."""
    while (span := parent_of(spans, span)).name != name:
        pass
    return span


def ancestors(spans: CapturedSpans, span: ReadableSpan) -> list[ReadableSpan]:
    found = []
    while span.parent is not None:
        span = parent_of(spans, span)
        found.append(span)
    return found


def city_of(span: ReadableSpan) -> str:
    text = str(
        attrs(span).get("gen_ai.input.messages", attrs(span).get("gen_ai.tool.call.arguments"))
    )
    (city,) = [c for c in CITIES if c in text]
    return city


@pytest.mark.parametrize("mode", MODES)
async def test_send_branches_inside_a_subgraph_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fake = CityFake("worker")
    await run(core(subgraph_send_graph(fake)), mode)

    assert_counted_once(captured_spans, [fake])
    run_span = one(captured_spans, "invoke_agent outer")
    node_step = one(captured_spans, "agent_step team")
    assert parent_of(captured_spans, node_step) is run_span
    plan = one(captured_spans, "agent_step team/plan")
    assert parent_of(captured_spans, plan) is node_step
    assert agent_of(plan) == "fanout"  # the subgraph's node
    branches = captured_spans.by_name("agent_step team/worker")
    assert len(branches) == 2
    (a, b) = (times(s) for s in branches)
    assert a[0] < b[1] and b[0] < a[1]  # the two Send branches ran at once
    assert {agent_of(s) for s in branches} == {"fanout"}
    chats = chat_spans(captured_spans)
    tools = captured_spans.by_name("execute_tool lookup")
    owner: dict[str, set[int]] = {city: set() for city in CITIES}
    for span in [*chats, *tools]:
        owner[city_of(span)].add(
            enclosing(captured_spans, span, "agent_step team/worker").context.span_id
        )
    # each city's two calls and its tool in one branch, each branch a city of its own
    assert sorted(len(ids) for ids in owner.values()) == [1, 1]
    assert set.union(*owner.values()) == {s.context.span_id for s in branches}
    for chat in chats:
        in_step(captured_spans, chat, "team/worker/agent", "worker")
    for tool_span in tools:
        in_step(captured_spans, tool_span, "team/worker/tools", "worker")
        assert (
            parent_of(captured_spans, one(captured_spans, f"db.query {city_of(tool_span)}"))
            is tool_span
        )
    # no step holds another branch's call: one call per model step, one city per tools step
    for step in captured_spans.by_name("agent_step team/worker/agent"):
        assert len([c for c in chats if parent_of(captured_spans, c) is step]) == 1
    for chat in chats:  # what a model call opened nests under that very call
        mine = [
            h
            for h in captured_spans.by_name(f"http.request {city_of(chat)}")
            if parent_of(captured_spans, h) is chat
        ]
        assert len(mine) == 1
    (level,) = check_totals(captured_spans.spans, model_calls=len(fake.reported))
    assert (level.agent, level.model_calls, level.tool_calls, level.nested_runs) == (
        "outer",
        4,
        2,
        0,
    )
    assert level.input_tokens == sum(sum(tokens) for tokens in CITIES.values())
    assert_no_anomalies(captured_spans.spans, caplog.text)


@pytest.mark.parametrize("mode", MODES)
async def test_agents_on_parallel_edges_inside_a_subgraph_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fakes = {
        name: Fake(name, [lookup_call(city, tokens[0]), answer(f"{city} done", tokens[1])])
        for name, (city, tokens) in zip(("north", "south"), CITIES.items(), strict=True)
    }
    pair = StateGraph(MessagesState)
    for name, fake in fakes.items():
        pair.add_node(name, react(name, fake))
        pair.add_edge(START, name)
        pair.add_edge(name, END)
    graph = StateGraph(MessagesState)
    graph.add_node("team", pair.compile(name="pair"))
    graph.add_edge(START, "team")
    graph.add_edge("team", END)
    await run(core(graph.compile(name="outer")), mode)

    assert_counted_once(captured_spans, list(fakes.values()))
    node_steps = [one(captured_spans, f"agent_step team/{name}") for name in fakes]
    (a, b) = (times(s) for s in node_steps)
    assert a[0] < b[1] and b[0] < a[1]  # the two agents ran at once
    for name, node_step in zip(fakes, node_steps, strict=True):
        assert agent_of(node_step) == "pair"
        for chat in in_start_order(captured_spans, f"chat {name}-llm"):
            step = in_step(captured_spans, chat, f"team/{name}/agent", name)
            assert parent_of(captured_spans, step) is node_step
        (tool_span,) = [
            t for t in captured_spans.by_name("execute_tool lookup") if agent_of(t) == name
        ]
        step = in_step(captured_spans, tool_span, f"team/{name}/tools", name)
        assert parent_of(captured_spans, step) is node_step
    total = sum(sum(tokens) for tokens in CITIES.values())
    assert levels_of(captured_spans, 4) == [("outer", 0, 4, 2, total, total)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


@pytest.mark.parametrize("mode", MODES)
async def test_send_branches_inside_a_subgraph_nest_in_its_node_step(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(core(subgraph_send_graph(CityFake("worker"))), mode)
    node_step = one(captured_spans, "agent_step team")
    branches = captured_spans.by_name("agent_step team/worker")
    assert [parent_of(captured_spans, s) for s in branches] == [node_step, node_step]


# -- an agent used as a tool: a nested run ---------------------------------------------------------
def ask(tool_name: str, question: str, input_tokens: int) -> AIMessage:
    call = {"name": tool_name, "args": {"question": question}, "id": f"call-{tool_name}"}
    return AIMessage(content="", tool_calls=[call], usage_metadata=usage(input_tokens))


def agent_tool(graph: Any, name: str) -> Any:
    """A tool whose body runs ``graph`` (the pattern of LangGraph's multi-agent docs)."""

    async def ask_agent(question: str) -> str:
        out = await graph.ainvoke({"messages": [HumanMessage(question)]})
        return str(out["messages"][-1].text)

    return tool(name, description=f"Ask the {graph.name}.")(ask_agent)


def as_tool(graph: Any, name: str) -> Any:
    """``Runnable.as_tool()``: the graph itself as the tool."""
    return graph.as_tool(
        name=name, description=f"Ask the {graph.name}.", arg_types={"messages": list}
    )


def researcher_team(kind: str) -> tuple[Any, list[Fake]]:
    researcher = Fake("researcher", [lookup_call("Oslo", 11), answer("Oslo is cold.", 13)])
    inner = react("researcher", researcher)
    if kind == "as_tool":
        call = {
            "name": "research",
            "args": {"messages": [{"role": "user", "content": "Oslo?"}]},
            "id": "call-research",
        }
        first = AIMessage(content="", tool_calls=[call], usage_metadata=usage(3))
        research = as_tool(inner, "research")
    else:
        first = ask("research", "Oslo?", 3)
        research = agent_tool(inner, "research")
    boss = Fake("boss", [first, answer("Oslo: cold.", 5)])
    return react("boss", boss, tools=[research]), [boss, researcher]


RESEARCHER_RUN = (
    "invoke_agent researcher",
    [
        ("agent_step agent", [("chat researcher-llm", [])]),
        ("agent_step tools", [("execute_tool lookup", [("db.query Oslo", [])])]),
        ("agent_step agent", [("chat researcher-llm", [])]),
    ],
)
BOSS_TREE = [
    (
        "invoke_agent boss",
        [
            ("agent_step agent", [("chat boss-llm", [])]),
            ("agent_step tools", [("execute_tool research", [RESEARCHER_RUN])]),
            ("agent_step agent", [("chat boss-llm", [])]),
        ],
    )
]


def levels_of(spans: CapturedSpans, calls: int) -> list[tuple[str, int, int, int, int, int]]:
    """Per run level: (agent, depth, model calls, tool calls, input tokens, own input tokens)."""
    levels = check_totals(spans.spans, model_calls=calls)
    print(rows(levels))  # the note's per-level figures (pytest -s)
    return [
        (lv.agent, lv.depth, lv.model_calls, lv.tool_calls, lv.input_tokens, lv.own_input_tokens)
        for lv in levels
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["tool", "as_tool"])
async def test_an_agent_used_as_a_tool_is_a_nested_run_under_its_tool_call(
    mode: str, kind: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    graph, fakes = researcher_team(kind)
    await run(core(graph), mode)

    assert captured_spans.tree() == BOSS_TREE
    inner = one(captured_spans, "invoke_agent researcher")
    assert agent_of(inner) == "researcher"
    for span in captured_spans.spans:  # the researcher's spans carry its name, the rest the boss's
        if span.name.startswith(("agent_step", "chat", "execute_tool")):
            inside = inner in ancestors(captured_spans, span)
            assert agent_of(span) == ("researcher" if inside else "boss"), span.name
    (asked,) = json.loads(attrs(inner)["gen_ai.input.messages"])
    assert asked["parts"][0]["content"] == "Oslo?"
    assert_counted_once(captured_spans, fakes)
    assert levels_of(captured_spans, 4) == [
        ("boss", 0, 4, 2, 3 + 5 + 11 + 13, 3 + 5),
        ("researcher", 1, 2, 1, 11 + 13, 11 + 13),
    ]
    assert_no_anomalies(captured_spans.spans, caplog.text)


@pytest.mark.parametrize("mode", MODES)
async def test_agents_used_as_tools_nest_two_deep_and_roll_up(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher = Fake("fetcher", [answer("raw: cold", 7)])
    researcher = Fake("researcher", [ask("fetch", "Oslo raw", 11), answer("Oslo is cold.", 13)])
    inner = react(
        "researcher", researcher, tools=[agent_tool(react("fetcher", fetcher, ()), "fetch")]
    )
    boss = Fake("boss", [ask("research", "Oslo?", 3), answer("Oslo: cold.", 5)])
    await run(core(react("boss", boss, tools=[agent_tool(inner, "research")])), mode)

    fetch_run = one(captured_spans, "invoke_agent fetcher")
    assert [s.name for s in ancestors(captured_spans, fetch_run)] == [
        "execute_tool fetch",
        "agent_step tools",
        "invoke_agent researcher",
        "execute_tool research",
        "agent_step tools",
        "invoke_agent boss",
    ]
    assert agent_of(one(captured_spans, "execute_tool fetch")) == "researcher"
    assert agent_of(one(captured_spans, "chat fetcher-llm")) == "fetcher"
    assert_counted_once(captured_spans, [boss, researcher, fetcher])
    assert levels_of(captured_spans, 5) == [
        ("boss", 0, 5, 2, 3 + 5 + 11 + 13 + 7, 3 + 5),
        ("researcher", 1, 3, 1, 11 + 13 + 7, 11 + 13),
        ("fetcher", 2, 1, 0, 7, 7),
    ]
    boss_run = attrs(one(captured_spans, "invoke_agent boss"))
    assert boss_run["runnertrace.nested_runs"] == 2
    assert_no_anomalies(captured_spans.spans, caplog.text)


class InnerFailed(RuntimeError):
    """What the agent tool's model raises."""


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_that_fails_ends_its_nested_run_in_error_and_counts_above(
    mode: str, captured_spans: CapturedSpans
) -> None:
    researcher_model = ScriptedChatModel(
        responses=[InnerFailed("model endpoint reset the connection")], model_name="researcher-llm"
    )
    researcher = create_react_agent(researcher_model, [lookup], name="researcher")
    boss = Fake("boss", [ask("research", "Oslo?", 3), answer("No notes today.", 5)])
    tools = ToolNode([agent_tool(researcher, "research")], handle_tool_errors=True)
    await run(core(create_react_agent(boss.model, tools, name="boss")), mode)

    inner = one(captured_spans, "invoke_agent researcher")
    (chat,) = captured_spans.by_name("chat researcher-llm")
    for span in (inner, chat):
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert attrs(span)["error.type"] == "InnerFailed"
    call = parent_of(captured_spans, inner)
    assert call.name == "execute_tool research"
    assert call.status.status_code is StatusCode.ERROR  # the boss was told the tool failed
    boss_run = one(captured_spans, "invoke_agent boss")
    assert boss_run.status.status_code is StatusCode.UNSET  # and answered
    levels = check_totals(captured_spans.spans, model_calls=3)
    assert [(lv.agent, lv.model_calls, lv.errors) for lv in levels] == [
        ("boss", 3, 2),  # the researcher's failed call and the tool that ran it
        ("researcher", 1, 1),
    ]


class Hangs(ScriptedChatModel):
    """A model that never answers: it tells ``reached`` it was called, then waits."""

    reached: Any = None

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.reached.set()
        await asyncio.Event().wait()

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.reached.set()
        await asyncio.Event().wait()
        yield  # pragma: no cover - never reached


class RomeFailsOnceOsloAsked(ScriptedChatModel):
    """The branches' model: Oslo's branch asks the researcher; Rome's fails, but only once
    the researcher's call is in flight."""

    reached: Any = None

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if "Rome" in str(messages[0].text):
            await self.reached.wait()
        return await super()._agenerate(messages, *args, **kwargs)

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if "Rome" in str(messages[0].text):
            await self.reached.wait()
        async for chunk in super()._astream(messages, *args, **kwargs):
            yield chunk


def branch_turn(messages: list[BaseMessage]) -> AIMessage:
    if "Rome" in str(messages[0].text):
        raise BranchError("Rome is unreachable")
    return ask("research", "Oslo?", 11)


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_cancelled_by_a_failing_sibling_branch_ends_cancelled(
    mode: str, captured_spans: CapturedSpans
) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    reached = asyncio.Event()
    researcher = create_react_agent(
        Hangs(responses=[], model_name="researcher-llm", reached=reached),
        [lookup],
        name="researcher",
    )
    model = RomeFailsOnceOsloAsked(
        responses=[branch_turn] * 2, model_name="worker-llm", reached=reached
    )
    worker = create_react_agent(model, [agent_tool(researcher, "research")], name="worker")
    graph = StateGraph(MessagesState)
    graph.add_node("plan", lambda state: {})
    graph.add_node("worker", worker)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges(
        "plan",
        lambda state: [
            Send("worker", {"messages": [HumanMessage(f"research {c}")]}) for c in CITIES
        ],
        ["worker"],
    )
    graph.add_edge("worker", END)
    with pytest.raises(BranchError):
        await run(core(graph.compile(name="fanout")), mode)

    inner = one(captured_spans, "invoke_agent researcher")
    assert attrs(inner)["runnertrace.cancelled"] is True
    assert parent_of(captured_spans, inner).name == "execute_tool research"
    (hung,) = captured_spans.by_name("chat researcher-llm")
    assert enclosing(captured_spans, hung, "invoke_agent researcher") is inner
    assert attrs(hung).get("error.type") == "CancelledError"
    assert not tracker.open  # everything, the nested run included, ended
    levels = check_totals(captured_spans.spans)
    assert [(lv.agent, lv.model_calls) for lv in levels] == [("fanout", 3), ("researcher", 1)]


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_a_node_runs_is_a_subgraph_of_the_run_not_a_nested_run(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    fake = Fake("researcher", [lookup_call("Oslo", 11), answer("Oslo is cold.", 13)])
    researcher = react("researcher", fake)

    async def research(state: MessagesState) -> dict[str, Any]:
        out = await researcher.ainvoke({"messages": state["messages"]})
        return {"messages": [out["messages"][-1]]}

    graph = StateGraph(MessagesState)
    graph.add_node("research", research)
    graph.add_edge(START, "research")
    graph.add_edge("research", END)
    await run(core(graph.compile(name="team")), mode)

    assert [s.name for s in captured_spans.spans if s.name.startswith("invoke_agent")] == [
        "invoke_agent team"
    ]
    node_step = one(captured_spans, "agent_step research")
    for chat in chat_spans(captured_spans):
        step = in_step(captured_spans, chat, "research/agent", "researcher")
        assert parent_of(captured_spans, step) is node_step
    assert levels_of(captured_spans, 2) == [("team", 0, 2, 1, 24, 24)]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- with an app-wide SDK provider and OpenInference's LangChain instrumentor on it ---------------
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

from openinference.instrumentation.langchain import LangChainInstrumentor
LangChainInstrumentor().instrument()

import tests.runners.langgraph.test_langgraph_compositions as case
from tests.composition_checks import check_totals
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.langgraph import LangGraphRunner
from runnertrace.tracing.config import TraceConfig

case.USER["tracer"] = trace.get_tracer("user-code")

def subgraph_send():
    fake = case.CityFake("worker")
    return case.subgraph_send_graph(fake), [fake]

CASES = {"subgraph send": subgraph_send, "agent tool": lambda: case.researcher_team("tool")}

async def go(runner, name, mode):
    graph, fakes = CASES[name]()
    a = Agent(graph.name, runner, graph)
    requests = [AgentRequestText(prompt="Oslo and Rome?")]
    if mode == "run":
        await a.runner.run(a, Session("s1"), requests)
    else:
        async for _ in a.runner.stream(a, Session("s1"), requests):
            pass
    # The process's first priced calls end once the price table is loaded: a flush ends them.
    app.force_flush()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    def parents(prefix):
        return sorted(
            by_id[s.parent.span_id].name for s in spans if s.name.startswith(prefix) and s.parent
        )
    calls = sum(len(f.reported) for f in fakes)
    out = {
        "names": sorted(s.name for s in spans),
        "scopes": sorted({s.instrumentation_scope.name for s in spans}),
        "calls": calls,
        "db parents": parents("db.query"),
        "http parents": parents("http.request"),
        "nested parents": parents("invoke_agent researcher"),
    }
    if runner is not None and getattr(runner, "is_tracing_runner", False):
        levels = check_totals(spans, model_calls=calls)
        out["levels"] = [[lv.agent, lv.depth, lv.model_calls, lv.input_tokens] for lv in levels]
    exporter.clear()
    return out

async def main():
    out = {}
    for name in CASES:
        for mode in ("run", "stream"):
            out[f"untraced {name} {mode}"] = await go(LangGraphRunner(), name, mode)
            tracing = traced(LangGraphRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
            out[f"traced {name} {mode}"] = await go(tracing, name, mode)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_with_an_app_provider_and_openinference_on_it_each_call_once_in_its_run(
    tmp_path: Path,
) -> None:
    pytest.importorskip("openinference.instrumentation.langchain")
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
        env={**env, "HOME": str(tmp_path), "LANGSMITH_TRACING": "false"},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    total = sum(sum(tokens) for tokens in CITIES.values())
    expected = {
        "subgraph send": [["outer", 0, 4, total]],
        "agent tool": [["boss", 0, 4, 32], ["researcher", 1, 2, 24]],
    }
    for name, levels in expected.items():
        for mode in MODES:
            untraced = seen[f"untraced {name} {mode}"]
            # untraced, the spans are OpenInference's (so the checks below can fail)
            assert not any(n.startswith("invoke_agent") for n in untraced["names"])
            assert any(s.startswith("openinference") for s in untraced["scopes"]), untraced
            got = seen[f"traced {name} {mode}"]
            assert got["scopes"] == ["runnertrace", "user-code"], got["scopes"]
            assert got["levels"] == levels  # check_totals held at every level, each call once
            assert set(got["db parents"]) == {"execute_tool lookup"}
            assert set(got["http parents"]) <= {"chat worker-llm"}
            if name == "agent tool":
                assert got["nested parents"] == ["execute_tool research"]
