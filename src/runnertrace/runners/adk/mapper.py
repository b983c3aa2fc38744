"""The mapper: ADK's progress, as our plugin hears it, turned into builder calls.

* A step is one model call and the tool calls it asks for (ADK's LLM-flow step);
  it starts at ``before_model_callback`` and ends when the next one on its lane
  starts, its agent is done (``after_agent_callback``) or the run ends. A *lane*
  is one ADK invocation on one ADK branch (``invocation_id``, ``branch``), on
  which agents take turns: a ``sub_agents`` transfer, a ``SequentialAgent``'s
  agents, a ``LoopAgent``'s iterations. A step after a ``transfer_to_agent`` call
  by another agent records the handoff (source and target); a turn of a workflow
  agent is a plain step of the new agent.
* Compositions inside one run are builder branches (see
  :mod:`runnertrace.runners._kit.builder`): the run's own lane is the run's line,
  every other lane a branch keyed by its invocation and ADK branch, its steps under
  the run span. A ``ParallelAgent`` gives each sub-agent its own ADK branch, so its
  branches' steps overlap, each with its own chat and tool spans and agent name; a
  step on a lane ends the steps of the invocation's lanes that take turns with it
  (any but one parting right under a ``ParallelAgent``).
* An ``AgentTool``'s agent is a nested run (discovered in :mod:`.nesting`, its life
  the kit's :class:`~runnertrace.runners._kit.nesting.NestedRuns`, keyed by the tool
  call's id): a mapper of its own reports to it, under the tool's ``execute_tool``
  span, and closes what it holds as the run ends. Its totals roll up into the run
  that called the tool. When the tool call is cancelled (a sibling branch of a
  ``ParallelAgent`` failed; ADK then calls ``on_tool_error_callback`` with the
  ``CancelledError``), the nested run ends cancelled, and its open step and
  unfinished chat span with it (the ADK ``after_agent_callback`` of an agent being
  cancelled ends nothing there). An untraced stream does not map it: the stream is
  the outer agent's. Any run still open when its caller's run ends (fails, stops)
  ends cancelled first.
* The chat span starts when the request is about to be sent (:mod:`.request`).
  ``on_model_error_callback`` ends it with the exception, in its step. ADK does not
  retry a failed model call; unless an error callback answers for the model, the
  run fails. The chat span is made current around the model call: entered in
  ``before_model_callback`` and left in the final ``after_model_callback`` (or
  ``on_model_error_callback``), which ADK runs in its own task inside the scope it
  drives the model call with, so a span opened inside a model call (an HTTP
  client's, the user's own) nests under it; not where ADK's spans record under a
  quiet context (see :mod:`.quiet`), as they would nest there too.
* A tool call runs in the tool scope from ``before_tool_callback`` to
  ``after_tool_callback`` / ``on_tool_error_callback`` (ADK runs all three in the
  same task, so spans opened in the tool nest under its ``execute_tool``), held in
  a :class:`~runnertrace.runners._kit.adapter.ScopeLedger` by the call's id. A tool
  that raises is reported with its exception, whether an ``on_tool_error`` callback
  feeds a response back to the model or the run fails.

Every public method runs in the runner's one boundary (:data:`_BOUNDARY`): a fault
costs telemetry only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from google.adk.agents import BaseAgent, ParallelAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from runnertrace.core.models import AgentReply
from runnertrace.runners._kit.adapter import ScopeLedger, guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.mcp import mcp_call
from runnertrace.runners._kit.nesting import NestedAgentRun, NestedRuns
from runnertrace.runners._kit.skeleton import MappingBoundary, reply_of
from runnertrace.runners.adk.convert import final_text, result_text
from runnertrace.runners.adk.mcp import is_mcp_tool
from runnertrace.runners.adk.nesting import agent_tool_call, inner_run, runs_an_agent
from runnertrace.runners.adk.quiet import attached, quiet_context, spans_recorded
from runnertrace.runners.adk.request import provider_of, request_fields

_BOUNDARY = MappingBoundary("google_adk")
"""The runner's one boundary: every file of the runner uses this one."""

_TRANSFER = "transfer_to_agent"  # ADK's tool for a transfer to another agent
_FINISH_REASONS = {types.FinishReason.STOP: "stop", types.FinishReason.MAX_TOKENS: "length"}

_LaneKey = tuple[str, str]  # (ADK invocation id, ADK branch)


def _concurrent(branch: str, other: str, root: BaseAgent | None) -> bool:
    """Whether two ADK branches of one invocation run at the same time: they part
    right under a ``ParallelAgent`` (ADK names a sub-agent's branch
    ``<parallel>.<sub-agent>`` under its parent's); a branch and one it contains, or
    two that part under any other agent, take turns. Agents of no tree we can read
    (``root`` is ``None``) may run at once: neither's step is ended by the other."""
    ours, theirs = branch.split(".") if branch else [], other.split(".") if other else []
    shared = 0
    for mine, yours in zip(ours, theirs, strict=False):
        if mine != yours:
            break
        shared += 1
    if shared in (0, len(ours), len(theirs)):
        return False
    if root is None:
        return True
    parting = root.find_agent(ours[shared - 1].partition("@")[0])
    return isinstance(parting, ParallelAgent)


def _cancelling() -> bool:
    """Whether the task running now is being cancelled (ADK calls some callbacks on
    its way out of a cancelled agent)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Lane:
    """One line of steps: the agents of one ADK invocation on one ADK branch take
    turns on it (a transfer, a ``SequentialAgent``, a ``LoopAgent``); a
    ``ParallelAgent`` gives each sub-agent its own branch. ``branch`` is its
    builder branch (``None``: the run's own line)."""

    __slots__ = ("agent", "branch", "step", "transferring")

    def __init__(self, branch: str | None) -> None:
        self.branch = branch
        self.step: tuple[str, int] | None = None
        self.agent: str | None = None
        self.transferring = False  # its step called transfer_to_agent


class _ModelCall:
    """One agent's model call in progress: its message, and what its partial
    responses carried (``True``: reasoning, ``False``: text)."""

    __slots__ = ("message", "streamed")

    def __init__(self, message: str) -> None:
        self.message = message
        self.streamed: set[bool] = set()


@guarded(_BOUNDARY)
class _Mapper:
    """Turns one run's plugin callbacks into builder calls.

    One instance per mapped run: the run's own, and one per agent run an
    ``AgentTool`` starts (``nested``: the nested run it reports to). Steps, model
    calls and their tool calls are kept per lane (see :class:`_Lane`), since the
    agents of a ``ParallelAgent`` call their models at the same time.
    ``model_scopes`` says whether the chat span may be made current around the
    model call, ``silenced`` whether ADK's tracer passes the context through in
    this run (both set by the runner's ``install`` and ``quiet`` steps).
    """

    def __init__(
        self,
        builder: EventBuilder,
        *,
        model_scopes: bool,
        silenced: bool = False,
        nested: NestedAgentRun | None = None,
        prompt: str = "",
    ) -> None:
        self.builder = builder
        self._detailed = builder.observed
        self.model_scopes = model_scopes
        self.silenced = silenced
        self.nested = nested
        self._prompt = prompt
        self._output: str | None = None  # a nested run: its final text so far
        self._steps = 0
        self.root: str | None = None  # the run's own invocation id
        self._lanes: dict[_LaneKey, _Lane] = {}
        self._calls: dict[_LaneKey, _ModelCall] = {}  # lane -> its model call in progress
        self._models: ScopeLedger[_LaneKey] = ScopeLedger(_BOUNDARY)  # chat span current
        self._tools: ScopeLedger[str] = ScopeLedger(_BOUNDARY)  # call id -> its scopes
        self._agent_runs: NestedRuns[str] = NestedRuns(_BOUNDARY)  # AgentTool call -> run
        self._pending: dict[str, str] = {}  # tool call id -> tool name, no result yet
        self._failed: set[str] = set()  # reported failed; a fed-back response follows

    @property
    def ended(self) -> bool:
        """A nested run's mapping whose run has ended: nothing more is mapped."""
        return self.nested is not None and self.nested.ended

    # invocations and lanes ----------------------------------------------------------
    def run_started(self, invocation_id: str) -> None:
        """The run's own invocation starts."""
        self.root = invocation_id

    def run_ended(self, invocation_id: str) -> None:
        """An invocation is over: its lanes' last steps end (an agent run's before its
        tool's result closes its span)."""
        for key in [k for k in self._lanes if k[0] == invocation_id]:
            self._close(key)
            self.end_step(key)

    def agent_ended(self, key: _LaneKey, agent_name: str) -> None:
        """An agent is done: its last step on its lane ends now, not when the lane is
        next used (a ``ParallelAgent`` branch that finishes first, a failing run).
        ADK calls this for an agent being cancelled too: in a nested run, its step
        is then left to end, marked cancelled, with the run."""
        if self.nested is not None and _cancelling():
            return
        lane = self._lanes.get(key)
        if lane is not None and lane.agent == agent_name:
            self._close(key)
            self.end_step(key)

    def _lane(self, key: _LaneKey) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            invocation, branch = key
            own_line = invocation == self.root and not branch
            lane = self._lanes[key] = _Lane(None if own_line else f"{invocation}:{branch}")
        return lane

    # agent runs (AgentTool) -----------------------------------------------------------
    def open_agent_run(self, call_id: str, invocation_context: InvocationContext) -> _Mapper | None:
        """The invocation an ``AgentTool`` call of this run starts: a nested run under
        the tool's span, mapped by a mapper of its own (``None``: not traced)."""
        if not self._detailed or self.ended or not self._tools.holds(call_id):
            return None
        name, mode, requests, prompt = inner_run(invocation_context)
        with self.builder.tool_scope(call_id):  # opened under the tool's span
            nested = self._agent_runs.open(call_id, name, mode=mode, requests=requests)
        if nested is None:
            return None
        child = _Mapper(
            nested.builder,
            model_scopes=self.model_scopes,
            silenced=self.silenced,
            nested=nested,
            prompt=prompt,
        )
        nested.closing = child.close_nested
        child.run_started(invocation_context.invocation_id)
        return child

    def see(self, event: Event) -> None:
        """A nested run keeps its final response's text (its reply)."""
        if self.nested is not None:
            text = final_text(event)
            if text:
                self._output = text

    def end_run(self, error: BaseException | None = None) -> None:
        """A nested run's own invocation ended: with its reply, or with ``error``."""
        nested = self.nested
        if nested is not None:
            if error is None:
                nested.end()  # the reply: what close_nested answers
            else:
                nested.fail(error)

    def close_nested(self, cancelled: bool) -> AgentReply | None:
        """The nested run this mapping reports to ends (the kit calls this once, before
        its span ends): the runs it started end first (they roll up into it), then
        what is open closes, unless it was cancelled (its tasks are gone: no scope is
        left, its open spans end marked cancelled). Its reply is its final text."""
        self.end_agent_runs()
        if cancelled:
            self._calls.clear()
            return None
        self.finish()
        return reply_of(self._output, self._prompt)

    def end_agent_runs(self) -> None:
        """This run ends: the agent runs still open were cut short (cancelled)."""
        self._agent_runs.end_all()

    # steps --------------------------------------------------------------------------
    def end_step(self, key: _LaneKey) -> None:
        lane = self._lanes.get(key)
        if lane is not None and lane.step is not None:
            name, index = lane.step
            lane.step = None
            self.builder.step_end(name, index, branch=lane.branch)

    def _start_step(self, key: _LaneKey, agent_name: str, root: BaseAgent | None) -> _Lane:
        """A model call starts a step on its lane: the lane's previous step ends, and
        so do those of the invocation's other lanes, unless they run alongside it
        (branches of one ``ParallelAgent``): the agent that ran there is done or
        waits for this one."""
        invocation, branch = key
        for other in [k for k in self._lanes if k[0] == invocation and k != key]:
            if not _concurrent(branch, other[1], root):
                self.end_step(other)
        self.end_step(key)
        lane = self._lane(key)
        handoff = lane.agent if lane.transferring and lane.agent != agent_name else None
        lane.agent, lane.transferring = agent_name, False
        self._steps += 1
        lane.step = (agent_name, self._steps)
        self.builder.step_start(
            agent_name,
            self._steps,
            agent_name=agent_name,
            handoff_from=handoff,
            branch=lane.branch,
        )
        return lane

    # model calls ----------------------------------------------------------------------
    def model_started(
        self, key: _LaneKey, agent_name: str, root: BaseAgent | None, llm_request: LlmRequest
    ) -> None:
        self._close(key)
        lane = self._start_step(key, agent_name, root)
        fields = _BOUNDARY.detail(request_fields, llm_request) if self._detailed else {}
        message = self.builder.message_start(
            model=llm_request.model,
            provider=provider_of(llm_request.model),
            branch=lane.branch,
            **fields,
        )
        self._calls[key] = _ModelCall(message)
        if self.model_scopes:
            self._models.enter(key, self.builder.model_scope(message))

    def _end(self, key: _LaneKey) -> _ModelCall | None:
        """The lane's model call is over: its scope is left (same task as entered)."""
        call = self._calls.pop(key, None)
        if call is not None:
            self._models.leave(key)
        return call

    def model_responded(self, key: _LaneKey, response: LlmResponse) -> None:
        call = self._calls.get(key)
        if call is None:  # a response no request of ours announced (a callback's)
            call = self._calls[key] = _ModelCall(
                self.builder.message_start(
                    model=response.model_version,
                    provider=provider_of(response.model_version),
                    branch=self._lane(key).branch,
                )
            )
        message = call.message
        parts = response.content.parts or [] if response.content is not None else []
        if response.partial:
            call.streamed.update(bool(p.thought) for p in parts if p.text)
            self._content(parts, message)
            return
        # The final response repeats what the partial ones streamed: only the rest is new.
        self._content([p for p in parts if bool(p.thought) not in call.streamed], message)
        for index, part in enumerate(parts):
            function_call = part.function_call
            if function_call is not None and function_call.id and function_call.name:
                self._pending[function_call.id] = function_call.name
                self.builder.tool_call(
                    json.dumps(function_call.args or {}),
                    tool_call_id=function_call.id,
                    name=function_call.name,
                    index=index,
                    message_id=message,
                )
        usage = response.usage_metadata
        reason = response.finish_reason
        self._end(key)
        self.builder.message_end(
            message,
            finish_reason="error"
            if response.error_code
            else _FINISH_REASONS.get(reason, str(reason.value).lower())
            if reason is not None
            else None,
            input_tokens=usage.prompt_token_count if usage is not None else None,
            output_tokens=usage.candidates_token_count if usage is not None else None,
            cache_read_input_tokens=usage.cached_content_token_count if usage else None,
            reasoning_output_tokens=usage.thoughts_token_count if usage else None,
            response_model=response.model_version,
            response_id=response.interaction_id,
        )

    def _content(self, parts: Sequence[types.Part], message: str) -> None:
        for part in parts:
            if part.text:
                if part.thought:
                    self.builder.reasoning(part.text, message)
                else:
                    self.builder.text(part.text, message)

    def model_failed(self, key: _LaneKey, error: BaseException) -> None:
        call = self._end(key)
        if call is not None:
            self.builder.message_end(call.message, error=error)

    def _close(self, key: _LaneKey) -> None:
        """A model call no response closed (an agent callback answered for the model)."""
        call = self._end(key)
        if call is not None:
            self.builder.message_end(call.message)

    # tools ----------------------------------------------------------------------------
    def tool_started(self, key: _LaneKey, call_id: str, tool: BaseTool) -> None:
        """The tool runs from here in its scope (its span current); an ``AgentTool``
        marks its task (the sub-runner it starts is a nested run), any other tool's own
        code records ADK's spans again (see :mod:`.quiet`)."""
        if tool.name == _TRANSFER:
            self._lane(key).transferring = True
        tools = self._tools
        tools.enter(call_id, self.builder.tool_scope(call_id))
        if runs_an_agent(tool):
            tools.enter(call_id, agent_tool_call(self, call_id))
            if self._detailed and not self.model_scopes:  # traced, and ADK's spans record:
                # the sub-runner's are dropped, as the run's are
                tools.enter(call_id, attached(quiet_context()))
        elif self.silenced:
            tools.enter(call_id, spans_recorded())
        if is_mcp_tool(tool):  # innermost: our span is current for the call's request
            tools.enter(call_id, mcp_call(None))

    def _leave_tool_scope(self, call_id: str) -> None:
        while self._tools.leave(call_id):
            continue  # newest first: the tool's own scope last

    def tool_finished(self, call_id: str, name: str, result: Any) -> None:
        """After the tool (or a callback answering for it); a failure was reported already."""
        self._agent_runs.end(call_id)
        self._leave_tool_scope(call_id)
        if call_id in self._failed:
            self._failed.discard(call_id)
            return
        self._pending.pop(call_id, None)
        self.builder.tool_result(call_id, result_text(result), name=name)

    def tool_failed(self, call_id: str, name: str, error: BaseException) -> None:
        """The tool raised (or was cancelled): reported now, whether a callback then
        feeds a response back (``after_tool_callback`` follows) or the run fails. The
        agent run it started ends with it (cancelled, when it was)."""
        self._agent_runs.end(call_id, error=error)
        self._leave_tool_scope(call_id)
        self._pending.pop(call_id, None)
        self._failed.add(call_id)
        message = f"{type(error).__name__}: {error}"
        self.builder.tool_result(call_id, message, name=name, error=error)

    def settle(self, event: Event) -> None:
        """Function responses whose after-tool hook never reached us (a user plugin
        ahead of ours answered for it) still close their calls."""
        self.see(event)
        for response in event.get_function_responses():
            name = self._pending.pop(response.id, None) if response.id else None
            if name is not None and response.id is not None:
                self._agent_runs.end(response.id)
                self.builder.tool_result(response.id, result_text(response.response), name=name)

    def finish(self) -> None:
        """The native run ended: what is still open closes (the agent runs it started,
        a message a callback answered for, the last step)."""
        self.end_agent_runs()
        for key in list(self._calls):
            self._close(key)
        for key in list(self._lanes):
            self.end_step(key)
