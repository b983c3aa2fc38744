"""What the span state machine keeps for each open span, one record type per span kind.

A record is an open span plus what its end needs. One is made per span on the hot
path, so only ``start_ns`` (and the span, once open) is written at creation; every
other field reads as its class default until set. The base, :class:`SpanRecord`,
holds what writing or closing a span of any kind reads; each kind adds its own.

A tool call's life is the one with states (:class:`ToolState`), and
:data:`TOOL_MOVES` is where all of it is written: which happening takes a call from
which state to which. :class:`ToolRecord.move` is the only writer of its state.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Span

from runnertrace.core.events import EventError
from runnertrace.tracing import attributes as A

__all__ = [
    "TOOL_MOVES",
    "Branch",
    "MessageRecord",
    "ReasoningRecord",
    "RunRecord",
    "SpanRecord",
    "StepRecord",
    "StreamRecord",
    "ToolRecord",
    "ToolState",
]


class SpanRecord:
    """An open span of one run, and what writing or closing it reads."""

    kind: ClassVar[str]  # its template in the writer gate, and its vendor mirrors
    span: Span = trace_api.INVALID_SPAN  # until it opens (a tool call announced, not yet run)
    ctx: Context | None = None  # the context its children start in (built once, when asked)
    agent: str | None = None  # a branch span's agent (its children inherit it)
    branch: str | None = None  # the branch a step, message or tool call belongs to
    sanitized: tuple[str, ...] = ()  # keys already named in runnertrace.sanitized
    failure: EventError | None = None  # what it ends with, noted before its end (a step's)

    def __init__(self, start_ns: int) -> None:
        self.start_ns = start_ns

    @property
    def outlived(self) -> bool:
        """Whether it outlived the step it belongs to, and so ends normally at the run's
        end (only a tool call can: see :class:`ToolState`)."""
        return False

    def end_attributes(self, aggregated: bool) -> dict[str, Any]:
        """What its span says as it ends, whoever ends it (its end event or a close)."""
        return {}


class RunRecord(SpanRecord):
    kind = "run"
    ctx: Context  # set as it opens: the caller's context with the run span current

    def context(self) -> Context:
        """The run's context, to make it current around the base runner."""
        return self.ctx


class StepRecord(SpanRecord):
    """A step: ``failure`` is set when a model call in it failed (the step ends ERROR)."""

    kind = "step"


class StreamRecord(SpanRecord):
    """A span fed by deltas (a message's text, a reasoning block): their aggregates."""

    deltas = 0  # deltas seen
    chars = 0  # characters of the aggregated deltas
    first_ns = 0  # time of the first delta (of a message: or of its first tool call)
    parts: list[str] | None = None  # captured text (content capture only)
    owner: StepRecord | None = None  # the step it started in

    def end_attributes(self, aggregated: bool) -> dict[str, Any]:
        """The aggregated-delta attributes (``aggregated``: the deltas are not written
        as span events, so their characters are counted here)."""
        attrs: dict[str, Any] = {A.DELTA_COUNT: self.deltas}
        if self.deltas and aggregated:
            attrs[A.DELTA_CHARS] = self.chars
        if self.first_ns:
            attrs[A.TTFC] = (self.first_ns - self.start_ns) / 1e9
        return attrs


class MessageRecord(StreamRecord):
    """A model call (``chat``)."""

    kind = "message"
    model: str | None = None  # the model it asked for (what it is priced by, else)
    calls: list[dict[str, Any]] | None = None  # its captured tool calls (content capture)


class ReasoningRecord(StreamRecord):
    kind = "reasoning"
    message: MessageRecord | None = None  # the message the block is part of


class ToolState(enum.Enum):
    """Where a tool call is in its life. Its span opens when the tool runs (or, when
    no scope said so, as its result arrives or the run ends, backdated to when it was
    announced), and it may outlive the step that asked for it."""

    ANNOUNCED = "announced"  # the model asked for it; no span yet: its start fields wait
    DEFERRED = "deferred"  # announced, and its step ended before it ran (LangGraph)
    RUNNING = "running"  # its span is open, in its step
    AWAITING = "awaiting"  # running, and its step ended before its result arrived
    ENDED = "ended"


_S = ToolState
TOOL_MOVES: dict[tuple[ToolState, str], ToolState] = {
    # The framework starts the tool, in its tool scope: the span opens now, in the
    # innermost open step (the one running it).
    (_S.ANNOUNCED, "runs"): _S.RUNNING,
    (_S.DEFERRED, "runs"): _S.RUNNING,
    # It ran where no scope saw it (a foreign stream): its result, or the run's end,
    # opens the span in the step that announced it, and ends it at once.
    (_S.ANNOUNCED, "ran"): _S.RUNNING,
    (_S.DEFERRED, "ran"): _S.AWAITING,
    # The step it belongs to ends first: it ends at its result, or normally at the run's
    # end (some frameworks never report results).
    (_S.ANNOUNCED, "step ended"): _S.DEFERRED,
    (_S.RUNNING, "step ended"): _S.AWAITING,
    # Its result, a salvaged fault or the run's end: the span ends.
    (_S.RUNNING, "ends"): _S.ENDED,
    (_S.AWAITING, "ends"): _S.ENDED,
}
"""A tool call's life: ``(state, happening) -> next state``. A pair not listed is a
bug of ours (``KeyError``), reported like any fault of the state machine."""

_UNOPENED = frozenset({_S.ANNOUNCED, _S.DEFERRED})
_OUTLIVED = frozenset({_S.DEFERRED, _S.AWAITING})


class ToolRecord(SpanRecord):
    """A tool call, from the model's announcement to its result."""

    kind = "tool"
    state = ToolState.ANNOUNCED
    fields: dict[str, Any]  # its span's start fields, gathered until it opens
    name = ""  # the tool's name
    parent_id: str | None = None  # the asking message's id
    owner: StepRecord | None = None  # the step it belongs to (None once that ended)
    origin: StepRecord | None = None  # the step it was announced in
    chunks = 0  # argument chunks seen
    parts: list[str] | None = None  # captured argument chunks (content capture only)

    def move(self, happening: str) -> ToolState:
        """Take the call to its next state (:data:`TOOL_MOVES`)."""
        self.state = state = TOOL_MOVES[self.state, happening]
        return state

    @property
    def opened(self) -> bool:
        """Whether its span is open (it ran, or is running)."""
        return self.state not in _UNOPENED

    @property
    def outlived(self) -> bool:
        return self.state in _OUTLIVED


class Branch:
    """One agent's line of work in a run (``StepStart.branch``): its open steps,
    innermost last, and the span its steps nest under when none is open."""

    __slots__ = ("root", "steps")

    def __init__(self, root: SpanRecord) -> None:
        self.root = root
        self.steps: list[tuple[tuple[str, Any], StepRecord]] = []
