"""Our requests as ADK's user message, and ADK's output as our reply.

A run sends ADK one user message, one part per request in order (an image or file
by reference when it is an ``http(s)`` URL, else as inline bytes). Its reply is the
text of the invocation's final response, parsed as JSON when the agent declares an
``output_schema``; a tool's result reads as the text ADK hands back to the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.events import Event
from google.genai import types

from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.runners._kit.skeleton import is_url, media_bytes, reply_of

__all__ = ["content_text", "final_text", "reply_from", "result_text", "user_content_of"]


# -- requests -> native input ------------------------------------------------------------------


def _blob(data: str, mime_type: str, name: str | None) -> types.Part:
    """An image or file: an http(s) URL stays a reference, anything else is inline bytes."""
    if is_url(data):
        return types.Part(file_data=types.FileData(file_uri=data, mime_type=mime_type))
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        mime_type = header[5:].split(";")[0] or mime_type
    raw = media_bytes(data, mime_type, name)
    return types.Part(inline_data=types.Blob(data=raw, mime_type=mime_type, display_name=name))


_REQUEST_PARTS: dict[str, Callable[[Any], types.Part]] = {
    "text": lambda r: types.Part(text=r.prompt),
    "image": lambda r: _blob(r.image_data, r.mime_type, r.name),
    "file": lambda r: _blob(r.file_data, r.mime_type, r.name),
    "any": lambda r: types.Part(
        text=r.content if isinstance(r.content, str) else json.dumps(r.content, default=str)
    ),
}


def user_content_of(requests: Sequence[AgentRequest]) -> types.Content:
    """Our requests as the ADK user message (one part per request, in order)."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return types.Content(role="user", parts=[_REQUEST_PARTS[r.type](r) for r in requests])


# -- native output -> reply ---------------------------------------------------------------------


def content_text(content: types.Content | None) -> str:
    """The text of a message (its non-thought text parts), ``""`` if none."""
    if content is None:
        return ""
    return "".join(p.text for p in content.parts or () if p.text and not p.thought)


def final_text(event: Event) -> str | None:
    """The text of an invocation's final response, if ``event`` is one."""
    if event.partial or event.content is None or not event.is_final_response():
        return None
    return content_text(event.content) or None


def result_text(result: Any) -> str:
    """A tool's result as text: ADK wraps a non-dict return as ``{"result": value}``."""
    if isinstance(result, Mapping) and set(result) == {"result"}:
        result = result["result"]
    return result if isinstance(result, str) else json.dumps(result, default=str)


def reply_from(native: BaseAgent, output: str | None, prompt: str) -> AgentReply:
    """The run's reply: the final text, as JSON when the agent declares an output schema."""
    value: Any = output
    if isinstance(native, LlmAgent) and native.output_schema is not None and output:
        with suppress(ValueError):  # not JSON after all: the text is the reply
            value = json.loads(output)
    return reply_of(value, prompt)
