"""Data types of the native agent loop: messages, tool calls, events, context."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

__all__ = [
    "AgentResult",
    "ContentItem",
    "Event",
    "ExecutionContext",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "ReasoningPart",
    "StreamPart",
    "TextPart",
    "ToolCall",
    "ToolCallPart",
    "ToolResult",
    "Usage",
    "new_id",
]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass
class ToolCall:
    tool_call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolResult:
    tool_call_id: str
    name: str
    status: Literal["success", "error"]
    content: list[Any]

    @property
    def text(self) -> str:
        return "\n".join(str(c) for c in self.content)


ContentItem = Message | ToolCall | ToolResult


@dataclass
class Event:
    """One entry of the execution history: who said what."""

    execution_id: str
    author: str
    content: list[ContentItem]
    id: str = field(default_factory=lambda: new_id("evt"))


@dataclass
class ExecutionContext:
    """The whole history of one execution, plus the step counter and final result."""

    execution_id: str = field(default_factory=lambda: new_id("exec"))
    events: list[Event] = field(default_factory=list)
    current_step: int = 0
    final_result: str | BaseModel | None = None
    state: dict[str, Any] = field(default_factory=dict)

    def add_event(self, event: Event) -> None:
        self.events.append(event)

    def increment_step(self) -> None:
        self.current_step += 1


@dataclass
class AgentResult:
    """What ``Agent.run`` returns: the output and the context it came from."""

    output: str | BaseModel | None
    context: ExecutionContext
    stop_reason: Literal["final", "max_steps"] = "final"


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class LlmRequest:
    """What the agent chooses to send the model (a view of the context, not the context)."""

    instructions: list[str]
    contents: list[ContentItem]
    tools: list[Any] = field(default_factory=list)
    tool_choice: Literal["auto", "none"] | None = None
    output_schema: dict[str, Any] | None = None


@dataclass
class LlmResponse:
    content: list[Message | ToolCall]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str | None = None
    reasoning: str | None = None
    response_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(c.content for c in self.content if isinstance(c, Message))

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for c in self.content if isinstance(c, ToolCall)]


@dataclass
class TextPart:
    delta: str


@dataclass
class ReasoningPart:
    delta: str


@dataclass
class ToolCallPart:
    """A piece of a streamed tool call; ``id``/``name`` are set on its first piece."""

    index: int
    args_delta: str = ""
    id: str | None = None
    name: str | None = None


StreamPart = TextPart | ReasoningPart | ToolCallPart | LlmResponse
"""What ``LlmClient.stream`` yields; the final item is always the full ``LlmResponse``."""
