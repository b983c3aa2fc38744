"""What a model call was sent, in GenAI semantic-convention shapes, built once for every runner.

Each runner reads its framework's own message and tool types; the shapes those
become on a ``MessageStart`` (``input_messages``, ``request_parameters``,
``tool_definitions``) and the text a tool result or an argument becomes are the
same everywhere, so they are made here. Parts follow the GenAI input-messages
schema: ``text``, ``reasoning``, ``blob`` (never the bytes: the modality is what
helps when debugging), ``tool_call`` and ``tool_call_response``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, JsonValue

Part = dict[str, JsonValue]
Message = dict[str, JsonValue]


def as_text(value: Any) -> str:
    """A tool result, a structured request or arguments as the text a trace records.

    Text stays itself, a Pydantic model is its JSON, anything else its JSON with
    unknown objects as their ``str`` (a circular structure as its ``repr``).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure
        return repr(value)


def arguments_of(raw: Any) -> JsonValue:
    """Tool-call arguments as a JSON value: a JSON string parsed, else the value as given."""
    if isinstance(raw, str):
        try:
            parsed: JsonValue = json.loads(raw or "{}")
        except ValueError:
            return raw
        return parsed
    return raw  # type: ignore[no-any-return]


def text_part(content: str) -> Part:
    return {"type": "text", "content": content}


def reasoning_part(content: str) -> Part:
    return {"type": "reasoning", "content": content}


def blob_part(modality: str) -> Part:
    return {"type": "blob", "modality": modality}


def tool_call_part(call_id: str | None, name: str | None, arguments: Any) -> Part:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments_of(arguments)}


def tool_response_part(call_id: str | None, name: str | None, response: Any) -> Part:
    return {
        "type": "tool_call_response",
        "id": call_id,
        "name": name,
        "response": as_text(response),
    }


def message(role: str, parts: list[Part]) -> Message:
    return {"role": role, "parts": parts}  # type: ignore[dict-item]


def tool_definition(name: str | None, description: str | None, parameters: Any) -> Part:
    """One tool offered to the model (a ``gen_ai.tool.definitions`` entry)."""
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


# A framework's name for a sampling parameter -> its ``gen_ai.request.*`` suffix.
REQUEST_PARAMETER_NAMES: dict[str, str] = {
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "stop": "stop_sequences",
    "stop_sequences": "stop_sequences",
    "n": "choice.count",
    "candidate_count": "choice.count",
}


def request_parameters(
    *sources: Mapping[str, Any], names: Mapping[str, str] = REQUEST_PARAMETER_NAMES
) -> dict[str, JsonValue] | None:
    """The sampling parameters found in ``sources`` (later sources win), by semconv name.

    Only plain values count (numbers, text, lists of text); ``None`` and empty
    lists mean "not set". ``names`` maps a framework's own spellings.
    """
    found: dict[str, JsonValue] = {}
    for source in sources:
        for theirs, ours in names.items():
            value = source.get(theirs)
            if isinstance(value, bool) or value is None or value == []:
                continue
            if isinstance(value, int | float | str | list):
                found[ours] = value
    return found or None


def or_none(items: Iterable[Any]) -> list[Any] | None:
    """A list of what was found, ``None`` when nothing was (the field stays unset)."""
    listed = list(items)
    return listed or None
