"""An offline Microsoft Agent Framework chat client for tests and examples (``maf`` extra;
without it, importing this module names the extra, as the package does).

It is built the way Agent Framework documents a full-featured client: the
function-invocation, chat-middleware and telemetry layers over ``BaseChatClient``,
in that order, so a run through it exercises the framework's own tool loop,
middleware pipelines and OpenTelemetry spans, with only the provider call
replaced. It lives apart from the runner so importing the runner never defines a
test double, and apart from :mod:`runnertrace.testing` (a pytest plugin loaded by
every test run) so that plugin never imports Agent Framework.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, cast

from agent_framework import (
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    UsageDetails,
)
from agent_framework.observability import ChatTelemetryLayer

__all__ = ["ScriptedChatClient", "Turn", "call", "say"]

Turn = Sequence[ChatResponseUpdate] | BaseException | Callable[[list[Message]], Any]
"""One scripted reply: the updates the model streams, an exception (a failed
request), or a function of the messages sent returning either of those. A
function runs inside the provider call (inside the stream's pull in stream
mode), so a span it opens stands for the provider's HTTP request."""


def say(text: str, *, input_tokens: int = 10, output_tokens: int = 5) -> list[ChatResponseUpdate]:
    """A text answer, streamed word by word, with usage and a ``stop`` finish."""
    words = [word + " " for word in text.split(" ")]
    words[-1] = words[-1].rstrip(" ")
    updates = [ChatResponseUpdate(role="assistant", contents=[Content.from_text(w)]) for w in words]
    updates.append(_usage(input_tokens, output_tokens, finish_reason="stop"))
    return updates


def call(
    *calls: tuple[str, str, Mapping[str, Any]], input_tokens: int = 10, output_tokens: int = 5
) -> list[ChatResponseUpdate]:
    """Tool calls ``(call_id, tool name, arguments)``; each call's arguments arrive in
    two chunks after the chunk that names it, as providers stream them."""
    updates: list[ChatResponseUpdate] = []
    for call_id, name, arguments in calls:
        text = json.dumps(dict(arguments))
        half = len(text) // 2
        updates.append(_function_call(call_id, name, text[:half]))
        updates.append(_function_call(call_id, "", text[half:]))
    updates.append(_usage(input_tokens, output_tokens, finish_reason="tool_calls"))
    return updates


def _function_call(call_id: str, name: str, arguments: str) -> ChatResponseUpdate:
    content = Content.from_function_call(call_id=call_id, name=name, arguments=arguments)
    return ChatResponseUpdate(role="assistant", contents=[content])


def _usage(
    input_tokens: int, output_tokens: int, *, finish_reason: Literal["stop", "tool_calls"]
) -> ChatResponseUpdate:
    usage = UsageDetails(input_token_count=input_tokens, output_token_count=output_tokens)
    return ChatResponseUpdate(
        role="assistant", contents=[Content.from_usage(usage)], finish_reason=finish_reason
    )


class ScriptedChatClient(
    FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], ChatTelemetryLayer[Any], BaseChatClient
):
    """A deterministic chat client that replays scripted :data:`Turn` s, in order.

    ``loop=True`` starts the script over when it is used up (for benchmarks);
    otherwise running out is an error naming the call. ``calls`` records the
    messages and options of each request (not in loop mode, where it would grow
    without bound). ``pause_after_tool_calls`` makes a streamed reply wait that many
    seconds after its tool-call updates (a model that streams on after announcing
    its calls).
    """

    OTEL_PROVIDER_NAME: ClassVar[str] = "scripted"

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        model: str = "scripted-1",
        loop: bool = False,
        pause_after_tool_calls: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.pause_after_tool_calls = pause_after_tool_calls
        self._turns = list(turns)
        self._position = 0
        self._loop = loop
        self.calls: list[tuple[list[Message], dict[str, Any]]] = []

    def _next(self, messages: Sequence[Message], options: Mapping[str, Any]) -> Turn:
        if self._position >= len(self._turns):
            if not self._loop or not self._turns:
                raise RuntimeError(
                    f"ScriptedChatClient: request {self._position + 1} has no scripted turn "
                    f"(the script holds {len(self._turns)})"
                )
            self._position = 0
        if not self._loop:
            self.calls.append((list(messages), dict(options)))
        turn = self._turns[self._position]
        self._position += 1
        return turn

    @staticmethod
    def _play(turn: Turn, messages: Sequence[Message]) -> Sequence[ChatResponseUpdate]:
        if callable(turn) and not isinstance(turn, BaseException):
            turn = turn(list(messages))
        if isinstance(turn, BaseException):
            raise turn
        return list(cast(Sequence[ChatResponseUpdate], turn))

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Any:
        turn = self._next(messages, options)
        if stream:
            return ResponseStream(self._stream(turn, messages), finalizer=ChatResponse.from_updates)
        return self._respond(turn, messages)

    async def _respond(self, turn: Turn, messages: Sequence[Message]) -> ChatResponse[Any]:
        return ChatResponse.from_updates(self._play(turn, messages))

    async def _stream(
        self, turn: Turn, messages: Sequence[Message]
    ) -> AsyncIterator[ChatResponseUpdate]:
        announced = False
        for update in self._play(turn, messages):
            calls = any(content.type == "function_call" for content in update.contents)
            if announced and not calls and self.pause_after_tool_calls:
                await asyncio.sleep(self.pause_after_tool_calls)
                announced = False
            announced = announced or calls
            yield update
