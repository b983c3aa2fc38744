"""One place where a framework's progress becomes a well-formed event stream.

Frameworks report progress in their own shapes: chunks with an index but no call
id yet, reasoning that just stops when text begins, tool results for calls that
were never streamed, failures in the middle of a response. Every runner used to
re-implement the same pairing rules; :class:`EventBuilder` holds them once:

* reasoning ends when text or a tool call starts, and when its message ends;
* tool-call arguments that arrive before the call's id is known are held back,
  keyed by the framework's chunk index, and flushed once the id is known;
* a result for a call that was never announced gets a start and an end made up;
* a message ends its calls' argument streams (``tool_call_end``) before it ends;
* :meth:`EventBuilder.fail` closes what is open, the message with the error.

Several agents of one run at once (parallel branches): a runner passes ``branch=``
(any key the framework gives to tell the agents apart) to
:meth:`~EventBuilder.step_start`, :meth:`~EventBuilder.step_end` and
:meth:`~EventBuilder.message_start`; each branch then has its own innermost step,
and a message's reasoning and tool calls stay in the message's branch. An agent
that another agent starts (an agent run as a tool) is not a branch but a nested run
(:func:`~runnertrace.core.observer.open_nested_run`), with a builder of its own.

Each event is handed to the run's observer the moment it is made (so spans start
when things happen) and, in stream mode, queued for the runner to yield
(:meth:`EventBuilder.drain`). The builder never drops or reorders an event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager
from itertools import count
from typing import Any

from pydantic import JsonValue

from runnertrace.core import events as ev
from runnertrace.core.observer import NULL_OBSERVER, Observer

__all__ = ["EventBuilder"]

_ids = count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


class _Message:
    __slots__ = ("branch", "calls", "id", "pending", "reasoning")

    def __init__(self, message_id: str, branch: str | None = None) -> None:
        self.id = message_id
        self.branch = branch
        self.reasoning: str | None = None  # the open reasoning block's id
        self.calls: dict[Any, str] = {}  # chunk index (or id) -> tool call id, in order
        self.pending: dict[Any, list[str]] = {}  # args held back until the id is known


class EventBuilder:
    """Builds one run's events. Not thread-safe: one run, one task (or one loop)."""

    def __init__(self, observer: Observer = NULL_OBSERVER, *, queue: bool = False) -> None:
        self.observer = observer
        self._queue: deque[ev.StreamEvent] | None = deque() if queue else None
        self._messages: dict[str, _Message] = {}
        self._announced: set[str] = set()  # tool call ids whose start was emitted
        self._steps: list[tuple[str, int | None, str | None]] = []

    @property
    def observed(self) -> bool:
        """Whether anyone traces this run: a runner builds the request fields (what the
        model was sent) only then, so an untraced run pays nothing for them."""
        return self.observer is not NULL_OBSERVER

    # -- output -------------------------------------------------------------------------
    def emit(self, event: ev.StreamEvent) -> None:
        """Report ``event`` now and, in stream mode, queue it for the runner to yield."""
        self.observer(event)
        if self._queue is not None:
            self._queue.append(event)

    def drain(self) -> Iterator[ev.StreamEvent]:
        """The queued events, oldest first (stream mode); each is yielded once."""
        queue = self._queue
        while queue:
            yield queue.popleft()

    # -- scopes ---------------------------------------------------------------------------
    def tool_scope(self, tool_call_id: str) -> AbstractContextManager[None]:
        """Wrap the framework's execution of a tool: its ``execute_tool`` span starts here
        (not when the model announced the call) and spans opened inside nest under it.
        Enter it where the framework starts the tool, and report the result the moment
        the tool returns, so the span times the tool."""
        return self.observer.scope("tool", tool_call_id)

    def model_scope(self, message_id: str) -> AbstractContextManager[None]:
        """Wrap the framework's model request: its HTTP span nests under the chat span."""
        return self.observer.scope("model", message_id)

    # -- steps ----------------------------------------------------------------------------
    def step_start(
        self,
        name: str,
        index: int | None = None,
        *,
        agent_name: str | None = None,
        handoff_from: str | None = None,
        branch: str | None = None,
        parent_step: tuple[str, int | None, str | None] | None = None,
    ) -> None:
        """A step starts; ``branch``, ``parent_step``: see the module docstring and
        :class:`~runnertrace.core.events.StepStart`."""
        self._steps.append((name, index, branch))
        self.emit(
            ev.StepStart(
                step_name=name,
                step_index=index,
                agent_name=agent_name,
                handoff_from=handoff_from,
                branch=branch,
                parent_step=parent_step,
            )
        )

    def step_end(
        self,
        name: str | None = None,
        index: int | None = None,
        *,
        code: str | None = None,
        branch: str | None = None,
    ) -> None:
        """End the named step (default: the innermost open one); ``code`` is what it ran."""
        if name is None:
            if not self._steps:
                return
            name, index, branch = self._steps[-1]
        if (name, index, branch) in self._steps:
            self._steps.remove((name, index, branch))
        self.emit(ev.StepEnd(step_name=name, step_index=index, code=code, branch=branch))

    # -- model calls ----------------------------------------------------------------------
    def message_start(
        self,
        message_id: str | None = None,
        *,
        model: str | None = None,
        provider: str | None = None,
        input_messages: list[dict[str, JsonValue]] | None = None,
        system_instructions: str | None = None,
        request_parameters: dict[str, JsonValue] | None = None,
        tool_definitions: list[dict[str, JsonValue]] | None = None,
        branch: str | None = None,
    ) -> str:
        """A model request is sent; returns its message id (made up if not given).
        ``branch``: the branch whose step it belongs to (see the module docstring)."""
        message_id = message_id or _new_id("msg")
        self._messages[message_id] = _Message(message_id, branch)
        self.emit(
            ev.MessageStart(
                message_id=message_id,
                model=model,
                provider=provider,
                input_messages=input_messages,
                system_instructions=system_instructions,
                request_parameters=request_parameters,
                tool_definitions=tool_definitions,
                branch=branch,
            )
        )
        return message_id

    def _message(self, message_id: str | None) -> _Message:
        if message_id is None:
            if not self._messages:
                message_id = self.message_start()
            else:
                return next(reversed(self._messages.values()))
        message = self._messages.get(message_id)
        return message if message is not None else self._messages[self.message_start(message_id)]

    def _end_reasoning(self, message: _Message) -> None:
        if message.reasoning is not None:
            self.emit(ev.ReasoningEnd(message_id=message.reasoning))
            message.reasoning = None

    def reasoning(self, delta: str, message_id: str | None = None) -> None:
        """A chunk of reasoning; opens a reasoning block in the message if none is open."""
        message = self._message(message_id)
        if message.reasoning is None:
            message.reasoning = _new_id(f"{message.id}_reasoning")
            # In a branch, another branch's message may be newer: name the one it is part of.
            parent = message.id if message.branch is not None else None
            self.emit(ev.ReasoningStart(message_id=message.reasoning, parent_message_id=parent))
        if delta:
            self.emit(ev.ReasoningDelta(message_id=message.reasoning, delta=delta))

    def text(self, delta: str, message_id: str | None = None) -> None:
        """A chunk of the message's text; ends any open reasoning first."""
        message = self._message(message_id)
        self._end_reasoning(message)
        if delta:
            self.emit(ev.TextDelta(message_id=message.id, delta=delta))

    def tool_call(
        self,
        args_delta: str = "",
        *,
        tool_call_id: str | None = None,
        name: str | None = None,
        index: Any = None,
        message_id: str | None = None,
    ) -> None:
        """A tool call asked for by the message, or a chunk of its arguments.

        Chunks are matched by ``index`` (the framework's position of the call in
        the response) or by ``tool_call_id``. Until both the id and the name are
        known, argument chunks are held back; then the call starts and they follow.
        """
        message = self._message(message_id)
        self._end_reasoning(message)
        key = index if index is not None else tool_call_id
        known = message.calls.get(key) if key is not None else None
        if known is None and tool_call_id is not None and name is not None:
            known = message.calls[key if key is not None else tool_call_id] = tool_call_id
            self._announced.add(tool_call_id)
            self.emit(
                ev.ToolCallStart(
                    tool_call_id=tool_call_id, tool_name=name, parent_message_id=message.id
                )
            )
            for held in message.pending.pop(key, ()):
                self.emit(ev.ToolCallArgs(tool_call_id=tool_call_id, delta=held))
        if not args_delta:
            return
        if known is None:
            message.pending.setdefault(key, []).append(args_delta)
        else:
            self.emit(ev.ToolCallArgs(tool_call_id=known, delta=args_delta))

    def message_end(
        self,
        message_id: str | None = None,
        *,
        finish_reason: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_input_tokens: int | None = None,
        reasoning_output_tokens: int | None = None,
        response_model: str | None = None,
        response_id: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        """The response is complete (or failed, with ``error``): its calls' arguments
        end, then the message does."""
        if message_id is not None and message_id not in self._messages:
            return  # never started, or already ended: nothing to end twice
        message = self._message(message_id)
        del self._messages[message.id]
        self._end_reasoning(message)
        for call_id in message.calls.values():
            self.emit(ev.ToolCallEnd(tool_call_id=call_id))
        self.emit(
            ev.MessageEnd(
                message_id=message.id,
                finish_reason="error"
                if error is not None and finish_reason is None
                else finish_reason,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_input_tokens=cache_read_input_tokens,
                reasoning_output_tokens=reasoning_output_tokens,
                response_model=response_model,
                response_id=response_id,
                error=ev.EventError.from_exception(error) if error is not None else None,
            )
        )

    def tool_start(self, tool_call_id: str, name: str, arguments: str = "") -> None:
        """A tool call no model message asked for (a framework's own action, such as
        running the code a reply held): it starts, with its arguments, before it runs,
        so its scope has a span to make current. Nothing happens for a known call."""
        if tool_call_id in self._announced:
            return
        self._announced.add(tool_call_id)
        self.emit(ev.ToolCallStart(tool_call_id=tool_call_id, tool_name=name))
        if arguments:
            self.emit(ev.ToolCallArgs(tool_call_id=tool_call_id, delta=arguments))
        self.emit(ev.ToolCallEnd(tool_call_id=tool_call_id))

    # -- tool results ---------------------------------------------------------------------
    def tool_result(
        self,
        tool_call_id: str,
        content: str,
        *,
        name: str | None = None,
        error: BaseException | None = None,
        is_error: bool | None = None,
        started_at: int | None = None,
        ended_at: int | None = None,
    ) -> None:
        """The tool finished. A call never announced gets a start and an end first.
        ``started_at``/``ended_at`` (``time.time_ns()``): when it ran, if that was not
        just now in its tool scope."""
        if tool_call_id not in self._announced:
            self._announced.add(tool_call_id)
            self.emit(ev.ToolCallStart(tool_call_id=tool_call_id, tool_name=name or "unknown"))
            self.emit(ev.ToolCallEnd(tool_call_id=tool_call_id))
        self.emit(
            ev.ToolCallResult(
                tool_call_id=tool_call_id,
                content=content,
                is_error=(error is not None) if is_error is None else is_error,
                error=ev.EventError.from_exception(error) if error is not None else None,
                started_at=started_at,
                ended_at=ended_at,
            )
        )

    # -- failure --------------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """The run failed: every open message ends with ``error`` (innermost last)."""
        for message_id in list(self._messages):
            self.message_end(message_id, error=error)
