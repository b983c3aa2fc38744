"""The mapping: what one Agent Framework run reports, as builder calls.

Our middleware (:mod:`.adapter`) and the model stream's hooks hand each model request,
streamed update, response and tool result to a :class:`_Mapper`; it makes the steps,
messages and tool results of the run's event stream. It is ``@guarded``: a fault in
any of its methods is reported once and costs that report only, and the run goes on
(``update`` then hands its update back unchanged, so the stream a consumer reads is
the framework's own).

:data:`_BOUNDARY` is the runner's one mapping boundary; every module of the runner
uses it.
"""

from __future__ import annotations

from typing import Any

from agent_framework import AgentResponse, ChatContext, ChatResponse, ChatResponseUpdate, Content

from runnertrace._internal.errors import internal_log
from runnertrace.runners._kit.adapter import fault_returns, guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.maf.convert import result_value
from runnertrace.runners.maf.request import model_of, provider_of, request_fields

_BOUNDARY = MappingBoundary("maf")
"""The runner's error boundary: every guarded class, bracket and install step uses it."""


class _ContentRun:
    """One run of text or reasoning contents (its type and id), and what it reported."""

    __slots__ = ("occurrence", "reported")

    def __init__(self, occurrence: tuple[str, str | None]) -> None:
        self.occurrence = occurrence
        self.reported = ""


class _Streamed:
    """What one model message has reported so far, per occurrence, so that a content
    in replace mode sends only what it adds.

    Agent Framework streams deltas (``merge_mode`` "append" or unset) and, from some
    clients, the whole value again (``merge_mode="replace"``: the Responses client
    repeats each text, reasoning and argument value from its ``.done`` events). It
    merges them itself (``ChatResponse.from_updates``); the event stream has to do
    the same or it shows every value twice. As there, a text or reasoning content
    belongs to the run of same-type contents it follows (reasoning also by its id),
    and a tool call's arguments to its call id. An update in replace mode
    (``ChatResponseUpdate.merge_mode``) is a snapshot of the whole message: its
    contents replace the message's occurrences in order.
    """

    __slots__ = ("arguments", "last_call", "runs", "snapshot")

    def __init__(self) -> None:
        self.runs: list[_ContentRun] = []  # in message order
        self.arguments: dict[str, str] = {}  # call id -> arguments reported
        self.last_call: str | None = None  # the call id the last call chunk named
        self.snapshot: int | None = None  # in a replace-mode update: the next run to match


def _continued(streamed: _Streamed, kind: str, content_id: str | None) -> _ContentRun:
    """The run a content of this type and id continues in ``streamed`` (or a new one)."""
    occurrence = (kind, content_id)
    runs = streamed.runs
    if streamed.snapshot is not None:
        for index in range(streamed.snapshot, len(runs)):
            if runs[index].occurrence == occurrence:
                streamed.snapshot = index + 1
                return runs[index]
        streamed.snapshot = len(runs) + 1
    elif runs and runs[-1].occurrence == occurrence:
        return runs[-1]
    run = _ContentRun(occurrence)
    runs.append(run)
    return run


def _added(reported: str, value: str, replace: bool, what: str) -> str:
    """What a content adds to what its occurrence reported: all of it when it is a
    delta; when it is the whole value again, only what lies beyond the reported part.
    A whole value that contradicts what was already streamed cannot be taken back:
    the stream keeps what it sent, and the mismatch is logged."""
    if not replace:
        return value
    if value.startswith(reported):
        return value[len(reported) :]
    internal_log.warning(
        f"maf replaced {what}",
        "Agent Framework replaced the streamed %s with a different value; the stream "
        "keeps what it already sent (%d characters, the replacement has %d)",
        what,
        len(reported),
        len(value),
    )
    return ""


@guarded(_BOUNDARY)
class _Mapper:
    """Turns one run's middleware and stream-hook calls into builder calls.

    One per run (and one per inner agent's run, see :mod:`.nesting`); every call
    comes from the run's own task, so plain attributes do. ``detailed`` says whether
    to build the request fields (only worth it when someone observes).
    """

    def __init__(self, builder: EventBuilder, agent_name: str, *, detailed: bool) -> None:
        self.builder = builder
        self._agent_name = agent_name
        self._detailed = detailed
        self._step: int | None = None
        self._steps = 0
        self._streamed: dict[str, _Streamed] = {}  # message id -> what it reported so far
        self._answered: set[str] = set()  # tool call ids whose result was reported

    # steps and messages -------------------------------------------------------------------
    def chat_started(self, context: ChatContext) -> str:
        """A model request: the previous step (its tools ran) ends, a new one starts;
        returns the message's id (``None`` after a fault: nothing more is reported for
        the request)."""
        self._end_step()
        self._step = self._steps
        self._steps += 1
        self.builder.step_start(self._agent_name, self._step)
        fields = _BOUNDARY.detail(request_fields, context) if self._detailed else {}
        return self.builder.message_start(
            model=model_of(context), provider=provider_of(context), **fields
        )

    def _end_step(self) -> None:
        if self._step is not None:
            self.builder.step_end(self._agent_name, self._step)
            self._step = None

    def run_finished(self, response: Any = None) -> None:
        """The run ended (the agent middleware, or the agent stream's result hook) with
        ``response``: the results of tool calls that a middleware answered without
        running the tool (a handoff orchestration's ``handoff_to_<agent>`` tools), which
        only the response holds, then the last step's end."""
        if isinstance(response, AgentResponse):
            self._unrun_results(response)
        self._end_step()

    def _unrun_results(self, response: AgentResponse[Any]) -> None:
        names: dict[str, str] = {}
        for message in response.messages:
            for content in message.contents:
                call_id = content.call_id
                if not call_id:
                    continue
                if content.type == "function_call" and content.name:
                    names[call_id] = content.name
                elif content.type == "function_result" and call_id not in self._answered:
                    self._answered.add(call_id)
                    text = as_text(result_value(content.result))
                    self.builder.tool_result(call_id, text, name=names.get(call_id))

    def _content(self, message_id: str, content: Content) -> None:
        kind = content.type
        if kind == "usage":
            return
        streamed = self._streamed.setdefault(message_id, _Streamed())
        replace = streamed.snapshot is not None or content.merge_mode == "replace"
        if kind in ("text", "text_reasoning"):
            run = _continued(streamed, kind, content.id)
            value = content.text or ""
            added = _added(run.reported, value, replace, "text" if kind == "text" else "reasoning")
            run.reported = value if replace else run.reported + value
            if kind == "text":
                self.builder.text(added, message_id)
            elif added or not replace:  # a repeated value opens no empty reasoning block
                self.builder.reasoning(added, message_id)
            return
        _continued(streamed, kind, None)  # ends the text or reasoning run before it
        if kind == "function_call":
            call_id = content.call_id or streamed.last_call
            if call_id:
                streamed.last_call = call_id
            arguments = content.arguments
            value = arguments if isinstance(arguments, str) else as_text(arguments or {})
            value = value if arguments else ""
            reported = streamed.arguments.get(call_id or "", "")
            delta = _added(reported, value, replace, "tool-call arguments")
            streamed.arguments[call_id or ""] = value if replace else reported + value
            self.builder.tool_call(
                delta,
                tool_call_id=call_id or None,
                name=content.name or None,
                message_id=message_id,
            )

    @fault_returns(lambda self, message_id, update: update)
    def update(self, message_id: str, update: ChatResponseUpdate) -> ChatResponseUpdate:
        """Stream mode: one update of the model stream (a transform hook: the update is
        passed on unchanged, after a fault too)."""
        streamed = self._streamed.setdefault(message_id, _Streamed())
        if update.merge_mode == "replace":  # the whole message so far: match from the start
            streamed.snapshot = 0
        try:
            for content in update.contents:
                self._content(message_id, content)
        finally:
            streamed.snapshot = None
        return update

    def response(self, message_id: str, response: ChatResponse[Any]) -> None:
        """Run mode: the whole response's contents (:meth:`finished` ends the message)."""
        for message in response.messages:
            for content in message.contents:
                self._content(message_id, content)

    def finished(self, message_id: str, response: ChatResponse[Any]) -> None:
        """The message ends with the response's usage (stream mode: a result hook)."""
        usage = response.usage_details or {}
        reason = response.finish_reason
        self._streamed.pop(message_id, None)
        self.builder.message_end(
            message_id,
            finish_reason=str(reason) if reason is not None else None,
            input_tokens=usage.get("input_token_count"),
            output_tokens=usage.get("output_token_count"),
            response_model=response.model,
            response_id=response.response_id,
        )

    def failed(self, message_id: str, error: BaseException) -> None:
        self._streamed.pop(message_id, None)
        self.builder.message_end(message_id, error=error)

    # tools ---------------------------------------------------------------------------------
    def tool_returned(self, call_id: str, name: str, result: Any) -> None:
        self._answered.add(call_id)
        self.builder.tool_result(call_id, as_text(result_value(result)), name=name)

    def tool_failed(self, call_id: str, name: str, error: BaseException) -> None:
        self._answered.add(call_id)
        self.builder.tool_result(
            call_id, f"{type(error).__name__}: {error}", name=name, error=error
        )
