"""The mapping: one agent run's model calls, tool calls, step callbacks and stream
items, as builder calls.

The stand-ins the runner puts on the agent (``adapter``) tell the mapper what
happens; the mapper alone calls the builder. Its class is guarded: each public
method runs in the runner's one boundary (:data:`BOUNDARY`), so a fault there
(a smolagents release that renamed what a method reads) is logged once and costs
that report, never the run. A method the stand-ins use as a part of a call's
bracket (a start that gives an id, the scope, the end) takes the ``None`` a
faulty start gives as "not reported": nothing is reported for that call after it.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from smolagents import MultiStepAgent, Tool
from smolagents.memory import ActionStep, MemoryStep, PlanningStep, ToolCall
from smolagents.models import ChatMessage, ChatMessageStreamDelta
from smolagents.utils import AgentError

from runnertrace.runners._kit import genai
from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.nesting import NestedRuns
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.smolagents.convert import answer_text, reply_for
from runnertrace.runners.smolagents.request import provider_of, request_fields

__all__ = ["BOUNDARY", "CODE_TOOL", "FINAL_ANSWER"]

BOUNDARY = MappingBoundary("smolagents")
"""The runner's one boundary: the mapper, the stand-ins and the install step use it."""

CODE_TOOL = "python_interpreter"  # the tool call a CodeAgent's code runs as (smolagents' name)
FINAL_ANSWER = "final_answer"  # the tool a ToolCallingAgent answers with
_NO_SCOPE: AbstractContextManager[None] = nullcontext()


@dataclass
class _Queued:
    call_id: str
    name: str
    arguments: Any


@guarded(BOUNDARY)
class _Mapper:
    """Turns one agent run's progress into builder calls.

    Calls come from the run's worker thread and, for parallel tool calls, from
    smolagents' tool threads, so every builder call holds ``lock``. Once
    ``closed`` (the run was cancelled), nothing more is reported. A managed agent's
    run has a mapper of its own, reporting to its nested run, which its manager's
    ``members`` keeps (under ``key``) and ends: with the member's answer or error,
    else cancelled when the manager's run ends. The manager keeps the member's
    mapper in ``children`` too, so that a cancellation reaches its own members.
    """

    def __init__(
        self,
        builder: EventBuilder,
        agent_name: str,
        native: MultiStepAgent,
        manager: _Mapper | None = None,
        key: int = 0,
    ) -> None:
        self.builder = builder
        self.manager = manager
        self.key = key
        self.lock = threading.Lock()
        self.closed = False
        self.native = native
        self.members: NestedRuns[int] = NestedRuns(BOUNDARY)  # the members' runs, by key
        self.member_keys = itertools.count(1)
        self.children: list[_Mapper] = []  # the members' mappers
        self.code_context: contextvars.Context | None = None  # a CodeAgent call's, while it runs
        self._code_call: str | None = None  # a CodeAgent call to run in its scope next
        self._agent_name = agent_name
        self._model = native.model
        self._step: int | None = None
        self._queued: list[_Queued] = []
        self._pending: dict[str, str] = {}  # call id -> tool name, no result yet this step
        self._answers: dict[tuple[str, Any], list[str]] = {}  # streamed final_answer arguments
        self._usage: dict[str, list[int]] = {}  # message id -> streamed (input, output) tokens
        self._made_up = 0

    # steps ------------------------------------------------------------------------------------
    def _open_step(self) -> None:
        if self._step is None:
            self._step = self.native.step_number
            self.builder.step_start(self._agent_name, self._step)

    def step_ended(self, step: MemoryStep) -> None:
        """The step callback (action and planning steps): settle what the step left
        pending, then end it."""
        if not isinstance(step, ActionStep | PlanningStep):
            return
        with self.lock:
            if self.closed:
                return
            error = getattr(step, "error", None)
            observations = getattr(step, "observations", None)
            for call_id, name in list(self._pending.items()):
                content = str(error.message) if isinstance(error, AgentError) else ""
                self.builder.tool_result(
                    call_id,
                    content or str(observations or ""),
                    name=name,
                    error=(error.__cause__ or error) if error is not None else None,
                )
            self._pending.clear()
            self._queued.clear()
            if self._step is None:
                return
            code = getattr(step, "code_action", None)
            self.builder.step_end(self._agent_name, self._step, code=code)
            self._step = None

    # model calls ----------------------------------------------------------------------------
    def model_started(
        self, messages: Sequence[Any], stop: list[str] | None, tools: Sequence[Tool] | None
    ) -> str | None:
        """A model call starts (its step too, at the step's first call): its message id."""
        with self.lock:
            if self.closed:
                return None
            self._open_step()
            fields = (
                BOUNDARY.detail(request_fields, self._model, messages, stop, tools)
                if self.builder.observed
                else {}
            )
            return self.builder.message_start(
                model=getattr(self._model, "model_id", None),
                provider=provider_of(self._model),
                **fields,
            )

    def model_scope(self, message_id: str | None) -> AbstractContextManager[None]:
        """What the model request runs in: its HTTP span nests under the chat span."""
        return _NO_SCOPE if message_id is None else self.builder.model_scope(message_id)

    def delta(self, message_id: str | None, delta: ChatMessageStreamDelta) -> None:
        """One chunk of a streamed reply: its text, tool-call pieces and usage."""
        if message_id is None:
            return
        with self.lock:
            if self.closed:
                return
            if delta.token_usage is not None:
                tokens = self._usage.setdefault(message_id, [0, 0])
                tokens[0] += delta.token_usage.input_tokens
                tokens[1] += delta.token_usage.output_tokens
            if delta.content:
                self.builder.text(delta.content, message_id)
            for piece in delta.tool_calls or ():
                function = piece.function
                key = (message_id, piece.index)
                if function is not None and function.name == FINAL_ANSWER:
                    self._answers[key] = []
                if key in self._answers:  # the answer, not a tool call: text at message end
                    self._answers[key].append(function.arguments or "" if function else "")
                    continue
                self.builder.tool_call(
                    function.arguments or "" if function is not None else "",
                    tool_call_id=piece.id,
                    name=(function.name or None) if function is not None else None,
                    index=piece.index,
                    message_id=message_id,
                )

    def model_done(self, message_id: str | None, reply: ChatMessage) -> None:
        """A model call answered ``reply`` (not streamed): its text, tool calls, usage."""
        usage = reply.token_usage
        tokens = (usage.input_tokens, usage.output_tokens) if usage is not None else None
        self._end_message(message_id, reply, tokens)

    def stream_done(self, message_id: str | None) -> None:
        """A streamed reply ended: its usage is what its chunks reported."""
        if message_id is None:
            return
        with self.lock:
            counted = self._usage.pop(message_id, None)
        self._end_message(message_id, None, (counted[0], counted[1]) if counted else None)

    def model_failed(self, message_id: str | None, error: BaseException) -> None:
        self._usage.pop(message_id or "", None)
        self._end_message(message_id, None, None, error)

    def _end_message(
        self,
        message_id: str | None,
        reply: ChatMessage | None,
        usage: tuple[int, int] | None,
        error: BaseException | None = None,
    ) -> None:
        if message_id is None:
            return
        with self.lock:
            if self.closed:
                return
            for key in [k for k in self._answers if k[0] == message_id]:
                self.builder.text(answer_text("".join(self._answers.pop(key))), message_id)
            if reply is not None:
                text = reply.content if isinstance(reply.content, str) else None
                if text:
                    self.builder.text(text, message_id)
                for call in reply.tool_calls or ():
                    if call.function.name == FINAL_ANSWER:
                        self.builder.text(answer_text(call.function.arguments), message_id)
                        continue
                    self.builder.tool_call(
                        genai.as_text(call.function.arguments),
                        tool_call_id=call.id,
                        name=call.function.name,
                        message_id=message_id,
                    )
            self.builder.message_end(
                message_id,
                input_tokens=usage[0] if usage else None,
                output_tokens=usage[1] if usage else None,
                response_model=getattr(self._model, "model_id", None),
                error=error,
            )

    # tools ----------------------------------------------------------------------------------
    def tool_started(self, name: str, arguments: Any) -> str:
        """A ``ToolCallingAgent`` executes a tool: the announced call it answers (same
        name, same arguments), or an id made up for one nobody announced."""
        with self.lock:
            for match in (
                lambda q: q.arguments is arguments,
                lambda q: q.arguments == arguments,
                lambda q: True,
            ):
                for queued in self._queued:
                    if queued.name == name and match(queued):
                        self._queued.remove(queued)
                        return queued.call_id
            self._made_up += 1
            return f"{name}_{self._made_up}"

    def tool_scope(self, call_id: str | None) -> AbstractContextManager[None]:
        """What the tool runs in. Taking it opens the tool's span, so it is taken under
        the lock (parallel calls, one at a time); an unreported call's scope only hides
        the run from the tool's body."""
        with self.lock:
            return self.builder.tool_scope(call_id or "")

    def tool_done(self, call_id: str | None, name: str, result: Any) -> None:
        self._settle(call_id, name, str(result))

    def tool_failed(self, call_id: str | None, name: str, error: BaseException) -> None:
        message = str(getattr(error, "message", error))
        self._settle(call_id, name, message, error=error.__cause__ or error)

    def _settle(
        self, call_id: str | None, name: str, content: str, error: BaseException | None = None
    ) -> None:
        if call_id is None:
            return
        with self.lock:
            if self.closed:
                return
            self._pending.pop(call_id, None)
            self.builder.tool_result(call_id, content, name=name, error=error)

    # stream items ---------------------------------------------------------------------------
    def item(self, item: Any) -> None:
        """One item of ``run(stream=True)`` (deltas come through the model stand-in)."""
        if not isinstance(item, ToolCall) or item.name == FINAL_ANSWER:
            return
        with self.lock:
            if self.closed:
                return
            # Announced by the model already, unless smolagents parsed it from text or it
            # is a CodeAgent's code; then it starts here, before it runs.
            self.builder.tool_start(item.id, item.name, genai.as_text(item.arguments))
            self._pending[item.id] = item.name
            if item.name == CODE_TOOL:
                self._code_call = item.id
            else:
                self._queued.append(_Queued(item.id, item.name, item.arguments))

    def take_code_call(self) -> str | None:
        """The ``python_interpreter`` call the next item runs (a CodeAgent's code), once."""
        code_call, self._code_call = self._code_call, None
        return code_call

    def code_scope(self, call_id: str) -> AbstractContextManager[None]:
        """The scope a CodeAgent's code runs in: its call's tool scope, whose context
        the code's tools are called in too (the executor runs them in a thread of its
        own, which starts without it)."""
        return self._in_code_scope(call_id)

    @contextmanager
    def _in_code_scope(self, call_id: str) -> Iterator[None]:
        with self.builder.tool_scope(call_id):
            self.code_context = contextvars.copy_context()
            try:
                yield
            finally:
                self.code_context = None

    # the run's ends ---------------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        with self.lock:
            if not self.closed:
                self.builder.fail(error)

    def run_ended(self, task: str, output: Any) -> None:
        """A managed agent answered: its nested run ends with the answer (unless its
        manager's run ended it already)."""
        manager = self.manager
        if manager is not None:
            with manager.lock:
                manager.members.end(self.key, reply_for(output, task))

    def run_failed(self, error: BaseException) -> None:
        """A managed agent failed: its nested run ends with the error (the open message
        or tool with it)."""
        manager = self.manager
        if manager is not None:
            with manager.lock:
                manager.members.end(self.key, error=error)

    def end_members(self) -> None:
        """The run ends: a member's run still open (its end was never reported) ends
        cancelled, inside this run, the innermost first."""
        with self.lock:
            children = list(self.children)
        for child in children:
            child.end_members()
        with self.lock:
            self.members.end_all()

    def close(self) -> None:
        """The run was cancelled: report nothing more (nor do its managed agents' runs,
        which end cancelled and are interrupted: they stop at their next step, as the
        manager does)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            children = list(self.children)
        for child in children:
            child.native.interrupt()
            child.close()
        with self.lock:
            self.members.end_all()
