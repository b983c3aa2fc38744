"""The door: a foreign runner's events read once, as typed values, before any handler.

The span state machine (:mod:`runnertrace.tracing.state`) is duck-typed: any object
with a known ``type`` and the right fields is traced. Our own events are pydantic
models, validated where they were made, so they pass the door as they are (one type
check). A foreign event may carry anything: an int where a text belongs, ``"12"``
for a count, ``None`` for a delta, a C-style ``0`` for "no error", Agent Kernel's
spellings of some fields. :data:`READERS` reads each kind into a ``Foreign*`` record
whose fields have the types the handlers expect, by the rules below; each handler
takes ``ev.X | ForeignX`` (the ``*In`` aliases), so what it reads is typed either way.

The rules, one per kind of field:

* ids (``message_id``, ``tool_call_id``) and names (a step's, a tool's) become texts,
  so ``3`` and ``"3"`` pair; a missing required field raises (``AttributeError``),
  which the state machine counts as an anomaly of that event (see ``RunTracer._salvage``);
* optional labels (model, provider, agent, finish reason...) become texts, or
  ``None`` when falsy;
* counts (tokens, a step's index) become numbers when they are numeric texts, and
  stay texts otherwise (written as the attribute, never summed);
* timestamps that are not positive integers read as absent;
* errors become an :class:`~runnertrace.core.events.EventError` or ``None``;
* content (messages, instructions, definitions, a tool's result) passes as given:
  the writer gate makes any value an attribute. Content read only under content
  capture is read only then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from runnertrace.core import events as ev
from runnertrace.core.events import EventError

__all__ = [
    "OWN_EVENTS",
    "READERS",
    "MessageEndIn",
    "MessageStartIn",
    "ReasoningDeltaIn",
    "ReasoningEndIn",
    "ReasoningStartIn",
    "StepEndIn",
    "StepStartIn",
    "TextDeltaIn",
    "ToolCallArgsIn",
    "ToolCallEndIn",
    "ToolCallResultIn",
    "ToolCallStartIn",
    "identifier",
]

Number: TypeAlias = int | float | str
"""A count as read: a number, or the text a foreign runner sent when it is none."""

StepKey: TypeAlias = tuple[str, Number | None, str | None]


# -- what a foreign event is read as ----------------------------------------------------------
@dataclass(slots=True)
class ForeignStepStart:
    step_name: str
    step_index: Number | None
    agent_name: str | None
    handoff_from: str | None
    branch: str | None
    parent_step: StepKey | None


@dataclass(slots=True)
class ForeignStepEnd:
    step_name: str
    step_index: Number | None
    code: str | None  # content capture only
    branch: str | None


@dataclass(slots=True)
class ForeignMessageStart:
    message_id: str
    model: str | None
    provider: str | None
    request_parameters: Mapping[Any, Any] | None
    tool_definitions: Any
    input_messages: Any  # content capture only
    system_instructions: Any  # content capture only
    branch: str | None


@dataclass(slots=True)
class ForeignDelta:
    """A text or reasoning delta."""

    message_id: str
    delta: str


@dataclass(slots=True)
class ForeignMessageEnd:
    message_id: str
    finish_reason: str | None
    input_tokens: Number | None
    output_tokens: Number | None
    cache_read_input_tokens: Number | None
    reasoning_output_tokens: Number | None
    response_model: str | None
    response_id: str | None
    error: EventError | None


@dataclass(slots=True)
class ForeignReasoningStart:
    message_id: str
    parent_message_id: str | None


@dataclass(slots=True)
class ForeignMessageRef:
    """An event that only names its message (``reasoning_end``)."""

    message_id: str


@dataclass(slots=True)
class ForeignToolCallStart:
    tool_call_id: str
    tool_name: str
    parent_message_id: str | None


@dataclass(slots=True)
class ForeignToolCallArgs:
    tool_call_id: str
    delta: str  # content capture only ("" without)


@dataclass(slots=True)
class ForeignToolCallRef:
    """An event that only names its call (``tool_call_end``)."""

    tool_call_id: str


@dataclass(slots=True)
class ForeignToolCallResult:
    tool_call_id: str
    content: Any
    is_error: bool
    error: EventError | None  # set whenever is_error is
    started_at: int | None
    ended_at: int | None


# What each handler reads: one of our events, or a foreign one read at the door.
StepStartIn: TypeAlias = ev.StepStart | ForeignStepStart
StepEndIn: TypeAlias = ev.StepEnd | ForeignStepEnd
MessageStartIn: TypeAlias = ev.MessageStart | ForeignMessageStart
TextDeltaIn: TypeAlias = ev.TextDelta | ForeignDelta
MessageEndIn: TypeAlias = ev.MessageEnd | ForeignMessageEnd
ReasoningStartIn: TypeAlias = ev.ReasoningStart | ForeignReasoningStart
ReasoningDeltaIn: TypeAlias = ev.ReasoningDelta | ForeignDelta
ReasoningEndIn: TypeAlias = ev.ReasoningEnd | ForeignMessageRef
ToolCallStartIn: TypeAlias = ev.ToolCallStart | ForeignToolCallStart
ToolCallArgsIn: TypeAlias = ev.ToolCallArgs | ForeignToolCallArgs
ToolCallEndIn: TypeAlias = ev.ToolCallEnd | ForeignToolCallRef
ToolCallResultIn: TypeAlias = ev.ToolCallResult | ForeignToolCallResult


# -- the readers -----------------------------------------------------------------------------
def _step_start(event: Any, capture: bool) -> ForeignStepStart:
    return ForeignStepStart(
        step_name=_text(_field(event, "step_name", "name")),
        step_index=_count(getattr(event, "step_index", None)),
        agent_name=_label(getattr(event, "agent_name", None)),
        handoff_from=_label(getattr(event, "handoff_from", None)),
        branch=_key(getattr(event, "branch", None)),
        parent_step=_step_key(getattr(event, "parent_step", None)),
    )


def _step_end(event: Any, capture: bool) -> ForeignStepEnd:
    code = getattr(event, "code", None)
    return ForeignStepEnd(
        step_name=_text(_field(event, "step_name", "name")),
        step_index=_count(getattr(event, "step_index", None)),
        code=_text(code) if code and capture else None,
        branch=_key(getattr(event, "branch", None)),
    )


def _message_start(event: Any, capture: bool) -> ForeignMessageStart:
    parameters = getattr(event, "request_parameters", None)
    return ForeignMessageStart(
        message_id=_text(event.message_id),
        model=_label(getattr(event, "model", None)),
        provider=_label(getattr(event, "provider", None)),
        request_parameters=dict(parameters.items()) if parameters else None,
        tool_definitions=getattr(event, "tool_definitions", None) or None,
        input_messages=getattr(event, "input_messages", None) if capture else None,
        system_instructions=getattr(event, "system_instructions", None) if capture else None,
        branch=_key(getattr(event, "branch", None)),
    )


def _delta(event: Any, capture: bool) -> Any:
    # A stream's most frequent event: the rules of _text, _field and _chunk inline, and
    # one whose two fields are texts already is read as it is (the handler reads no other).
    mid = event.message_id
    delta = getattr(event, "delta", _MISSING)
    if type(delta) is str and type(mid) is str:
        return event
    if delta is _MISSING:
        delta = event.content
    return ForeignDelta(
        mid if type(mid) is str else str(mid),
        delta if type(delta) is str else "" if delta is None else str(delta),
    )


def _message_end(event: Any, capture: bool) -> ForeignMessageEnd:
    return ForeignMessageEnd(
        message_id=_text(event.message_id),
        finish_reason=_label(getattr(event, "finish_reason", None)),
        input_tokens=_count(getattr(event, "input_tokens", None)),
        output_tokens=_count(getattr(event, "output_tokens", None)),
        cache_read_input_tokens=_count(getattr(event, "cache_read_input_tokens", None)),
        reasoning_output_tokens=_count(getattr(event, "reasoning_output_tokens", None)),
        response_model=_label(getattr(event, "response_model", None)),
        response_id=_label(getattr(event, "response_id", None)),
        error=_event_error(getattr(event, "error", None)),
    )


def _reasoning_start(event: Any, capture: bool) -> ForeignReasoningStart:
    return ForeignReasoningStart(
        message_id=_text(event.message_id),
        parent_message_id=_key(getattr(event, "parent_message_id", None)),
    )


def _message_ref(event: Any, capture: bool) -> ForeignMessageRef:
    return ForeignMessageRef(message_id=_text(event.message_id))


def _tool_call_start(event: Any, capture: bool) -> ForeignToolCallStart:
    return ForeignToolCallStart(
        tool_call_id=_text(event.tool_call_id),
        tool_name=_text(_field(event, "tool_name", "name")),
        parent_message_id=_key(getattr(event, "parent_message_id", None)),
    )


def _tool_call_args(event: Any, capture: bool) -> ForeignToolCallArgs:
    return ForeignToolCallArgs(
        tool_call_id=_text(event.tool_call_id),
        delta=_chunk(_field(event, "delta", "content")) if capture else "",
    )


def _tool_call_ref(event: Any, capture: bool) -> ForeignToolCallRef:
    return ForeignToolCallRef(tool_call_id=_text(event.tool_call_id))


def _tool_call_result(event: Any, capture: bool) -> ForeignToolCallResult:
    cid = _text(event.tool_call_id)
    # The result is content: required under capture, where it is written.
    content = event.content if capture else getattr(event, "content", "")
    error = _event_error(getattr(event, "error", None))
    is_error = error is not None or bool(getattr(event, "is_error", False))
    if error is None and is_error:
        error = EventError(type="_OTHER", message=_text(getattr(event, "content", "")))
    return ForeignToolCallResult(
        tool_call_id=cid,
        content=content,
        is_error=is_error,
        error=error,
        started_at=_time(getattr(event, "started_at", None)),
        ended_at=_time(getattr(event, "ended_at", None)),
    )


READERS: dict[str, Callable[[Any, bool], Any]] = {
    "step_start": _step_start,
    "step_end": _step_end,
    "message_start": _message_start,
    "text_delta": _delta,
    "message_end": _message_end,
    "reasoning_start": _reasoning_start,
    "reasoning_delta": _delta,
    "reasoning_end": _message_ref,
    "tool_call_start": _tool_call_start,
    "tool_call_args": _tool_call_args,
    "tool_call_end": _tool_call_ref,
    "tool_call_result": _tool_call_result,
}
"""Event type -> its reader: ``(foreign event, content capture on) -> typed event``."""

OWN_EVENTS: frozenset[type] = frozenset(
    {
        ev.StepStart,
        ev.StepEnd,
        ev.MessageStart,
        ev.TextDelta,
        ev.MessageEnd,
        ev.ReasoningStart,
        ev.ReasoningDelta,
        ev.ReasoningEnd,
        ev.ToolCallStart,
        ev.ToolCallArgs,
        ev.ToolCallEnd,
        ev.ToolCallResult,
    }
)
"""Our event classes: validated where they were made, they pass the door as they are."""


# -- the rules ----------------------------------------------------------------------------
def identifier(value: Any) -> str:
    """An id or a name as the key it is kept under (``3`` and ``"3"`` are one key)."""
    return value if type(value) is str else str(value)


_text = identifier


def _field(event: Any, name: str, alias: str) -> Any:
    """``event.<name>``, else ``event.<alias>``: the spelling some foreign runners use.

    Agent Kernel's events, for one, carry ``TextDelta.content``, ``ToolCallStart.name``
    and ``StepStart.name``; the AG-UI-style names are ours. A missing field raises.
    """
    value = getattr(event, name, _MISSING)
    return getattr(event, alias) if value is _MISSING else value


_MISSING = object()


def _key(value: Any) -> str | None:
    """An optional id (a branch, a parent message): a text, or ``None``."""
    return None if value is None else _text(value)


def _label(value: Any) -> str | None:
    """An optional label (a model, an agent): a text, or ``None`` when falsy."""
    return _text(value) if value else None


def _chunk(value: Any) -> str:
    """A delta: a text (``None`` reads as no text)."""
    return value if type(value) is str else "" if value is None else str(value)


def _count(value: Any) -> Number | None:
    """A count: a number; a numeric text (``"12"``) as its number; else its text."""
    if value is None:
        return None
    kind = type(value)
    if kind is int or kind is float:
        return value  # type: ignore[no-any-return]
    text = str(value)
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


def _step_key(value: Any) -> StepKey | None:
    """``(step_name, step_index, branch)`` of an open step, read like those fields."""
    if not value:
        return None
    name, index, branch = value
    return (_text(name), _count(index), _key(branch))


def _time(value: Any) -> int | None:
    """A Unix-ns timestamp, if the field holds one."""
    return value if type(value) is int and value > 0 else None


def _error_name(error: Any) -> str:
    name = getattr(error, "type", None)
    return name if isinstance(name, str) and name else "_OTHER"


def _event_error(error: Any) -> EventError | None:
    """An event's ``error`` field as an :class:`EventError`; ``None`` when it names none.

    A foreign runner may send an exception, an object with ``type``/``message``, or a
    C-style ``0`` for "no error" (any falsy value reads as none).
    """
    if error is None or isinstance(error, EventError):
        return error
    if isinstance(error, BaseException):
        return EventError.from_exception(error)
    if not error:
        return None
    trace = getattr(error, "stacktrace", None)
    return EventError(
        type=_error_name(error),
        message=_text(getattr(error, "message", error)),
        stacktrace=trace if isinstance(trace, str) else None,
    )
