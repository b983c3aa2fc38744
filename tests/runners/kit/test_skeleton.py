"""The run/stream skeleton the framework runners share (core/skeleton.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from runnertrace.core.agent import Agent
from runnertrace.core.context import ToolContext
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequestText,
)
from runnertrace.core.session import Session
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.skeleton import (
    BoundedBuilder,
    MappingBoundary,
    invoke,
    native_of,
    prepare,
    relay,
    reply_of,
    save,
)
from runnertrace.testing import tolerate_internal_errors


class _Runner:
    framework = "test"

    @classmethod
    def validate_run_options(cls, options: Any) -> None:
        if "forbidden" in options:
            raise ValueError("run option 'forbidden' is reserved")


def _agent(native: Any = None) -> Agent:
    return Agent("a", _Runner(), native)  # type: ignore[arg-type]


REQUESTS: list[Any] = [AgentRequestText(prompt="hi")]


def test_native_of_names_the_agent_and_what_was_expected() -> None:
    assert native_of(_agent([1]), list, "a list") == [1]
    with pytest.raises(TypeError, match=r"agent 'a' is not a list \(got dict\)"):
        native_of(_agent({}), list, "a list")


async def test_prepare_reads_options_context_and_state() -> None:
    agent = _agent()
    agent.declare_run_options(lambda _a, _s, requests: {"seed": len(requests)}, temperature=0.5)
    session = Session("s")
    session.set_framework_context({"user": "ada"})
    session.set("fw", ["old"])
    prepared = await prepare(agent, session, REQUESTS, "fw")
    assert prepared.options == {"temperature": 0.5, "seed": 1}
    assert prepared.context == {"user": "ada"}
    assert prepared.state == ["old"]
    prepared.context["user"] = "grace"  # a copy: the session is untouched until save
    assert session.get_framework_context() == {"user": "ada"}


def test_save_writes_state_and_merges_what_the_run_produced() -> None:
    session = Session("s")
    session.set_framework_context({"user": "ada", "n": 1})
    from runnertrace.runners._kit.skeleton import Prepared

    prepared = Prepared({}, {"user": "ada", "n": 1}, None)
    save(session, "fw", ["new"], prepared, {"n": 2})
    assert session.get("fw") == ["new"]
    assert session.get_framework_context() == {"user": "ada", "n": 2}
    prepared.context["user"] = "grace"  # type: ignore[index]
    save(session, "fw", ["newer"], prepared)  # default: the loaded context, as mutated
    assert session.get_framework_context() == {"user": "grace", "n": 1}


async def test_invoke_activates_the_tool_context_and_reports_a_failure() -> None:
    agent, session = _agent(), Session("s")
    seen: list[Any] = []

    async def call() -> str:
        seen.append(ToolContext.get().session.id)
        return "ok"

    assert await invoke(agent, session, REQUESTS, call, on_exit=lambda: seen.append("exit")) == "ok"
    assert seen == ["s", "exit"]

    async def broken() -> str:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await invoke(agent, session, REQUESTS, broken, on_failure=seen.append)
    assert isinstance(seen[-1], KeyError)


async def test_invoke_runs_on_exit_when_cancelled() -> None:
    exited: list[bool] = []

    async def hang() -> None:
        await asyncio.sleep(10)

    task = asyncio.create_task(
        invoke(_agent(), Session("s"), REQUESTS, hang, on_exit=lambda: exited.append(True))
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert exited == [True]


async def _native(items: list[str], fail_at: int | None = None) -> AsyncIterator[str]:
    for i, item in enumerate(items):
        if i == fail_at:
            raise ValueError("native stream broke")
        yield item


async def test_relay_yields_what_each_item_made_then_the_rest() -> None:
    builder = EventBuilder(queue=True)
    mid = builder.message_start("m")

    def on_item(item: str) -> None:
        builder.text(item, mid)

    got = [
        e
        async for e in relay(
            builder, _native(["a", "b"]), on_item, on_complete=lambda: builder.message_end(mid)
        )
    ]
    assert [(e.type, getattr(e, "delta", None)) for e in got] == [
        ("message_start", None),
        ("text_delta", "a"),
        ("text_delta", "b"),
        ("message_end", None),
    ]


async def test_relay_fails_the_builder_yields_what_was_made_and_reraises() -> None:
    builder = EventBuilder(queue=True)
    mid = builder.message_start("m")
    exits: list[bool] = []
    got: list[Any] = []
    with pytest.raises(ValueError, match="native stream broke"):
        async for event in relay(
            builder,
            _native(["a", "b"], fail_at=1),
            lambda item: builder.text(item, mid),
            on_exit=lambda: exits.append(True),
        ):
            got.append(event)
    assert [e.type for e in got] == ["message_start", "text_delta", "message_end"]
    assert got[-1].error is not None and got[-1].error.type == "ValueError"
    assert exits == [True]


async def test_relay_runs_on_exit_when_the_consumer_stops() -> None:
    builder = EventBuilder(queue=True)
    mid = builder.message_start("m")
    exits: list[bool] = []
    stream = relay(
        builder,
        _native(["a", "b", "c"]),
        lambda item: builder.text(item, mid),
        on_exit=lambda: exits.append(True),
    )
    await anext(stream)
    await stream.aclose()
    assert exits == [True]


class _Answer(BaseModel):
    value: int


@pytest.mark.parametrize(
    ("output", "image", "expected"),
    [
        ("hi", None, AgentReplyText(text="hi", prompt="p")),
        (None, None, AgentReplyText(text="", prompt="p")),
        ("look", "aGk=", AgentReplyImage(text="look", image_data="aGk=", prompt="p")),
        (_Answer(value=3), None, AgentReplyAny(content={"value": 3}, prompt="p")),
        ({"k": [1]}, None, AgentReplyAny(content={"k": [1]}, prompt="p")),
        ([1, 2], None, AgentReplyAny(content={"output": [1, 2]}, prompt="p")),
    ],
)
def test_reply_of(output: Any, image: str | None, expected: Any) -> None:
    assert reply_of(output, "p", image=image) == expected


# -- the mapping boundary --------------------------------------------------------------------
def _internal_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "internal error in" in r.getMessage()]


async def test_relay_maps_on_past_a_faulty_item_and_logs_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = EventBuilder(queue=True)
    mid = builder.message_start("m")
    boundary = MappingBoundary("test")

    def on_item(item: str) -> None:
        if item != "b":
            raise KeyError(item)  # the mapping of every item but "b" is broken
        builder.text(item, mid)

    with tolerate_internal_errors():
        got = [
            e async for e in relay(builder, _native(["a", "b", "c"]), on_item, boundary=boundary)
        ]
    assert [getattr(e, "delta", None) for e in got] == [None, "b"]
    assert len(_internal_errors(caplog)) == 1  # a, then c: one line, the rest counted
    assert "test mapping" in _internal_errors(caplog)[0]


async def test_relay_raises_a_mapping_fault_under_pytest() -> None:
    builder = EventBuilder(queue=True)

    def on_item(item: str) -> None:
        raise KeyError(item)

    with pytest.raises(KeyError):
        async for _ in relay(builder, _native(["a"]), on_item, boundary=MappingBoundary("t")):
            pass


def test_the_boundary_reports_a_fault_and_lets_cancellation_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    boundary = MappingBoundary("test")
    with tolerate_internal_errors():
        with boundary:
            _ = 1 // 0
        assert boundary.detail(lambda: {"x": 1 // 0}) == {}
        with pytest.raises(asyncio.CancelledError), boundary:
            raise asyncio.CancelledError  # not a fault of ours: it goes on
    assert len(_internal_errors(caplog)) == 1  # two faults, one line


def test_a_bounded_builder_survives_a_fault_in_message_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Any] = []
    builder = BoundedBuilder(seen.append, MappingBoundary("test"), queue=True)  # type: ignore[arg-type]

    def broken(*args: Any, **kwargs: Any) -> str:
        raise KeyError("renamed")

    monkeypatch.setattr(EventBuilder, "message_start", broken)
    with tolerate_internal_errors():
        message_id = builder.message_start("m1", model="x")
        builder.step_start("s", 0)
    assert message_id == "m1"
    assert [e.type for e in seen] == ["step_start"]
    assert len(_internal_errors(caplog)) == 1
