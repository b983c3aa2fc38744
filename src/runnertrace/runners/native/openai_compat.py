"""``OpenAICompatibleLlm``: the native agent's model client for chat-completions servers.

It speaks the OpenAI chat-completions protocol through the ``openai`` package,
so it works with OpenAI itself and with the many servers that mimic it (vLLM,
Ollama, LM Studio, llama.cpp, gateways). The agent's history (messages, tool
calls, tool results) is translated into chat messages on every call; nothing is
kept between calls, so one client can serve concurrent runs.

The ``openai`` package is optional: it is imported on first use, and a missing
install fails with the ``pip install 'runnertrace[openai]'`` hint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runnertrace._internal.imports import require
from runnertrace.runners.native.llm import LlmClient
from runnertrace.runners.native.types import (
    ContentItem,
    LlmRequest,
    LlmResponse,
    Message,
    ReasoningPart,
    StreamPart,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolResult,
    Usage,
    new_id,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAICompatibleLlm"]

# Keys the client computes from the LlmRequest on every call; accepting them as
# constructor kwargs would silently fight with the agent's own history.
_OWNED_KEYS = frozenset({"model", "messages", "stream", "stream_options", "tools"})

# Servers that expose chain-of-thought put it in a non-standard field; these are
# the spellings in use (vLLM/DeepSeek, then OpenRouter/Ollama).
_REASONING_FIELDS = ("reasoning_content", "reasoning")

_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class OpenAICompatibleLlm(LlmClient):
    """A chat-completions model behind an OpenAI-compatible HTTP API.

    Args:
        model: The model name sent with every request.
        base_url: The server's ``/v1`` URL; ``None`` means OpenAI (or ``OPENAI_BASE_URL``).
        api_key: The key; ``None`` falls back to ``OPENAI_API_KEY`` and, for a
            custom ``base_url`` (local servers rarely check keys), to a placeholder.
        client: A ready ``AsyncOpenAI`` to use instead (retries, timeouts, headers).
        **request_kwargs: Extra chat-completions parameters for every call
            (``temperature``, ``max_tokens``, ``tool_choice="required"``, ...).
            They are applied over the computed ones, except the keys the client
            owns (``model``, ``messages``, ``stream``, ``stream_options``, ``tools``).
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        **request_kwargs: Any,
    ) -> None:
        owned = sorted(_OWNED_KEYS & request_kwargs.keys())
        if owned:
            raise ValueError(
                f"OpenAICompatibleLlm sets {owned} itself from the agent's request; "
                "pass the model as the first argument and leave the rest to the agent"
            )
        self.model = model
        self.base_url = base_url
        self._api_key = api_key
        self._client = client
        self.request_kwargs = request_kwargs

    @property
    def client(self) -> AsyncOpenAI:
        """The ``AsyncOpenAI`` client, created on first use so import stays optional."""
        if self._client is None:
            openai = require("openai", "openai")
            api_key = self._api_key or os.environ.get("OPENAI_API_KEY")
            if api_key is None and self.base_url is not None:
                api_key = "not-needed"
            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key)
        return self._client

    # -- request ------------------------------------------------------------------
    def build_request(self, request: LlmRequest) -> dict[str, Any]:
        """The chat-completions keyword arguments for ``request`` (without ``stream``)."""
        params: dict[str, Any] = {"model": self.model, "messages": to_chat_messages(request)}
        if request.tools:
            params["tools"] = [t.definition() for t in request.tools]
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
        if request.output_schema is not None:
            params["response_format"] = _response_format(request.output_schema)
        params.update(self.request_kwargs)
        return params

    async def generate(self, request: LlmRequest) -> LlmResponse:
        completion = await self.client.chat.completions.create(**self.build_request(request))
        if not completion.choices:
            raise RuntimeError(f"{self.model}: the server returned a completion without choices")
        choice = completion.choices[0]
        message = choice.message
        calls = [
            ToolCall(
                call.id or new_id("call"),
                call.function.name,
                _parse_arguments(call.function.arguments),
            )
            for call in message.tool_calls or []
            if getattr(call, "function", None) is not None
        ]
        text = message.content or getattr(message, "refusal", None) or ""
        return LlmResponse(
            content=_content(text, calls),
            usage=_usage(completion.usage),
            finish_reason=choice.finish_reason or "stop",
            model=completion.model or self.model,
            reasoning=_reasoning(message),
            response_id=completion.id,
        )

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamPart]:
        """Stream text, reasoning and tool-call pieces, then the assembled response.

        Tool-call argument deltas arrive keyed by ``index``; a call is announced
        (its first :class:`ToolCallPart` carries id and name) once its name is
        known, and the final response holds the concatenated arguments.
        """
        params = self.build_request(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        chunks = await self.client.chat.completions.create(**params)
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, _PendingCall] = {}
        finish_reason: str | None = None
        usage = Usage()
        response_id: str | None = None
        response_model: str | None = None
        async for chunk in chunks:
            response_id = response_id or getattr(chunk, "id", None)
            response_model = response_model or getattr(chunk, "model", None)
            if getattr(chunk, "usage", None) is not None:
                usage = _usage(chunk.usage)
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish_reason = choice.finish_reason or finish_reason
            delta = choice.delta
            thought = _reasoning(delta)
            if thought:
                reasoning.append(thought)
                yield ReasoningPart(thought)
            if delta.content:
                text.append(delta.content)
                yield TextPart(delta.content)
            for piece in delta.tool_calls or []:
                pending = calls.setdefault(piece.index, _PendingCall(piece.index))
                part = pending.feed(piece)
                if part is not None:
                    yield part
        for pending in calls.values():
            part = pending.flush()
            if part is not None:
                yield part
        tool_calls = [p.to_tool_call() for _, p in sorted(calls.items())]
        yield LlmResponse(
            content=_content("".join(text), tool_calls),
            usage=usage,
            finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
            model=response_model or self.model,
            reasoning="".join(reasoning) or None,
            response_id=response_id,
        )


@dataclass
class _PendingCall:
    """One streamed tool call being assembled from its deltas."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    announced: bool = False

    def feed(self, piece: Any) -> ToolCallPart | None:
        self.id = self.id or piece.id
        function = piece.function
        delta = ""
        if function is not None:
            self.name = self.name or function.name
            delta = function.arguments or ""
        self.arguments += delta
        if self.announced:
            return ToolCallPart(self.index, delta) if delta else None
        if self.name is None:
            return None  # hold the arguments until the call can be named
        return self._announce()

    def flush(self) -> ToolCallPart | None:
        """Announce a call whose name never arrived, so its events still pair up."""
        return None if self.announced else self._announce()

    def _announce(self) -> ToolCallPart:
        self.announced = True
        self.id = self.id or new_id("call")
        return ToolCallPart(self.index, self.arguments, id=self.id, name=self.name)

    def to_tool_call(self) -> ToolCall:
        return ToolCall(
            self.id or new_id("call"), self.name or "", _parse_arguments(self.arguments)
        )


# -- translation helpers -------------------------------------------------------------
def to_chat_messages(request: LlmRequest) -> list[dict[str, Any]]:
    """Translate the agent's history into chat-completions messages.

    Consecutive assistant text and tool calls (one model turn) become one
    assistant message with ``tool_calls``; each tool result becomes a
    ``role="tool"`` message answering its call id.
    """
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": "\n\n".join(request.instructions)})
    turn: dict[str, Any] | None = None  # the assistant message being assembled
    for item in request.contents:
        if isinstance(item, ToolCall):
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(_tool_call_message(item))
            continue
        turn = None
        messages.append(_message_of(item))
        if isinstance(item, Message) and item.role == "assistant":
            turn = messages[-1]
    return messages


def _message_of(item: ContentItem) -> dict[str, Any]:
    if isinstance(item, ToolResult):
        return {"role": "tool", "tool_call_id": item.tool_call_id, "content": item.text}
    if isinstance(item, Message):
        return {"role": item.role, "content": item.content}
    raise TypeError(f"cannot send {type(item).__name__} to a chat-completions model")


def _tool_call_message(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.tool_call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def _response_format(schema: dict[str, Any]) -> dict[str, Any]:
    # Not ``strict``: pydantic's schemas omit ``additionalProperties: false`` and
    # optional fields, which strict mode rejects; the agent validates the answer.
    name = _SCHEMA_NAME.sub("_", str(schema.get("title") or "output"))[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def _parse_arguments(raw: str | None) -> dict[str, Any]:
    """Decode tool arguments; malformed JSON reaches the tool (and so the model) as an error.

    The raw text is kept under ``_unparsed_arguments``: the tool's schema rejects
    that key, so the model gets an error result quoting what it sent instead of
    the run crashing.
    """
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"_unparsed_arguments": raw}
    return value if isinstance(value, dict) else {"_unparsed_arguments": raw}


def _content(text: str, calls: list[ToolCall]) -> list[Message | ToolCall]:
    content: list[Message | ToolCall] = []
    if text or not calls:
        content.append(Message("assistant", text))
    content.extend(calls)
    return content


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
    )


def _reasoning(message: Any) -> str | None:
    for name in _REASONING_FIELDS:
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return None
