"""Offline models for a Pydantic AI agent, in both modes, from one function.

Pydantic AI ships its own offline models, and the runner's tests and examples use
them rather than a scripted model of ours: ``pydantic_ai.models.test.TestModel``
(calls every tool once, then answers; the contract suite's calculator) and
``pydantic_ai.models.function.FunctionModel`` (answers with a function of the
messages). A ``FunctionModel`` streams only with a second function, which each
script would otherwise write again; :func:`streaming` derives it from the first, so
one script drives run mode and stream mode with the same answers::

    def respond(messages, info):
        if messages[-1].parts[-1].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("6 x 7 = 42")])
        return ModelResponse(parts=[ToolCallPart("multiply", {"a": 6, "b": 7})])

    agent = Agent(function_model(respond, model_name="offline"), tools=[multiply])

The stream is what a provider streams: text word by word, a tool call as its name
(and id) first, then its JSON arguments. Other parts (thinking, files) are refused:
write a stream function for a script that answers with them.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionDef,
    FunctionModel,
)

__all__ = ["function_model", "streaming"]

StreamItem = str | DeltaToolCalls
_WORDS = re.compile(r"\S+\s*|\s+")


def _text(index: int, part: TextPart) -> Iterator[StreamItem]:
    yield from _WORDS.findall(part.content)


def _tool_call(index: int, part: ToolCallPart) -> Iterator[StreamItem]:
    yield {index: DeltaToolCall(part.tool_name, tool_call_id=part.tool_call_id)}
    yield {index: DeltaToolCall(json_args=part.args_as_json_str())}


_STREAMED: dict[str, Callable[[int, Any], Iterator[StreamItem]]] = {
    "text": _text,
    "tool-call": _tool_call,
}


def _deltas(response: ModelResponse) -> Iterator[StreamItem]:
    """The stream items that make up ``response``, part by part (part index = its place)."""
    for index, part in enumerate(response.parts):
        stream = _STREAMED.get(part.part_kind)
        if stream is None:
            raise TypeError(f"streaming() cannot stream a {type(part).__name__}")
        yield from stream(index, part)


def streaming(respond: FunctionDef) -> Callable[[list[Any], AgentInfo], AsyncIterator[StreamItem]]:
    """A ``FunctionModel`` stream function that streams what ``respond`` answers
    (``respond`` may be sync or async, as ``FunctionModel`` allows)."""

    async def stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[StreamItem]:
        response = respond(messages, info)
        if inspect.isawaitable(response):
            response = await response
        for item in _deltas(response):
            yield item

    return stream


def function_model(respond: FunctionDef, *, model_name: str = "offline") -> FunctionModel:
    """A ``FunctionModel`` answering with ``respond`` in run mode and streaming the same
    answers in stream mode (:func:`streaming`)."""
    return FunctionModel(respond, stream_function=streaming(respond), model_name=model_name)
