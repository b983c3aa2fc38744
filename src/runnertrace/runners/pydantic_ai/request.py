"""What a model call is sent, in GenAI shapes: messages, instructions, parameters, tools.

A model call starts when the request is sent, with what it is sent: the input
messages (Pydantic AI's own GenAI-semconv conversion, so fed-back tool results and
retry prompts appear as the model sees them), the instructions as the text rendered
from the request's ``instruction_parts`` (dynamic instruction functions resolved;
system *prompts* are history and stay in the input messages), the request
parameters of the merged model settings, and the function tools.

Built only when someone observes the run, and through
:meth:`~runnertrace.runners._kit.skeleton.MappingBoundary.detail`: a fault here
costs the detail alone, the message still starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core
from pydantic_ai.messages import InstructionPart
from pydantic_ai.models import ModelRequestContext

from runnertrace.runners._kit.genai import arguments_of, request_parameters, tool_definition
from runnertrace.runners.pydantic_ai.quiet import no_op_settings

__all__ = ["request_fields"]


def _instructions(request_context: ModelRequestContext) -> str | None:
    """The instructions as the text the model is sent.

    ``instruction_parts`` are what Pydantic AI renders the request's instructions
    from (dynamic instruction functions already called); without them (a direct
    model request) the newest request message's ``instructions`` hold the text.
    """
    parts = request_context.model_request_parameters.instruction_parts
    if parts is not None:
        return InstructionPart.join(parts) if parts else None
    for message in reversed(request_context.messages):
        if message.kind == "request":
            return message.instructions
    return None


def _call_in_schema(part: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as JSON: a real client's reply holds them as the text
    the server sent, and Pydantic AI keeps that text in the history."""
    return {**part, "arguments": arguments_of(part["arguments"])} if "arguments" in part else part


def _response_in_schema(part: dict[str, Any]) -> dict[str, Any]:
    """A tool result under the schema's ``response`` key, Pydantic AI's ``result`` kept."""
    return {**part, "response": part["result"]} if "result" in part else part


def _as_is(part: dict[str, Any]) -> dict[str, Any]:
    return part


_PARTS_IN_SCHEMA: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "tool_call": _call_in_schema,
    "tool_call_response": _response_in_schema,
}


def _in_schema(message: dict[str, Any]) -> dict[str, Any]:
    """One of Pydantic AI's OTel messages with the keys the GenAI schema reads."""
    if "parts" not in message:
        return message
    parts = [_PARTS_IN_SCHEMA.get(part.get("type", ""), _as_is)(part) for part in message["parts"]]
    return {**message, "parts": parts}


def request_fields(request_context: ModelRequestContext) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    tools = [
        tool_definition(tool.name, tool.description, tool.parameters_json_schema)
        for tool in request_context.model_request_parameters.function_tools
    ]
    messages = no_op_settings().messages_to_otel_messages(request_context.messages)
    jsonable: list[dict[str, Any]] = pydantic_core.to_jsonable_python(messages)
    return {
        "input_messages": [_in_schema(message) for message in jsonable] or None,
        "system_instructions": _instructions(request_context),
        "request_parameters": request_parameters(request_context.model_settings or {}),
        "tool_definitions": tools or None,
    }
