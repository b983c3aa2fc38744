"""What an Agent Framework model call is sent, in GenAI semconv shapes.

The chat middleware reads a ``ChatContext`` (the messages, the options the client
merged, the client itself) as the request fields of a message's start: telemetry
detail only, built when someone observes, and through ``MappingBoundary.detail``
(a fault costs the detail, never the message).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_framework import ChatContext, Content, Message

from runnertrace.runners._kit.genai import Message as SemconvMessage
from runnertrace.runners._kit.genai import (
    Part,
    blob_part,
    or_none,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners._kit.genai import message as semconv_message
from runnertrace.runners.maf.convert import result_value


def _modality(content: Content) -> str:
    return (content.media_type or "file").split("/", 1)[0]


# Content type -> its GenAI semconv message part (types not listed are left out).
_PARTS: dict[str, Callable[[Content, dict[str, str]], Part]] = {
    "text": lambda c, names: text_part(c.text or ""),
    "text_reasoning": lambda c, names: reasoning_part(c.text or ""),
    "function_call": lambda c, names: tool_call_part(c.call_id, c.name, c.arguments),
    "function_result": lambda c, names: tool_response_part(
        c.call_id, names.get(c.call_id or ""), result_value(c.result)
    ),
    "uri": lambda c, names: blob_part(_modality(c)),
    "data": lambda c, names: blob_part(_modality(c)),
}


def semconv_messages(messages: Sequence[Message]) -> list[SemconvMessage]:
    """The messages as GenAI semconv messages (tool results named after their calls)."""
    names: dict[str, str] = {}
    converted: list[SemconvMessage] = []
    for msg in messages:
        parts: list[Part] = []
        for content in msg.contents:
            if content.type == "function_call" and content.call_id and content.name:
                names[content.call_id] = content.name
            part = _PARTS.get(content.type)
            if part is not None:
                parts.append(part(content, names))
        converted.append(semconv_message(str(msg.role), parts))
    return converted


def _instructions(options: Mapping[str, Any]) -> str | None:
    instructions = options.get("instructions")
    if isinstance(instructions, str):
        return instructions or None
    if isinstance(instructions, Sequence):
        return "\n".join(str(i) for i in instructions) or None
    return None


def _tool_definition(tool: Any) -> Part:
    parameters = getattr(tool, "parameters", None)
    return tool_definition(
        getattr(tool, "name", None) or type(tool).__name__,
        getattr(tool, "description", None),
        parameters() if callable(parameters) else parameters,
    )


def request_fields(context: ChatContext) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    options: Mapping[str, Any] = context.options or {}
    return {
        "input_messages": or_none(semconv_messages(context.messages)),
        "system_instructions": _instructions(options),
        "request_parameters": request_parameters(options),
        "tool_definitions": or_none(_tool_definition(t) for t in options.get("tools") or ()),
    }


def model_of(context: ChatContext) -> str | None:
    model = (context.options or {}).get("model") or getattr(context.client, "model", None)
    return str(model) if model else None


def provider_of(context: ChatContext) -> str | None:
    provider = getattr(context.client, "otel_provider_name", None)
    return str(provider) if provider and provider != "unknown" else None
