"""What an ADK model call is sent, in GenAI shapes.

The chat span starts when ADK is about to send the request (``before_model_callback``),
with what is sent: ``llm_request.contents`` as GenAI messages, the system instruction
as text, the generate-content config's sampling parameters and the function
declarations; and the provider, read from the model id as ADK's own telemetry reads
it. The mapper builds these fields only in a traced run, through the boundary's
``detail`` (a fault costs the fields, never the message).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from google.adk.models.llm_request import LlmRequest
from google.genai import types
from pydantic import JsonValue

__all__ = ["provider_of", "request_fields"]

# GenerateContentConfig fields that are GenAI request parameters, by semconv name.
_REQUEST_PARAMETERS = {
    "temperature": "temperature",
    "max_output_tokens": "max_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop_sequences": "stop_sequences",
}

_ROLES = {"model": "assistant", "user": "user"}


def _jsonable(value: Any) -> JsonValue:
    return json.loads(json.dumps(value, default=str))  # type: ignore[no-any-return]


def _part(part: types.Part) -> dict[str, JsonValue] | None:
    """One ``types.Part`` as a GenAI semconv message part (``None``: nothing to show)."""
    if part.function_call is not None:
        call = part.function_call
        return {
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "arguments": _jsonable(call.args or {}),
        }
    if part.function_response is not None:
        response = part.function_response
        return {
            "type": "tool_call_response",
            "id": response.id,
            "name": response.name,
            "response": _jsonable(response.response),
        }
    if part.text is not None:
        return {"type": "reasoning" if part.thought else "text", "content": part.text}
    blob = part.inline_data or part.file_data
    if blob is not None:
        return {"type": "blob", "mime_type": blob.mime_type}
    return None


def _messages(contents: Sequence[types.Content]) -> list[dict[str, JsonValue]]:
    """``llm_request.contents`` as GenAI semconv input messages.

    A user-role content that holds only function responses is the tool's message.
    """
    messages: list[dict[str, JsonValue]] = []
    for content in contents:
        parts = [p for p in map(_part, content.parts or ()) if p is not None]
        if not parts:
            continue
        role = _ROLES.get(content.role or "user", content.role or "user")
        if all(p["type"] == "tool_call_response" for p in parts):
            role = "tool"
        messages.append({"role": role, "parts": list(parts)})
    return messages


def _instruction_text(instruction: Any) -> str | None:
    """The system instruction as the text the model gets (ADK renders it to a string)."""
    if instruction is None or isinstance(instruction, str):
        return instruction or None
    if isinstance(instruction, types.Content):
        texts = [p.text for p in instruction.parts or () if p.text]
        return "\n".join(texts) or None
    if isinstance(instruction, types.Part):
        return instruction.text or None
    if isinstance(instruction, list):
        return "\n".join(filter(None, map(_instruction_text, instruction))) or None
    return str(instruction)


def _tool_definitions(config: types.GenerateContentConfig) -> list[dict[str, JsonValue]]:
    definitions: list[dict[str, JsonValue]] = []
    for tool in config.tools or ():
        for declaration in getattr(tool, "function_declarations", None) or ():
            schema: Any = declaration.parameters_json_schema
            if schema is None and declaration.parameters is not None:
                schema = declaration.parameters.model_dump(mode="json", exclude_none=True)
            definitions.append(
                {
                    "type": "function",
                    "name": declaration.name,
                    "description": declaration.description,
                    "parameters": _jsonable(schema),
                }
            )
    return definitions


def request_fields(llm_request: LlmRequest) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    config = llm_request.config
    parameters: dict[str, JsonValue] = {
        name: _jsonable(getattr(config, field))
        for field, name in _REQUEST_PARAMETERS.items()
        if getattr(config, field, None) is not None
    }
    return {
        "input_messages": _messages(llm_request.contents) or None,
        "system_instructions": _instruction_text(config.system_instruction),
        "request_parameters": parameters or None,
        "tool_definitions": _tool_definitions(config) or None,
    }


def provider_of(model: str | None) -> str | None:
    """``gen_ai.provider.name`` for a model id, read as ADK's own telemetry reads it.

    Gemini ids are Google's (``gcp.vertex_ai`` when the google-genai client is set to
    Vertex, else ``gcp.gemini``), ``claude-*`` Anthropic's, and a LiteLLM-style
    ``<provider>/<model>`` names its provider; any other id names none we know.
    """
    if not model:
        return None
    name = model.rsplit("models/", 1)[-1]  # a resource path ends in models/<id>
    if name.startswith("gemini"):
        vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("1", "true")
        return "gcp.vertex_ai" if vertex else "gcp.gemini"
    if name.startswith("claude"):
        return "anthropic"
    prefix, slash, _ = name.partition("/")
    return prefix.lower() if slash and prefix else None
