"""An offline CrewAI model for tests and examples: ``ScriptedLLM`` (needs the ``crewai`` extra).

It lives apart from the runner so that importing the runner never defines a
test double, and apart from :mod:`runnertrace.testing` (a pytest plugin loaded
by every test run) so that plugin never imports CrewAI. Imported without CrewAI,
the package names the extra to install.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from crewai.events.types.llm_events import LLMCallType
from crewai.llms.base_llm import BaseLLM, llm_call_context
from pydantic import Field, PrivateAttr

__all__ = ["ScriptedLLM", "Turn", "action", "final"]

Turn = str | BaseException | Callable[[Any], str]
"""One scripted reply: the ReAct text, an exception to raise (a failed request),
or a function of the messages sent that returns the text (it runs inside the
call, so a span it opens stands for the provider's HTTP request)."""


def action(tool: str, **arguments: Any) -> str:
    """The ReAct text that asks CrewAI to run ``tool`` with ``arguments``."""
    return f"Thought: I should use {tool}.\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def final(answer: str) -> str:
    """The ReAct text that ends the task with ``answer``."""
    return f"Thought: I now know the final answer.\nFinal Answer: {answer}"


def _sent(messages: Any) -> str:
    return messages if isinstance(messages, str) else json.dumps(messages, default=str)


class _Script:
    """Where a scripted model is in its script, and the messages of each call."""

    def __init__(self) -> None:
        self.position = 0
        self.calls: list[Any] = []
        self.lock = threading.Lock()


class ScriptedLLM(BaseLLM):
    """A deterministic CrewAI ``BaseLLM`` that replays scripted ReAct turns.

    CrewAI drives a model that does not support function calling through ReAct
    text (``Action:`` / ``Action Input:``, then ``Final Answer:``), so this model
    needs no tool-calling protocol. Each call plays the next :data:`Turn` and
    reports it on CrewAI's event bus the way CrewAI's own providers do (call
    started, stream chunks word by word when streaming, call completed with
    usage, or call failed), inside ``llm_call_context()`` so the events carry the
    call's id. ``calls`` records the messages each call received. The script is
    shared by every run using the instance, in call order (a lock keeps
    concurrent runs from drawing the same turn). ``pause_after_tool_calls`` makes a
    streamed turn that asks for a tool (``Action:``) wait that many seconds after its
    chunks, before the call completes (a model that streams on after its call).
    """

    responses: list[Any] = Field(repr=False)
    model: str = "scripted"
    provider: str = "scripted"
    llm_type: str = "scripted"
    pause_after_tool_calls: float = 0.0

    # One script per model, also shared by the shallow copies CrewAI makes when it
    # copies an agent (the runner copies the agent for each run).
    _script: _Script = PrivateAttr(default_factory=lambda: _Script())

    def __init__(self, responses: list[Any], model: str = "scripted", **data: Any) -> None:
        # CrewAI validates the model name and infers the provider before field
        # defaults apply: pass both.
        data.setdefault("provider", "scripted")
        super().__init__(responses=responses, model=model, **data)

    @property
    def calls(self) -> list[Any]:
        return self._script.calls

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 8192

    def get_input_tokens_count(
        self, messages: Any, tools: Any = None, response_model: Any = None
    ) -> int:
        """The count the usage reports (one token per word), without CrewAI's
        warning that it is estimating."""
        return len(_sent(messages).split())

    def _next(self, messages: Any) -> Turn:
        script = self._script
        with script.lock:
            if script.position >= len(self.responses):
                raise RuntimeError(
                    f"ScriptedLLM ran out of scripted responses after {script.position} calls"
                )
            turn = self.responses[script.position]
            script.position += 1
            # CrewAI extends the list it sent after the call: keep what was sent.
            script.calls.append(
                [dict(m) for m in messages] if isinstance(messages, list) else messages
            )
        return turn  # type: ignore[no-any-return]

    def call(
        self,
        messages: Any,
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Any | None = None,
        from_agent: Any | None = None,
        response_model: Any | None = None,
    ) -> str:
        with llm_call_context():
            self._emit_call_started_event(
                messages=messages,
                tools=tools,
                callbacks=callbacks,
                available_functions=available_functions,
                from_task=from_task,
                from_agent=from_agent,
            )
            try:
                turn = self._next(messages)
                if isinstance(turn, BaseException):
                    raise turn
                text = turn(messages) if callable(turn) else str(turn)
            except Exception as exc:
                self._emit_call_failed_event(
                    error=str(exc), from_task=from_task, from_agent=from_agent
                )
                raise
            if self._effective_stream():
                words = text.split(" ")
                for position, word in enumerate(words):
                    piece = word if position == len(words) - 1 else f"{word} "
                    self._emit_stream_chunk_event(
                        piece,
                        from_task=from_task,
                        from_agent=from_agent,
                        call_type=LLMCallType.LLM_CALL,
                    )
                if self.pause_after_tool_calls and "\nAction:" in text:
                    time.sleep(self.pause_after_tool_calls)
            self._emit_call_completed_event(
                response=text,
                call_type=LLMCallType.LLM_CALL,
                from_task=from_task,
                from_agent=from_agent,
                messages=messages,
                usage={
                    "prompt_tokens": self.get_input_tokens_count(messages),
                    "completion_tokens": len(text.split()),
                },
                finish_reason="stop",
            )
            return text
