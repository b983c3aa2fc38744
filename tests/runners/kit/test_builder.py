"""The core event builder: the pairing rules every runner relies on, in one place."""

from __future__ import annotations

from typing import Any

from runnertrace.core import events as ev
from runnertrace.core.observer import observing, stream_observer
from runnertrace.runners._kit.builder import EventBuilder


def shape(events: list[Any]) -> list[tuple[str, ...]]:
    out = []
    for e in events:
        key = getattr(e, "tool_call_id", None) or getattr(e, "message_id", None) or ""
        extra = getattr(e, "delta", None)
        out.append((e.type, key, extra) if extra is not None else (e.type, key))
    return out


def test_reasoning_ends_when_text_or_a_tool_call_starts() -> None:
    b = EventBuilder(queue=True)
    m = b.message_start("m")
    b.reasoning("think", m)
    b.text("hi", m)
    b.reasoning("more", m)
    b.tool_call('{"a"', tool_call_id="c", name="t", index=0, message_id=m)
    b.message_end(m)
    types = [e.type for e in b.drain()]
    assert types == [
        "message_start",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "text_delta",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "message_end",
    ]


def test_arguments_are_held_until_the_call_id_is_known() -> None:
    b = EventBuilder(queue=True)
    m = b.message_start("m")
    b.tool_call('{"x":', index=0, message_id=m)  # no id, no name yet
    b.tool_call(" 1}", index=0, message_id=m)
    assert [e.type for e in b.drain()] == ["message_start"]
    b.tool_call("", tool_call_id="c1", name="calc", index=0, message_id=m)
    assert shape(list(b.drain())) == [
        ("tool_call_start", "c1"),
        ("tool_call_args", "c1", '{"x":'),
        ("tool_call_args", "c1", " 1}"),
    ]


def test_a_result_for_a_call_never_announced_gets_a_start_and_an_end() -> None:
    b = EventBuilder(queue=True)
    b.tool_result("c9", "42", name="lookup")
    events = list(b.drain())
    assert shape(events) == [
        ("tool_call_start", "c9"),
        ("tool_call_end", "c9"),
        ("tool_call_result", "c9"),
    ]
    assert events[0].tool_name == "lookup"


def test_an_announced_call_gets_no_second_start() -> None:
    b = EventBuilder(queue=True)
    m = b.message_start("m")
    b.tool_call("{}", tool_call_id="c1", name="t", message_id=m)
    b.message_end(m)
    b.tool_result("c1", "ok")
    assert [e.type for e in b.drain()].count("tool_call_start") == 1


def test_a_failed_tool_result_carries_the_exception() -> None:
    b = EventBuilder(queue=True)
    try:
        raise KeyError("city")
    except KeyError as exc:
        b.tool_result("c1", "KeyError: 'city'", name="t", error=exc)
    result = list(b.drain())[-1]
    assert result.is_error and result.error is not None
    assert result.error.type == "KeyError"
    assert "raise KeyError" in (result.error.stacktrace or "")


def test_fail_closes_open_messages_with_the_error() -> None:
    b = EventBuilder(queue=True)
    m = b.message_start("m")
    b.reasoning("hmm", m)
    b.tool_call("{", tool_call_id="c", name="t", message_id=m)
    b.fail(TimeoutError("model timed out"))
    events = list(b.drain())
    assert [e.type for e in events] == [
        "message_start",
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "message_end",
    ]
    end = events[-1]
    assert isinstance(end, ev.MessageEnd) and end.finish_reason == "error"
    assert end.error is not None and end.error.type == "TimeoutError"
    b.fail(TimeoutError("again"))  # nothing left open: nothing more
    assert list(b.drain()) == []


def test_each_event_reaches_the_observer_when_made_and_is_queued_once() -> None:
    seen: list[Any] = []
    with observing(seen.append):
        b = EventBuilder(stream_observer(), queue=True)
    m = b.message_start("m")
    b.text("a", m)
    assert [e.type for e in seen] == ["message_start", "text_delta"]
    drained = list(b.drain())
    assert all(x is y for x, y in zip(drained, seen, strict=True))
    assert list(b.drain()) == []


def test_text_without_a_started_message_starts_one() -> None:
    b = EventBuilder(queue=True)
    b.text("orphan")
    b.message_end()
    assert [e.type for e in b.drain()] == ["message_start", "text_delta", "message_end"]


def test_a_call_no_message_asked_for_starts_whole_before_it_runs_and_only_once() -> None:
    b = EventBuilder(queue=True)
    b.step_start("coder", 1)
    b.tool_start("c1", "python_interpreter", "print(1)")
    b.tool_start("c1", "python_interpreter", "print(1)")  # known: nothing more
    b.tool_result("c1", "1")
    b.step_end(code="print(1)")
    events = list(b.drain())
    assert shape(events) == [
        ("step_start", ""),
        ("tool_call_start", "c1"),
        ("tool_call_args", "c1", "print(1)"),
        ("tool_call_end", "c1"),
        ("tool_call_result", "c1"),
        ("step_end", ""),
    ]
    assert isinstance(events[1], ev.ToolCallStart) and events[1].parent_message_id is None
    assert isinstance(events[-1], ev.StepEnd) and events[-1].code == "print(1)"
