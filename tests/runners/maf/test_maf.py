"""MAFRunner against the real Microsoft Agent Framework, driven offline.

The model is ``ScriptedChatClient`` (Agent Framework's function-invocation,
chat-middleware and telemetry layers over ``BaseChatClient``, with the provider
call scripted): it asks for ``multiply(6, 7)``, then states the result. The
client records the messages and options of every request, so tests can check
what reached the native call.
"""

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("agent_framework", reason="needs the maf extra: pip install -e '.[dev,maf]'")

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from agent_framework import (
    Agent,
    AgentContext,
    AgentExecutor,
    ChatContext,
    ChatResponseUpdate,
    Content,
    FunctionInvocationContext,
    Message,
    WorkflowBuilder,
    agent_middleware,
    chat_middleware,
    function_middleware,
    tool,
)
from pydantic import BaseModel
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Runtime, SqliteSessionStore, ToolContext, observing
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyText,
    AgentRequest,
    AgentRequestFile,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.core.session import Session
from runnertrace.runners.maf import CONTEXT_KEY, STATE_KEY, MAFModule, MAFRunner, messages_of
from runnertrace.runners.maf.testing import ScriptedChatClient, Turn, call, say
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

REPO = Path(__file__).resolve().parents[3]
QUESTION: list[AgentRequest] = [AgentRequestText(prompt="What is 6 times 7?")]


@tool
def multiply(a: int, b: int, ctx: FunctionInvocationContext) -> int:
    """Multiply two whole numbers."""
    assert ctx.session is not None
    context = ctx.session.state[CONTEXT_KEY]
    context["calls"] = context.get("calls", 0) + 1
    context["session"] = ToolContext.get().session.id
    return a * b


def script(answer: Turn | None = None) -> list[Turn]:
    return [call(("call_1", "multiply", {"a": 6, "b": 7})), answer or say("6 x 7 = 42")]


class Setup:
    """A runtime with the calculator registered through ``MAFModule``."""

    def __init__(
        self,
        turns: list[Turn] | None = None,
        *,
        runtime: Runtime | None = None,
        **kw: Any,
    ) -> None:
        self.client = ScriptedChatClient(turns if turns is not None else script() * 2)
        self.runtime = runtime or Runtime(settings=Settings())
        self.native = Agent(self.client, "Be exact.", name="calc", tools=[multiply], **kw)
        self.module = MAFModule([self.native], runtime=self.runtime)
        self.agent = self.runtime.agents().get("calc")

    def session(self, session_id: str = "s1") -> Session:
        return self.runtime.sessions().get_or_new(session_id)

    async def run(self, session: Session | None = None, requests: Any = None) -> Any:
        return await self.runtime.run(self.agent, session or self.session(), requests or QUESTION)

    async def stream(
        self, session: Session | None = None, requests: Any = None
    ) -> list[ev.StreamEvent]:
        chunks = self.runtime.stream(self.agent, session or self.session(), requests or QUESTION)
        return [c.event async for c in chunks if c.event is not None]

    async def observed_run(
        self, session: Session | None = None
    ) -> tuple[Any, list[ev.StreamEvent]]:
        seen: list[ev.StreamEvent] = []
        with observing(seen.append):
            reply = await self.run(session)
        return reply, seen

    async def go(self, mode: str, session: Session | None = None) -> list[ev.StreamEvent]:
        if mode == "run":
            return (await self.observed_run(session))[1]
        return await self.stream(session)


def kinds(events: list[ev.StreamEvent]) -> list[str]:
    """Event types with runs of one delta type collapsed (deltas are chunking)."""
    out: list[str] = []
    for e in events:
        if not (e.type.endswith(("_delta", "_args")) and out and out[-1] == e.type):
            out.append(e.type)
    return out


# -- the event sequence ------------------------------------------------------------------------
async def test_stream_yields_the_exact_paired_sequence() -> None:
    events = await Setup().stream()
    m1, m2 = (e.message_id for e in events if isinstance(e, ev.MessageStart))
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert events == [
        ev.StepStart(step_name="calc", step_index=0),
        ev.MessageStart(message_id=m1, model="scripted-1", provider="scripted"),
        ev.ToolCallStart(tool_call_id="call_1", tool_name="multiply", parent_message_id=m1),
        ev.ToolCallArgs(tool_call_id="call_1", delta='{"a": 6,'),
        ev.ToolCallArgs(tool_call_id="call_1", delta=' "b": 7}'),
        ev.ToolCallEnd(tool_call_id="call_1"),
        ends[0],
        ev.ToolCallResult(tool_call_id="call_1", content="42"),
        ev.StepEnd(step_name="calc", step_index=0),
        ev.StepStart(step_name="calc", step_index=1),
        ev.MessageStart(message_id=m2, model="scripted-1", provider="scripted"),
        ev.TextDelta(message_id=m2, delta="6 "),
        ev.TextDelta(message_id=m2, delta="x "),
        ev.TextDelta(message_id=m2, delta="7 "),
        ev.TextDelta(message_id=m2, delta="= "),
        ev.TextDelta(message_id=m2, delta="42"),
        ends[1],
        ev.StepEnd(step_name="calc", step_index=1),
    ]
    assert [(e.message_id, e.finish_reason, e.input_tokens, e.output_tokens) for e in ends] == [
        (m1, "tool_calls", 10, 5),
        (m2, "stop", 10, 5),
    ]


async def test_run_returns_the_text_and_reports_the_same_events_as_a_stream() -> None:
    s = Setup()
    reply, observed = await s.observed_run(s.session("a"))
    assert isinstance(reply, AgentReplyText)
    assert (reply.text, reply.prompt) == ("6 x 7 = 42", "What is 6 times 7?")
    streamed = await s.stream(s.session("b"))
    assert kinds(observed) == kinds(streamed)
    starts = [e for e in observed if isinstance(e, ev.MessageStart)]
    assert starts[0].system_instructions == "Be exact."  # someone observes: fields are built
    assert starts[0].tool_definitions is not None
    assert starts[0].tool_definitions[0]["name"] == "multiply"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_reasoning_is_a_block_of_its_own_before_the_tool_call(mode: str) -> None:
    thinking = [
        ChatResponseUpdate(role="assistant", contents=[Content.from_text_reasoning(text=t)])
        for t in ("6 times ", "7")
    ]
    s = Setup([[*thinking, *call(("call_1", "multiply", {"a": 6, "b": 7}))], say("42")])
    events = await s.go(mode)
    assert kinds(events)[:6] == [
        *("step_start", "message_start", "reasoning_start", "reasoning_delta"),
        *("reasoning_end", "tool_call_start"),
    ]
    assert "".join(e.delta for e in events if isinstance(e, ev.ReasoningDelta)) == "6 times 7"


async def test_an_untraced_stream_builds_no_request_fields() -> None:
    events = await Setup().stream()
    starts = [e for e in events if isinstance(e, ev.MessageStart)]
    assert starts and all(e.input_messages is None and e.tool_definitions is None for e in starts)


class Product(BaseModel):
    product: int


async def test_structured_output_becomes_agent_reply_any() -> None:
    s = Setup(script(say('{"product": 42}')))
    s.module.run_options(s.native, options={"response_format": Product})
    reply = await s.run()
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == {"product": 42}


async def test_images_and_files_reach_the_model_as_contents() -> None:
    s = Setup()
    png = "iVBORw0KGgo="
    requests: list[AgentRequest] = [
        AgentRequestText(prompt="What is 6 times 7?"),
        AgentRequestImage(image_data=png, mime_type="image/png"),
        AgentRequestFile(file_data="https://example.org/a.pdf", mime_type="application/pdf"),
    ]
    await s.run(requests=requests)
    sent = s.client.calls[0][0][-1]
    assert [c.type for c in sent.contents] == ["text", "data", "uri"]
    assert sent.contents[1].uri == f"data:image/png;base64,{png}"
    assert sent.contents[2].uri == "https://example.org/a.pdf"
    with pytest.raises(ValueError, match="neither base64 data"):
        messages_of([AgentRequestImage(image_data="not base64!", mime_type="image/png")])
    with pytest.raises(ValueError, match="at least one request"):
        messages_of([])


# -- session state and framework context ----------------------------------------------------------
@pytest.mark.parametrize("second", ["run", "stream"])
async def test_history_persists_across_runs_through_a_pickling_store(
    second: str, tmp_path: Path
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    s = Setup(runtime=Runtime(settings=Settings(), session_store=store))
    await s.run(s.session("h"))
    stored = store.load("h")
    assert stored is not None and stored.get(STATE_KEY)["session_id"] == "h"
    await s.go(second, store.load("h"))
    # The second run's first model call sees the whole first run, then the new prompt.
    first_run = [m.role for m in s.client.calls[1][0]] + ["assistant"]
    second_run_input = [m.role for m in s.client.calls[2][0]]
    assert first_run == ["user", "assistant", "tool", "assistant"]
    assert second_run_input == [*first_run, "user"]
    assert s.client.calls[2][0][0].text == "What is 6 times 7?"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_framework_context_round_trips_with_the_keys_tools_added(mode: str) -> None:
    s = Setup()
    session = s.session()
    session.set_framework_context({"calls": 1, "user": "ada"})
    await s.go(mode, session)
    assert session.get_framework_context() == {"calls": 2, "user": "ada", "session": "s1"}
    # ... and it is not kept twice: the native session holds no copy of it
    assert CONTEXT_KEY not in session.get(STATE_KEY)["state"]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_failed_run_leaves_the_stored_context_and_history_intact(mode: str) -> None:
    s = Setup([*script(), *script(ConnectionError("the model is down"))])
    session = s.session()
    session.set_framework_context({"calls": 0})
    await s.go(mode, session)
    stored = session.get(STATE_KEY)
    assert session.get_framework_context() == {"calls": 1, "session": "s1"}
    with pytest.raises(ConnectionError, match="the model is down"):
        await s.go(mode, session)
    assert len(s.client.calls) == 4  # the tool ran again before the model failed
    assert session.get_framework_context() == {"calls": 1, "session": "s1"}
    assert session.get(STATE_KEY) == stored


async def test_without_a_stored_context_tools_get_a_throw_away_dict() -> None:
    s = Setup()
    session = s.session()
    await s.run(session)
    assert session.get_framework_context() is None


# -- run options -----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["messages", "session", "stream"])
def test_reserved_run_options_are_rejected_at_declaration(key: str) -> None:
    s = Setup()
    with pytest.raises(ValueError, match=f"run option '{key}' is reserved by MAFRunner"):
        s.module.run_options(s.native, **{key: None})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"max_turns": 3}, "unknown key 'max_turns' \\(value 3\\); allowed: additional_tools"),
        ({"max_iterations": 0}, "max_iterations must be at least 1"),
        ([("max_iterations", 2)], "must be a mapping of"),
    ],
)
def test_a_bad_function_invocation_configuration_is_refused_clearly(
    config: Any, message: str
) -> None:
    s = Setup()
    with pytest.raises(ValueError, match=message):
        s.module.run_options(s.native, function_invocation_configuration=config)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_function_invocation_configuration_is_a_run_option_for_that_run_only(
    mode: str,
) -> None:
    s = Setup([*script(), *script()])
    before = dict(s.client.function_invocation_configuration)
    s.module.run_options(s.native, function_invocation_configuration={"max_iterations": 1})
    await s.go(mode)
    # One round trip with tools, then Agent Framework's final request without them.
    assert s.client.calls[1][1]["tool_choice"] == "none"
    assert s.client.function_invocation_configuration == before  # the shared client is intact
    s.agent.run_options.clear()
    await s.go(mode, s.session("later"))
    assert s.client.calls[3][1]["tool_choice"] != "none"


async def test_a_factorys_options_reach_the_native_call_over_static_ones() -> None:
    s = Setup()

    async def per_run(agent: CoreAgent, session: Session, requests: list[AgentRequest]) -> Any:
        return {"options": {"temperature": 0.7, "max_tokens": len(session.id)}}

    s.module.run_options(s.native, per_run, options={"temperature": 0.1})
    await s.run(s.session("four"))
    sent = s.client.calls[0][1]
    assert (sent["temperature"], sent["max_tokens"]) == (0.7, 4)


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    s = Setup()
    s.module.run_options(s.native, lambda agent, session, requests: {"session": None})
    with pytest.raises(ValueError, match="'session' is reserved"):
        await s.run()


async def test_unknown_options_reach_the_framework_which_rejects_them() -> None:
    s = Setup()
    s.module.run_options(s.native, max_turns=3)
    with pytest.raises(TypeError, match="max_turns"):
        await s.run()


# -- the user's own middleware -------------------------------------------------------------------
def counting(counts: dict[str, int], prefix: str) -> list[Any]:
    def bump(kind: str) -> None:
        counts[f"{prefix}{kind}"] = counts.get(f"{prefix}{kind}", 0) + 1

    @agent_middleware
    async def on_agent(context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        bump("agent")
        await call_next()

    @chat_middleware
    async def on_chat(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        bump("chat")
        await call_next()

    @function_middleware
    async def on_tool(
        context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        bump("tool")
        await call_next()

    return [on_agent, on_chat, on_tool]


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_the_agents_and_declared_middleware_fire_exactly_once(
    mode: str, traced: bool, captured_spans: CapturedSpans
) -> None:
    counts: dict[str, int] = {}
    settings = Settings(trace=TraceConfig(enabled=traced))
    s = Setup(runtime=Runtime(settings=settings), middleware=counting(counts, "own "))
    s.module.run_options(s.native, middleware=counting(counts, "declared "))
    events = await s.go(mode)
    assert counts == {
        **{"own agent": 1, "own chat": 2, "own tool": 1},
        **{"declared agent": 1, "declared chat": 2, "declared tool": 1},
    }
    if traced:  # the tracer takes the run's events; the spans show them
        assert len(captured_spans.by_name("chat scripted-1")) == 2
    else:
        assert kinds(events)[:2] == ["step_start", "message_start"]
        assert captured_spans.spans == []


async def test_a_nested_untraced_run_inside_a_tool_does_not_report_into_the_outer_run() -> None:
    inner = Setup()
    inner_runner = MAFRunner()

    @tool
    async def ask_inner() -> str:
        """Ask the calculator."""
        agent = CoreAgent("calc", inner_runner, inner.native)
        return str(await inner_runner.run(agent, Session("i"), QUESTION))

    outer = Agent(
        ScriptedChatClient([call(("outer_1", "ask_inner", {})), say("done")]), tools=[ask_inner]
    )
    runner = MAFRunner()
    seen: list[ev.StreamEvent] = []
    with observing(seen.append):
        await runner.run(CoreAgent("outer", runner, outer), Session("o"), QUESTION)
    assert {e.step_name for e in seen if isinstance(e, ev.StepStart)} == {"outer"}
    assert ev.ToolCallResult(tool_call_id="outer_1", content="6 x 7 = 42") in seen


async def test_a_non_maf_agent_is_refused() -> None:
    runner = MAFRunner()
    with pytest.raises(TypeError, match=r"is not an agent_framework\.Agent"):
        await runner.run(CoreAgent("odd", runner, native=object()), Session("x"), QUESTION)


def test_an_unnamed_agent_cannot_be_registered() -> None:
    with pytest.raises(ValueError, match="give the Agent Framework agent a name"):
        MAFModule([Agent(ScriptedChatClient([]))], runtime=Runtime(settings=Settings()))


# -- tracing ---------------------------------------------------------------------------------------
TOOL_RUN_TREE: list[Any] = [
    (
        "invoke_agent calc",
        [
            ("agent_step calc", [("chat scripted-1", []), ("execute_tool multiply", [])]),
            ("agent_step calc", [("chat scripted-1", [])]),
        ],
    )
]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_runs_produce_the_span_tree_in_both_modes(
    mode: str, captured_spans: CapturedSpans
) -> None:
    s = Setup(runtime=Runtime(settings=Settings(trace=TraceConfig(enabled=True))))
    assert getattr(s.agent.runner, "is_tracing_runner", False)
    await s.go(mode)
    assert captured_spans.tree() == TOOL_RUN_TREE
    (tool_span,) = captured_spans.by_name("execute_tool multiply")
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool_span.attributes["gen_ai.tool.name"] == "multiply"
    (run_span,) = captured_spans.by_name("invoke_agent calc")
    assert run_span.attributes is not None
    assert run_span.attributes["runnertrace.framework"] == "maf"


# -- cancellation --------------------------------------------------------------------------------
@pytest.fixture
def tracker(captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture) -> OpenSpanTracker:
    caplog.set_level(logging.DEBUG)
    tracking = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracking)
    return tracking


def assert_clean(tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture) -> None:
    assert tracker.started > 0
    assert tracker.open == {}
    bad = [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert not bad, bad
    assert asyncio.all_tasks() == {asyncio.current_task()}


def traced_agent(turns: list[Turn]) -> CoreAgent:
    native = Agent(ScriptedChatClient(turns), name="calc", tools=[multiply])
    return CoreAgent("calc", TracingRunner(MAFRunner()), native)


@pytest.mark.parametrize("index", range(18))
async def test_closing_the_stream_at_every_event_leaves_nothing_open_and_saves_nothing(
    index: int, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    agent = traced_agent(script())
    session = Session("s1")
    session.set_framework_context({"calls": 0})
    async with aclosing(agent.runner.stream(agent, session, QUESTION)) as events:  # type: ignore[type-var]
        seen = 0
        async for _ in events:
            seen += 1
            if seen > index:
                break
    assert seen == index + 1  # the scenario has 18 events: each index stops inside it
    assert_clean(tracker, caplog)
    assert session.get(STATE_KEY) is None
    assert session.get_framework_context() == {"calls": 0}


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_run_cancelled_inside_a_tool_leaves_nothing_open(
    mode: str, tracker: OpenSpanTracker, caplog: pytest.LogCaptureFixture
) -> None:
    inside = asyncio.Event()

    @tool
    async def slow(city: str) -> str:
        """Wait forever."""
        inside.set()
        await asyncio.sleep(10)
        return city

    client = ScriptedChatClient([call(("c9", "slow", {"city": "Oslo"}))])
    agent = CoreAgent("calc", TracingRunner(MAFRunner()), Agent(client, name="calc", tools=[slow]))

    async def go() -> None:
        if mode == "run":
            await agent.runner.run(agent, Session("s"), QUESTION)
        else:
            async for _ in agent.runner.stream(agent, Session("s"), QUESTION):
                pass

    task = asyncio.create_task(go())
    await inside.wait()
    await cancel_and_settle(task)
    assert_clean(tracker, caplog)


# -- packaging -------------------------------------------------------------------------------------
def test_runnertrace_imports_without_agent_framework() -> None:
    code = (
        "import sys, runnertrace, runnertrace.core, runnertrace.runners;"
        "assert 'agent_framework' not in sys.modules, 'agent_framework was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("module", ["maf", "maf.testing"])
def test_without_agent_framework_the_runner_names_the_extra_to_install(module: str) -> None:
    code = (
        "import sys; sys.modules['agent_framework'] = None\n"
        "from runnertrace._internal.imports import MissingExtraError\n"
        "try:\n"
        f"    import runnertrace.runners.{module}\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERTRACE_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    assert "pip install 'runnertrace[maf]'" in done.stdout


def test_a_message_list_is_what_the_runner_sends() -> None:
    (message,) = messages_of(QUESTION)
    assert isinstance(message, Message)
    assert (message.role, message.text) == ("user", "What is 6 times 7?")


# -- a workflow as the agent (workflow.as_agent()) -----------------------------------------------


class WorkflowSetup(Setup):
    """The calculator as the one agent of a workflow, registered as ``workflow.as_agent()``."""

    def __init__(self, turns: list[Turn] | None = None) -> None:
        self.client = ScriptedChatClient(turns if turns is not None else script() * 2)
        self.runtime = Runtime(settings=Settings())
        self.calc = Agent(self.client, "Be exact.", name="calc", tools=[multiply])
        workflow = WorkflowBuilder(start_executor=self.calc).build()
        self.workflow = workflow.as_agent(name="pipeline")
        self.native = self.workflow  # type: ignore[assignment]
        self.module = MAFModule([self.workflow], runtime=self.runtime)
        self.agent = self.runtime.agents().get("pipeline")


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_registered_workflow_replies_in_both_modes(mode: str) -> None:
    s = WorkflowSetup()
    if mode == "run":
        reply = await s.run()
    else:  # the runtime's streamed reply: the text of the last message the stream carried
        s.runtime.settings.execution.mode = "stream"
        reply = await s.run()
    assert isinstance(reply, AgentReplyText)
    assert (reply.text, reply.prompt) == ("6 x 7 = 42", "What is 6 times 7?")
    assert len(s.client.calls) == 2
    assert s.calc.middleware is None


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_workflows_agents_tools_share_the_framework_context(mode: str) -> None:
    s = WorkflowSetup()
    session = s.session()
    session.set_framework_context({"calls": 1, "user": "ada"})
    await s.go(mode, session)
    assert session.get_framework_context() == {"calls": 2, "user": "ada", "session": "s1"}
    stored = session.get(STATE_KEY)["state"]
    assert CONTEXT_KEY not in stored
    # lent to the executor's own session for the run only
    executors = s.workflow.workflow.executors.values()
    (executor,) = [e for e in executors if isinstance(e, AgentExecutor)]
    assert CONTEXT_KEY not in executor._session.state  # noqa: SLF001 - where it was lent


async def test_a_registered_workflow_keeps_the_conversation_in_the_session() -> None:
    s = WorkflowSetup([say("First answer."), say("Second answer.")])
    session = s.session()
    await s.run(session, [AgentRequestText(prompt="One?")])
    await s.run(session, [AgentRequestText(prompt="Two?")])
    sent, _ = s.client.calls[1]
    assert [m.text for m in sent if m.text][-3:] == ["One?", "First answer.", "Two?"]


async def test_a_workflow_refuses_the_agent_only_run_option() -> None:
    s = WorkflowSetup()
    s.module.run_options(s.native, function_invocation_configuration={"max_iterations": 2})
    with pytest.raises(ValueError, match=r"applies to an agent_framework\.Agent"):
        await s.run()
    assert s.client.calls == []
