"""LangGraphRunner against real LangGraph graphs driven by a scripted chat model (offline)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, AsyncCallbackManager
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, create_react_agent
from langgraph.prebuilt.chat_agent_executor import AgentState
from langgraph.types import Command
from pydantic import BaseModel

from runnertrace import TracingRunner
from runnertrace._internal.imports import MissingExtraError
from runnertrace.core import Runtime, Session, ToolContext, observing
from runnertrace.core.agent import Agent
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyText,
    AgentRequestAny,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.runners.langgraph import LangGraphModule, LangGraphRunner, merge_config
from runnertrace.runners.langgraph.testing import ScriptedChatModel
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig, load_settings

# create_react_agent is deprecated in favour of langchain.agents.create_agent,
# which needs the full `langchain` package; the prebuilt agent is what we drive.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

QUESTION = "What is 6 times 7?"
ANSWER = "6 times 7 is 42."
PROMPT = [AgentRequestText(prompt=QUESTION)]
TOOL_SESSIONS: list[str] = []


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    TOOL_SESSIONS.append(ToolContext.get().session.id)
    return a * b


def tool_turn(call_id: str = "call_1", name: str = "multiply", **args: Any) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args or {"a": 6, "b": 7}, "id": call_id}],
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    )


def answer_turn(text: str = ANSWER) -> AIMessage:
    return AIMessage(
        content=text, usage_metadata={"input_tokens": 20, "output_tokens": 4, "total_tokens": 24}
    )


def two_step(runs: int = 1) -> list[AIMessage]:
    return [
        tool_turn(f"call_{i}") if j == 0 else answer_turn() for i in range(runs) for j in (0, 1)
    ]


def calc_graph(model: ScriptedChatModel, *, checkpointer: Any = None, **kwargs: Any) -> Any:
    return create_react_agent(
        model,
        kwargs.pop("tools", [multiply]),
        checkpointer=InMemorySaver() if checkpointer is None else checkpointer,
        name=kwargs.pop("name", "calc"),
        **kwargs,
    )


def setup(
    model: ScriptedChatModel | None = None, **kwargs: Any
) -> tuple[Runtime, LangGraphModule, Agent, ScriptedChatModel]:
    model = model or ScriptedChatModel(responses=two_step())
    runtime = Runtime(settings=load_settings())
    graph = calc_graph(model, **kwargs)
    module = LangGraphModule([graph], runtime=runtime)
    return runtime, module, runtime.agents().get(graph.name), model


async def stream_events(runtime: Runtime, agent: Agent, session: Session) -> list[Any]:
    return [c.event async for c in runtime.stream(agent, session, PROMPT) if c.event is not None]


# What a model call was sent: asserted in test_fidelity_langgraph.py (beside this file), left
# out here.
REQUEST_FIELDS = {"input_messages", "system_instructions", "request_parameters", "tool_definitions"}


def shape(events: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Events with message ids replaced by their order of appearance (run ids differ per run)."""
    ids: dict[str, str] = {}

    def mid(value: str) -> str:
        message, reasoning, _ = value.partition("_reasoning")
        return ids.setdefault(message, f"m{len(ids) + 1}") + (":reasoning" if reasoning else "")

    out: list[tuple[Any, ...]] = []
    for e in events:
        data = e.model_dump(exclude={"type", *REQUEST_FIELDS})
        for key in ("message_id", "parent_message_id"):
            if data.get(key):
                data[key] = mid(data[key])
        if str(data.get("response_id")).startswith("scripted-"):
            data["response_id"] = "<scripted id>"
        out.append((e.type, *(v for v in data.values() if v is not None)))
    return out


def coalesce(events: Sequence[Any]) -> list[Any]:
    """Merge consecutive text / argument deltas of one id (run mode does not stream)."""
    merged: list[Any] = []
    for e in events:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and e.type in ("text_delta", "tool_call_args", "reasoning_delta")
            and prev.type == e.type
            and getattr(prev, "message_id", None) == getattr(e, "message_id", None)
            and getattr(prev, "tool_call_id", None) == getattr(e, "tool_call_id", None)
        ):
            merged[-1] = prev.model_copy(update={"delta": prev.delta + e.delta})
        else:
            merged.append(e)
    return merged


def assert_paired(events: Sequence[Any]) -> None:
    """Every start has its end, in order, and nothing ends that did not start."""
    open_steps: list[tuple[str, int | None]] = []
    open_messages: set[str] = set()
    calls: dict[str, str] = {}
    for e in events:
        if e.type == "step_start":
            open_steps.append((e.step_name, e.step_index))
        elif e.type == "step_end":
            assert open_steps.pop() == (e.step_name, e.step_index)
        elif e.type in ("message_start", "reasoning_start"):
            assert e.message_id not in open_messages
            open_messages.add(e.message_id)
        elif e.type in ("message_end", "reasoning_end"):
            open_messages.remove(e.message_id)
        elif e.type in ("text_delta", "reasoning_delta"):
            assert e.message_id in open_messages
        elif e.type == "tool_call_start":
            assert e.parent_message_id is None or e.parent_message_id in open_messages
            calls[e.tool_call_id] = "started"
        elif e.type == "tool_call_args":
            assert calls[e.tool_call_id] == "started"
        elif e.type == "tool_call_end":
            assert calls[e.tool_call_id] == "started"
            calls[e.tool_call_id] = "ended"
        elif e.type == "tool_call_result":
            assert calls.pop(e.tool_call_id) == "ended"
    assert not open_steps and not open_messages and not calls


EXPECTED_STREAM = [
    ("step_start", "agent", 1),
    ("message_start", "m1", "assistant", "scripted", "scripted"),
    ("tool_call_start", "call_0", "multiply", "m1"),
    ("tool_call_args", "call_0", '{"a": 6,'),
    ("tool_call_args", "call_0", ' "b": 7}'),
    ("tool_call_end", "call_0"),
    ("message_end", "m1", "tool_calls", 10, 5, "scripted", "<scripted id>"),
    ("step_end", "agent", 1),
    ("step_start", "tools", 2),
    ("tool_call_result", "call_0", "42", False),
    ("step_end", "tools", 2),
    ("step_start", "agent", 3),
    ("message_start", "m2", "assistant", "scripted", "scripted"),
    ("text_delta", "m2", "6"),
    ("text_delta", "m2", " times"),
    ("text_delta", "m2", " 7"),
    ("text_delta", "m2", " is"),
    ("text_delta", "m2", " 42."),
    ("message_end", "m2", "stop", 20, 4, "scripted", "<scripted id>"),
    ("step_end", "agent", 3),
]


# -- replies and events ------------------------------------------------------------------
async def test_run_returns_the_last_ai_message_as_text() -> None:
    runtime, _, agent, model = setup()
    TOOL_SESSIONS.clear()
    reply = await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    assert isinstance(reply, AgentReplyText)
    assert reply.text == ANSWER
    assert reply.prompt == QUESTION
    assert TOOL_SESSIONS == ["s1"]  # the tool ran, and ToolContext resolved inside it
    assert len(model.calls) == 2


async def test_stream_maps_the_native_stream_exactly() -> None:
    runtime, _, agent, _ = setup()
    events = await stream_events(runtime, agent, runtime.sessions().new("s1"))
    assert shape(events) == EXPECTED_STREAM
    assert_paired(events)
    # message ids are LangChain run ids: unique per model call
    message_ids = {e.message_id for e in events if e.type == "message_start"}
    assert len(message_ids) == 2


async def test_run_mode_reports_the_same_events_to_the_observer() -> None:
    runtime, _, agent, _ = setup()
    streamed = await stream_events(runtime, agent, runtime.sessions().new("s1"))
    runtime2, _, agent2, _ = setup()
    observed: list[Any] = []
    with observing(observed.append):
        reply = await runtime2.run(agent2, runtime2.sessions().new("s1"), PROMPT)
    assert str(reply) == ANSWER
    assert shape(observed) == shape(coalesce(streamed))
    assert_paired(observed)


async def test_without_an_observer_run_mode_reports_nothing_and_still_works() -> None:
    runtime, _, agent, _ = setup()
    reply = await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    assert str(reply) == ANSWER


async def test_structured_response_becomes_agent_reply_any() -> None:
    class Product(BaseModel):
        value: int

    model = ScriptedChatModel(
        responses=[*two_step(), tool_turn("call_s", name="Product", value=42)]
    )
    runtime, _, agent, _ = setup(model, response_format=Product)
    reply = await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == {"value": 42}
    assert str(reply) == '{"value": 42}'


async def test_reasoning_blocks_map_to_reasoning_events_in_both_modes() -> None:
    thinking = AIMessage(
        content=[{"type": "reasoning", "reasoning": "6*7"}, {"type": "text", "text": "42"}]
    )

    def run_setup() -> tuple[Runtime, Agent]:
        runtime, _, agent, _ = setup(ScriptedChatModel(responses=[thinking]))
        return runtime, agent

    runtime, agent = run_setup()
    streamed = await stream_events(runtime, agent, runtime.sessions().new("s"))
    runtime, agent = run_setup()
    observed: list[Any] = []
    with observing(observed.append):
        reply = await runtime.run(agent, runtime.sessions().new("s"), PROMPT)
    assert str(reply) == "42"
    for events in (streamed, observed):
        kinds = [e.type for e in events]
        assert kinds == [
            "step_start",
            "message_start",
            "reasoning_start",
            "reasoning_delta",
            "reasoning_end",
            "text_delta",
            "message_end",
            "step_end",
        ]
        assert_paired(events)


async def test_images_become_standard_content_blocks() -> None:
    runtime, _, agent, model = setup()
    requests = [
        AgentRequestText(prompt="What is in the picture?"),
        AgentRequestImage(image_data="aGVsbG8=", mime_type="image/png"),
    ]
    await runtime.run(agent, runtime.sessions().new("s1"), requests)
    sent = model.calls[0][-1]
    assert isinstance(sent, HumanMessage)
    assert sent.content == [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image", "base64": "aGVsbG8=", "mime_type": "image/png"},
    ]


async def test_subgraph_steps_nest_and_parallel_tool_calls_share_one_step() -> None:
    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "multiply", "args": {"a": 1, "b": 2}, "id": "c1"},
            {"name": "multiply", "args": {"a": 3, "b": 4}, "id": "c2"},
        ],
    )
    inner = calc_graph(ScriptedChatModel(responses=[both, answer_turn()]), name="inner")
    builder = StateGraph(MessagesState)
    builder.add_node("delegate", inner)
    builder.add_edge(START, "delegate")
    builder.add_edge("delegate", END)
    agent = Agent("outer", LangGraphRunner(), builder.compile(name="outer"))
    events = [e async for e in agent.runner.stream(agent, Session("s1"), PROMPT)]
    assert_paired(events)
    steps = [(e.type, e.step_name) for e in events if e.type in ("step_start", "step_end")]
    assert steps == [
        ("step_start", "delegate"),
        ("step_start", "delegate/agent"),
        ("step_end", "delegate/agent"),
        ("step_start", "delegate/tools"),  # one step for both per-call `tools` tasks
        ("step_end", "delegate/tools"),
        ("step_start", "delegate/agent"),
        ("step_end", "delegate/agent"),
        ("step_end", "delegate"),
    ]
    results = {e.tool_call_id: e.content for e in events if e.type == "tool_call_result"}
    assert results == {"c1": "2", "c2": "12"}  # the two calls run concurrently


async def test_closing_a_stream_early_saves_nothing() -> None:
    _, _, agent, _ = setup()
    session = Session("s1")
    session.set_framework_context({"visits": 1})
    stream = agent.runner.stream(agent, session, PROMPT)
    first = [await anext(stream) for _ in range(3)]
    await stream.aclose()
    assert [e.type for e in first] == ["step_start", "message_start", "tool_call_start"]
    assert session.get("langgraph") is None
    assert session.get_framework_context() == {"visits": 1}


# -- session state -------------------------------------------------------------------------
async def test_second_run_sees_the_first_runs_history() -> None:
    runtime, _, agent, model = setup(ScriptedChatModel(responses=two_step(runs=2)))
    session = runtime.sessions().new("s1")
    await runtime.run(agent, session, PROMPT)
    follow_up = [AgentRequestText(prompt="And 6 times 8?")]
    [c async for c in runtime.stream(agent, session, follow_up)]
    first_call_of_second_run = [str(m.text) for m in model.calls[2]]
    assert first_call_of_second_run[0] == QUESTION
    assert first_call_of_second_run[3] == ANSWER
    assert first_call_of_second_run[-1] == "And 6 times 8?"
    assert len(first_call_of_second_run) == 5
    # another session starts from scratch
    runtime2, _, agent2, model2 = setup()
    await runtime2.run(agent2, runtime2.sessions().new("other"), PROMPT)
    assert len(model2.calls[0]) == 1


async def test_history_survives_a_fresh_checkpointer_and_a_graph_without_one() -> None:
    """The session, not only the checkpointer, carries the thread (e.g. after a restart)."""
    runtime, _, agent, _ = setup()
    session = runtime.sessions().new("s1")
    await runtime.run(agent, session, PROMPT)
    state = session.to_state()
    assert [type(m).__name__ for m in session.get("langgraph")["calc"]["messages"]] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    for checkpointer in (InMemorySaver(), None):
        model = ScriptedChatModel(responses=[answer_turn("again")])
        graph = create_react_agent(model, [multiply], checkpointer=checkpointer, name="calc")
        restarted = Agent("calc", LangGraphRunner(), graph)
        saved = Session.from_state(state)  # e.g. loaded from a SqliteSessionStore
        reply = await restarted.runner.run(restarted, saved, [AgentRequestText(prompt="more")])
        assert str(reply) == "again"
        assert str(model.calls[0][0].text) == QUESTION
        assert len(model.calls[0]) == 5


async def test_thread_id_is_the_session_id() -> None:
    runtime, module, agent, _ = setup()
    module.run_options(agent, config={"configurable": {"user_id": "u1"}})
    await runtime.run(agent, runtime.sessions().new("thread-s1"), PROMPT)
    state = await agent.native.aget_state({"configurable": {"thread_id": "thread-s1"}})
    assert [str(m.text) for m in state.values["messages"]][-1] == ANSWER


# -- framework context -------------------------------------------------------------------
class VisitState(AgentState):
    visits: int


SEEN_STATE: list[dict[str, Any]] = []


@tool
def record_visit(
    state: Annotated[dict[str, Any], InjectedState],
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> Command[Any]:
    """Count one more visit."""
    SEEN_STATE.append({"visits": state.get("visits"), "note": state.get("note")})
    return Command(
        update={
            "visits": state["visits"] + 1,
            "messages": [ToolMessage("counted", tool_call_id=tool_call_id)],
        }
    )


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("tool exploded")


def visit_setup(tools: list[Any], first: AIMessage) -> tuple[Runtime, Agent, Session]:
    model = ScriptedChatModel(responses=[first, answer_turn("done")])
    runtime, _, agent, _ = setup(model, tools=tools, state_schema=VisitState)
    session = runtime.sessions().new("s1")
    session.set_framework_context({"visits": 1, "note": "keep me"})
    return runtime, agent, session


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_context_round_trips_declared_channels_only(mode: str) -> None:
    SEEN_STATE.clear()
    runtime, agent, session = visit_setup([record_visit], tool_turn(name="record_visit"))
    if mode == "run":
        await runtime.run(agent, session, PROMPT)
    else:
        await stream_events(runtime, agent, session)
    # injected: the declared channel reached the tool; the undeclared key was dropped
    assert SEEN_STATE == [{"visits": 1, "note": None}]
    # written back: the declared channel's new value, the caller's other key untouched,
    # and nothing the runner owns (messages)
    assert session.get_framework_context() == {"visits": 2, "note": "keep me"}


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_context_is_not_written_back_when_the_run_fails(mode: str) -> None:
    runtime, agent, session = visit_setup([broken], tool_turn(name="broken"))
    with pytest.raises(RuntimeError, match="tool exploded"):
        if mode == "run":
            await runtime.run(agent, session, PROMPT)
        else:
            await stream_events(runtime, agent, session)
    assert session.get_framework_context() == {"visits": 1, "note": "keep me"}
    assert session.get("langgraph") is None


async def test_a_failing_stream_still_closes_what_it_opened() -> None:
    runtime, agent, session = visit_setup([broken], tool_turn(name="broken"))
    events: list[Any] = []
    with pytest.raises(RuntimeError, match="tool exploded"):
        async for chunk in runtime.stream(agent, session, PROMPT):
            events.append(chunk.event)
    assert [e.type for e in events][-4:] == [
        "step_end",
        "step_start",
        "tool_call_result",
        "step_end",
    ]
    assert events[-2].is_error and "tool exploded" in events[-2].content
    assert_paired(events)


# -- run options -----------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["input", "version", "stream_mode", "output_keys", "print_mode"])
def test_reserved_keys_are_rejected_at_declaration(key: str) -> None:
    _, module, agent, _ = setup()
    with pytest.raises(ValueError, match=f"'{key}' is reserved by LangGraphRunner"):
        module.run_options(agent, **{key: "x"})
    assert agent.run_options == {}


@pytest.mark.parametrize(
    "key", ["recursion_limit", "callbacks", "tags", "metadata", "run_name", "configurable"]
)
def test_top_level_runnable_config_keys_point_to_config(key: str) -> None:
    _, module, agent, _ = setup()
    with pytest.raises(ValueError, match=rf"config=\{{'{key}': \.\.\.\}}"):
        module.run_options(agent, **{key: 1})


def test_thread_id_in_config_is_rejected() -> None:
    _, module, agent, _ = setup()
    with pytest.raises(ValueError, match=r"thread_id.*session id"):
        module.run_options(agent, config={"configurable": {"thread_id": "mine"}})
    module.run_options(agent, config={"configurable": {"user_id": "u"}}, durability="exit")
    assert agent.run_options["durability"] == "exit"


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    runtime, module, agent, _ = setup()
    module.run_options(agent, lambda a, s, r: {"recursion_limit": 3})
    with pytest.raises(ValueError, match="config="):
        await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)


class Recorder(AsyncCallbackHandler):
    """A user's own LangChain callback handler.

    Inline, so LangChain calls it in list order relative to the runner's handler.
    """

    run_inline = True

    def __init__(self, on_step: Callable[[], None] | None = None) -> None:
        self.model_starts = 0
        self.tool_starts = 0
        self.root_tags: list[list[str]] = []
        self._on_step = on_step

    async def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if kwargs.get("parent_run_id") is None:
            self.root_tags.append(list(kwargs.get("tags") or []))
        elif self._on_step is not None and kwargs.get("name") == "agent":
            self._on_step()
            self._on_step = None

    async def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.model_starts += 1

    async def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.tool_starts += 1


def test_merge_config_rule() -> None:
    ours_cb, theirs_cb = Recorder(), Recorder()
    merged = merge_config(
        {"configurable": {"thread_id": "s1"}, "callbacks": [ours_cb], "tags": ["ours"]},
        {
            "configurable": {"thread_id": "x", "user_id": "u"},
            "callbacks": [theirs_cb],
            "tags": ["theirs"],
            "metadata": {"k": "v"},
            "recursion_limit": 5,
        },
    )
    assert merged == {
        "configurable": {"thread_id": "s1", "user_id": "u"},
        "callbacks": [ours_cb, theirs_cb],
        "tags": ["ours", "theirs"],
        "metadata": {"k": "v"},
        "recursion_limit": 5,
    }
    manager = AsyncCallbackManager(handlers=[theirs_cb], inheritable_handlers=[theirs_cb])
    merged = merge_config({"callbacks": [ours_cb]}, {"callbacks": manager})
    assert merged["callbacks"].handlers == [ours_cb, theirs_cb]
    assert merged["callbacks"].inheritable_handlers == [ours_cb, theirs_cb]
    assert manager.handlers == [theirs_cb]  # the caller's manager is not modified
    assert merge_config({"configurable": {"thread_id": "s"}}, None) == {
        "configurable": {"thread_id": "s"}
    }


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_user_callback_fires_exactly_once_and_after_the_runners(mode: str) -> None:
    runtime, module, agent, _ = setup()
    observed: list[Any] = []
    seen_at_first_step: list[list[str]] = []
    user = Recorder(on_step=lambda: seen_at_first_step.append([e.type for e in observed]))
    module.run_options(agent, config={"callbacks": [user], "tags": ["user-tag"]})
    session = runtime.sessions().new("s1")
    if mode == "run":
        with observing(observed.append):
            await runtime.run(agent, session, PROMPT)
        # the runner's handler comes first: its step start was reported before
        # the user's handler saw that step
        assert seen_at_first_step == [["step_start"]]
    else:
        await stream_events(runtime, agent, session)
    assert (user.model_starts, user.tool_starts) == (2, 1)
    assert user.root_tags == [["user-tag"]]


async def test_factory_options_reach_the_native_call() -> None:
    runtime, module, agent, _ = setup()
    user = Recorder()

    def per_run(agent: Agent, session: Session, requests: Any) -> dict[str, Any]:
        # extend the static config rather than replace it (a factory's dict wins wholesale)
        static = agent.run_options["config"]
        return {"config": {**static, "tags": [*static["tags"], f"session:{session.id}"]}}

    module.run_options(agent, per_run, config={"callbacks": [user], "tags": ["static"]})
    await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    assert user.root_tags == [["static", "session:s1"]]


async def test_recursion_limit_from_config_reaches_langgraph() -> None:
    runtime, module, agent, model = setup()
    module.run_options(agent, config={"recursion_limit": 2})
    reply = await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    # the prebuilt agent answers instead of raising when it runs out of steps
    assert "need more steps" in str(reply)
    assert len(model.calls) == 1


async def test_dict_any_request_sets_state_keys() -> None:
    SEEN_STATE.clear()
    model = ScriptedChatModel(responses=[tool_turn(name="record_visit"), answer_turn("done")])
    runtime, _, agent, _ = setup(model, tools=[record_visit], state_schema=VisitState)
    requests = [AgentRequestText(prompt="count"), AgentRequestAny(content={"visits": 41})]
    await runtime.run(agent, runtime.sessions().new("s1"), requests)
    assert SEEN_STATE == [{"visits": 41, "note": None}]


# -- module --------------------------------------------------------------------------------
def test_module_registers_graphs_by_name_or_override() -> None:
    runtime = Runtime(settings=load_settings())
    graph = calc_graph(ScriptedChatModel(responses=[]))
    other = calc_graph(ScriptedChatModel(responses=[]))
    module = LangGraphModule([graph, ("second", other)], runtime=runtime)
    assert runtime.agents().names() == ["calc", "second"]
    assert runtime.agents().get("second").native is other
    assert module.get(other).name == "second"
    assert module.run_options(graph, config={"recursion_limit": 5}) is module
    assert runtime.agents().get("calc").framework == "langgraph"
    with pytest.raises(TypeError, match="not a compiled LangGraph graph"):
        runner = LangGraphRunner()
        asyncio.run(
            runner.run(Agent("x", runner, object()), Session("s"), [AgentRequestText(prompt="hi")])
        )


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "langgraph" or n.startswith("langgraph.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the package were not installed
    monkeypatch.delitem(sys.modules, "runnertrace.runners.langgraph")
    with pytest.raises(MissingExtraError, match=r"pip install 'runnertrace\[langgraph\]'"):
        importlib.import_module("runnertrace.runners.langgraph")


# -- traced --------------------------------------------------------------------------------
EXPECTED_TREE = [
    (
        "invoke_agent calc",
        [
            ("agent_step agent", [("chat scripted", [])]),
            ("agent_step tools", [("execute_tool multiply", [])]),  # the step that ran it
            ("agent_step agent", [("chat scripted", [])]),
        ],
    )
]


async def traced_run(mode: str, captured: CapturedSpans) -> tuple[Recorder, Any]:
    runner = TracingRunner(LangGraphRunner(), settings=TraceConfig(capture_content=True))
    user = Recorder()
    agent = Agent("calc", runner, calc_graph(ScriptedChatModel(responses=two_step())))
    agent.declare_run_options(config={"callbacks": [user]})
    if mode == "run":
        await runner.run(agent, Session("s1"), PROMPT)
    else:
        [e async for e in runner.stream(agent, Session("s1"), PROMPT)]
    return user, captured


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_span_tree_in_both_modes(mode: str, captured_spans: CapturedSpans) -> None:
    user, spans = await traced_run(mode, captured_spans)
    assert spans.tree() == EXPECTED_TREE
    assert (user.model_starts, user.tool_starts) == (2, 1)  # still exactly once when traced
    chat = spans.by_name("chat scripted")
    assert [dict(s.attributes or {})["gen_ai.usage.input_tokens"] for s in chat] == [10, 20]
    tool_span = spans.by_name("execute_tool multiply")[0]
    assert dict(tool_span.attributes or {})[A.TOOL_CALL_ID] == "call_0"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_tool_span_records_the_result(
    mode: str, captured_spans: CapturedSpans
) -> None:
    _, spans = await traced_run(mode, captured_spans)
    root = spans.by_name("invoke_agent calc")[0]
    assert A.MALFORMED not in dict(root.attributes or {})
    tool_span = spans.by_name("execute_tool multiply")[0]
    assert dict(tool_span.attributes or {})[A.TOOL_RESULT] == "42"


async def test_runtime_traces_langgraph_when_enabled() -> None:
    runtime = Runtime(settings=load_settings(trace={"enabled": True}))
    graph = calc_graph(ScriptedChatModel(responses=two_step()))
    LangGraphModule([graph], runtime=runtime)
    agent = runtime.agents().get("calc")
    assert isinstance(agent.runner, TracingRunner)
    with capture_spans() as spans:
        reply = await runtime.run(agent, runtime.sessions().new("s1"), PROMPT)
    assert str(reply) == ANSWER
    assert spans.tree() == EXPECTED_TREE


# -- an agent a tool runs is another agent's run ----------------------------------------
def asking_graph() -> Any:
    """``calc`` whose one tool runs another graph agent (``inner``) and returns its answer."""
    inner_model = ScriptedChatModel(responses=[answer_turn("inner says 42")], model_name="inner")
    inner = create_react_agent(inner_model, [], name="inner")

    @tool
    async def ask_inner(question: str) -> str:
        """Ask the inner agent."""
        out = await inner.ainvoke({"messages": [HumanMessage(question)]})
        return str(out["messages"][-1].text)

    model = ScriptedChatModel(
        responses=[tool_turn("call_0", "ask_inner", question="6x7?"), answer_turn()]
    )
    return calc_graph(model, tools=[ask_inner])


ASKING_STREAM = [
    *EXPECTED_STREAM[:2],
    ("tool_call_start", "call_0", "ask_inner", "m1"),
    ("tool_call_args", "call_0", '{"question'),
    ("tool_call_args", "call_0", '": "6x7?"}'),
    *EXPECTED_STREAM[5:9],
    ("tool_call_result", "call_0", "inner says 42", False),
    *EXPECTED_STREAM[10:],
]


async def test_an_agent_a_tool_runs_is_not_in_this_runs_stream_nor_its_events() -> None:
    runtime = Runtime(settings=load_settings())
    graph = asking_graph()
    LangGraphModule([graph], runtime=runtime)
    events = await stream_events(
        runtime, runtime.agents().get("calc"), runtime.sessions().new("s1")
    )
    assert shape(events) == ASKING_STREAM  # the tool's result only, none of its agent's events
    assert_paired(events)
    runtime = Runtime(settings=load_settings())
    graph = asking_graph()
    LangGraphModule([graph], runtime=runtime)
    observed: list[Any] = []
    with observing(observed.append):  # an observer without nested runs: not its events either
        reply = await runtime.run(
            runtime.agents().get("calc"), runtime.sessions().new("s1"), PROMPT
        )
    assert str(reply) == ANSWER
    assert shape(observed) == shape(coalesce(events))


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_an_agent_a_tool_runs_is_a_nested_run_and_the_stream_stays_the_same(
    mode: str, captured_spans: CapturedSpans
) -> None:
    agent = Agent("calc", TracingRunner(LangGraphRunner()), asking_graph())
    events: list[Any] = []
    with observing(events.append) if mode == "run" else contextlib.nullcontext():
        if mode == "run":
            await agent.runner.run(agent, Session("s1"), PROMPT)
        else:
            events = [e async for e in agent.runner.stream(agent, Session("s1"), PROMPT)]
    if mode == "stream":
        assert shape(events) == ASKING_STREAM
    (inner,) = spans_named(captured_spans, "invoke_agent inner")
    assert parent_named(captured_spans, inner) == "execute_tool ask_inner"
    outer = dict(spans_named(captured_spans, "invoke_agent calc")[0].attributes or {})
    assert (outer[A.AGG_MODEL_CALLS], outer[A.OWN_MODEL_CALLS], outer[A.NESTED_RUNS]) == (3, 2, 1)
    assert (outer[A.AGG_INPUT_TOKENS], outer[A.OWN_INPUT_TOKENS]) == (10 + 20 + 20, 10 + 20)


def spans_named(spans: CapturedSpans, name: str) -> list[Any]:
    return spans.by_name(name)


def parent_named(spans: CapturedSpans, span: Any) -> str:
    (parent,) = [s for s in spans.spans if span.parent and s.context.span_id == span.parent.span_id]
    return str(parent.name)


# -- example -------------------------------------------------------------------------------
def test_example_runs_offline(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "langgraph_agent.py"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        [sys.executable, str(example), "--stream"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "offline" in result.stdout
    assert "[multiply -> 42] 6 times 7 is 42." in result.stdout
