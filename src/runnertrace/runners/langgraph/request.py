"""A model call in GenAI shapes: what it was sent, and what it reported back.

LangChain hands a chat model's callback the messages it sends, its invocation
parameters (with the bound tools) and its tracing metadata (``ls_*``): that is
all a chat span's request fields are made from. The final message's usage and
response metadata make the fields the message ends with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import JsonValue

from runnertrace.runners._kit.genai import (
    Message,
    Part,
    blob_part,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners._kit.genai import message as semconv_message
from runnertrace.runners.langgraph.convert import content_parts


def _parts(message: BaseMessage) -> list[Part]:
    parts = [
        reasoning_part(text) if kind == "reasoning" else text_part(text)
        for kind, text in content_parts(message)
    ]
    if not isinstance(message.content, str):
        for block in message.content:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind in ("image", "file", "audio", "video", "image_url"):
                parts.append(blob_part(str(kind)))  # the bytes are never copied into a span
    return parts


def _ai_parts(message: BaseMessage) -> list[Part]:
    calls = [
        tool_call_part(c.get("id"), c["name"], c["args"])
        for c in getattr(message, "tool_calls", None) or []
    ]
    return [*_parts(message), *calls]


def _tool_parts(message: BaseMessage) -> list[Part]:
    call_id = getattr(message, "tool_call_id", None)
    return [tool_response_part(call_id, message.name, str(message.text))]


# LangChain message type -> (semconv role, parts reader). System messages are not
# here: they are the request's system instructions.
_ROLES: dict[str, tuple[str, Callable[[BaseMessage], list[dict[str, JsonValue]]]]] = {
    "human": ("user", _parts),
    "ai": ("assistant", _ai_parts),
    "AIMessageChunk": ("assistant", _ai_parts),
    "tool": ("tool", _tool_parts),
    "function": ("tool", _tool_parts),
    "chat": ("user", _parts),
}

# LangChain's standard tracing metadata names, for models that keep their parameters
# elsewhere; an invocation parameter of the same meaning wins (it is read later).
_LS_PARAMETERS = {
    "ls_temperature": "temperature",
    "ls_max_tokens": "max_tokens",
    "ls_stop": "stop_sequences",
}


def request_fields(
    messages: Sequence[BaseMessage], params: Mapping[str, Any], metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """The request fields of a MessageStart, from what LangChain says it sends."""
    sent: list[Message] = []
    system: list[str] = []
    for message in messages:
        if message.type == "system":
            system.append(str(message.text))
            continue
        role, reader = _ROLES.get(message.type, ("user", _parts))
        sent.append(semconv_message(role, reader(message)))
    tools = [_tool_definition(t) for t in params.get("tools") or () if isinstance(t, Mapping)]
    return {
        "input_messages": sent or None,
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": request_parameters(
            {_LS_PARAMETERS[k]: v for k, v in metadata.items() if k in _LS_PARAMETERS}, params
        ),
        "tool_definitions": tools or None,
    }


def _tool_definition(tool: Mapping[str, Any]) -> Part:
    """One bound tool (OpenAI ``{"function": ...}`` or Anthropic ``input_schema`` shape)."""
    function = tool.get("function")
    spec: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
    parameters = spec.get("parameters") or spec.get("input_schema")
    return tool_definition(spec.get("name"), spec.get("description"), parameters)


def response_fields(message: BaseMessage | None) -> dict[str, Any]:
    """The usage and response fields of a MessageEnd, from the final message."""
    usage: Mapping[str, Any] = getattr(message, "usage_metadata", None) or {}
    metadata: Mapping[str, Any] = getattr(message, "response_metadata", None) or {}
    response_id = metadata.get("id") or getattr(message, "id", None)
    if isinstance(response_id, str) and response_id.startswith("lc_"):
        response_id = None  # LangChain's own placeholder, not a provider id
    reason = metadata.get("finish_reason") or metadata.get("stop_reason")
    model = metadata.get("model_name") or metadata.get("model")
    return {
        "finish_reason": str(reason) if reason else None,
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cache_read_input_tokens": (usage.get("input_token_details") or {}).get("cache_read"),
        "reasoning_output_tokens": (usage.get("output_token_details") or {}).get("reasoning"),
        "response_model": str(model) if model else None,
        "response_id": str(response_id) if response_id else None,
    }
