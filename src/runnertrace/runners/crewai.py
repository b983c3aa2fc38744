"""``CrewAIRunner``: the runner contract over a CrewAI ``Agent``, one crew per run.

Install with ``pip install 'runnertrace[crewai]'``; importing this module
without CrewAI raises :class:`~runnertrace._internal.imports.MissingExtraError`.

How the contract maps onto CrewAI:

- **The native agent** is a ``crewai.Agent``. Each run builds a ``Crew`` of it
  and one ``Task`` made from the requests. A crew takes its agents over (it
  sets their crew and executor), so a run that starts while another run of the
  same agent is in flight gets a copy of the agent instead.
  The declared run options are the ``Crew(...)`` keywords; ``verbose=False`` is
  a default they can override. ``agents``, ``tasks``, ``memory`` and ``stream``
  are the runner's (``RESERVED_RUN_OPTIONS``). ``before_kickoff_callbacks``
  declared by the caller are kept; the runner adds its own after them.
- **A registered crew.** A ``crewai.Crew`` runs as built (its agents, tasks and
  process are the user's): the request, after the session's earlier turns, is its
  ``{request}`` input; the run sets only ``stream`` and adds its ``before_kickoff``
  callback, and gives both back after. Run options are refused (they are an
  Agent's ``Crew(...)`` keywords). A concurrent run of the same crew gets a copy.
  Each task is a step (``task``, its position) holding the step of the agent
  that works on it, both ended by CrewAI's task and agent ids; each agent's chat
  and tool spans carry its role as the agent name. A task with
  ``async_execution=True`` runs in a thread of its own beside the crew's: it is a
  branch of the run (``StepStart.branch``), so its step, its agent's step, chat and
  tool spans overlap the other async tasks' under the run span; the task that waits
  for them follows in the crew's own line. In a hierarchical crew the manager's
  step holds the task. A coworker that an agent delegates to (CrewAI's delegation
  tool, which runs the coworker inside the tool call) is a nested run
  (:func:`~runnertrace.core.observer.open_nested_run`): ``execute_tool <delegation>``
  > ``invoke_agent <coworker>`` > its step, chat and tool spans, its totals rolled
  up into the crew's run; its events are traced, not yielded (the stream is the
  crew's). A retried coworker is a run per attempt. Events that name another
  crew's agent or task (a crew kicked off inside a tool) are not this run's.
- **Session state.** CrewAI keeps no conversation between kickoffs, so the
  runner keeps the turns under the session key ``"crewai"`` (per agent) and
  puts them in front of the next task's description. Saved only after a run
  that succeeded.
- **Framework context** is not supported: a session's context is neither
  injected nor written back, and one warning per runner says so.
- **Events.** CrewAI reports a run on its event bus. Bus *handlers* run in a
  thread pool, in no guaranteed order, and see every crew in the process; so
  the runner does not register one. It adds a *stream sink* instead
  (``crewai.events.stream_context.add_stream_sink``), which the bus calls
  synchronously in ``emit``, in the emitting thread, before any handler: the
  events arrive in emission order, at the moment they happen, and a sink is a
  context variable, so each run sees only its own crew's events (20 concurrent
  runs are tested). The sink is added by a ``before_kickoff`` callback, inside
  the kickoff's own thread. Each event is mapped in the line of work (a lane) of
  the context it is emitted in: the crew's, an async task's branch, a coworker's
  nested run; CrewAI copies the context into every thread it starts (that is how
  the sink reaches them too). A task and an agent execution become steps (the
  agent's role is the step's agent name), an LLM call a message (its
  ``call_id`` is the message id), stream chunks deltas, tool usage a tool call.
  In a ReAct run the tool call is the ``Action`` the model's text asks for, so
  it is announced in the message that asked, the reply's scaffolding (thought,
  action, the ``Final Answer:`` marker) is the message's reasoning and only the
  final answer its text (so a stream's text is run mode's reply). With native
  function calling (``LLM("openai/...")``) a response's tool calls are announced
  by their ids (streamed: CrewAI's chunks carry the arguments accumulated so
  far, and the delta is taken), and a call CrewAI runs (its event has no id) is
  the first asked call of that tool with those arguments; its scope is entered
  in the thread that runs it (CrewAI runs a response's calls in a thread pool).
  CrewAI's retries of a failing tool
  are attempts of that one call, which ends with the last error. A failed LLM
  call ends its message with the exception CrewAI is handling (its event only
  carries the text). A model call and a tool run in their scopes, so a span
  opened there (an HTTP client, a user's own) nests under chat / execute_tool.
  Events a crew run *inside* a tool emits are its own run's, not ours.
- **Run mode** untraced is a plain ``kickoff_async``: no callback, no sink.
- **Stream mode** builds the crew with ``stream=True`` and pulls CrewAI's
  chunk stream; each chunk is a moment to hand over the events made so far
  (the spans start on time regardless). CrewAI's stream yields model chunks
  only, so the events after a message's last chunk (its tool call, the tool's
  result) reach the consumer with the next chunk or at the end of the run.
- **Other OpenTelemetry.** CrewAI's own telemetry uses a provider of its own
  (never ours); switch it off with ``CREWAI_DISABLE_TELEMETRY=true``, not
  ``OTEL_SDK_DISABLED``, which would switch ours off too. OpenInference's
  CrewAI instrumentor would add a kickoff, a task and a tool span for what our
  spans already show: a *traced* run suppresses OTel instrumentation in the
  crew's thread (``suppress_instrumentation``, which the instrumentor and most
  others honour; in stream mode the first step of CrewAI's chunk stream, where
  the crew's task starts, runs suppressed too), so each call is one span, ours,
  also with the application's own provider. A span a tool or a model
  call opens with a tracer still nests under our spans (tracers do not check
  the flag), but an HTTP client's instrumentation inside a traced crew is
  silenced with the rest. Untraced runs are left to the instrumentor.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import logging
import sys
import threading
import uuid
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from opentelemetry import baggage
from opentelemetry import context as otel_context
from pydantic import JsonValue

from runnertrace._internal.errors import suppressed_instrumentation, suppressing_context
from runnertrace._internal.imports import missing_extra

try:
    from crewai import Agent as CrewAgent
    from crewai import Crew, Task
    from crewai.agents.constants import FINAL_ANSWER_ACTION
    from crewai.agents.parser import AgentAction, OutputParserError, parse
    from crewai.events.stream_context import add_stream_sink
    from crewai.events.types.agent_events import (
        AgentExecutionCompletedEvent,
        AgentExecutionErrorEvent,
        AgentExecutionStartedEvent,
    )
    from crewai.events.types.llm_events import (
        LLMCallCompletedEvent,
        LLMCallFailedEvent,
        LLMCallStartedEvent,
        LLMStreamChunkEvent,
        LLMThinkingChunkEvent,
    )
    from crewai.events.types.task_events import (
        TaskCompletedEvent,
        TaskFailedEvent,
        TaskStartedEvent,
    )
    from crewai.events.types.tool_usage_events import (
        ToolUsageErrorEvent,
        ToolUsageFinishedEvent,
        ToolUsageStartedEvent,
    )
    from crewai.tools.tool_usage import ToolUsage
    from crewai.types.streaming import CrewStreamingOutput
    from crewai.utilities.agent_utils import extract_tool_call_info
except ImportError as exc:
    raise missing_extra(exc, "crewai") from exc

from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText, prompt_of
from runnertrace.core.module import Module
from runnertrace.core.observer import NULL_OBSERVER, NestedRun, in_traced_run, open_nested_run
from runnertrace.runners._kit import genai
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    Prepared,
    RunSetup,
    reply_of,
    save,
)

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.runtime import Runtime

__all__ = ["STATE_KEY", "CrewAIModule", "CrewAIReportedError", "CrewAIRunner"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "crewai"
T = TypeVar("T", CrewAgent, Crew)
_boundary = MappingBoundary("crewai")
EXPECTED_OUTPUT = "A complete answer to the current request."


class CrewAIReportedError(Exception):
    """A failure CrewAI reported only as text (the exception itself was not in reach)."""


# -- requests -> native input ----------------------------------------------------------------------
# Request type -> its text in the task description. A task is text: images and
# files have no place in it (a CrewAI tool can take them).
_REQUEST_TEXT: dict[str, Callable[[Any], str]] = {
    "text": lambda r: str(r.prompt),
    "any": lambda r: genai.as_text(r.content),
}


def _request_text(request: AgentRequest) -> str:
    convert = _REQUEST_TEXT.get(request.type)
    if convert is None:
        raise ValueError(
            f"CrewAIRunner takes 'text' and 'any' requests; got a {request.type!r} request "
            "(pass files to a CrewAI tool instead)"
        )
    return convert(request)


def task_description(requests: Sequence[AgentRequest], turns: Sequence[Mapping[str, str]]) -> str:
    """The task for this run: the earlier turns of the session, then the request."""
    request = "\n".join(_request_text(r) for r in requests)
    if not request:
        raise ValueError("a run needs at least one request")
    if turns:
        history = "\n".join(f"User: {t['request']}\nAssistant: {t['reply']}" for t in turns)
        request = f"The conversation so far:\n{history}\n\nThe current request:\n{request}"
    return request


def _reply_value(output: Any) -> Any:
    """A CrewOutput's most structured form: its Pydantic model, its JSON, its text."""
    for value in (getattr(output, "pydantic", None), getattr(output, "json_dict", None)):
        if value is not None:
            return value
    return getattr(output, "raw", output)


# -- what a model call is sent ---------------------------------------------------------------------
def _text_of(content: Any) -> str:
    """A message's content as text (CrewAI's content is text or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return "" if content is None else str(content)


def _request(event: LLMCallStartedEvent, tools: list[dict[str, JsonValue]] | None) -> Any:
    """The request fields of a MessageStart, from what CrewAI says it sends."""
    sent: list[genai.Message] = []
    system: list[str] = []
    messages = event.messages
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    for entry in messages or ():
        role = str(entry.get("role") or "user")
        text = _text_of(entry.get("content"))
        if role == "system":
            system.append(text)
        else:
            sent.append(genai.message(role, [genai.text_part(text)]))
    fields = {name: getattr(event, name, None) for name in genai.REQUEST_PARAMETER_NAMES}
    return {
        "input_messages": sent or None,
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": genai.request_parameters(fields),
        "tool_definitions": tools,
    }


def _tool_definitions(tools: Iterable[Any] | None) -> list[dict[str, JsonValue]] | None:
    """An agent's tools as GenAI tool definitions (CrewAI lists them in the prompt)."""
    definitions: list[dict[str, JsonValue]] = []
    for tool in tools or ():
        schema = getattr(getattr(tool, "args_schema", None), "model_json_schema", None)
        definitions.append(
            genai.tool_definition(
                str(getattr(tool, "name", "")),
                getattr(tool, "description", None),
                schema() if callable(schema) else None,
            )
        )
    return genai.or_none(definitions)


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Token counts from a completed call (OpenAI or Anthropic spelling)."""
    usage = usage or {}
    return {
        "input_tokens": usage.get("prompt_tokens", usage.get("input_tokens")),
        "output_tokens": usage.get("completion_tokens", usage.get("output_tokens")),
        "cache_read_input_tokens": usage.get("cached_prompt_tokens"),
    }


def _handled(text: str) -> BaseException:
    """The exception CrewAI is handling while it reports a failure as ``text``.

    The bus calls our sink synchronously inside CrewAI's ``except`` block, so the
    exception is the one being handled, when the reported text carries its message
    (CrewAI's providers prefix it: ``"OpenAI API call failed: <message>"``).
    """
    current = sys.exc_info()[1]
    if current is not None and str(current) in text:
        return current
    return CrewAIReportedError(text)


# -- native progress -> builder calls (the mapping) ------------------------------------------------
class _Lane:
    """One line of work in a run, and the state of the agent working in it.

    The crew's own line (its sync tasks, one after the other) is the run's; an
    ``async_execution`` task's is a branch of the run (``branch``: its key), which
    overlaps the others; a coworker that an agent delegates to (CrewAI's delegation
    tool) works in a nested run of its own (``run``), opened in the delegation's
    tool scope, with a builder of its own. A lane is found by the context the
    events are emitted in (:data:`_LANE`): CrewAI runs an async task in a thread of
    its own in a copy of the crew's context, and a coworker in the delegating
    agent's tool call.
    """

    __slots__ = (
        "agent_steps",
        "asked",
        "asked_native",
        "branch",
        "builder",
        "call",
        "call_error",
        "mapper",
        "outer",
        "previous",
        "ran",
        "run",
        "running",
        "steps",
        "task",
        "tool_scope",
        "tools",
    )

    def __init__(
        self,
        mapper: _Mapper,
        builder: EventBuilder,
        *,
        branch: str | None = None,
        run: NestedRun | None = None,
        outer: _Lane | None = None,
    ) -> None:
        self.mapper = mapper
        self.builder = builder
        self.branch = branch
        self.run = run  # a coworker's nested run, which this lane ends
        self.outer = outer  # a coworker's: the lane of the agent that delegated
        self.previous: _Lane | None = None  # a coworker's: the context's lane before it
        self.task = ""  # a coworker's: the task delegated to it
        self.steps: list[tuple[str, int | None]] = []
        self.agent_steps: dict[tuple[str, str], str] = {}  # (agent id, task id) -> its step
        self.tools: list[dict[str, JsonValue]] | None = None  # the working agent's tools
        self.asked: tuple[str, str] | None = None  # (call id, tool) the last message asked for
        self.call: tuple[str, str] | None = None  # the ReAct tool call running or being retried
        self.call_error: BaseException | None = None
        self.tool_scope: AbstractContextManager[None] | None = None
        self.running = False  # the call's function is running (in its scope)
        self.ran = False  # the function of the current call has started
        # Native function calling: the calls the model's last responses asked for, not
        # yet run, as (call id, tool name, arguments).
        self.asked_native: list[tuple[str, str, Any]] = []

    def step_start(self, name: str, index: int | None, agent_name: str | None = None) -> None:
        self.steps.append((name, index))
        self.builder.step_start(name, index, agent_name=agent_name, branch=self.branch)

    def step_end(self, name: str, index: int | None = None) -> None:
        if (name, index) in self.steps:
            self.steps.remove((name, index))
            self.builder.step_end(name, index, branch=self.branch)

    def settle_call(self) -> None:
        """A failed ReAct tool call that CrewAI did not retry ends with its last error."""
        if self.call is None or self.call_error is None:
            return
        (call_id, name), error = self.call, self.call_error
        self.call, self.call_error = None, None
        self.builder.tool_result(call_id, str(error), name=name, error=error)


# The lane of the events emitted in this context (``None``: the crew's own line).
_LANE: contextvars.ContextVar[_Lane | None] = contextvars.ContextVar(
    "runnertrace_crewai_lane", default=None
)


class _Mapper:
    """One run's sink: maps the crew's events, in emission order, onto the builder.

    The bus calls sinks in the emitting thread: the crew's, an async task's, a
    thread CrewAI runs a tool in. Each event is mapped in its lane (:class:`_Lane`),
    under one lock; scopes entered at a start event are left at the matching end
    event, in the same context. After :meth:`close` (the run ended or was cancelled
    while the crew's threads keep going) it ignores everything.
    """

    def __init__(self, builder: EventBuilder, *, mode: str = "run", suppress: bool = False) -> None:
        self.builder = builder
        self.mode = mode
        self.suppress = suppress
        self.closed = False
        self.crew_id: str | None = None
        self.main = _Lane(self, builder)
        self._model_scopes: dict[str, AbstractContextManager[None]] = {}
        self._message_lanes: dict[str, _Lane] = {}  # an open model call -> its lane
        self._streamed: set[str] = set()
        self._react: dict[str, _ReActText] = {}  # ReAct calls (sent no tools): their split
        self._tasks = 0
        self._task_steps: dict[str, tuple[int, _Lane]] = {}  # task id -> its step's index, lane
        self._agent_lanes: dict[tuple[str, str], _Lane] = {}  # agent execution -> its lane
        self._coworkers: list[_Lane] = []  # the coworkers' lanes whose run is open
        # Native function calling: the calls running, per thread (CrewAI runs a
        # response's calls in a thread pool, each in its own copy of the context, so
        # each scope is entered and left in its own thread).
        self._native: dict[int, list[tuple[_Lane, str, str, AbstractContextManager[None]]]] = {}
        self._arguments: dict[tuple[str, Any], str] = {}  # streamed call -> its arguments so far
        self._lock = threading.RLock()  # async tasks and parallel tool calls report at once
        # This crew's agents (its manager joins when it starts) and tasks: an event of
        # another agent is a crew's run inside one of our tools, its own run's.
        self._agent_ids: set[str] = set()
        self._task_ids: set[str] = set()

    # -- entry points ----------------------------------------------------------------------
    def expect(self, crew: Crew) -> None:
        """The crew this run kicks off: :func:`_attach` finds this mapping by its id."""
        self.crew_id = str(crew.id)
        self._agent_ids.update(str(agent.id) for agent in crew.agents)
        self._task_ids.update(str(task.id) for task in crew.tasks)
        _MAPPINGS[self.crew_id] = self

    def sink(self, source: Any, event: Any) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is None or self.closed:
            return
        with self._lock, _boundary:
            if not self._foreign(event):
                handler(self, source, event)

    def _lane(self) -> _Lane:
        """The lane of what runs in the current context (the crew's own line unless an
        async task or a delegation of this run set another)."""
        lane = _LANE.get()
        return lane if lane is not None and lane.mapper is self else self.main

    def _foreign(self, event: Any) -> bool:
        """Whether ``event`` is another crew's, by CrewAI's agent and task ids: an agent
        execution names its agent (ours when its crew is this crew), a model call or a
        tool call the agent or task it is for. An event naming neither is ours."""
        agent = getattr(event, "agent", None)
        if agent is not None:
            key = str(agent.id)
            if str(getattr(getattr(agent, "crew", None), "id", None)) == self.crew_id:
                self._agent_ids.add(key)  # the manager of a hierarchical crew, made at kickoff
            return key not in self._agent_ids
        agent_id = getattr(event, "agent_id", None)
        if agent_id is not None:
            return str(agent_id) not in self._agent_ids
        task = getattr(event, "task", None)
        task_id = getattr(task, "id", None) or getattr(event, "task_id", None)
        return task_id is not None and str(task_id) not in self._task_ids

    def fail(self, error: BaseException) -> None:
        """The run failed: the coworkers' runs still open fail with it (innermost
        first), then this run's open calls."""
        with self._lock:
            for lane in list(reversed(self._coworkers)):
                lane.settle_call()
                lane.builder.fail(error)
                self._end_coworker(lane, error=error)
            self.main.settle_call()
            for task_lane in {lane for _, lane in self._task_steps.values()}:
                task_lane.settle_call()
            self.builder.fail(error)

    def close(self) -> None:
        """The run is over: ignore what the crew's threads still emit. Scopes they
        entered belong to their contexts and end with them; a coworker's run still
        open (the run was cancelled while it worked) ends as cancelled."""
        with self._lock:
            self.closed = True
            if self.crew_id is not None:
                _MAPPINGS.pop(self.crew_id, None)
            for lane in list(reversed(self._coworkers)):
                self._end_coworker(lane, cancelled=True)
            self._model_scopes.clear()
            self._message_lanes.clear()
            self._native.clear()

    # -- steps -----------------------------------------------------------------------------
    def on_task_started(self, source: Any, event: TaskStartedEvent) -> None:
        """A crew's task: a step in the crew's line, or, run with ``async_execution``
        (in a thread of its own, beside the crew's), in a branch of its own."""
        lane = self._lane()
        lane.settle_call()
        index = self._tasks
        self._tasks += 1
        if getattr(getattr(event, "task", None), "async_execution", False):
            # The task's thread runs in its own copy of the crew's context: the lane
            # set here is the task's, and its agent's (and the threads that copy it).
            lane = _Lane(self, self.builder, branch=f"task {index}")
            _LANE.set(lane)
        self._task_steps[_task_key(event)] = (index, lane)
        lane.step_start("task", index)

    def on_task_ended(self, source: Any, event: Any) -> None:
        """A task's step ends by the task's id (a crew's async tasks overlap)."""
        found = self._task_steps.pop(_task_key(event), None)
        if found is None:
            return
        index, lane = found
        lane.settle_call()
        lane.step_end("task", index)

    def on_agent_started(self, source: Any, event: AgentExecutionStartedEvent) -> None:
        lane = self._lane()
        lane.settle_call()
        role = str(event.agent.role)
        if lane.agent_steps:
            # An agent of this lane is working: this one runs inside its tool call
            # (CrewAI's delegation tool), a coworker, in a nested run of its own.
            lane = self._coworker(lane, role, event)
        if lane.builder.observed:
            lane.tools = _tool_definitions(event.tools)
        key = _agent_key(event)
        self._agent_lanes[key] = lane
        lane.agent_steps[key] = role
        lane.step_start(role, None, agent_name=role)

    def _coworker(self, outer: _Lane, role: str, event: AgentExecutionStartedEvent) -> _Lane:
        """The lane of a coworker delegated to from ``outer``'s running tool call: a run
        nested in that call's scope (the current context), whose events are traced but
        not yielded (the stream is the crew's); an untraced run maps them to nothing."""
        run: NestedRun | None = None
        task = str(getattr(event.task, "description", None) or event.task_prompt)
        if outer.builder.observed:
            requests = [AgentRequestText(prompt=task)]
            run = open_nested_run(role, mode=self.mode, requests=requests)
        lane = _Lane(self, EventBuilder(run or NULL_OBSERVER), run=run, outer=outer)
        lane.task = task
        self._coworkers.append(lane)
        # Set in the delegation's context, which its end is reported in: reset there.
        lane.previous = _LANE.get()
        _LANE.set(lane)
        return lane

    def _end_coworker(
        self,
        lane: _Lane,
        *,
        output: Any = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        if lane in self._coworkers:
            self._coworkers.remove(lane)
            if lane.run is not None:
                reply = None if output is None else reply_of(output, lane.task)
                lane.run.finish(reply=reply, error=error, cancelled=cancelled)

    def on_agent_ended(self, source: Any, event: Any) -> None:
        """An agent's step ends by the agent's and the task's ids: in a crew, each agent
        takes its turn over its tasks; a coworker's run ends with its step."""
        key = _agent_key(event)
        lane = self._agent_lanes.pop(key, None)
        if lane is None:
            return
        lane.settle_call()
        role = lane.agent_steps.pop(key, None)
        if role is not None:
            lane.step_end(role)
        if lane.outer is None or lane.agent_steps:
            return
        # A coworker's execution ended (CrewAI may retry it: a run of its own again).
        error = None
        if isinstance(event, AgentExecutionErrorEvent):
            error = _handled(str(event.error))
            lane.builder.fail(error)
        self._end_coworker(lane, output=getattr(event, "output", None), error=error)
        if _LANE.get() is lane:
            _LANE.set(lane.previous)

    # -- model calls -----------------------------------------------------------------------
    def on_llm_started(self, source: Any, event: LLMCallStartedEvent) -> None:
        lane = self._lane()
        lane.settle_call()
        builder = lane.builder
        request = _boundary.detail(_request, event, lane.tools) if builder.observed else {}
        provider = getattr(source, "provider", None)
        message_id = builder.message_start(
            event.call_id,
            model=event.model,
            provider=provider if isinstance(provider, str) else None,
            branch=lane.branch,
            **request,
        )
        self._message_lanes[message_id] = lane
        if not _calls_functions(source):  # CrewAI parses the reply as ReAct text
            self._react[message_id] = _ReActText()
        scope = builder.model_scope(message_id)
        scope.__enter__()
        self._model_scopes[message_id] = scope

    def _message_lane(self, call_id: str) -> _Lane:
        return self._message_lanes.get(call_id) or self._lane()

    def _leave_model(self, call_id: str) -> None:
        scope = self._model_scopes.pop(call_id, None)
        if scope is not None:
            scope.__exit__(None, None, None)

    def on_llm_chunk(self, source: Any, event: LLMStreamChunkEvent) -> None:
        self._streamed.add(event.call_id)
        builder = self._message_lane(event.call_id).builder
        call = event.tool_call
        if call is None:
            self._text(builder, event.call_id, event.chunk)
            return
        builder.tool_call(
            self._arguments_delta(event.call_id, call.index, call.function.arguments),
            tool_call_id=call.id,
            name=call.function.name,
            index=call.index,
            message_id=event.call_id,
        )

    def _text(self, builder: EventBuilder, call_id: str, text: str, *, last: bool = False) -> None:
        """A model's text: a ReAct reply's scaffolding (its thought, its action) is the
        message's reasoning, and only its final answer is text, as CrewAI replies it;
        so a stream's text deltas are the reply run mode gives."""
        react = self._react.get(call_id)
        if react is None:
            builder.text(text, call_id)
            return
        pieces = react.feed(text)
        if last:
            pieces += react.finish()
            del self._react[call_id]
        for kind, piece in pieces:
            emit = builder.reasoning if kind == "reasoning" else builder.text
            emit(piece, call_id)

    def _arguments_delta(self, call_id: str, index: Any, arguments: str | None) -> str:
        """The new part of a streamed call's arguments: CrewAI's chunk events carry the
        arguments accumulated so far (``tool_call.function.arguments``), not a delta."""
        key = (call_id, index)
        seen, now = self._arguments.get(key, ""), arguments or ""
        self._arguments[key] = now
        return now[len(seen) :] if now.startswith(seen) else now

    def on_llm_thinking(self, source: Any, event: LLMThinkingChunkEvent) -> None:
        self._message_lane(event.call_id).builder.reasoning(event.chunk, event.call_id)

    def on_llm_completed(self, source: Any, event: LLMCallCompletedEvent) -> None:
        call_id = event.call_id
        lane = self._message_lane(call_id)
        self._message_lanes.pop(call_id, None)
        self._leave_model(call_id)
        response = event.response
        if isinstance(response, str):
            self._text(
                lane.builder, call_id, "" if call_id in self._streamed else response, last=True
            )
            self._ask(lane, call_id, response)
        elif isinstance(response, list):
            self._ask_native(lane, call_id, response)
        self._streamed.discard(call_id)
        self._react.pop(call_id, None)
        self._arguments = {k: v for k, v in self._arguments.items() if k[0] != call_id}
        lane.builder.message_end(
            call_id,
            finish_reason=event.finish_reason,
            response_id=event.response_id,
            **_usage(event.usage),
        )

    def _ask(self, lane: _Lane, call_id: str, text: str) -> None:
        """A ReAct ``Action`` in the model's text is the tool call it asks for."""
        try:
            parsed = parse(text)
        except OutputParserError:
            return  # CrewAI feeds the format error back; there is no call to announce
        if not isinstance(parsed, AgentAction):
            return
        tool_call_id = f"call_{uuid.uuid4().hex[:12]}"
        lane.builder.tool_call(
            parsed.tool_input, tool_call_id=tool_call_id, name=parsed.tool, message_id=call_id
        )
        lane.asked = (tool_call_id, parsed.tool)

    def _ask_native(self, lane: _Lane, call_id: str, calls: list[Any]) -> None:
        """The tool calls a native function-calling response asks for (run mode: their
        only report; stream mode: announced by the chunks already, by the same ids)."""
        for call in calls:
            info = extract_tool_call_info(call)
            if info is None:
                continue
            tool_call_id, name, arguments = info
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            if call_id not in self._streamed:
                lane.builder.tool_call(
                    text, tool_call_id=tool_call_id, name=name, message_id=call_id
                )
            lane.asked_native.append((tool_call_id, name, _parsed(text)))

    def on_llm_failed(self, source: Any, event: LLMCallFailedEvent) -> None:
        lane = self._message_lane(event.call_id)
        self._message_lanes.pop(event.call_id, None)
        self._leave_model(event.call_id)
        self._streamed.discard(event.call_id)
        self._react.pop(event.call_id, None)
        lane.builder.message_end(event.call_id, error=_handled(event.error))

    # -- tool calls (ReAct: the call the last message asked for) ------------------------------
    def on_tool_started(self, source: Any, event: ToolUsageStartedEvent) -> None:
        if not isinstance(source, ToolUsage):
            self._native_started(source, event)
            return
        lane = self._lane()
        name = str(event.tool_name)
        if lane.call is None or lane.call[1] != name:  # not a retry of the failed call
            lane.settle_call()
            asked, lane.asked = lane.asked, None
            if asked is not None and _same_tool(asked[1], name):
                lane.call = (asked[0], name)
            else:  # a call no message announced
                lane.call = (f"call_{uuid.uuid4().hex[:12]}", name)
        lane.call_error = None
        lane.ran = False
        if not self._time_function(source, name):
            scope = lane.builder.tool_scope(lane.call[0])
            scope.__enter__()
            lane.tool_scope = scope

    def _time_function(self, source: Any, name: str) -> bool:
        """Run the tool's scope around the tool's function itself, if it can be found.

        CrewAI emits the started event before its cache lookup and the argument
        schema it builds per call (1-3 ms), so the scope (where the span starts)
        wraps the function instead. The structured tools a ``ToolUsage`` picks from
        are made per agent execution (``parse_tools``), so wrapping one changes no
        object of the user's; an async function keeps the scope of the event.
        """
        found = False
        for structured in getattr(source, "tools", None) or ():
            func = getattr(structured, "func", None)
            if not _same_tool(str(getattr(structured, "name", "")), name) or func is None:
                continue
            if inspect.iscoroutinefunction(func):
                return False
            if getattr(func, "__runnertrace_mapping__", None) is not self:
                structured.func = self._timed(func)
            found = True
        return found

    def _timed(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._lock:  # taking the scope opens the span: one lane at a time
                lane = self._lane()
                call = lane.call
                if call is None or lane.running or self.closed:
                    scope: AbstractContextManager[None] | None = None
                else:
                    lane.running = lane.ran = True
                    scope = lane.builder.tool_scope(call[0])
            if scope is None:
                return func(*args, **kwargs)
            try:
                with scope:
                    return func(*args, **kwargs)
            finally:
                lane.running = False

        timed.__runnertrace_mapping__ = self  # type: ignore[attr-defined]
        return timed

    def _leave_tool(self, lane: _Lane) -> bool:
        """Leave the running tool's scope; False when no call is running.

        A call whose function never ran (a cached result, a failed validation)
        opens its span here, when CrewAI settles it."""
        scope, lane.tool_scope = lane.tool_scope, None
        if scope is not None:
            scope.__exit__(None, None, None)
        elif lane.call is not None and not lane.ran:
            with lane.builder.tool_scope(lane.call[0]):
                lane.ran = True
        return lane.call is not None

    # -- native function calling: a call the model's response asked for, by id --------------
    def _native_started(self, source: Any, event: ToolUsageStartedEvent) -> None:
        """CrewAI's executor runs a call of the last response (its event has no call
        id): it is the first asked call of that tool, with those arguments if one
        matches. Its scope opens here, in the thread that runs the tool."""
        lane = self._lane()
        name = str(event.tool_name)
        same = [c for c in lane.asked_native if _same_tool(c[1], name)]
        exact = [c for c in same if c[2] == event.tool_args]
        chosen = next(iter(exact or same), None)
        if chosen is None:  # a call no response announced: it runs as its own
            tool_call_id = f"call_{uuid.uuid4().hex[:12]}"
            lane.builder.tool_start(tool_call_id, name, json.dumps(event.tool_args, default=str))
        else:
            lane.asked_native.remove(chosen)
            tool_call_id = chosen[0]
        scope = lane.builder.tool_scope(tool_call_id)
        scope.__enter__()
        self._native.setdefault(threading.get_ident(), []).append((lane, tool_call_id, name, scope))

    def _native_ended(self, output: Any, error: BaseException | None) -> None:
        running = self._native.get(threading.get_ident())
        if not running:
            return
        lane, tool_call_id, name, scope = running.pop()  # calls nest in a delegation
        scope.__exit__(None, None, None)
        lane.builder.tool_result(
            tool_call_id,
            genai.as_text(output) if error is None else str(error),
            name=name,
            error=error,
        )

    def on_tool_finished(self, source: Any, event: ToolUsageFinishedEvent) -> None:
        if not isinstance(source, ToolUsage):
            self._native_ended(event.output, None)
            return
        lane = self._lane()
        if not self._leave_tool(lane) or lane.call is None:
            return
        call_id, name = lane.call
        lane.call = None
        lane.builder.tool_result(call_id, genai.as_text(event.output), name=name)

    def on_tool_error(self, source: Any, event: ToolUsageErrorEvent) -> None:
        error = event.error
        failure = error if isinstance(error, BaseException) else CrewAIReportedError(str(error))
        if not isinstance(source, ToolUsage):
            self._native_ended(None, failure)
            return
        lane = self._lane()
        if self._leave_tool(lane):
            # CrewAI may retry the call: it is settled by whatever the lane does next.
            lane.call_error = failure


class _ReActText:
    """Splits a ReAct reply, as it streams, at CrewAI's ``Final Answer:`` marker.

    What comes before the marker (and the marker) is reasoning, given on as it
    arrives except for a tail that may be the start of the marker; what comes
    after it is the answer, without the whitespace around it (CrewAI strips it).
    A reply without the marker (an action) is reasoning throughout.
    """

    __slots__ = ("answering", "held", "started")

    def __init__(self) -> None:
        self.held = ""
        self.answering = False
        self.started = False  # some of the answer was given

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        pieces: list[tuple[str, str]] = []
        if not self.answering:
            self.held += chunk
            at = self.held.find(FINAL_ANSWER_ACTION)
            if at < 0:
                safe = len(self.held) - _marker_start(self.held)
                if safe > 0:
                    pieces.append(("reasoning", self.held[:safe]))
                    self.held = self.held[safe:]
                return pieces
            end = at + len(FINAL_ANSWER_ACTION)
            pieces.append(("reasoning", self.held[:end]))
            chunk, self.held, self.answering = self.held[end:], "", True
        text = self.held + chunk
        if not self.started:
            text = text.lstrip()
        answer = text.rstrip()
        if answer:
            pieces.append(("text", answer))
            self.started = True
        self.held = text[len(answer) :]  # trailing whitespace: given if more text follows
        return pieces

    def finish(self) -> list[tuple[str, str]]:
        """The reply ended: a held tail of reasoning is given; an answer's is dropped."""
        held, self.held = self.held, ""
        return [("reasoning", held)] if held and not self.answering else []


def _marker_start(text: str) -> int:
    """The length of the longest end of ``text`` that begins the final-answer marker."""
    longest = min(len(text), len(FINAL_ANSWER_ACTION) - 1)
    return next((n for n in range(longest, 0, -1) if FINAL_ANSWER_ACTION.startswith(text[-n:])), 0)


def _calls_functions(model: Any) -> bool:
    """Whether CrewAI drives ``model`` (an LLM event's source) by native function
    calling; else by ReAct text, whose every reply it parses for its final answer."""
    supports = getattr(model, "supports_function_calling", None)
    return bool(supports()) if callable(supports) else True


def _task_key(event: Any) -> str:
    """A task event's task id (CrewAI's own, or the event's copy of it)."""
    task = getattr(event, "task", None)
    return str(getattr(task, "id", None) or getattr(event, "task_id", None))


def _agent_key(event: Any) -> tuple[str, str]:
    """An agent execution's (agent id, task id)."""
    return str(event.agent.id), _task_key(event)


def _parsed(arguments: str) -> Any:
    """A call's arguments as CrewAI parses them (to match the call it then runs)."""
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments


def _same_tool(asked: str, ran: str) -> bool:
    """Whether the tool CrewAI ran is the one the model asked for (CrewAI sanitises names)."""

    def norm(name: str) -> str:
        return "".join(c for c in name.lower() if c.isalnum())

    return norm(asked) == norm(ran)


# Event class -> what the mapping does with it. Everything else is not mapped.
_HANDLERS: dict[type, Callable[[_Mapper, Any, Any], None]] = {
    TaskStartedEvent: _Mapper.on_task_started,
    TaskCompletedEvent: _Mapper.on_task_ended,
    TaskFailedEvent: _Mapper.on_task_ended,
    AgentExecutionStartedEvent: _Mapper.on_agent_started,
    AgentExecutionCompletedEvent: _Mapper.on_agent_ended,
    AgentExecutionErrorEvent: _Mapper.on_agent_ended,
    LLMCallStartedEvent: _Mapper.on_llm_started,
    LLMStreamChunkEvent: _Mapper.on_llm_chunk,
    LLMThinkingChunkEvent: _Mapper.on_llm_thinking,
    LLMCallCompletedEvent: _Mapper.on_llm_completed,
    LLMCallFailedEvent: _Mapper.on_llm_failed,
    ToolUsageStartedEvent: _Mapper.on_tool_started,
    ToolUsageFinishedEvent: _Mapper.on_tool_finished,
    ToolUsageErrorEvent: _Mapper.on_tool_error,
}


# Crew id -> the mapping of the run that kicks that crew off (while the run lasts).
_MAPPINGS: dict[str, _Mapper] = {}


def _attach(inputs: Any) -> Any:
    """The ``before_kickoff`` callback: it runs in the kickoff's own thread, in the
    context the kickoff copied, so what it adds there lasts for this crew only.

    It adds the run's sink and, in a traced run, suppresses other OTel
    instrumentation (see the module docstring); neither is undone, since the
    context ends with the kickoff. The run is found by the crew's id, which CrewAI
    puts in the OTel baggage (a module-level function: CrewAI warns that a
    bound method or a closure would prevent checkpointing). It returns ``None``
    for the empty inputs CrewAI hands it, so CrewAI does not try to fill in
    ``{placeholders}`` in the user's request, just as when there is no callback.
    """
    crew = baggage.get_baggage("crew_context")
    mapping = _MAPPINGS.get(str(getattr(crew, "id", "")))
    if mapping is not None:
        add_stream_sink(mapping.sink)
        if mapping.suppress:
            otel_context.attach(suppressing_context())
    return inputs or None


# -- the run and the runner ------------------------------------------------------------------------
class _QuietStart:
    """CrewAI's chunk stream, its first step run under ``quiet``: CrewAI starts the
    crew's task there (``Crew.kickoff`` in a thread), in a copy of that context, so a
    traced stream's crew runs with OTel instrumentation suppressed, as run mode's."""

    __slots__ = ("_items", "_quiet")

    def __init__(self, native: AsyncIterable[Any], quiet: AbstractContextManager[None]) -> None:
        self._items = native.__aiter__()
        self._quiet: AbstractContextManager[None] | None = quiet

    def __aiter__(self) -> _QuietStart:
        return self

    async def __anext__(self) -> Any:
        quiet, self._quiet = self._quiet, None
        if quiet is None:
            return await self._items.__anext__()
        with quiet:  # entered and left in this one step (no yield in between)
            return await self._items.__anext__()


def _nothing() -> None:
    """Giving back a copy of an agent: nothing to do."""


class _Run(FrameworkRun[Any]):
    """One crew's kickoff: ``kickoff_async`` (run mode), or its streaming output.

    ``inputs`` are the kickoff's (a registered crew's ``{request}``), ``None`` for the
    one-task crew of a registered agent, whose task is the request itself.
    """

    def __init__(
        self,
        setup: RunSetup[CrewAgent | Crew],
        crew: Crew,
        mapper: _Mapper | None,
        give_back: Callable[[], None],
        inputs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(setup)
        self.crew = crew
        self.inputs = inputs
        self.mapper = mapper
        self.give_back = give_back
        self.native: CrewStreamingOutput | None = None

    def _quiet(self) -> AbstractContextManager[None]:
        """A traced run silences CrewAI's own instrumentation around the crew."""
        traced = self.mapper is not None and self.mapper.suppress
        return suppressed_instrumentation() if traced else nullcontext()

    async def call(self) -> Any:
        with self._quiet():
            return await self.crew.kickoff_async(inputs=self.inputs)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        kickoff = await self.crew.kickoff_async(inputs=self.inputs)
        native = self.native = cast(CrewStreamingOutput, kickoff)
        # A consumer that stops early closes both at once: ours, then CrewAI's stream.
        async with native:
            traced = self.mapper is not None and self.mapper.suppress
            yield _QuietStart(native, self._quiet()) if traced else native

    def fail(self, error: BaseException) -> None:
        if self.mapper is not None:
            self.mapper.fail(error)

    def close(self) -> None:
        self.give_back()
        if self.mapper is not None:
            self.mapper.close()

    async def outcome(self) -> Any:
        assert self.native is not None  # set when the stream opened
        return self.native.result

    async def save(self, result: Any) -> None:
        setup = self.setup
        agent, prepared = setup.agent, setup.prepared
        text = str(getattr(result, "raw", _reply_value(result)))
        turn = {"request": prompt_of(setup.requests), "reply": text}
        state = dict(prepared.state or {})
        state[agent.name] = [*(state.get(agent.name) or []), turn]
        save(setup.session, STATE_KEY, state, prepared)

    def reply(self, result: Any, prompt: str) -> AgentReply:
        return reply_of(_reply_value(result), prompt)


class CrewAIRunner(FrameworkRunner[CrewAgent | Crew]):
    """Runs a CrewAI ``Agent`` as a one-task crew, or a registered ``Crew`` as built
    (its agents taking their turns over its tasks), in run (``kickoff_async``) or
    stream (``stream=True``) mode."""

    framework: ClassVar[str] = "crewai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = CrewAgent
    native_what: ClassVar[str] = "a CrewAI Agent or Crew"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "agents": "the runner builds the crew from the registered agent",
        "tasks": "the runner builds the task from the requests and the session",
        "memory": "the session is the conversation's memory; CrewAI's would persist on disk",
        "stream": "the runner sets it per mode (stream() streams, run() does not)",
    }

    def __init__(self) -> None:
        self._warned_context = False
        self._busy: set[int] = set()  # native agents a run of this runner has taken over

    def native_of(self, agent: Agent) -> CrewAgent | Crew:
        native = agent.native
        return native if isinstance(native, Crew) else super().native_of(agent)

    def _take(self, native: T) -> tuple[T, Callable[[], None]]:
        """The agent a run's crew takes over, and how to give it back after the run.

        A crew sets its agents' crew and executor, so two crews running at once
        must not share an agent: a run takes the user's own agent when no other
        run of it is in flight (as a user reusing their agent would, and with
        nothing to copy), else a copy (``Agent.copy()``, a few milliseconds and
        a colder first run). A registered crew is taken the same way (``Crew.copy()``
        copies its agents and tasks): a crew's id is how its run's mapping is found.
        """
        key = id(native)
        if key in self._busy:
            return native.copy(), _nothing
        self._busy.add(key)
        return native, lambda: self._busy.discard(key)

    def _warn_context(self, prepared: Prepared) -> None:
        if prepared.context is not None and not self._warned_context:
            self._warned_context = True
            logger.warning(
                "CrewAIRunner does not support a framework context: the session's "
                "context is neither passed to the crew nor written back (warned once per runner)"
            )

    def _crew(
        self,
        agent: Agent,
        worker: CrewAgent,
        prepared: Prepared,
        requests: list[AgentRequest],
        mapping: _Mapper | None,
        *,
        stream: bool,
    ) -> Crew:
        turns = (prepared.state or {}).get(agent.name) or []
        task = Task(
            description=task_description(requests, turns),
            expected_output=EXPECTED_OUTPUT,
            agent=worker,
        )
        options = {"verbose": False, **prepared.options}
        declared = list(options.pop("before_kickoff_callbacks", None) or ())
        crew = Crew(
            agents=[worker],
            tasks=[task],
            stream=stream,
            before_kickoff_callbacks=[*declared, _attach] if mapping is not None else declared,
            **options,
        )
        if mapping is not None:
            mapping.expect(crew)
        return crew

    def _registered_crew(
        self, setup: RunSetup[CrewAgent | Crew], native: Crew, mapping: _Mapper | None
    ) -> _Run:
        """A registered crew runs as built, with the request as its ``{request}`` input
        (with the session's earlier turns in front, as an agent's task has them): the
        run sets only its ``stream`` and adds the mapping's ``before_kickoff`` callback,
        and gives both back after the run."""
        if setup.prepared.options:
            raise ValueError(
                f"agent {setup.agent.name!r} is a registered CrewAI Crew, which runs as built: "
                f"run options ({', '.join(sorted(setup.prepared.options))}) apply to an Agent"
            )
        crew, give_back = self._take(native)
        # A copy of a crew another run is using has that run's callback too.
        declared = [c for c in crew.before_kickoff_callbacks if c is not _attach]
        streamed = crew.stream
        crew.stream = setup.streaming
        if mapping is not None:
            crew.before_kickoff_callbacks = [*declared, _attach]
            mapping.expect(crew)

        def restore() -> None:
            crew.stream, crew.before_kickoff_callbacks = streamed, declared
            give_back()

        turns = (setup.prepared.state or {}).get(setup.agent.name) or []
        try:
            inputs = {"request": task_description(setup.requests, turns)}
        except BaseException:
            restore()
            raise
        return _Run(setup, crew, mapping, restore, inputs)

    async def start(self, setup: RunSetup[CrewAgent | Crew]) -> _Run:
        self._warn_context(setup.prepared)
        # Untraced run mode installs nothing: the plain crew. Stream mode always maps
        # (the events are the stream).
        mapper: _Mapper | None = None
        if setup.streaming or setup.observed:
            mapper = _Mapper(
                setup.builder,
                mode="stream" if setup.streaming else "run",
                suppress=in_traced_run(),
            )
        if isinstance(setup.native, Crew):
            return self._registered_crew(setup, setup.native, mapper)
        worker, give_back = self._take(setup.native)
        try:
            crew = self._crew(
                setup.agent, worker, setup.prepared, setup.requests, mapper, stream=setup.streaming
            )
        except BaseException:
            give_back()
            raise
        return _Run(setup, crew, mapper, give_back)


class CrewAIModule(Module):
    """Registers CrewAI agents with the runtime, paired with a :class:`CrewAIRunner`.

    An agent's name is its ``role``; pass ``(name, agent)`` pairs, or
    ``add(agent, name=...)``, to choose another.
    """

    runner_class = CrewAIRunner

    def __init__(self, agents: Iterable[Any], runtime: Runtime | None = None) -> None:
        self._names: dict[int, str] = {}
        super().__init__(agents, runtime)

    def add(self, native: Any, name: str | None = None) -> Agent:
        if isinstance(native, tuple):
            name, native = native
        if name is not None:
            self._names[id(native)] = name
        return super().add(native)

    def agent_name(self, native: Any) -> str:
        named = self._names.get(id(native))
        if named:
            return named
        role = getattr(native, "role", None)
        if isinstance(role, str) and role:
            return role
        return super().agent_name(native)
