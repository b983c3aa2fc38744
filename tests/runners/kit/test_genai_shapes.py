"""The GenAI semconv shapes every runner builds its request fields from (core/genai.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from runnertrace.runners._kit.genai import (
    arguments_of,
    as_text,
    blob_part,
    message,
    request_parameters,
    tool_call_part,
    tool_definition,
    tool_response_part,
)


class _Point(BaseModel):
    x: int


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (_Point(x=1), '{"x":1}'),
        ({"city": "Zürich"}, '{"city": "Zürich"}'),  # readable, not \\u-escaped
        ([1, None], "[1, null]"),
        ({"when": object}, '{"when": "<class \'object\'>"}'),
    ],
)
def test_as_text(value: Any, text: str) -> None:
    assert as_text(value) == text


def test_as_text_survives_a_circular_structure() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert as_text(loop) == "[[...]]"


def test_arguments_are_parsed_when_they_are_json() -> None:
    assert arguments_of('{"a": 2}') == {"a": 2}
    assert arguments_of("") == {}
    assert arguments_of("{not json") == "{not json"
    assert arguments_of({"a": 2}) == {"a": 2}


def test_parts_and_messages_have_the_semconv_shape() -> None:
    call = tool_call_part("c1", "add", '{"a": 1}')
    response = tool_response_part("c1", "add", {"sum": 3})
    assert message("assistant", [call]) == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}],
    }
    assert response == {
        "type": "tool_call_response",
        "id": "c1",
        "name": "add",
        "response": '{"sum": 3}',
    }
    assert blob_part("image") == {"type": "blob", "modality": "image"}
    assert tool_definition("add", "Adds.", {"type": "object"}) == {
        "type": "function",
        "name": "add",
        "description": "Adds.",
        "parameters": {"type": "object"},
    }


def test_request_parameters_use_semconv_names_and_skip_unset_values() -> None:
    found = request_parameters(
        {"temperature": 0.1, "max_output_tokens": 10, "stop": []},
        {"temperature": 0.3, "top_p": None, "stop": ["END"], "stream": True, "n": 2},
    )
    assert found == {
        "temperature": 0.3,  # the later source wins
        "max_tokens": 10,
        "stop_sequences": ["END"],
        "choice.count": 2,
    }
    assert request_parameters({"top_p": None, "logprobs": True}) is None
