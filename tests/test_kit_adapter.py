"""The kit's structural boundary: the class guard, the call bracket, the scope ledger,
the nested-run lifecycle, and the template's install step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, ClassVar

import pytest

from runnertrace.core.agent import Agent
from runnertrace.core.events import StreamEvent
from runnertrace.core.models import AgentReply, AgentRequestText
from runnertrace.core.observer import (
    end_nesting_runs,
    enter_traced_run,
    exit_traced_run,
    nesting_runs,
    observing,
)
from runnertrace.core.session import Session
from runnertrace.runners._kit.adapter import (
    ScopeLedger,
    bracket,
    bracket_sync,
    fault_returns,
    guarded,
    is_guarded,
    mapped_stream,
    passes_through,
)
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.nesting import NestedAgentRun, NestedRuns
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    reply_of,
)
from runnertrace.testing import tolerate_internal_errors

BOUNDARY = MappingBoundary("kit-test")


def _faults(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "internal error in" in r.getMessage()]


# -- the class guard ----------------------------------------------------------------------------


@guarded(BOUNDARY)
class _Hooks:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_start(self, value: int) -> int:
        return 10 // value

    async def on_end(self, value: int) -> int:
        return 10 // value

    @fault_returns(lambda self, update: update)
    def update(self, update: str) -> str:
        raise KeyError(update)

    @passes_through
    async def process(self, call_next: Any) -> Any:
        return await call_next()

    def _private(self) -> None:
        raise KeyError("not guarded")

    @staticmethod
    def static(value: int) -> int:
        return 10 // value


def test_the_guard_wraps_every_public_method_and_nothing_else() -> None:
    assert is_guarded(_Hooks.on_start) and is_guarded(_Hooks.on_end)
    assert is_guarded(_Hooks.update) and is_guarded(_Hooks.static)
    assert not is_guarded(_Hooks.process)  # it calls into the framework
    assert not is_guarded(_Hooks._private)  # noqa: SLF001
    assert not is_guarded(_Hooks.__init__)


async def test_a_guarded_method_returns_none_or_its_fallback_on_a_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = _Hooks()
    with tolerate_internal_errors():
        assert hooks.on_start(5) == 2
        assert hooks.on_start(0) is None
        assert await hooks.on_end(0) is None
        assert hooks.update("chunk") == "chunk"
        assert _Hooks.static(0) is None
    assert len(_faults(caplog)) == 1  # four faults at one place: one line, the rest counted
    assert "kit-test mapping" in _faults(caplog)[0]


async def test_a_guarded_method_raises_under_pytest_and_passes_cancellation() -> None:
    with pytest.raises(ZeroDivisionError):
        _Hooks().on_start(0)

    @guarded(BOUNDARY)
    class Cancelling:
        async def on_event(self) -> None:
            raise asyncio.CancelledError

    with tolerate_internal_errors(), pytest.raises(asyncio.CancelledError):
        await Cancelling().on_event()


async def test_a_passing_method_lets_the_frameworks_error_through() -> None:
    async def failing() -> None:
        raise ValueError("the agent's own")

    with tolerate_internal_errors(), pytest.raises(ValueError, match="the agent's own"):
        await _Hooks().process(failing)


def test_the_body_can_be_replaced_under_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, value: int) -> int:
        raise KeyError("renamed")

    monkeypatch.setattr(_Hooks.on_start, "__wrapped__", broken)
    with tolerate_internal_errors():
        assert _Hooks().on_start(5) is None


def test_a_generator_cannot_be_guarded_whole() -> None:
    with pytest.raises(TypeError, match="mapped_stream"):

        @guarded(BOUNDARY)
        class Streaming:
            async def events(self) -> AsyncIterator[int]:
                yield 1


# -- the call bracket ---------------------------------------------------------------------------


class _Report:
    def __init__(self, fail_at: str | None = None) -> None:
        self.calls: list[Any] = []
        self.fail_at = fail_at

    def _note(self, what: str, *args: Any) -> None:
        if what == self.fail_at:
            raise KeyError(what)
        self.calls.append((what, *args))

    def start(self) -> str:
        self._note("start")
        return "m1"

    @contextmanager
    def _scope(self, handle: str) -> Iterator[None]:
        self._note("enter", handle)
        yield
        self.calls.append(("leave", handle))

    def scope(self, handle: str) -> AbstractContextManager[None]:
        return self._scope(handle)

    def done(self, handle: str, result: Any) -> None:
        self._note("done", handle, result)

    def failed(self, handle: str, error: BaseException) -> None:
        self._note("failed", handle, type(error).__name__)


def _bracketed(report: _Report) -> dict[str, Any]:
    return {
        "start": report.start,
        "scope": report.scope,
        "done": report.done,
        "failed": report.failed,
    }


async def test_the_bracket_reports_start_scope_and_end_in_order() -> None:
    report = _Report()

    async def call() -> int:
        report.calls.append(("call",))
        return 42

    assert await bracket(BOUNDARY, call, **_bracketed(report)) == 42
    assert report.calls == [
        ("start",),
        ("enter", "m1"),
        ("call",),
        ("leave", "m1"),
        ("done", "m1", 42),
    ]


async def test_the_bracket_passes_the_calls_error_and_reports_it() -> None:
    report = _Report()

    async def call() -> int:
        raise ValueError("the model's")

    with pytest.raises(ValueError, match="the model's"):
        await bracket(BOUNDARY, call, **_bracketed(report))
    assert report.calls[-1] == ("failed", "m1", "ValueError")


@pytest.mark.parametrize("control", [True, False])
def test_the_bracket_does_not_fail_a_span_on_control_flow(control: bool) -> None:
    class Retry(Exception):
        pass

    report = _Report()

    def call() -> int:
        raise Retry

    with pytest.raises(Retry):
        bracket_sync(BOUNDARY, call, control=(Retry,) if control else (), **_bracketed(report))
    assert (("failed", "m1", "Retry") in report.calls) is not control


@pytest.mark.parametrize("told", [True, False])
async def test_the_bracket_tells_of_a_cancellation_only_when_asked(told: bool) -> None:
    """An inner run the framework cancels while the outer run goes on ends there."""
    report = _Report()

    async def call() -> int:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await bracket(BOUNDARY, call, cancellation=told, **_bracketed(report))
    assert report.calls[-1] == (("failed", "m1", "CancelledError") if told else ("leave", "m1"))


@pytest.mark.parametrize("fail_at", ["start", "enter", "done", "failed"])
async def test_a_fault_in_the_bracket_costs_telemetry_only(
    fail_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    report = _Report(fail_at)

    async def call() -> int:
        if fail_at == "failed":
            raise ValueError("the agent's")
        return 7

    with tolerate_internal_errors():
        if fail_at == "failed":
            with pytest.raises(ValueError, match="the agent's"):
                await bracket(BOUNDARY, call, **_bracketed(report))
        else:
            assert await bracket(BOUNDARY, call, **_bracketed(report)) == 7
    assert len(_faults(caplog)) == 1
    if fail_at == "start":  # nothing was started: nothing is ended
        assert report.calls == []


async def test_a_mapped_stream_passes_every_item_past_a_faulty_mapping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed: list[bool] = []

    async def native() -> AsyncIterator[int]:
        try:
            for i in range(4):
                yield i
        finally:
            closed.append(True)

    def on_item(item: int) -> None:
        if item % 2:
            raise KeyError(item)

    with tolerate_internal_errors():
        got = [i async for i in mapped_stream(BOUNDARY, native(), on_item)]
    assert got == [0, 1, 2, 3]
    assert closed == [True]
    assert len(_faults(caplog)) == 1


# -- the scope ledger ---------------------------------------------------------------------------


def test_the_ledger_pairs_scopes_by_key_and_leaves_the_rest_at_the_end() -> None:
    events: list[str] = []

    @contextmanager
    def scope(name: str) -> Iterator[None]:
        events.append(f"+{name}")
        yield
        events.append(f"-{name}")

    ledger: ScopeLedger[str] = ScopeLedger(BOUNDARY)
    ledger.enter("a", scope("a"))
    ledger.enter("b", scope("b1"))
    ledger.enter("b", scope("b2"))
    assert len(ledger) == 3
    assert ledger.leave("a") is True
    assert ledger.leave("a") is False
    ledger.leave_all()
    assert events == ["+a", "+b1", "+b2", "-a", "-b2", "-b1"]
    assert len(ledger) == 0


def test_a_scope_that_fails_to_enter_is_never_left(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def __enter__(self) -> None:
            raise KeyError("renamed")

        def __exit__(self, *exc: object) -> None:
            raise AssertionError("left a scope that never entered")

    ledger: ScopeLedger[str] = ScopeLedger(BOUNDARY)
    with tolerate_internal_errors():
        ledger.enter("a", Broken())
    assert ledger.leave("a") is False
    assert len(_faults(caplog)) == 1


# -- the nested-run lifecycle -------------------------------------------------------------------


class _NestedRun:
    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[str] = []
        self.finished: list[tuple[Any, Any, bool]] = []

    def __call__(self, event: StreamEvent) -> None:
        self.events.append(event.type)

    def scope(self, kind: str, key: str) -> AbstractContextManager[None]:
        raise AssertionError("not used")

    def claim(self) -> None:
        return None

    def finish(
        self, reply: Any = None, error: BaseException | None = None, cancelled: bool = False
    ) -> None:
        self.finished.append((reply, type(error).__name__ if error else None, cancelled))


@contextmanager
def _opener() -> Iterator[list[_NestedRun]]:
    opened: list[_NestedRun] = []

    def open_run(agent_name: str, mode: str, requests: Any = None) -> _NestedRun:
        opened.append(_NestedRun(agent_name))
        return opened[-1]

    token = nesting_runs(open_run)
    try:
        yield opened
    finally:
        end_nesting_runs(token)


def test_a_nested_run_ends_once_and_hears_nothing_after() -> None:
    assert NestedAgentRun.open(BOUNDARY, "inner") is None  # nothing traces here
    with _opener() as opened:
        nested = NestedAgentRun.open(BOUNDARY, "inner")
        assert nested is not None
        message = nested.builder.message_start()
        nested.fail(ValueError("inner failed"))
        nested.end("late reply")
        nested.builder.text("late", message)
    (run,) = opened
    assert run.events == ["message_start", "message_end"]  # the open message ended with it
    assert run.finished == [(None, "ValueError", False)]


def test_a_cancelled_nested_run_ends_cancelled() -> None:
    with _opener() as opened:
        nested = NestedAgentRun.open(BOUNDARY, "inner")
        assert nested is not None
        nested.fail(asyncio.CancelledError())
    assert opened[0].finished == [(None, None, True)]


def test_a_cancelled_nested_run_can_keep_its_error_as_a_traced_run_does() -> None:
    with _opener() as opened:
        nested = NestedAgentRun.open(BOUNDARY, "inner")
        assert nested is not None
        message = nested.builder.message_start()
        nested.fail(asyncio.CancelledError(), keep_error=True)
        nested.builder.text("late", message)
    (run,) = opened
    assert run.events == ["message_start", "message_end"]  # what was open ended with it
    assert run.finished == [(None, "CancelledError", True)]


def test_a_nested_run_takes_the_builder_the_runner_makes() -> None:
    class Forwarding(EventBuilder):
        def __init__(self, observer: Any, forwarded: list[str]) -> None:
            super().__init__(observer)
            self.forwarded = forwarded

        def emit(self, event: StreamEvent) -> None:
            super().emit(event)
            self.forwarded.append(event.type)

    forwarded: list[str] = []
    with _opener() as opened:
        nested = NestedAgentRun.open(
            BOUNDARY, "inner", builder=lambda run: Forwarding(run, forwarded)
        )
        assert nested is not None and isinstance(nested.builder, Forwarding)
        nested.builder.message_end(nested.builder.message_start())
        nested.end("done")
    assert opened[0].events == forwarded == ["message_start", "message_end"]
    assert opened[0].finished == [("done", None, False)]


def test_the_registry_ends_what_the_outer_run_left_open() -> None:
    with _opener() as opened:
        runs: NestedRuns[str] = NestedRuns(BOUNDARY)
        runs.open("call_1", "a")
        runs.open("call_2", "b")
        assert runs.end("call_1", reply="done") is True
        assert runs.end("call_1") is False
        runs.end_all()
    assert [r.finished for r in opened] == [[("done", None, False)], [(None, None, True)]]
    assert len(runs) == 0


# -- the template's install step ----------------------------------------------------------------


class _Framework:
    """A framework of two words: run mode answers, stream mode streams them."""

    async def answer(self) -> str:
        return "6 x 7 = 42"

    async def words(self) -> AsyncIterator[str]:
        for word in ("6 x 7", " = 42"):
            yield word


class _Run(FrameworkRun[str]):
    async def call(self) -> str:
        answer: str = await self.setup.native.answer()
        return answer

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterator[str]]:
        self.streamed: list[str] = []
        yield self.setup.native.words()

    def map(self, item: str) -> None:
        if not self.builder._messages:  # noqa: SLF001 - the test's own tiny mapping
            self.builder.message_start("m1")
        self.builder.text(item, "m1")
        self.streamed.append(item)

    def complete(self) -> None:
        if self.setup.streaming:
            self.builder.message_end("m1")

    async def outcome(self) -> str:
        return "".join(self.streamed)

    async def save(self, result: str) -> None:
        return None

    def reply(self, result: str, prompt: str) -> AgentReply:
        return reply_of(result, prompt)


class _Runner(FrameworkRunner[_Framework]):
    framework: ClassVar[str] = "kit-test"
    state_key: ClassVar[str] = "kit-test"
    native_type: ClassVar[type[Any]] = _Framework
    native_what: ClassVar[str] = "a two-word framework"
    boundary: ClassVar[MappingBoundary] = BOUNDARY

    def __init__(self, broken: bool) -> None:
        self.broken = broken
        self.installed: list[str] = []
        self.taken_down: list[str] = []

    async def start(self, setup: RunSetup[_Framework]) -> _Run:
        return _Run(setup)

    def install(self, setup: RunSetup[_Framework], run: FrameworkRun[Any]) -> None:
        self.installed.append("listener")
        run.exits.callback(self.taken_down.append, "listener")
        if self.broken:
            raise KeyError("python_executor.static_tools")  # what a renaming release does


async def _both_modes(runner: _Runner) -> tuple[str, list[StreamEvent]]:
    agent = Agent("calc", runner, _Framework())
    requests: list[Any] = [AgentRequestText(prompt="6 x 7?")]
    seen: list[StreamEvent] = []
    with observing(seen.append):
        reply = await runner.run(agent, Session(id="s1"), requests)
    events = [e async for e in runner.stream(agent, Session(id="s2"), requests)]
    return str(reply), events


def _text(events: list[StreamEvent]) -> str:
    return "".join(getattr(e, "delta", "") for e in events if e.type == "text_delta")


async def test_an_untraced_run_mode_installs_nothing() -> None:
    runner = _Runner(broken=False)
    agent = Agent("calc", runner, _Framework())
    await runner.run(agent, Session(id="s"), [AgentRequestText(prompt="q")])
    assert runner.installed == []


async def test_a_fault_in_the_install_step_costs_the_telemetry_not_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    healthy_reply, healthy_events = await _both_modes(_Runner(broken=False))
    broken = _Runner(broken=True)
    with tolerate_internal_errors():
        reply, events = await _both_modes(broken)
    assert reply == healthy_reply == "6 x 7 = 42"
    assert _text(events) == _text(healthy_events) == "6 x 7 = 42"
    assert [e.type for e in events] == ["message_start", "text_delta", "message_end"]
    assert broken.taken_down == broken.installed == ["listener", "listener"]  # undone each time
    faults = _faults(caplog)
    assert len(faults) == 1 and "kit-test install" in faults[0]


class _QuietRunner(_Runner):
    """A runner whose quiet step fails: the framework's own telemetry stays on."""

    def quiet(self, setup: RunSetup[_Framework], run: FrameworkRun[Any]) -> None:
        raise KeyError("OBSERVABILITY_SETTINGS")


async def test_a_fault_in_the_quiet_step_costs_the_silence_not_the_mapping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, healthy_events = await _both_modes(_Runner(broken=False))
    runner = _QuietRunner(broken=False)
    token = enter_traced_run()  # the quiet step runs inside a traced run only
    try:
        with tolerate_internal_errors():
            reply, events = await _both_modes(runner)
    finally:
        exit_traced_run(token)
    assert reply == "6 x 7 = 42"
    assert [e.type for e in events] == [e.type for e in healthy_events]  # the mapping's own
    assert runner.taken_down == runner.installed == ["listener", "listener"]  # at each end
    faults = _faults(caplog)
    assert len(faults) == 1 and "kit-test install" in faults[0]


async def test_an_install_fault_raises_under_pytest() -> None:
    runner = _Runner(broken=True)
    agent = Agent("calc", runner, _Framework())
    with pytest.raises(KeyError), observing(lambda event: None):
        await runner.run(agent, Session(id="s"), [AgentRequestText(prompt="q")])
