"""An offline Google ADK model for tests and examples: ``ScriptedAdkLlm``.

ADK calls a model through ``BaseLlm.generate_content_async(llm_request, stream)``;
this subclass answers from a script instead of a network, so an ``LlmAgent`` runs
its real loop (callbacks, plugins, tools, sessions) with no API key.

Each turn of the script is a :class:`Turn` (text and/or function calls), a
callable ``(LlmRequest) -> Turn`` (to answer from what was sent, or to raise),
or an exception instance to raise. With ``stream=True`` (ADK's SSE mode) the
text comes as ``partial=True`` chunks first, then the whole response once more,
non-partial, as real models do. Every response carries usage metadata (without
it ADK logs "Skipping missing token usage metadata" on each call).

Imported without ``google-adk``, the package names the extra to install.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

__all__ = ["CallRecord", "ScriptedAdkLlm", "Turn", "answer", "call"]


@dataclass(frozen=True)
class Turn:
    """One scripted model response: ``text`` (sent in ``chunks`` partial responses
    when streamed; ``chunks=0``: only in the final response), ``thought`` (one
    partial response) and function calls ``(name, args, call_id)``."""

    text: str = ""
    calls: Sequence[tuple[str, dict[str, Any], str]] = ()
    chunks: int = 2
    input_tokens: int = 10
    output_tokens: int = 5
    thought: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def parts(self) -> list[types.Part]:
        parts: list[types.Part] = []
        if self.thought:
            parts.append(types.Part(text=self.thought, thought=True))
        if self.text:
            parts.append(types.Part(text=self.text))
        parts.extend(
            types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))
            for name, args, call_id in self.calls
        )
        return parts

    def usage(self) -> types.GenerateContentResponseUsageMetadata:
        return types.GenerateContentResponseUsageMetadata(
            prompt_token_count=self.input_tokens,
            candidates_token_count=self.output_tokens,
            total_token_count=self.input_tokens + self.output_tokens,
        )


def answer(text: str, **kw: Any) -> Turn:
    """A turn that answers with ``text``."""
    return Turn(text=text, **kw)


def call(name: str, args: dict[str, Any], call_id: str, **kw: Any) -> Turn:
    """A turn that asks for one function call."""
    return Turn(calls=[(name, args, call_id)], **kw)


@dataclass(frozen=True)
class CallRecord:
    """One answered model call, as the fake model saw it: when it started and sent
    its final response (``time.time_ns()``) and the usage it reported."""

    started_ns: int
    ended_ns: int
    input_tokens: int
    output_tokens: int


ScriptItem: TypeAlias = "Turn | BaseException | Callable[[LlmRequest], Turn]"


def _pieces(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` (or fewer) consecutive non-empty pieces."""
    if count <= 0:
        return []
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


class ScriptedAdkLlm(BaseLlm):
    """A ``BaseLlm`` that plays ``script`` turn by turn (see the module docstring).

    ``requests`` records every ``LlmRequest`` it was sent; ``loop=True`` starts
    the script over when it is used up (for benchmarks). ``pause_after_tool_calls``
    keeps a response that asks for function calls open that many seconds after it
    announced them (a model that streams on; ADK acts on the calls meanwhile).
    ``delay`` is each call's latency in seconds (awaited before the first chunk, so
    the agents of a ``ParallelAgent`` really overlap), and ``calls`` logs every call
    it answered as :class:`CallRecord` (its own clock and usage, independent of any
    span). ``called`` is set as each call starts and ``gate`` awaited before it
    answers (or raises): the order of concurrent agents' calls, without a clock.
    """

    model: str = "scripted-llm"
    script: list[Any] = Field(default_factory=list)
    loop: bool = False
    pause_after_tool_calls: float = 0.0
    requests: list[LlmRequest] = Field(default_factory=list)
    delay: float = 0.0
    calls: list[CallRecord] = Field(default_factory=list)
    called: asyncio.Event | None = None
    gate: asyncio.Event | None = None
    _position: int = PrivateAttr(default=0)

    def _next(self, llm_request: LlmRequest) -> Turn:
        self.requests.append(llm_request)
        if self._position >= len(self.script):
            if not self.loop or not self.script:
                raise RuntimeError(f"{self.model}: the script has no turn {self._position + 1}")
            self._position = 0
            self.requests[:] = [llm_request]
        item = self.script[self._position]
        self._position += 1
        if isinstance(item, BaseException):
            raise item
        turn = item if isinstance(item, Turn) else item(llm_request)
        if not isinstance(turn, Turn):
            raise TypeError(f"a script item returned {type(turn).__name__}, expected a Turn")
        return turn

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        started = time.time_ns()
        if self.called is not None:
            self.called.set()
        if self.delay:  # a failing call takes its time too
            await asyncio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        turn = self._next(llm_request)
        if stream:
            if turn.thought:
                yield LlmResponse(
                    content=types.Content(
                        role="model", parts=[types.Part(text=turn.thought, thought=True)]
                    ),
                    partial=True,
                )
            for piece in _pieces(turn.text, turn.chunks):
                await asyncio.sleep(0)  # a network read: other tasks may run between chunks
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text=piece)]),
                    partial=True,
                )
        # Logged as the final response is sent: ADK may stop reading after it (a transfer).
        self.calls.append(
            CallRecord(started, time.time_ns(), turn.input_tokens, turn.output_tokens)
        )
        yield LlmResponse(
            content=types.Content(role="model", parts=turn.parts()),
            partial=False,
            turn_complete=True,
            finish_reason=types.FinishReason.STOP,
            usage_metadata=turn.usage(),
            model_version=self.model,
            **turn.extra,
        )
        if turn.calls and self.pause_after_tool_calls:
            await asyncio.sleep(self.pause_after_tool_calls)
