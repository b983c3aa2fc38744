"""The contract every runner keeps, run over every runner in tests/contract/runner_cases.py.

Each runner is driven on its framework's own offline fake model, in both modes:

- a fault injected into its mapping leaves the reply (and the text and tool results
  the stream carries) unchanged, logs one line, and leaves no span open;
- a consumer that stops the stream after any event closes the framework's own
  stream at once, in the consumer's context;
- cancelling the run at any event leaves no span open and logs no fault;
- a hook the user declared fires as often traced as untraced;
- the run-option keys the runner owns are refused at declaration;
- an untraced run-mode call makes no mapping at all.

The CrewAI case skips where CrewAI is not installed (the main venv); .ci/extra-crewai
runs this file in CrewAI's own venv.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager, suppress
from typing import Any

import pytest
from tests.contract.runner_cases import CASES, RunnerCase
from tests.tracing_helpers import OpenSpanTracker

from runnertrace import TracingRunner
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentRequestText
from runnertrace.core.session import Session
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.testing import CapturedSpans, tolerate_internal_errors

# The LangGraph case drives the prebuilt agent, deprecated in favour of langchain's.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

QUESTION = [AgentRequestText(prompt="What is 6 times 7?")]
MODES = ["run", "stream"]
RUNNERS = [pytest.param(case, id=case.name) for case in CASES]

_consumer: contextvars.ContextVar[object] = contextvars.ContextVar("contract_consumer")


@pytest.fixture(autouse=True)
def _crewai_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """CrewAI writes under $HOME and phones home unless told not to."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


@pytest.fixture
def tracker(captured_spans: CapturedSpans) -> OpenSpanTracker:
    tracking = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracking)
    return tracking


def plain(runner: Any) -> Any:
    return runner


async def drive(agent: Agent, mode: str) -> tuple[Any, list[ev.StreamEvent]]:
    """One run: its reply (run mode) or its events (stream mode)."""
    session = Session("s1")
    if mode == "run":
        return await agent.runner.run(agent, session, QUESTION), []
    async with aclosing(agent.runner.stream(agent, session, QUESTION)) as stream:
        return None, [event async for event in stream]


def text_of(events: list[ev.StreamEvent]) -> str:
    return "".join(e.delta for e in events if isinstance(e, ev.TextDelta))


def results_of(events: list[ev.StreamEvent]) -> list[str]:
    return [e.content for e in events if isinstance(e, ev.ToolCallResult)]


def break_(case: RunnerCase, monkeypatch: pytest.MonkeyPatch, target: str | None = None) -> None:
    """Make a mapping function raise, as a framework release that renames an attribute would."""
    module_path, attribute = (case.fault[0], target) if target else case.fault
    owner: Any = importlib.import_module(module_path)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("an attribute the framework renamed")

    monkeypatch.setattr(owner, name, broken)


async def settle() -> None:
    """Give callbacks scheduled by the framework a few turns of the loop (no garbage
    collection: what must close, closes without it)."""
    for _ in range(3):
        await asyncio.sleep(0)


def faults(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runnertrace" and r.levelno >= logging.WARNING
    ]


# -- a fault in the mapping ------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", RUNNERS)
async def test_a_fault_in_the_mapping_is_logged_once_and_the_run_goes_on(
    case: RunnerCase,
    mode: str,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    case.runner_module()
    expected_reply, expected_events = await drive(case.make(TracingRunner, None), mode)
    break_(case, monkeypatch)
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        reply, events = await drive(case.make(TracingRunner, None), mode)
    await settle()
    assert reply == expected_reply
    assert text_of(events) == text_of(expected_events)
    assert results_of(events) == results_of(expected_events)
    logged = faults(caplog)
    assert len(logged) == 1, logged
    assert "internal error in" in logged[0] and "KeyError" in logged[0]
    assert tracker.started > 0
    assert tracker.open == {}


@pytest.mark.parametrize("case", RUNNERS)
async def test_a_fault_in_the_mapping_raises_under_pytest(
    case: RunnerCase, captured_spans: CapturedSpans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``tolerate_internal_errors`` the same fault surfaces, so tests see our bugs
    (as raised, or as the cause of the error a framework wraps a hook's failure in)."""
    case.runner_module()
    break_(case, monkeypatch)
    with pytest.raises(Exception) as raised:  # a framework may wrap it
        await drive(case.make(TracingRunner, None), "run")
    await settle()
    chain: list[BaseException] = []
    error: BaseException | None = raised.value
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, KeyError) and "renamed" in str(e) for e in chain), chain


# -- an early stop ---------------------------------------------------------------------------
def defining_module(module: Any) -> Any:
    """Where a runner's classes are defined: a runner package's ``runner`` module, or
    the runner module itself."""
    if hasattr(module, "__path__"):
        return importlib.import_module(f"{module.__name__}.runner")
    return module


def probe_native_stream(module: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, Any]]:
    """Record, when a run's framework stream is closed, whose context closed it and
    whether the framework's async generator (when it is one) is finished."""
    exits: list[tuple[object, Any]] = []
    run_class = vars(defining_module(module))["_Run"]  # every runner's per-run class
    original: Callable[[Any], Any] = run_class.native_stream

    @asynccontextmanager
    async def probed(self: Any) -> AsyncIterator[Any]:
        items: Any = None
        try:
            async with original(self) as items:
                yield items
        finally:
            frame = getattr(items, "ag_frame", False)
            exits.append((_consumer.get(None), None if frame is False else frame is None))

    monkeypatch.setattr(run_class, "native_stream", probed)
    return exits


@pytest.mark.parametrize("case", RUNNERS)
async def test_an_early_close_closes_the_framework_stream_at_once(
    case: RunnerCase,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    module = case.runner_module()
    _, events = await drive(case.make(TracingRunner, None), "stream")
    assert len(events) > 4
    exits = probe_native_stream(module, monkeypatch)
    for index in range(len(events)):
        agent = case.make(TracingRunner, None)
        stream = agent.runner.stream(agent, Session("s1"), QUESTION)
        for _ in range(index + 1):
            await anext(stream)
        marker = object()
        token = _consumer.set(marker)
        try:
            await stream.aclose()
            # At once: closed before aclose() returned, by the consumer, in its context.
            assert len(exits) == index + 1, f"not closed at once after event {index}"
            closer, finished = exits[-1]
            assert closer is marker, f"closed in another context after event {index}"
            assert finished in (None, True), f"the framework's stream runs on after {index}"
        finally:
            _consumer.reset(token)
        await settle()
        assert tracker.open == {}, f"spans left open after event {index}"
    late = "after the run ended"  # a worker thread's last event (see RunnerCase.worker_thread)
    assert [m for m in faults(caplog) if not (case.worker_thread and late in m)] == []


# -- cancellation ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", RUNNERS)
async def test_cancellation_at_every_event_leaves_nothing_open(
    case: RunnerCase,
    mode: str,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    case.runner_module()
    made: list[int] = []
    emit = EventBuilder.emit
    cancel_at: list[Callable[[int], None]] = [lambda count: None]

    def counting(self: EventBuilder, event: ev.StreamEvent) -> None:
        emit(self, event)
        made.append(1)
        cancel_at[0](len(made))

    monkeypatch.setattr(EventBuilder, "emit", counting)
    await drive(case.make(TracingRunner, None), mode)
    total = len(made)
    assert total > 4
    loop = asyncio.get_running_loop()
    for index in range(total):
        made.clear()
        task = asyncio.ensure_future(drive(case.make(TracingRunner, None), mode))

        def cancel(count: int, index: int = index, task: asyncio.Future[Any] = task) -> None:
            if count == index + 1:
                loop.call_soon_threadsafe(task.cancel)  # events may come from a worker thread

        cancel_at[0] = cancel
        with suppress(asyncio.CancelledError):
            await task
        cancel_at[0] = lambda count: None
        await settle()
        assert tracker.open == {}, f"spans left open after a cancellation at event {index}"
    assert faults(caplog) == []


# -- the user's own hooks --------------------------------------------------------------------
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", RUNNERS)
async def test_a_declared_hook_fires_once_per_call_traced_or_not(
    case: RunnerCase, mode: str, traced: bool, captured_spans: CapturedSpans
) -> None:
    case.runner_module()
    fired: list[str] = []
    reply, events = await drive(case.make(TracingRunner if traced else plain, fired), mode)
    assert len(fired) == case.fires, fired
    assert reply is not None or events


# -- what the runner owns --------------------------------------------------------------------
@pytest.mark.parametrize("case", RUNNERS)
def test_reserved_run_option_keys_are_rejected(case: RunnerCase) -> None:
    case.runner_module()
    agent = case.make(plain, None)
    reserved = type(agent.runner).RESERVED_RUN_OPTIONS
    assert reserved
    for key in reserved:
        with pytest.raises(ValueError, match=f"run option {key!r} is reserved"):
            agent.declare_run_options(**{key: object()})
    assert not set(agent.run_options) & set(reserved)


@pytest.mark.parametrize("case", RUNNERS)
async def test_an_untraced_run_makes_no_mapping(
    case: RunnerCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    case.runner_module()
    if not case.untraced_installs_nothing:
        pytest.skip(f"{case.name}: the loop is ours and makes its events either way")
    expected, _ = await drive(case.make(plain, None), "run")
    break_(case, monkeypatch, "_Mapper.__init__")  # outside any boundary: making one fails
    reply, _ = await drive(case.make(plain, None), "run")
    assert reply == expected


def test_every_runner_is_on_the_template() -> None:
    """The guarantees above live in one place: every runner subclasses the template."""
    from runnertrace.runners._kit.skeleton import FrameworkRunner

    for case in CASES:
        try:
            module = defining_module(case.runner_module())
        except pytest.skip.Exception:
            continue
        runners = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and value.__module__ == module.__name__
            and hasattr(value, "RESERVED_RUN_OPTIONS")
        ]
        assert runners and all(issubclass(r, FrameworkRunner) for r in runners), case.name


@pytest.mark.parametrize("mode", MODES)
async def test_a_fault_in_the_builder_itself_does_not_break_the_native_loop(
    mode: str,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The native loop calls the builder itself: the builder it gets carries the boundary."""
    (case,) = (c for c in CASES if c.name == "native")
    expected_reply, expected_events = await drive(case.make(TracingRunner, None), mode)
    monkeypatch.setattr(EventBuilder, "message_start", _raise_key_error)
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        reply, events = await drive(case.make(TracingRunner, None), mode)
    assert reply == expected_reply
    assert results_of(events) == results_of(expected_events)
    logged = [m for m in faults(caplog) if "internal error in native mapping" in m]
    assert len(logged) == 1, faults(caplog)
    assert tracker.open == {}


def _raise_key_error(*args: Any, **kwargs: Any) -> Any:
    raise KeyError("an attribute the framework renamed")
