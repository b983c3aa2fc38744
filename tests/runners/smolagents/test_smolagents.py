"""SmolagentsRunner against real smolagents agents, with the offline ``ScriptedModel``.

Events and their pairing in both modes, session state (through a pickling store),
the framework context round trip, run options and their reserved keys, the
user's step callbacks (fired once, the agent left as it was), the worker thread
(the event loop keeps running, runs of one agent are serialised), the quiet
console, cancellation and the missing extra.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "smolagents", reason="needs the smolagents extra: pip install -e '.[dev,smolagents]'"
)

import asyncio
import importlib
import io
import logging
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from opentelemetry.trace import StatusCode
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.memory import ActionStep, MemoryStep
from smolagents.monitoring import LogLevel, Timing
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace._internal.errors import internal_log
from runnertrace.core import Runtime, Session, SqliteSessionStore, observing
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequest, AgentRequestFile, AgentRequestText
from runnertrace.runners.smolagents import (
    STATE_KEY,
    SmolagentsModule,
    SmolagentsRunner,
    StoredAgentError,
)
from runnertrace.runners.smolagents.convert import task_of
from runnertrace.runners.smolagents.testing import ScriptedModel, Turn, calls, code
from runnertrace.testing import CapturedSpans, tolerate_internal_errors
from runnertrace.tracing.config import Settings

QUESTION = [AgentRequestText(prompt="What is 6 times 7?")]
MODES = ["run", "stream"]


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


ASK = calls(("multiply", {"a": 6, "b": 7}))
ANSWER = calls(("final_answer", {"answer": "The product is 42."}), prefix="fin")


def calculator(turns: list[Turn] | None = None, **kw: Any) -> ToolCallingAgent:
    model = ScriptedModel(turns if turns is not None else [ASK, ANSWER] * 3)
    kw.setdefault("verbosity_level", LogLevel.OFF)
    return ToolCallingAgent(tools=[multiply], model=model, name="calc", **kw)


async def go(
    agent: Agent, mode: str, session: Session | None = None, requests: Any = None
) -> tuple[Any, list[ev.StreamEvent]]:
    """One run; returns the reply (run mode) and the events it reported or yielded."""
    session = session or Session("s1")
    requests = requests or QUESTION
    seen: list[ev.StreamEvent] = []
    if mode == "run":
        with observing(seen.append):
            reply = await agent.runner.run(agent, session, requests)
        return reply, seen
    return None, [e async for e in agent.runner.stream(agent, session, requests)]


def core(native: Any, runner: Any = None) -> Agent:
    return Agent("calc", runner or SmolagentsRunner(), native)


def kinds(events: list[ev.StreamEvent]) -> list[str]:
    return [e.type for e in events if e.type not in ("text_delta", "tool_call_args")]


# -- events ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_events_pair_up_step_by_step(mode: str) -> None:
    _, events = await go(core(calculator()), mode)
    assert kinds(events) == [
        "step_start",
        "message_start",
        "tool_call_start",
        "tool_call_end",
        "message_end",
        "tool_call_result",
        "step_end",
        "step_start",
        "message_start",
        "message_end",
        "step_end",
    ]
    starts = [e for e in events if isinstance(e, ev.StepStart)]
    assert [(s.step_name, s.step_index) for s in starts] == [("calc", 1), ("calc", 2)]
    (call,) = [e for e in events if isinstance(e, ev.ToolCallStart)]
    assert (call.tool_call_id, call.tool_name) == ("call_1", "multiply")
    (result,) = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert (result.tool_call_id, result.content, result.is_error) == ("call_1", "42", False)
    args = "".join(e.delta for e in events if isinstance(e, ev.ToolCallArgs))
    assert args == '{"a": 6, "b": 7}'
    text = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
    assert text == "The product is 42."
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert [(e.input_tokens, e.output_tokens) for e in ends] == [(11, 7), (11, 7)]


async def test_stream_mode_streams_the_model_chunk_by_chunk() -> None:
    _, events = await go(core(calculator()), "stream")
    args = [e.delta for e in events if isinstance(e, ev.ToolCallArgs)]
    assert args == ['{"a": 6,', ' "b": 7}']  # the chunks as the model sent them


async def test_run_mode_returns_the_final_answer() -> None:
    reply, _ = await go(core(calculator()), "run")
    assert reply.type == "text" and reply.text == "The product is 42."
    assert reply.prompt == "What is 6 times 7?"


@pytest.mark.parametrize("mode", MODES)
async def test_a_code_agent_reports_its_code_and_its_result(mode: str) -> None:
    model = ScriptedModel([code("result = multiply(a=6, b=7)\nfinal_answer(result)")])
    native = CodeAgent(tools=[multiply], model=model, name="calc", verbosity_level=LogLevel.OFF)
    reply, events = await go(core(native), mode)
    (end,) = [e for e in events if isinstance(e, ev.StepEnd)]
    assert end.code == "result = multiply(a=6, b=7)\nfinal_answer(result)"
    (call,) = [e for e in events if isinstance(e, ev.ToolCallStart)]
    assert call.tool_name == "python_interpreter"
    (result,) = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert "42" in result.content and not result.is_error
    if mode == "run":
        assert reply.content == {"output": 42}


# -- session state and framework context -----------------------------------------------------------
@pytest.mark.parametrize("second", MODES)
async def test_memory_persists_across_runs_through_a_pickling_store(
    second: str, tmp_path: Path
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    runtime = Runtime(settings=Settings(), session_store=store)
    native = calculator([ASK, ANSWER, ANSWER])
    SmolagentsModule([native], runtime=runtime)
    agent = runtime.agents().get("calc")
    await runtime.run(agent, runtime.sessions().get_or_new("h"), QUESTION)
    stored = store.load("h")
    assert stored is not None
    first = stored.get(STATE_KEY)
    assert [type(s).__name__ for s in first] == ["TaskStep", "ActionStep", "ActionStep"]
    native.memory.reset()  # another session's run in between: the session is what counts
    session = store.load("h")
    assert session is not None
    if second == "run":
        await runtime.run(agent, session, [AgentRequestText(prompt="And 7 times 6?")])
    else:
        async for _ in runtime.stream(agent, session, [AgentRequestText(prompt="And 7 times 6?")]):
            pass
    seen = native.model.received[2]  # the second run's only model call
    said = "\n".join(str(m.content) for m in seen)
    assert "What is 6 times 7?" in said and "And 7 times 6?" in said
    reloaded = store.load("h")
    assert reloaded is not None and len(reloaded.get(STATE_KEY)) == 5


async def test_a_first_run_in_a_session_starts_from_an_empty_memory() -> None:
    native = calculator()
    agent = core(native)
    await go(agent, "run", Session("a"))
    await go(agent, "run", Session("b"))
    second_run = native.model.received[2]
    assert "What is 6 times 7?" in str(second_run[-1].content)
    assert sum("6 times 7" in str(m.content) for m in second_run) == 1


def test_stored_errors_pickle_and_keep_their_message() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(StoredAgentError("no such tool", "AgentToolExecutionError")))
    assert error.message == "no such tool"
    assert error.dict() == {"type": "AgentToolExecutionError", "message": "no such tool"}


@pytest.mark.parametrize("mode", MODES)
async def test_framework_context_writes_back_only_the_pre_seeded_keys(mode: str) -> None:
    @tool
    def remember(note: str) -> str:
        """Note something in the agent state.

        Args:
            note: What to note.
        """
        state = seen_agent[0].state
        state["count"] = state["count"] + 1
        state["brand_new"] = note
        return "noted"

    native = ToolCallingAgent(
        tools=[remember],
        model=ScriptedModel([calls(("remember", {"note": "hi"})), ANSWER], model_id="m"),
        name="calc",
        verbosity_level=LogLevel.OFF,
    )
    seen_agent = [native]
    native.state["outside"] = "kept"
    session = Session("s1")
    session.set_framework_context({"count": 1, "user": "ada"})
    await go(core(native), mode, session)
    assert session.get_framework_context() == {"count": 2, "user": "ada"}
    assert "count" in native.model.received[0][1].content[0]["text"]  # the task names them
    assert native.state == {"outside": "kept"}  # the agent's state is as it was


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_run_leaves_the_stored_context_and_memory_intact(mode: str) -> None:
    native = calculator([ASK, ConnectionError("the model is down")])
    session = Session("s1")
    session.set_framework_context({"count": 0})
    with pytest.raises(Exception, match="the model is down"):
        await go(core(native), mode, session)
    assert session.get_framework_context() == {"count": 0}
    assert session.get(STATE_KEY) is None


# -- run options -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key", ["task", "stream", "reset", "additional_args", "return_full_result", "images"]
)
def test_reserved_run_options_are_rejected_at_declaration(key: str) -> None:
    native = calculator()
    module = SmolagentsModule([native], runtime=Runtime(settings=Settings()))
    with pytest.raises(ValueError, match=f"run option '{key}' is reserved by SmolagentsRunner"):
        module.run_options(native, **{key: None})


async def test_a_factorys_options_reach_agent_run_over_static_ones() -> None:
    runtime = Runtime(settings=Settings())
    native = calculator([ASK, ASK, ASK, ASK])  # never answers: the step cap ends the run

    def per_run(agent: Agent, session: Session, requests: list[AgentRequest]) -> Any:
        return {"max_steps": len(session.id)}

    SmolagentsModule([native], runtime=runtime).run_options(native, per_run, max_steps=1)
    agent = runtime.agents().get("calc")
    await agent.runner.run(agent, Session("ab"), QUESTION)
    # the factory's two steps (not the static one), then smolagents' own last-answer request
    assert len(native.model.received) == 3


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    runtime = Runtime(settings=Settings())
    native = calculator()
    module = SmolagentsModule([native], runtime=runtime)
    module.run_options(native, lambda agent, session, requests: {"reset": True})
    agent = runtime.agents().get("calc")
    with pytest.raises(ValueError, match="'reset' is reserved"):
        await agent.runner.run(agent, Session("s1"), QUESTION)


async def test_unknown_options_reach_smolagents_which_rejects_them() -> None:
    runtime = Runtime(settings=Settings())
    native = calculator()
    SmolagentsModule([native], runtime=runtime).run_options(native, max_turns=3)
    agent = runtime.agents().get("calc")
    with pytest.raises(TypeError, match="max_turns"):
        await agent.runner.run(agent, Session("s1"), QUESTION)


def test_requests_become_the_task_and_files_are_refused() -> None:
    assert task_of([AgentRequestText(prompt="a"), AgentRequestText(prompt="b")]) == ("a\nb", None)
    with pytest.raises(ValueError, match="request type 'file'"):
        task_of([AgentRequestFile(file_data="AAAA", name="a.pdf")])
    with pytest.raises(ValueError, match="at least one request"):
        task_of([])


def test_a_module_needs_a_named_agent() -> None:
    native = ToolCallingAgent(tools=[], model=ScriptedModel([]), verbosity_level=LogLevel.OFF)
    with pytest.raises(ValueError, match="give the smolagents agent a name"):
        SmolagentsModule([native], runtime=Runtime(settings=Settings()))


# -- the user's agent object -----------------------------------------------------------------------
@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("mode", MODES)
async def test_a_users_step_callback_fires_once_and_the_agent_is_left_as_it_was(
    mode: str, traced: bool, captured_spans: CapturedSpans
) -> None:
    fired: list[int] = []
    native = calculator(step_callbacks=[lambda step: fired.append(step.step_number)])
    registry, model, logger = native.step_callbacks, native.model, native.logger
    runner = TracingRunner(SmolagentsRunner()) if traced else SmolagentsRunner()
    await go(core(native, runner), mode)
    assert fired == [1, 2]
    assert native.step_callbacks is registry and native.model is model
    assert native.logger is logger and native.stream_outputs is False
    assert "execute_tool_call" not in vars(native)
    assert bool(captured_spans.spans) is traced


async def test_a_callback_registered_during_a_run_stays_with_the_agent() -> None:
    fired: list[str] = []
    native = calculator()

    registered: list[bool] = []

    def register(step: MemoryStep, agent: Any = None) -> None:
        if not registered:
            registered.append(True)
            native.step_callbacks.register(ActionStep, lambda s: fired.append("late"))
        fired.append("first")

    native.step_callbacks.register(ActionStep, register)
    await go(core(native), "stream")
    assert fired[:2] == ["first", "late"]
    fired.clear()
    native.step_callbacks.callback(
        ActionStep(step_number=9, timing=Timing(start_time=0.0, end_time=1.0))
    )
    assert fired == ["first", "late"]


@pytest.mark.parametrize("mode", MODES)
async def test_smolagents_live_display_stays_silent_at_verbosity_off(mode: str) -> None:
    native = calculator(stream_outputs=True)
    printed = io.StringIO()
    with redirect_stdout(printed):
        await go(core(native), mode)
    assert printed.getvalue() == ""


async def test_the_event_loop_keeps_running_while_a_tool_blocks() -> None:
    release = threading.Event()
    ticks: list[int] = []

    @tool
    def slow(city: str) -> str:
        """Block until released.

        Args:
            city: Any city.
        """
        release.wait(5)
        return city

    native = ToolCallingAgent(
        tools=[slow],
        model=ScriptedModel([calls(("slow", {"city": "Oslo"})), ANSWER]),
        name="calc",
        verbosity_level=LogLevel.OFF,
    )
    running = asyncio.create_task(go(core(native), "run"))
    for n in range(5):
        await asyncio.sleep(0.01)
        ticks.append(n)
    release.set()
    await running
    assert ticks == [0, 1, 2, 3, 4]


async def test_runs_of_one_agent_object_are_serialised() -> None:
    inside = 0
    most = 0
    lock = threading.Lock()

    @tool
    def busy(city: str) -> str:
        """Count the runs inside.

        Args:
            city: Any city.
        """
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        threading.Event().wait(0.02)
        with lock:
            inside -= 1
        return city

    native = ToolCallingAgent(
        tools=[busy],
        model=ScriptedModel([calls(("busy", {"city": "Oslo"})), ANSWER] * 4),
        name="calc",
        verbosity_level=LogLevel.OFF,
    )
    agent = core(native)
    sessions = [Session(f"s{n}") for n in range(4)]
    await asyncio.gather(*(go(agent, "run", s) for s in sessions))
    assert most == 1
    assert all(len(s.get(STATE_KEY)) == 3 for s in sessions)  # each its own memory


async def test_runs_queued_on_one_agent_need_no_thread_while_they_wait() -> None:
    """Runs wait for their turn on the loop, not in a thread: with a pool of two
    threads, four runs of one agent all finish (a waiter holding a pool thread would
    leave none for the run whose turn it is)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
    native = calculator([ASK, ANSWER] * 4)
    agent = core(native)
    sessions = [Session(f"s{n}") for n in range(4)]
    runs = asyncio.gather(*(go(agent, "run", s) for s in sessions))
    replies = await asyncio.wait_for(runs, timeout=60)  # a deadlock, not a speed bound
    assert [str(reply) for reply, _ in replies] == ["The product is 42."] * 4


async def test_a_run_that_leaves_while_waiting_for_its_turn_passes_it_on() -> None:
    from runnertrace.runners.smolagents.runner import _Turns

    turns = _Turns()
    first = await turns.take()
    queued = asyncio.create_task(turns.take())
    handed = asyncio.create_task(turns.take())
    await asyncio.sleep(0)  # both are waiting now
    queued.cancel()  # leaves while in the queue
    first.end_run()  # the turn is handed to the next waiter...
    handed.cancel()  # ...which leaves before it gets it
    for task in (queued, handed):
        with pytest.raises(asyncio.CancelledError):
            await task
    last = await asyncio.wait_for(turns.take(), timeout=5)  # a turn lost, not a speed bound
    last.end_run()


# -- tracing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_the_span_tree_under_tracing_runner(mode: str, captured_spans: CapturedSpans) -> None:
    await go(core(calculator(), TracingRunner(SmolagentsRunner())), mode)
    assert captured_spans.tree() == [
        (
            "invoke_agent calc",
            [
                ("agent_step calc", [("chat scripted", []), ("execute_tool multiply", [])]),
                ("agent_step calc", [("chat scripted", [])]),
            ],
        )
    ]
    run_span = captured_spans.by_name("invoke_agent calc")[0]
    assert run_span.attributes is not None
    assert run_span.attributes["runnertrace.framework"] == "smolagents"


@pytest.fixture
def tracker(captured_spans: CapturedSpans) -> OpenSpanTracker:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    return tracker


# -- a fault of ours: telemetry only -------------------------------------------------------------
FAULTS = {
    # A release renaming python_executor.static_tools: scoping a CodeAgent's tools (a
    # guarded stand-in) fails; the run goes on traced, its code's tools unscoped.
    "tools in scope": ("adapter", "_tools_in_scope", "smolagents mapping"),
    # Anything the install step reads: the run goes on uninstrumented (the kit's step).
    "install": ("runner", "install_stand_ins", "smolagents install"),
}


def multiplier(kind: str) -> Any:
    if kind == "tool_calling":
        turns = [ASK, calls(("final_answer", {"answer": "6 x 7 = 42"}), prefix="fin")]
        return calculator(turns)
    model = ScriptedModel([code('final_answer(f"6 x 7 = {multiply(a=6, b=7)}")')])
    return CodeAgent(tools=[multiply], model=model, name="calc", verbosity_level=LogLevel.OFF)


async def answered(native: Any, runner: Any, mode: str) -> tuple[str, list[str]]:
    """One run nobody observes but ``runner``: the reply's text (run mode) or the
    stream's text and event kinds (stream mode)."""
    agent = core(native, runner)
    if mode == "run":
        return str(await agent.runner.run(agent, Session("s1"), QUESTION)), []
    events = [e async for e in agent.runner.stream(agent, Session("s1"), QUESTION)]
    return "".join(e.delta for e in events if isinstance(e, ev.TextDelta)), kinds(events)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["tool_calling", "code"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_fault_of_ours_in_the_install_step_or_a_stand_in_costs_telemetry_only(
    fault: str,
    kind: str,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    captured_spans: CapturedSpans,
    tracker: OpenSpanTracker,
) -> None:
    module, name, where = FAULTS[fault]
    reached: list[str] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        reached.append(name)
        raise KeyError("static_tools")

    monkeypatch.setattr(
        importlib.import_module(f"runnertrace.runners.smolagents.{module}"), name, broken
    )
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        untraced = await answered(multiplier(kind), SmolagentsRunner(), mode)
        assert bool(reached) is (mode == "stream")  # untraced run mode installs nothing
        internal_log.reset()
        caplog.clear()
        traced = await answered(multiplier(kind), TracingRunner(SmolagentsRunner()), mode)
    assert reached
    assert traced == untraced
    if mode == "run":
        assert traced[0] == "6 x 7 = 42"
    logged = [r.getMessage() for r in caplog.records if "internal error in" in r.getMessage()]
    assert len(logged) == 1 and where in logged[0], logged
    (run_span,) = captured_spans.by_name("invoke_agent calc")
    assert run_span.status.status_code is not StatusCode.ERROR
    chats = [s for s in captured_spans.spans if s.name.startswith("chat ")]
    assert bool(chats) is (fault == "tools in scope")  # still traced, or plain
    assert not tracker.open


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_run_leaves_nothing_open_and_stops_the_agent(
    mode: str, tracker: OpenSpanTracker
) -> None:
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

    native = ToolCallingAgent(
        tools=[slow],
        model=ScriptedModel([calls(("slow", {"city": "Oslo"})), ASK, ANSWER]),
        name="calc",
        verbosity_level=LogLevel.OFF,
    )
    agent = core(native, TracingRunner(SmolagentsRunner()))
    task = asyncio.create_task(go(agent, mode))
    await reached.wait()
    await cancel_and_settle(task)
    assert tracker.started and not tracker.open
    release.set()
    for _ in range(300):  # the worker finishes its step in the background, then stops
        if native.interrupt_switch:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert native.interrupt_switch
    assert len(native.model.received) == 1  # interrupted: no second model call
    assert not tracker.open  # and it reported nothing after the cancellation


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_that_fails_is_reported_with_its_exception(mode: str) -> None:
    @tool
    def broken(city: str) -> str:
        """Fail.

        Args:
            city: Any city.
        """
        raise KeyError(city)

    native = ToolCallingAgent(
        tools=[broken],
        model=ScriptedModel([calls(("broken", {"city": "Oslo"})), ANSWER]),
        name="calc",
        verbosity_level=LogLevel.OFF,
    )
    _, events = await go(core(native), mode)
    (result,) = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert result.is_error and result.error is not None
    assert result.error.type.endswith("KeyError")
    assert "Oslo" in result.content


# -- packaging -------------------------------------------------------------------------------------
def test_without_smolagents_the_runner_names_the_extra_to_install() -> None:
    code_ = (
        "import sys; sys.modules['smolagents'] = None\n"
        "import runnertrace, runnertrace.runners\n"
        "from runnertrace._internal.imports import MissingExtraError\n"
        "for name in ('smolagents', 'smolagents.testing'):\n"
        "    try:\n"
        "        __import__('runnertrace.runners.' + name)\n"
        "    except MissingExtraError as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code_], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.count("pip install 'runnertrace[smolagents]'") == 2
