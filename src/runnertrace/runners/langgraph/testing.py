"""An offline LangChain chat model for tests and examples (needs the ``langgraph`` extra).

It lives apart from the runner's modules so that importing the runner never
defines a test double, and apart from :mod:`runnertrace.testing` (a pytest plugin
loaded by every test run) so that plugin never imports LangChain. The package's
``__init__`` names the extra when LangChain is missing.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

__all__ = ["ScriptedChatModel", "Turn"]

Turn = AIMessage | BaseException | Callable[[list[BaseMessage]], AIMessage]
"""One scripted reply: a message, an exception to raise (a failed request), or a
function of the messages sent that returns the message (it runs inside the call,
so a span it opens stands for the provider's HTTP request)."""


class ScriptedChatModel(BaseChatModel):
    """A deterministic offline chat model that replays scripted turns.

    LangChain's own fakes cannot drive a tool-calling agent (their
    ``bind_tools`` is not implemented, and streaming a tool-call-only message
    fails), so examples and tests use this one. Each call plays the next
    :data:`Turn`; streamed, a reply yields its tool-call chunks (arguments split
    in two, as providers do) and then its text word by word, with usage on the
    last chunk. ``calls`` records the messages each call received;
    ``temperature`` and ``max_tokens`` are only reported as request parameters.
    ``pause_after_tool_calls`` makes a streamed reply wait that many seconds after
    its tool-call chunks (a model that streams on after announcing its calls).
    """

    # Out of repr: LangChain serialises the model (via repr) for every callback
    # handler's on_chat_model_start, and a long script would dominate that cost.
    responses: list[Any] = Field(repr=False)
    model_name: str = "scripted"
    temperature: float | None = None
    max_tokens: int | None = None
    pause_after_tool_calls: float = 0.0

    _position: int = PrivateAttr(default=0)
    _calls: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        return self._calls

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        params["ls_model_name"] = self.model_name
        return params

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        if self._position >= len(self.responses):
            raise RuntimeError(
                f"ScriptedChatModel ran out of responses after {len(self.responses)} calls"
            )
        turn = self.responses[self._position]
        self._position += 1
        self._calls.append(list(messages))
        if isinstance(turn, BaseException):
            raise turn
        scripted: AIMessage = turn if isinstance(turn, AIMessage) else turn(list(messages))
        metadata = {
            "finish_reason": "tool_calls" if scripted.tool_calls else "stop",
            "model_name": self.model_name,
            **scripted.response_metadata,
        }
        # A copy: the agent stamps its name on the message it receives. A fresh id
        # unless scripted: add_messages replaces a message whose id it has seen.
        return scripted.model_copy(
            update={
                "id": scripted.id or f"scripted-{uuid.uuid4().hex}",
                "response_metadata": metadata,
            }
        )

    @staticmethod
    def _call_chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
        for index, call in enumerate(message.tool_calls):
            args = json.dumps(call["args"])
            half = len(args) // 2
            for part, first in ((args[:half], True), (args[half:], False)):
                tool_chunk = {
                    "name": call["name"] if first else None,
                    "args": part,
                    "id": call["id"] if first else None,
                    "index": index,
                    "type": "tool_call_chunk",
                }
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content="", id=message.id, tool_call_chunks=[tool_chunk])
                )

    @staticmethod
    def _rest_chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
        if isinstance(message.content, str):
            pieces: list[Any] = re.findall(r"\s*\S+", message.content)
        else:
            pieces = [[block] for block in message.content]
        for piece in pieces:
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                id=message.id,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
                chunk_position="last",
            )
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._next(messages)
        yield from self._call_chunks(message)
        if message.tool_calls and self.pause_after_tool_calls:
            time.sleep(self.pause_after_tool_calls)
        yield from self._rest_chunks(message)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        message = self._next(messages)
        for chunk in self._call_chunks(message):
            yield chunk
        if message.tool_calls and self.pause_after_tool_calls:
            await asyncio.sleep(self.pause_after_tool_calls)
        for chunk in self._rest_chunks(message):
            yield chunk
