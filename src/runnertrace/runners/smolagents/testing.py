"""An offline smolagents model for tests and examples (needs the ``smolagents`` extra).

It lives apart from the production adapter so that importing the runner never
defines a test double, and apart from :mod:`runnertrace.testing` (a pytest plugin
loaded by every test run) so that plugin never imports smolagents.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

from runnertrace._internal.imports import missing_extra

try:
    from smolagents.models import (
        ChatMessage,
        ChatMessageStreamDelta,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        ChatMessageToolCallStreamDelta,
        MessageRole,
        Model,
    )
    from smolagents.monitoring import TokenUsage
except ImportError as exc:
    raise missing_extra(exc, "smolagents") from exc

__all__ = ["ScriptedModel", "Turn", "calls", "code", "delegate", "text"]

Turn: TypeAlias = "ChatMessage | BaseException | Callable[[list[ChatMessage]], ChatMessage]"
"""One scripted reply: a message, an exception to raise (a failed request), or a
function of the messages sent that returns the message (it runs inside the call,
so a span it opens stands for the provider's HTTP request)."""


def calls(*wanted: tuple[str, dict[str, Any]], prefix: str = "call") -> ChatMessage:
    """A reply asking for tools: ``(name, arguments)`` pairs, ids ``<prefix>_<n>``."""
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=None,
        tool_calls=[
            ChatMessageToolCall(
                function=ChatMessageToolCallFunction(name=name, arguments=arguments),
                id=f"{prefix}_{position}",
                type="function",
            )
            for position, (name, arguments) in enumerate(wanted, 1)
        ],
    )


def delegate(member: str, task: str, prefix: str = "ask") -> ChatMessage:
    """A manager's reply handing ``task`` to its managed agent ``member`` (a tool call
    with the ``task`` argument smolagents gives a managed agent)."""
    return calls((member, {"task": task}), prefix=prefix)


def text(content: str) -> ChatMessage:
    """A plain text reply."""
    return ChatMessage(role=MessageRole.ASSISTANT, content=content)


def code(source: str, thought: str = "Thought: I will run some code.") -> ChatMessage:
    """A ``CodeAgent`` reply: a thought, then ``source`` in the default code tags."""
    return text(f"{thought}\n<code>\n{source}\n</code>")


class ScriptedModel(Model):  # type: ignore[misc]
    """A deterministic offline smolagents model that replays scripted turns.

    ``generate`` plays the next :data:`Turn`; ``generate_stream`` plays it as
    chunks: the text word by word, then each tool call as a name chunk and two
    argument chunks (as providers stream them), with the usage on the last chunk.
    ``received`` records the messages each call was sent, ``reported`` the usage
    (input, output tokens) each reply carried, and ``kwargs`` (such as
    ``temperature``) are kept as smolagents keeps a model's completion settings.
    ``pause_after_tool_calls`` makes a streamed reply wait that many seconds after its
    tool-call chunks (a model that streams on after announcing its calls).
    """

    provider = "runnertrace"  # ``gen_ai.provider.name``, as the native ScriptedLlm's

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        model_id: str = "scripted",
        input_tokens: int = 11,
        output_tokens: int = 7,
        pause_after_tool_calls: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(model_id=model_id, **kwargs)
        self.pause_after_tool_calls = pause_after_tool_calls
        self.turns = list(turns)
        self.received: list[list[ChatMessage]] = []
        self.reported: list[tuple[int, int]] = []
        self._usage = (input_tokens, output_tokens)

    def _next(self, messages: list[ChatMessage]) -> ChatMessage:
        if len(self.received) >= len(self.turns):
            raise RuntimeError(f"ScriptedModel ran out of turns after {len(self.turns)} calls")
        turn = self.turns[len(self.received)]
        self.received.append(list(messages))
        if isinstance(turn, BaseException):
            raise turn
        reply = turn(messages) if callable(turn) else turn
        self.reported.append(self._usage)
        return ChatMessage(
            role=reply.role,
            content=reply.content,
            tool_calls=reply.tool_calls,
            token_usage=TokenUsage(*self._usage),
        )

    def generate(
        self,
        messages: list[ChatMessage | dict[str, Any]],
        stop_sequences: list[str] | None = None,
        response_format: dict[str, str] | None = None,
        tools_to_call_from: list[Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        return self._next([m for m in messages if isinstance(m, ChatMessage)])

    def generate_stream(
        self,
        messages: list[ChatMessage | dict[str, Any]],
        stop_sequences: list[str] | None = None,
        response_format: dict[str, str] | None = None,
        tools_to_call_from: list[Any] | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatMessageStreamDelta]:
        reply = self._next([m for m in messages if isinstance(m, ChatMessage)])
        content = reply.content if isinstance(reply.content, str) else ""
        words = content.split(" ")
        for position, word in enumerate(words):
            if word or position:
                yield ChatMessageStreamDelta(content=word if position == 0 else f" {word}")
        for index, call in enumerate(reply.tool_calls or ()):
            arguments = call.function.arguments
            args = arguments if isinstance(arguments, str) else json.dumps(arguments)
            half = len(args) // 2
            yield ChatMessageStreamDelta(
                tool_calls=[
                    ChatMessageToolCallStreamDelta(
                        index=index,
                        id=call.id,
                        type="function",
                        function=ChatMessageToolCallFunction(name=call.function.name, arguments=""),
                    )
                ]
            )
            for piece in (args[:half], args[half:]):
                yield ChatMessageStreamDelta(
                    tool_calls=[
                        ChatMessageToolCallStreamDelta(
                            index=index,
                            function=ChatMessageToolCallFunction(name="", arguments=piece),
                        )
                    ]
                )
        if reply.tool_calls and self.pause_after_tool_calls:
            time.sleep(self.pause_after_tool_calls)
        yield ChatMessageStreamDelta(content="", token_usage=reply.token_usage)
