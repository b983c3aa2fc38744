"""Requests a caller sends to an agent and replies a runner returns."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runnertrace.core.events import StreamEvent

__all__ = [
    "AgentReply",
    "AgentReplyAny",
    "AgentReplyImage",
    "AgentReplyText",
    "AgentRequest",
    "AgentRequestAny",
    "AgentRequestFile",
    "AgentRequestImage",
    "AgentRequestText",
    "StreamChunk",
    "prompt_of",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentRequestText(_Model):
    type: Literal["text"] = "text"
    prompt: str


class AgentRequestImage(_Model):
    """An image sent to the agent, base64-encoded. Its bytes never reach a span."""

    type: Literal["image"] = "image"
    image_data: str
    mime_type: str = "image/png"
    name: str | None = None


class AgentRequestFile(_Model):
    """A file sent to the agent, base64-encoded. Its bytes never reach a span."""

    type: Literal["file"] = "file"
    file_data: str
    mime_type: str = "application/octet-stream"
    name: str | None = None


class AgentRequestAny(_Model):
    """Structured input for agents that take something other than text."""

    type: Literal["any"] = "any"
    content: Any


AgentRequest = Annotated[
    AgentRequestText | AgentRequestImage | AgentRequestFile | AgentRequestAny,
    Field(discriminator="type"),
]


class AgentReplyText(_Model):
    type: Literal["text"] = "text"
    text: str
    prompt: str = ""

    def __str__(self) -> str:
        return self.text


class AgentReplyImage(_Model):
    type: Literal["image"] = "image"
    text: str
    image_data: str
    prompt: str = ""

    def __str__(self) -> str:
        return self.text


class AgentReplyAny(_Model):
    """A structured reply; ``str()`` is its JSON so text consumers keep working."""

    type: Literal["any"] = "any"
    content: dict[str, Any]
    prompt: str = ""

    def __str__(self) -> str:
        return json.dumps(self.content, ensure_ascii=False, default=str)


AgentReply = Annotated[
    AgentReplyText | AgentReplyImage | AgentReplyAny, Field(discriminator="type")
]


class StreamChunk(_Model):
    """What ``Runtime.stream()`` hands a client for each event.

    ``delta`` is set only for :class:`~runnertrace.core.events.TextDelta`, so a
    plain-text consumer can keep concatenating it.
    """

    delta: str | None = None
    event: StreamEvent | None = None
    done: bool = False
    error: str | None = None
    session_id: str | None = None


def prompt_of(requests: list[Any]) -> str:
    """The text prompt of a request list (text requests joined by newlines)."""
    return "\n".join(r.prompt for r in requests if getattr(r, "type", None) == "text")
