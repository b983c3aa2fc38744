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


def test_a_guarded_function_costs_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    installed: list[str] = []

    @guarded(BOUNDARY)
    def install_hook(name: str) -> None:
        installed.append(name)
        raise KeyError("Agent.iter")

    with tolerate_internal_errors():
        assert install_hook("hook") is None
    assert is_guarded(install_hook) and installed == ["hook"]
    assert len(_faults(caplog)) == 1


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


@pytest.mark.parametrize("heard", [True, False])
async def test_a_cancelled_call_is_heard_only_by_cancelled(heard: bool) -> None:
    """A cancellation is not a failure (``failed`` never sees it); a lifecycle that
    must end with the call (a nested run) hears it through ``cancelled``."""
    report = _Report()

    async def call() -> int:
        raise asyncio.CancelledError

    def cancelled(handle: str, error: BaseException) -> None:
        report.calls.append(("cancelled", handle))

    extra: dict[str, Any] = {"cancelled": cancelled} if heard else {}
    with pytest.raises(asyncio.CancelledError):
        await bracket(BOUNDARY, call, **_bracketed(report), **extra)
    with pytest.raises(KeyboardInterrupt):
        bracket_sync(BOUNDARY, _raise(KeyboardInterrupt()), **_bracketed(report), **extra)
    ends = [c for c in report.calls if c[0] in ("failed", "cancelled", "done")]
    assert ends == ([("cancelled", "m1")] * 2 if heard else [])
    report.calls.clear()
    with pytest.raises(ValueError, match="the agent's"):  # a failure is not a cancellation
        bracket_sync(BOUNDARY, _raise(ValueError("the agent's")), **_bracketed(report), **extra)
    assert [c for c in report.calls if c[0] in ("failed", "cancelled")] == [
        ("failed", "m1", "ValueError")
    ]


def _raise(error: BaseException) -> Any:
    def call() -> Any:
        raise error

    return call


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


def test_a_same_context_ledger_leaves_a_scope_only_where_it_was_entered() -> None:
    """An end hook run in another context (LangChain's shielded model-end task) drops
    the scope; the context that entered it keeps it, and leaves it only from there."""
    import contextvars

    events: list[str] = []

    @contextmanager
    def scope(name: str) -> Iterator[None]:
        events.append(f"+{name}")
        yield
        events.append(f"-{name}")

    ledger: ScopeLedger[str] = ScopeLedger(BOUNDARY, same_context=True)
    ledger.enter("elsewhere", scope("elsewhere"))
    ledger.enter("here", scope("here"))
    assert contextvars.copy_context().run(ledger.leave, "elsewhere") is True
    assert not ledger.holds("elsewhere")
    assert ledger.leave("here") is True
    assert events == ["+elsewhere", "+here", "-here"]
    ledger.enter("other", scope("other"))
    contextvars.copy_context().run(ledger.leave_all)
    assert events == ["+elsewhere", "+here", "-here", "+other"]
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


def test_a_cancelled_nested_run_ends_cancelled_without_an_error_it_did_not_raise() -> None:
    with _opener() as opened:
        nested = NestedAgentRun.open(BOUNDARY, "inner")
        assert nested is not None
        nested.builder.message_start()
        nested.fail(asyncio.CancelledError())
    (run,) = opened
    assert run.events == ["message_start"]  # the tracing layer ends what is open, cancelled
    assert run.finished == [(None, None, True)]


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


def test_a_runners_mapping_of_the_inner_agent_closes_inside_the_run() -> None:
    """``closing`` runs once, before the run span ends, after a failure's open message
    ended with it; its answer is the reply of a run ended without one, and a fault in
    it still ends the run."""
    closed: list[bool] = []

    def closing(cancelled: bool) -> str:
        closed.append(cancelled)
        return "its answer"

    with _opener() as opened, tolerate_internal_errors():
        runs: NestedRuns[str] = NestedRuns(BOUNDARY)
        answered, failed, cancelled, broken = (runs.open(k, k) for k in "abcd")
        assert answered and failed and cancelled and broken
        for nested in (answered, failed, cancelled):
            nested.closing = closing
        broken.closing = lambda cancelled: 1 // 0
        message = failed.builder.message_start()
        runs.end("a")  # the registry's caller does not know the answer
        runs.end("b", error=ValueError("inner failed"))
        runs.end("c", error=asyncio.CancelledError())
        runs.end("d", reply="given")
        answered.end("late")
        failed.builder.text("late", message)
    assert closed == [False, False, True]  # once each, however it ended
    assert [r.finished for r in opened] == [
        [("its answer", None, False)],
        [(None, "ValueError", False)],
        [(None, None, True)],
        [("given", None, False)],
    ]
    assert opened[1].events == ["message_start", "message_end"]


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

    def __init__(self, broken: bool, quiet_broken: bool = False) -> None:
        self.broken = broken
        self.quiet_broken = quiet_broken
        self.installed: list[str] = []
        self.taken_down: list[str] = []
        self.quieted: list[bool] = []

    async def start(self, setup: RunSetup[_Framework]) -> _Run:
        return _Run(setup)

    def install(self, setup: RunSetup[_Framework], run: FrameworkRun[Any]) -> None:
        self.installed.append("listener")
        run.exits.callback(self.taken_down.append, "listener")
        if self.broken:
            raise KeyError("python_executor.static_tools")  # what a renaming release does

    def quiet(self, setup: RunSetup[_Framework], run: FrameworkRun[Any]) -> None:
        self.quieted.append(setup.streaming)
        if self.quiet_broken:
            raise KeyError("tracer")  # a release that keeps its tracer elsewhere


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


async def test_a_fault_in_the_quiet_step_costs_the_silencing_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a traced run is quieted; a fault there leaves the mapping in: the same
    events in both modes, nothing taken down before the run ends, one log line."""
    healthy = _Runner(broken=False)
    _, untraced_events = await _both_modes(healthy)
    assert healthy.quieted == []
    broken = _Runner(broken=False, quiet_broken=True)
    traced = enter_traced_run()
    try:
        with tolerate_internal_errors():
            reply, events = await _both_modes(broken)
    finally:
        exit_traced_run(traced)
    assert broken.quieted == [False, True]  # it was reached in each mode
    assert reply == "6 x 7 = 42"
    assert [e.type for e in events] == [e.type for e in untraced_events]
    assert [e.type for e in events] == ["message_start", "text_delta", "text_delta", "message_end"]
    assert broken.taken_down == broken.installed == ["listener", "listener"]  # at the end
    faults = _faults(caplog)
    assert len(faults) == 1 and "kit-test install" in faults[0]


async def test_an_install_fault_raises_under_pytest() -> None:
    runner = _Runner(broken=True)
    agent = Agent("calc", runner, _Framework())
    with pytest.raises(KeyError), observing(lambda event: None):
        await runner.run(agent, Session(id="s"), [AgentRequestText(prompt="q")])


class _Unopened(_Run):
    """A framework whose stream refuses to open (a bad argument the framework checks)."""

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterator[str]]:
        raise ValueError("the framework refused the stream")
        yield self.setup.native.words()  # pragma: no cover - never reached


class _UnopenedRunner(_Runner):
    async def start(self, setup: RunSetup[_Framework]) -> _Run:
        return _Unopened(setup)


async def test_a_stream_that_fails_to_open_still_ends_the_run_once() -> None:
    runner = _UnopenedRunner(broken=False)
    agent = Agent("calc", runner, _Framework())
    requests: list[Any] = [AgentRequestText(prompt="6 x 7?")]
    with pytest.raises(ValueError, match="refused the stream"):
        async for _ in runner.stream(agent, Session(id="s"), requests):
            pass
    assert runner.taken_down == runner.installed == ["listener"]  # unwound, once
