"""Stream events: every type JSON round-trips to its own class; StreamChunk.delta rules."""

from __future__ import annotations

import json
import typing
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from runnertrace.core import Agent, Runner, Runtime, Session
from runnertrace.core import events as ev
from runnertrace.core.models import AgentReply, AgentReplyText, AgentRequestText, StreamChunk
from runnertrace.tracing.config import Settings


def union_members() -> list[type[BaseModel]]:
    """The classes of the StreamEvent union, read from the annotation itself."""
    union = typing.get_args(ev.StreamEvent)[0]
    return list(typing.get_args(union))


ALL_EVENTS = union_members()


def test_the_union_covers_every_public_event_class() -> None:
    public = {
        getattr(ev, name)
        for name in ev.__all__
        if isinstance(getattr(ev, name), type)
        and issubclass(getattr(ev, name), BaseModel)
        and getattr(ev, name) is not ev.EventError  # a payload of events, not an event
    }
    assert set(ALL_EVENTS) == public
    assert len(ALL_EVENTS) == 12
    assert {cls.model_fields["type"].default for cls in ALL_EVENTS} == ev.EVENT_TYPES


# JSON values as the request fields carry them (no floats: NaN never equals itself).
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(st.text(), JSON_VALUES, max_size=4)
# Fields typed with pydantic's recursive JsonValue, which hypothesis cannot resolve itself.
JSON_FIELDS = {
    "input_messages": st.none() | st.lists(JSON_OBJECTS, max_size=3),
    "tool_definitions": st.none() | st.lists(JSON_OBJECTS, max_size=3),
    "request_parameters": st.none() | JSON_OBJECTS,
}


def event_strategy(cls: type[BaseModel]) -> st.SearchStrategy[BaseModel]:
    """Fill every field (optional ones too), so no field escapes the round trip."""
    fields = {
        name: JSON_FIELDS[name] if name in JSON_FIELDS else st.from_type(info.annotation)  # type: ignore[arg-type]
        for name, info in cls.model_fields.items()
        if name != "type"
    }
    return st.builds(cls, **fields)


ANY_EVENT = st.one_of(*(event_strategy(cls) for cls in ALL_EVENTS))


@pytest.mark.parametrize("cls", ALL_EVENTS, ids=lambda c: c.__name__)
def test_round_trip_each_type(cls: type[BaseModel]) -> None:
    @settings(max_examples=25, deadline=None)
    @given(event_strategy(cls))
    def check(event: BaseModel) -> None:
        for wire in (event.model_dump_json(), json.dumps(event.model_dump(mode="json"))):
            parsed = ev.parse_event(wire)
            assert type(parsed) is cls
            assert parsed == event
        parsed = ev.parse_event(json.loads(event.model_dump_json()))
        assert type(parsed) is cls
        assert parsed == event

    check()


@settings(max_examples=50, deadline=None)
@given(ANY_EVENT)
def test_round_trip_inside_a_stream_chunk(event: BaseModel) -> None:
    chunk = StreamChunk(event=event, session_id="s")  # type: ignore[arg-type]
    back = StreamChunk.model_validate_json(chunk.model_dump_json())
    assert type(back.event) is type(event)
    assert back.event == event


def test_unknown_type_and_extra_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        ev.parse_event({"type": "text_deltas", "message_id": "m", "delta": "x"})
    with pytest.raises(ValidationError):
        ev.parse_event({"type": "text_delta", "message_id": "m", "delta": "x", "extra": 1})


def test_events_are_frozen() -> None:
    event = ev.TextDelta(message_id="m", delta="x")
    with pytest.raises(ValidationError):
        event.delta = "y"  # type: ignore[misc]


# -- StreamChunk.delta via Runtime.stream ------------------------------------------------
ONE_OF_EACH: list[Any] = [
    ev.StepStart(step_name="s", step_index=0),
    ev.MessageStart(message_id="m"),
    ev.ReasoningStart(message_id="r"),
    ev.ReasoningDelta(message_id="r", delta="thinking"),
    ev.ReasoningEnd(message_id="r"),
    ev.TextDelta(message_id="m", delta="hello "),
    ev.TextDelta(message_id="m", delta="world"),
    ev.ToolCallStart(tool_call_id="c", tool_name="t", parent_message_id="m"),
    ev.ToolCallArgs(tool_call_id="c", delta='{"a": 1}'),
    ev.ToolCallEnd(tool_call_id="c"),
    ev.MessageEnd(message_id="m", input_tokens=1, output_tokens=2),
    ev.ToolCallResult(tool_call_id="c", content="ok"),
    ev.StepEnd(step_name="s", step_index=0),
]


class ReplayRunner(Runner):
    """Yields a fixed list of events; the smallest real runner."""

    framework = "replay"

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    async def run(self, agent: Agent, session: Session, requests: list[Any]) -> AgentReply:
        return AgentReplyText(text="done")

    async def stream(
        self, agent: Agent, session: Session, requests: list[Any]
    ) -> AsyncIterator[ev.StreamEvent]:
        for event in self.events:
            yield event


async def test_stream_chunk_delta_only_for_text_delta() -> None:
    assert {e.type for e in ONE_OF_EACH} == ev.EVENT_TYPES
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    agent = runtime.agents().register(Agent("replay", ReplayRunner(ONE_OF_EACH)))
    chunks = [c async for c in runtime.stream(agent, Session("s"), [AgentRequestText(prompt="x")])]
    assert chunks[-1].done and chunks[-1].event is None and chunks[-1].delta is None
    body = chunks[:-1]
    assert [c.event for c in body] == ONE_OF_EACH
    for chunk in body:
        assert chunk.session_id == "s"
        assert chunk.done is False
        if isinstance(chunk.event, ev.TextDelta):
            assert chunk.delta == chunk.event.delta
        else:
            assert chunk.delta is None, chunk.event
    assert "".join(c.delta for c in chunks if c.delta) == "hello world"
