"""GoogleADKRunner against the real Google ADK, driven offline by ``ScriptedAdkLlm``.

The usual two-step tool run: the model asks for ``multiply(6, 7)``, the tool runs,
the model states the result. The fake model records every ``LlmRequest`` it was
sent, so tests can check what reached ADK.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("google.adk", reason="needs the adk extra: pip install -e '.[dev,adk]'")

import asyncio
import base64
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent, ParallelAgent, RunConfig
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext, LlmCallsLimitExceededError
from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.tools.tool_context import ToolContext
from pydantic import BaseModel
from tests.tracing_helpers import cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Runtime, SqliteSessionStore, observing
from runnertrace.core import ToolContext as CoreToolContext
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyText,
    AgentRequest,
    AgentRequestAny,
    AgentRequestFile,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.core.session import Session
from runnertrace.runners.adk import STATE_KEY, GoogleADKModule, GoogleADKRunner, user_content_of
from runnertrace.runners.adk.testing import ScriptedAdkLlm, answer, call
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

REPO = Path(__file__).resolve().parents[3]
QUESTION: list[AgentRequest] = [AgentRequestText(prompt="What is 6 times 7?")]
MODES = ["run", "stream"]


def multiply(a: int, b: int, tool_context: ToolContext) -> int:
    """Multiply two whole numbers."""
    tool_context.state["calls"] = tool_context.state.get("calls", 0) + 1
    tool_context.state["session"] = CoreToolContext.get().session.id
    return a * b


def script(**kw: Any) -> list[Any]:
    return [call("multiply", {"a": 6, "b": 7}, "call_1"), answer("6 x 7 = 42", **kw)]


def calculator(llm: ScriptedAdkLlm | None = None, **kw: Any) -> LlmAgent:
    return LlmAgent(
        name="calc",
        model=llm or ScriptedAdkLlm(model="fake-llm", script=script()),
        instruction="You multiply.",
        tools=[multiply],
        **kw,
    )


def core(native: LlmAgent, runner: Any = None) -> CoreAgent:
    return CoreAgent("calc", runner or GoogleADKRunner(), native)


async def go(agent: CoreAgent, mode: str, session: Session | None = None) -> Any:
    session = session or Session("s1")
    if mode == "run":
        return await agent.runner.run(agent, session, QUESTION)
    return [e async for e in agent.runner.stream(agent, session, QUESTION)]


def shape(events: list[Any]) -> list[tuple[Any, ...]]:
    """Each event's type and the fields worth comparing (ids made up per run are left out)."""
    fields = ("step_name", "step_index", "tool_name", "tool_call_id", "delta", "content")
    return [(e.type, *(getattr(e, f) for f in fields if hasattr(e, f))) for e in events]


EXPECTED = [
    ("step_start", "calc", 1),
    ("message_start",),
    ("tool_call_start", "multiply", "call_1"),
    ("tool_call_args", "call_1", '{"a": 6, "b": 7}'),
    ("tool_call_end", "call_1"),
    ("message_end",),
    ("tool_call_result", "call_1", "42"),
    ("step_end", "calc", 1),
    ("step_start", "calc", 2),
    ("message_start",),
    ("text_delta", "6 x 7"),
    ("text_delta", " = 42"),
    ("message_end",),
    ("step_end", "calc", 2),
]


# -- events ------------------------------------------------------------------------------------
async def test_stream_yields_the_paired_sequence() -> None:
    events = await go(core(calculator()), "stream")
    assert shape(events) == EXPECTED
    starts = [e for e in events if e.type == "message_start"]
    ends = [e for e in events if e.type == "message_end"]
    assert [s.message_id for s in starts] == [e.message_id for e in ends]
    assert starts[0].model == "fake-llm"
    assert ends[0].input_tokens == 10 and ends[0].output_tokens == 5
    assert ends[1].finish_reason == "stop"
    assert all(
        e.parent_message_id == starts[0].message_id for e in events if e.type == "tool_call_start"
    )


async def test_run_mode_reports_the_same_events_as_stream_mode_yields() -> None:
    seen: list[ev.StreamEvent] = []
    with observing(seen.append):
        reply = await go(core(calculator()), "run")
    assert reply == AgentReplyText(text="6 x 7 = 42", prompt="What is 6 times 7?")
    # run mode is not SSE: the text comes whole, in one delta
    assert shape(seen) == [*EXPECTED[:10], ("text_delta", "6 x 7 = 42"), *EXPECTED[12:]]


async def test_streamed_reasoning_ends_before_the_text() -> None:
    llm = ScriptedAdkLlm(script=[answer("42", thought="6 times 7")])
    events = await go(core(calculator(llm)), "stream")
    kinds = [e.type for e in events]
    assert kinds.index("reasoning_end") < kinds.index("text_delta")
    assert [e.delta for e in events if e.type == "reasoning_delta"] == ["6 times 7"]


async def test_text_sent_only_in_the_final_response_is_not_lost_after_streamed_reasoning() -> None:
    llm = ScriptedAdkLlm(script=[answer("42", thought="6 times 7", chunks=0)])
    events = await go(core(calculator(llm)), "stream")
    assert [(e.type, e.delta) for e in events if e.type.endswith("_delta")] == [
        ("reasoning_delta", "6 times 7"),
        ("text_delta", "42"),
    ]


@pytest.mark.filterwarnings("ignore:ParallelAgent is deprecated:DeprecationWarning")
async def test_parallel_agents_model_calls_keep_their_own_messages() -> None:
    def branch(name: str, text: str) -> LlmAgent:
        llm = ScriptedAdkLlm(model=f"{name}-llm", script=[answer(text, chunks=4)])
        return LlmAgent(name=name, model=llm)

    both = ParallelAgent(
        name="calc", sub_agents=[branch("left", "one two three"), branch("right", "four five six")]
    )
    events = await go(core(both), "stream")  # type: ignore[arg-type]
    models = {e.message_id: e.model for e in events if e.type == "message_start"}
    assert sorted(models.values()) == ["left-llm", "right-llm"]
    text: dict[str, str] = {}
    for e in events:
        if e.type == "text_delta":
            text[models[e.message_id]] = text.get(models[e.message_id], "") + e.delta
    assert text == {"left-llm": "one two three", "right-llm": "four five six"}
    ended = [e.message_id for e in events if e.type == "message_end"]
    assert sorted(ended) == sorted(models)


async def test_without_an_observer_run_mode_adds_no_plugin() -> None:
    plugins: list[list[str]] = []

    class Spy(BasePlugin):
        async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
            plugins.append([p.name for p in invocation_context.plugin_manager.plugins])

    agent = core(calculator(ScriptedAdkLlm(script=script(), loop=True)))
    agent.declare_run_options(plugins=[Spy("spy")])
    await go(agent, "run")
    with observing(lambda e: None):
        await go(agent, "run", Session("s2"))
    await go(agent, "stream", Session("s3"))
    assert plugins == [["spy"], ["spy", "runnertrace"], ["spy", "runnertrace"]]


# -- sessions and context ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_the_adk_session_is_keyed_by_our_session_id_and_persists(mode: str) -> None:
    llm = ScriptedAdkLlm(script=[*script(), answer("Still 42.")])
    runner = GoogleADKRunner()
    agent = core(calculator(llm), runner)
    session = Session("conversation-7")
    for _ in range(2):
        await go(agent, mode, session)
    found = await runner.session_service.get_session(
        app_name="calc", user_id="runnertrace", session_id="conversation-7"
    )
    assert found is not None
    last = llm.requests[-1]
    texts = [p.text for c in last.contents for p in c.parts or () if p.text]
    assert texts == ["What is 6 times 7?", "6 x 7 = 42", "What is 6 times 7?"]


async def test_history_survives_a_fresh_runner_through_a_pickling_store(tmp_path: Path) -> None:
    llm = ScriptedAdkLlm(script=[*script(), answer("Still 42.")])
    store = SqliteSessionStore(tmp_path / "sessions.db")
    session = Session("s1")
    await go(core(calculator(llm)), "run", session)
    store.save(session)
    restored = store.load("s1")
    assert restored is not None and restored.get(STATE_KEY)
    # a new runner (a new process, say) whose session service has never seen "s1"
    reply = await go(core(calculator(llm), GoogleADKRunner()), "run", restored)
    assert str(reply) == "Still 42."
    contents = llm.requests[-1].contents
    calls = [p.function_call.name for c in contents for p in c.parts or () if p.function_call]
    assert calls == ["multiply"]
    assert len(contents) == 5  # question, call, result, answer, question


@pytest.mark.parametrize("mode", MODES)
async def test_framework_context_round_trips_filtered_and_accumulating(mode: str) -> None:
    session = Session("s1")
    session.set_framework_context({"seed": "kept", "calls": 10})
    await go(core(calculator()), mode, session)
    assert session.get_framework_context() == {"seed": "kept", "calls": 11, "session": "s1"}


async def test_scoped_state_keys_are_not_written_back() -> None:
    def remember(tool_context: ToolContext) -> str:
        """Remember things in every scope."""
        tool_context.state["app:flag"] = True
        tool_context.state["user:name"] = "ada"
        tool_context.state["temp:scratch"] = 1
        tool_context.state["plain"] = "yes"
        return "ok"

    llm = ScriptedAdkLlm(script=[call("remember", {}, "r1"), answer("done")])
    session = Session("s1")
    session.set_framework_context({})
    await go(core(LlmAgent(name="calc", model=llm, tools=[remember])), "run", session)
    assert session.get_framework_context() == {"plain": "yes"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_run_leaves_the_stored_context_and_history_intact(mode: str) -> None:
    llm = ScriptedAdkLlm(script=[call("multiply", {"a": 6, "b": 7}, "c1"), RuntimeError("down")])
    session = Session("s1")
    session.set_framework_context({"calls": 0})
    with pytest.raises(RuntimeError, match="down"):
        await go(core(calculator(llm)), mode, session)
    assert session.get_framework_context() == {"calls": 0}
    assert session.get(STATE_KEY) is None


# -- run options -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(GoogleADKRunner.RESERVED_RUN_OPTIONS))
def test_reserved_run_options_are_rejected_at_declaration(key: str) -> None:
    with pytest.raises(ValueError, match=f"run option '{key}' is reserved by GoogleADKRunner"):
        core(calculator()).declare_run_options(**{key: object()})


def test_the_reserved_keys_are_the_seed_table() -> None:
    assert set(GoogleADKRunner.RESERVED_RUN_OPTIONS) == {
        *("agent", "app", "app_name", "node", "session_service", "auto_create_session"),
        *("user_id", "session_id", "new_message", "state_delta", "invocation_id"),
        "yield_user_message",
    }


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    agent = core(calculator())
    agent.declare_run_options(lambda a, s, r: {"session_id": "other"})
    with pytest.raises(ValueError, match="'session_id' is reserved"):
        await go(agent, "run")


@pytest.mark.parametrize("mode", MODES)
async def test_max_llm_calls_in_a_factorys_run_config_wins_over_the_static_one(mode: str) -> None:
    agent = core(calculator())
    agent.declare_run_options(
        lambda a, s, r: {"run_config": RunConfig(max_llm_calls=1)},
        run_config=RunConfig(max_llm_calls=5),
    )
    with pytest.raises(LlmCallsLimitExceededError):
        await go(agent, mode)


async def test_stream_mode_copies_the_run_config_in_sse_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    declared = RunConfig(streaming_mode=StreamingMode.NONE, max_llm_calls=7)
    seen: list[RunConfig] = []

    class Spy(BasePlugin):
        async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
            assert invocation_context.run_config is not None
            seen.append(invocation_context.run_config)

    runner = GoogleADKRunner()
    agent = core(calculator(ScriptedAdkLlm(script=script() * 3)), runner)
    agent.declare_run_options(run_config=declared, plugins=[Spy("spy")])
    with caplog.at_level(logging.WARNING, logger="runnertrace"):
        for n in range(2):
            await go(agent, "stream", Session(f"s{n}"))
        await go(agent, "run", Session("s9"))
    assert [c.streaming_mode for c in seen] == [StreamingMode.SSE] * 2 + [StreamingMode.NONE]
    assert [c.max_llm_calls for c in seen] == [7, 7, 7]
    assert declared.streaming_mode == StreamingMode.NONE  # the caller's object is untouched
    warnings = [r for r in caplog.records if "streaming_mode" in r.getMessage()]
    assert len(warnings) == 1
    assert "'calc'" in warnings[0].getMessage()


async def test_services_go_to_the_adk_runner_and_unknown_keys_to_run_async() -> None:
    memory, artifacts = InMemoryMemoryService(), InMemoryArtifactService()
    seen: list[tuple[Any, Any]] = []

    class Spy(BasePlugin):
        async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
            seen.append((invocation_context.memory_service, invocation_context.artifact_service))

    agent = core(calculator())
    agent.declare_run_options(
        plugins=[Spy("spy")],
        memory_service=memory,
        artifact_service=artifacts,
        plugin_close_timeout=1.0,
    )
    await go(agent, "run")
    assert seen == [(memory, artifacts)]
    agent.declare_run_options(max_turns=3)
    with pytest.raises(TypeError, match="max_turns"):
        await go(agent, "run", Session("s2"))


async def test_a_run_config_that_is_not_a_run_config_is_refused_in_stream_mode() -> None:
    agent = core(calculator())
    agent.declare_run_options(run_config={"max_llm_calls": 2})
    with pytest.raises(TypeError, match="'run_config' of agent 'calc' must be"):
        await go(agent, "stream")


# -- the user's plugins and callbacks ------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("traced", [False, True])
async def test_the_users_plugin_and_callbacks_fire_exactly_once(mode: str, traced: bool) -> None:
    fired: list[str] = []

    class Counter(BasePlugin):
        async def before_model_callback(
            self, *, callback_context: CallbackContext, llm_request: LlmRequest
        ) -> None:
            fired.append("plugin before_model")

        async def after_model_callback(
            self, *, callback_context: CallbackContext, llm_response: LlmResponse
        ) -> None:
            if not llm_response.partial:
                fired.append("plugin after_model")

        async def after_tool_callback(self, **kw: Any) -> None:
            fired.append("plugin after_tool")

    def before_model(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        fired.append("agent before_model")

    def after_tool(**kw: Any) -> None:
        fired.append("agent after_tool")

    native = calculator(before_model_callback=before_model, after_tool_callback=after_tool)
    runner: Any = GoogleADKRunner()
    agent = core(native, TracingRunner(runner) if traced else runner)
    agent.declare_run_options(plugins=[Counter("counter")])
    await go(agent, mode)
    assert sorted(fired) == sorted(
        ["plugin before_model", "agent before_model"] * 2
        + ["plugin after_model"] * 2
        + ["plugin after_tool", "agent after_tool"]
    )


async def test_a_user_plugin_answering_for_a_tool_still_closes_the_call() -> None:
    class Cache(BasePlugin):
        async def before_tool_callback(self, **kw: Any) -> dict[str, Any]:
            return {"result": 42}

    agent = core(calculator())
    agent.declare_run_options(plugins=[Cache("cache")])
    events = await go(agent, "stream")
    (result,) = [e for e in events if e.type == "tool_call_result"]
    assert result.content == "42" and not result.is_error


# -- requests and replies ----------------------------------------------------------------------
def test_requests_become_one_user_content() -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    content = user_content_of(
        [
            AgentRequestText(prompt="look"),
            AgentRequestImage(image_data=png, mime_type="image/png"),
            AgentRequestFile(file_data="https://x.test/a.pdf", mime_type="application/pdf"),
            AgentRequestAny(content={"k": 1}),
        ]
    )
    parts = content.parts or []
    assert content.role == "user"
    assert parts[0].text == "look"
    assert parts[1].inline_data is not None and parts[1].inline_data.data == b"\x89PNG"
    assert parts[2].file_data is not None and parts[2].file_data.file_uri == "https://x.test/a.pdf"
    assert parts[3].text == '{"k": 1}'
    with pytest.raises(ValueError, match=r"\(image/png\) is neither base64"):
        user_content_of([AgentRequestImage(image_data="not base64!", mime_type="image/png")])
    with pytest.raises(ValueError, match="at least one request"):
        user_content_of([])


class Product(BaseModel):
    product: int


async def test_structured_output_becomes_agent_reply_any() -> None:
    llm = ScriptedAdkLlm(script=[answer('{"product": 42}')])
    native = LlmAgent(name="calc", model=llm, output_schema=Product)
    reply = await go(core(native), "run")
    assert reply == AgentReplyAny(content={"product": 42}, prompt="What is 6 times 7?")


async def test_a_non_adk_agent_is_refused() -> None:
    agent = CoreAgent("calc", GoogleADKRunner(), object())
    with pytest.raises(TypeError, match="agent 'calc' is not a Google ADK agent"):
        await go(agent, "run")


# -- cancellation ------------------------------------------------------------------------------
async def test_a_cancelled_stream_saves_nothing_and_leaves_no_task() -> None:
    reached = asyncio.Event()
    session = Session("s1")
    session.set_framework_context({"calls": 0})

    async def consume() -> None:
        agent = core(calculator())
        async for event in agent.runner.stream(agent, session, QUESTION):
            if event.type == "tool_call_result":
                reached.set()
                await asyncio.sleep(10)

    task = asyncio.create_task(consume())
    await reached.wait()
    await cancel_and_settle(task)
    assert session.get(STATE_KEY) is None
    assert session.get_framework_context() == {"calls": 0}
    # The abandoned stream is closed by the loop's finaliser, and ADK then cancels
    # and awaits its own root task: every task ends (the bound only stops a hang).
    me = asyncio.current_task()
    for _ in range(1000):
        if asyncio.all_tasks() == {me}:
            break
        await asyncio.sleep(0.01)
    assert asyncio.all_tasks() == {me}


# -- tracing -----------------------------------------------------------------------------------
TOOL_RUN_TREE = [
    (
        "invoke_agent calc",
        [
            ("agent_step calc", [("chat fake-llm", []), ("execute_tool multiply", [])]),
            ("agent_step calc", [("chat fake-llm", [])]),
        ],
    )
]


@pytest.mark.parametrize("mode", MODES)
async def test_a_runtime_with_tracing_on_produces_the_span_tree(
    mode: str, captured_spans: CapturedSpans
) -> None:
    runtime = Runtime(settings=Settings(trace=TraceConfig(enabled=True)))
    module = GoogleADKModule([calculator()], runtime=runtime)
    (agent,) = module.agents
    assert getattr(agent.runner, "is_tracing_runner", False)
    await go(agent, mode)
    assert captured_spans.tree() == TOOL_RUN_TREE
    tool = captured_spans.by_name("execute_tool multiply")[0]
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    run_span = captured_spans.by_name("invoke_agent calc")[0]
    assert run_span.attributes is not None
    assert run_span.attributes["runnertrace.framework"] == "google_adk"


# -- packaging and the example ---------------------------------------------------------------
def test_runnertrace_imports_without_google_adk() -> None:
    code = (
        "import sys, runnertrace, runnertrace.core, runnertrace.runners;"
        "assert 'google.adk' not in sys.modules, 'google.adk was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("module", ["adk", "adk.testing"])
def test_without_google_adk_the_runner_names_the_extra_to_install(module: str) -> None:
    code = (
        "import sys; sys.modules['google.adk'] = None\n"
        "from runnertrace._internal.imports import MissingExtraError\n"
        "try:\n"
        f"    import runnertrace.runners.{module}\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'runnertrace[adk]'" in done.stdout
