"""The stream-event vocabulary every runner speaks.

Runners translate their framework's native progress into these events; the
tracing layer turns them into spans without knowing any framework. Each event is
a pydantic model discriminated on its ``type`` literal and holds JSON-only
fields, so a stream can be serialised, shipped and parsed back into the very
same classes (see :data:`STREAM_EVENT_ADAPTER`).

Pairing: ``message_id`` pairs a message or reasoning start with its end,
``tool_call_id`` pairs a tool call's start, argument deltas, end and result, and
``step_name`` (plus the optional ``step_index``) pairs a step start with its end.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

__all__ = [
    "EVENT_TYPES",
    "STREAM_EVENT_ADAPTER",
    "EventError",
    "MessageEnd",
    "MessageStart",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "StepEnd",
    "StepStart",
    "StreamEvent",
    "TextDelta",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCallResult",
    "ToolCallStart",
    "parse_event",
]


class _Event(BaseModel):
    # Frozen: one event object is handed to hooks, tracers and consumers in turn;
    # none of them may change what the others see.
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventError(BaseModel):
    """What failed, where an event reports a failure: JSON-only, so it streams.

    ``type`` is the exception's class name (low cardinality: it becomes
    ``error.type``); ``stacktrace`` is the formatted traceback when there is one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    message: str = ""
    stacktrace: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> EventError:
        import traceback

        trace = (
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            if exc.__traceback__ is not None
            else None
        )
        return cls(type=type(exc).__qualname__, message=str(exc), stacktrace=trace)


class MessageStart(_Event):
    """An assistant (model) message begins: sent when the request goes out.

    The optional request fields say what the model was sent; a runner fills
    what its framework exposes. ``input_messages`` follow the GenAI semconv
    message shape (``[{"role", "parts": [...]}]``), ``tool_definitions`` are
    ``[{"type": "function", "name", "description", "parameters"}]``, and
    ``request_parameters`` use the semconv names without the prefix
    (``temperature``, ``max_tokens``, ``top_p``, ``seed``...). Messages and
    instructions are content, recorded only under content capture.
    """

    type: Literal["message_start"] = "message_start"
    message_id: str
    role: Literal["assistant", "user", "system", "tool"] = "assistant"
    model: str | None = None
    provider: str | None = None
    input_messages: list[dict[str, JsonValue]] | None = None
    system_instructions: str | None = None
    request_parameters: dict[str, JsonValue] | None = None
    tool_definitions: list[dict[str, JsonValue]] | None = None
    branch: str | None = None
    """The branch whose innermost open step the call belongs to (see ``StepStart.branch``)."""


class TextDelta(_Event):
    """A chunk of the text of the message ``message_id``."""

    type: Literal["text_delta"] = "text_delta"
    message_id: str
    delta: str


class MessageEnd(_Event):
    """The message ``message_id`` is complete; usage is reported here when known."""

    type: Literal["message_end"] = "message_end"
    message_id: str
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    response_model: str | None = None
    response_id: str | None = None
    error: EventError | None = None
    """Set when the model call failed: the message span ends with this error."""


class ReasoningStart(_Event):
    """A block of model reasoning begins (``message_id`` identifies the block)."""

    type: Literal["reasoning_start"] = "reasoning_start"
    message_id: str
    parent_message_id: str | None = None
    """The message the reasoning is part of (default: the newest open one)."""


class ReasoningDelta(_Event):
    type: Literal["reasoning_delta"] = "reasoning_delta"
    message_id: str
    delta: str


class ReasoningEnd(_Event):
    type: Literal["reasoning_end"] = "reasoning_end"
    message_id: str


class ToolCallStart(_Event):
    """The model asked for a tool; ``parent_message_id`` names the asking message."""

    type: Literal["tool_call_start"] = "tool_call_start"
    tool_call_id: str
    tool_name: str
    parent_message_id: str | None = None


class ToolCallArgs(_Event):
    """A chunk of the JSON arguments of a tool call."""

    type: Literal["tool_call_args"] = "tool_call_args"
    tool_call_id: str
    delta: str


class ToolCallEnd(_Event):
    """The tool call's arguments are complete; the tool runs next."""

    type: Literal["tool_call_end"] = "tool_call_end"
    tool_call_id: str


class ToolCallResult(_Event):
    """The tool finished; ``content`` is its (stringified) result.

    ``is_error`` flags a failed tool, whether the framework raised or fed the
    failure back to the model; ``error`` says what failed, when known.
    ``started_at`` and ``ended_at`` (Unix time in ns) say when the tool ran, for a
    runner that reports the result after the fact (a stream read behind the run it
    relays), so the tool's span still times the tool.
    """

    type: Literal["tool_call_result"] = "tool_call_result"
    tool_call_id: str
    content: str
    message_id: str | None = None
    is_error: bool = False
    error: EventError | None = None
    started_at: int | None = None
    ended_at: int | None = None


class StepStart(_Event):
    """A step begins. ``agent_name`` names the agent running it, when it is not the
    run's agent (after a handoff); ``handoff_from`` names the agent that handed off.

    Several agents of one run can work at once (parallel branches). ``branch`` keys
    one agent's line of work: a step, and the model calls reported with the same
    ``branch``, nest in that branch's innermost open step, so overlapping branches
    keep their own children (``None``: the run's own line); a branch's first step
    nests under the run span, or under ``parent_step`` (``(step_name, step_index,
    branch)`` of a step still open) when the branch forks inside that step (LangGraph
    ``Send`` inside a subgraph's node). Branches are concurrency inside one agent run only: an
    agent that another agent starts (as a tool, a delegate) is a nested run of its
    own (:func:`runnertrace.core.observer.open_nested_run`), not a branch.
    """

    type: Literal["step_start"] = "step_start"
    step_name: str
    step_index: int | None = None
    agent_name: str | None = None
    handoff_from: str | None = None
    branch: str | None = None
    parent_step: tuple[str, int | None, str | None] | None = None


class StepEnd(_Event):
    """A step ends. ``code`` is the code the step ran, for frameworks whose agents act
    by writing code (a smolagents ``CodeAgent``); it is content, recorded only under
    content capture."""

    type: Literal["step_end"] = "step_end"
    step_name: str
    step_index: int | None = None
    code: str | None = None
    branch: str | None = None


StreamEvent = Annotated[
    MessageStart
    | TextDelta
    | MessageEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCallResult
    | StepStart
    | StepEnd,
    Field(discriminator="type"),
]

STREAM_EVENT_ADAPTER: TypeAdapter[StreamEvent] = TypeAdapter(StreamEvent)

EVENT_TYPES: frozenset[str] = frozenset(
    cls.model_fields["type"].default
    for cls in (
        MessageStart,
        TextDelta,
        MessageEnd,
        ReasoningStart,
        ReasoningDelta,
        ReasoningEnd,
        ToolCallStart,
        ToolCallArgs,
        ToolCallEnd,
        ToolCallResult,
        StepStart,
        StepEnd,
    )
)


def parse_event(data: str | bytes | dict[str, Any]) -> StreamEvent:
    """Parse JSON text or a dict back into the event class its ``type`` names."""
    if isinstance(data, dict):
        return STREAM_EVENT_ADAPTER.validate_python(data)
    return STREAM_EVENT_ADAPTER.validate_json(data)
