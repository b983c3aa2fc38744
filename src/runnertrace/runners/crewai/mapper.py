"""The mapper: CrewAI's events, as the run's stream sink hears them, turned into builder calls.

CrewAI reports a run on its event bus; the adapter's sink (:mod:`.adapter`) hands
each event of this run's crew to the mapper, in emission order, in the emitting
thread, under one lock. Each event is mapped in the line of work (a *lane*,
:class:`_Lane`) of the context it is emitted in: the crew's, an async task's
branch, a coworker's nested run; CrewAI copies the context into every thread it
starts (that is how the sink reaches them too).

- **Steps.** A task and an agent execution become steps (the agent's role is the
  step's agent name), both ended by CrewAI's task and agent ids. In a registered
  crew each task is a step (``task``, its position) holding the step of the agent
  that works on it; in a hierarchical crew the manager's step holds the task. A
  task with ``async_execution=True`` runs in a thread of its own beside the crew's:
  it is a branch of the run (``StepStart.branch``), so its step, its agent's step,
  chat and tool spans overlap the other async tasks' under the run span; the task
  that waits for them follows in the crew's own line.
- **Model calls.** An LLM call is a message (its ``call_id`` is the message id),
  stream chunks deltas. The call runs in its model scope (a span opened there, an
  HTTP client's or a user's own, nests under ``chat``), entered at the call's start
  event and left at its end, in a :class:`~runnertrace.runners._kit.adapter.ScopeLedger`
  by message id. A failed LLM call ends its message with the exception CrewAI is
  handling (its event only carries the text).
- **ReAct tool calls.** In a ReAct run the tool call is the ``Action`` the model's
  text asks for, so it is announced in the message that asked; the reply's
  scaffolding (thought, action, the ``Final Answer:`` marker) is the message's
  reasoning and only the final answer its text (so a stream's text is run mode's
  reply). CrewAI emits a tool's started event before its cache lookup and the
  argument schema it builds per call, so the tool's scope wraps the tool's function
  itself where it can be found (the adapter's wrapper, which calls back
  :meth:`_Mapper.function_started` / :meth:`_Mapper.function_ended`), else it runs
  from the started to the finished event (a ledger by call id). CrewAI's retries of
  a failing tool are attempts of that one call, which ends with the last error.
- **Native function calling** (``LLM("openai/...")``): a response's tool calls are
  announced by their ids (streamed: CrewAI's chunks carry the arguments accumulated
  so far, and the delta is taken), and a call CrewAI runs (its event has no id) is
  the first asked call of that tool with those arguments; its scope is entered in
  the thread that runs it (CrewAI runs a response's calls in a thread pool) and left
  at its end there, by the innermost call that thread runs.
- **Coworkers** (:mod:`.nesting`) are nested runs on the kit's lifecycle
  (:class:`~runnertrace.runners._kit.nesting.NestedRuns`), keyed by the coworker's
  agent execution, their lane current in the delegation's context while they work.
- Events that name another crew's agent or task (a crew kicked off inside a tool)
  are not this run's (:meth:`_Mapper.foreign`).

Every public method runs in the runner's one boundary (:data:`_BOUNDARY`): a fault
costs telemetry only.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from crewai import Crew
from crewai.agents.parser import AgentAction, OutputParserError, parse
from crewai.events.types.agent_events import (
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
from crewai.events.types.task_events import TaskStartedEvent
from crewai.events.types.tool_usage_events import (
    ToolUsageErrorEvent,
    ToolUsageFinishedEvent,
    ToolUsageStartedEvent,
)
from crewai.tools.tool_usage import ToolUsage
from crewai.utilities.agent_utils import extract_tool_call_info
from pydantic import JsonValue

from runnertrace.core.context import reset_var
from runnertrace.core.observer import NULL_OBSERVER
from runnertrace.runners._kit import genai
from runnertrace.runners._kit.adapter import ScopeLedger, guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.nesting import NestedAgentRun, NestedRuns
from runnertrace.runners._kit.skeleton import MappingBoundary, reply_of
from runnertrace.runners.crewai.convert import (
    CrewAIReportedError,
    ReActText,
    handled,
    usage_of,
)
from runnertrace.runners.crewai.nesting import Coworker, coworker_of
from runnertrace.runners.crewai.request import offered_tools, request_fields, tool_definitions

_BOUNDARY = MappingBoundary("crewai")
"""The runner's one boundary: every file of the runner uses this one."""

ToolTiming = Callable[["_Mapper", Callable[..., Any]], Callable[..., Any]]
"""How a tool's function is made to run in its call's scope (the adapter's wrapper;
the mapper is handed it, as the adapter sits above the mapper)."""

_AgentKey = tuple[str, str]  # an agent execution: (CrewAI agent id, task id)


class _Lane:
    """One line of work in a run, and the state of the agent working in it.

    The crew's own line (its sync tasks, one after the other) is the run's; an
    ``async_execution`` task's is a branch of the run (``branch``: its key), which
    overlaps the others; a coworker that an agent delegates to works in a nested run
    of its own (``nested``), opened in the delegation's tool scope, with a builder
    of its own. A lane is found by the context the events are emitted in
    (:data:`_LANE`): CrewAI runs an async task in a thread of its own in a copy of
    the crew's context, and a coworker in the delegating agent's tool call.
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
        "nested",
        "outer",
        "ran",
        "running",
        "steps",
        "task",
        "tools",
    )

    def __init__(
        self,
        mapper: _Mapper,
        builder: EventBuilder,
        *,
        branch: str | None = None,
        nested: NestedAgentRun | None = None,
        outer: _Lane | None = None,
        task: str = "",
    ) -> None:
        self.mapper = mapper
        self.builder = builder
        self.branch = branch
        self.nested = nested  # a coworker's nested run (None: not traced)
        self.outer = outer  # a coworker's: the lane of the agent that delegated
        self.task = task  # a coworker's: the task delegated to it
        self.steps: list[tuple[str, int | None]] = []
        self.agent_steps: dict[_AgentKey, str] = {}  # agent execution -> its step
        self.tools: list[dict[str, JsonValue]] | None = None  # the working agent's tools
        self.asked: tuple[str, str] | None = None  # (call id, tool) the last message asked for
        self.call: tuple[str, str] | None = None  # the ReAct tool call running or being retried
        self.call_error: BaseException | None = None
        self.running = False  # the call's function is running (in its scope)
        self.ran = False  # the function of the current call has started
        # Native function calling: the calls the model's last responses asked for, not
        # yet run, as (call id, tool name, arguments).
        self.asked_native: list[tuple[str, str, Any]] = []


# The lane of the events emitted in this context (``None``: the crew's own line).
_LANE: contextvars.ContextVar[_Lane | None] = contextvars.ContextVar(
    "runnertrace_crewai_lane", default=None
)


@contextmanager
def _in_lane(lane: _Lane) -> Iterator[None]:
    """``lane`` is the current context's while a coworker works (set and reset in the
    delegation's context, where its start and end are both reported)."""
    token = _LANE.set(lane)
    try:
        yield
    finally:
        reset_var(_LANE, token)  # left in another context: nothing to undo


_Running = tuple[_Lane, AbstractContextManager[None]]  # a ReAct call's function running


@guarded(_BOUNDARY)
class _Mapper:
    """One run's mapping of the crew's events, in emission order, onto the builder.

    The bus reports in the emitting thread: the crew's, an async task's, a thread
    CrewAI runs a tool in; the sink maps each event under :attr:`lock`. Scopes
    entered at a start event are left at the matching end event, in the same
    context. After :meth:`close` (the run ended or was cancelled while the crew's
    threads keep going) the sink maps nothing more; scopes those threads entered
    belong to their contexts and end with them.
    """

    def __init__(
        self, builder: EventBuilder, *, mode: str = "run", timing: ToolTiming | None = None
    ) -> None:
        self.builder = builder
        self.mode = mode
        self.timing = timing
        self.closed = False
        self.crew_id: str | None = None
        self.lock = threading.RLock()  # async tasks and parallel tool calls report at once
        self.main = _Lane(self, builder)
        self._models: ScopeLedger[str] = ScopeLedger(_BOUNDARY)  # message id -> chat current
        self._tools: ScopeLedger[str] = ScopeLedger(_BOUNDARY)  # tool call id -> its scope
        self._lanes: ScopeLedger[_AgentKey] = ScopeLedger(_BOUNDARY)  # coworker -> its lane
        self._coworkers: NestedRuns[_AgentKey] = NestedRuns(_BOUNDARY)
        self._message_lanes: dict[str, _Lane] = {}  # an open model call -> its lane
        self._streamed: set[str] = set()
        self._react: dict[str, ReActText] = {}  # ReAct calls (sent no tools): their split
        self._tasks = 0
        self._task_steps: dict[str, tuple[int, _Lane]] = {}  # task id -> its step's index, lane
        self._agent_lanes: dict[_AgentKey, _Lane] = {}  # agent execution -> its lane
        # Native function calling: the calls each thread runs, innermost last (CrewAI
        # runs a response's calls in a thread pool, and calls nest in a delegation).
        self._native: dict[int, list[tuple[_Lane, str, str]]] = {}
        self._arguments: dict[tuple[str, Any], str] = {}  # streamed call -> its arguments so far
        # This crew's agents (its manager joins when it starts) and tasks: an event of
        # another agent is a crew's run inside one of our tools, its own run's.
        self._agent_ids: set[str] = set()
        self._task_ids: set[str] = set()

    # -- the run ---------------------------------------------------------------------------
    def expect(self, crew: Crew) -> None:
        """The crew this run kicks off: its agents and tasks are this run's."""
        self.crew_id = str(crew.id)
        self._agent_ids.update(str(agent.id) for agent in crew.agents)
        self._task_ids.update(str(task.id) for task in crew.tasks)

    def foreign(self, event: Any) -> bool:
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
        with self.lock:
            for key in reversed(list(self._coworkers)):
                lane = self._agent_lanes.get(key)
                if lane is not None:
                    self._settle(lane)
                self._coworkers.end(key, error=error)
            self._settle(self.main)
            for task_lane in {lane for _, lane in self._task_steps.values()}:
                self._settle(task_lane)
            self.builder.fail(error)

    def close(self) -> None:
        """The run is over: nothing more is mapped. A coworker's run still open (the run
        was cancelled while it worked) ends as cancelled."""
        with self.lock:
            self.closed = True
            self._coworkers.end_all()

    def _lane(self) -> _Lane:
        """The lane of what runs in the current context (the crew's own line unless an
        async task or a delegation of this run set another)."""
        lane = _LANE.get()
        return lane if lane is not None and lane.mapper is self else self.main

    def _step_start(
        self, lane: _Lane, name: str, index: int | None, agent_name: str | None = None
    ) -> None:
        lane.steps.append((name, index))
        lane.builder.step_start(name, index, agent_name=agent_name, branch=lane.branch)

    def _step_end(self, lane: _Lane, name: str, index: int | None = None) -> None:
        if (name, index) in lane.steps:
            lane.steps.remove((name, index))
            lane.builder.step_end(name, index, branch=lane.branch)

    def _settle(self, lane: _Lane) -> None:
        """A failed ReAct tool call that CrewAI did not retry ends with its last error."""
        if lane.call is None or lane.call_error is None:
            return
        (call_id, name), error = lane.call, lane.call_error
        lane.call, lane.call_error = None, None
        lane.builder.tool_result(call_id, str(error), name=name, error=error)

    # -- steps -----------------------------------------------------------------------------
    def on_task_started(self, source: Any, event: TaskStartedEvent) -> None:
        """A crew's task: a step in the crew's line, or, run with ``async_execution``
        (in a thread of its own, beside the crew's), in a branch of its own."""
        lane = self._lane()
        self._settle(lane)
        index = self._tasks
        self._tasks += 1
        if getattr(getattr(event, "task", None), "async_execution", False):
            # The task's thread runs in its own copy of the crew's context: the lane
            # set here is the task's, and its agent's (and the threads that copy it).
            lane = _Lane(self, self.builder, branch=f"task {index}")
            _LANE.set(lane)
        self._task_steps[_task_key(event)] = (index, lane)
        self._step_start(lane, "task", index)

    def on_task_ended(self, source: Any, event: Any) -> None:
        """A task's step ends by the task's id (a crew's async tasks overlap)."""
        found = self._task_steps.pop(_task_key(event), None)
        if found is None:
            return
        index, lane = found
        self._settle(lane)
        self._step_end(lane, "task", index)

    def on_agent_started(self, source: Any, event: AgentExecutionStartedEvent) -> None:
        lane = self._lane()
        self._settle(lane)
        role = str(event.agent.role)
        key = _agent_key(event)
        coworker = coworker_of(event, working=bool(lane.agent_steps))
        if coworker is not None:
            lane = self._coworker(lane, coworker, key)
        if lane.builder.observed:
            lane.tools = tool_definitions(offered_tools(event))
        self._agent_lanes[key] = lane
        lane.agent_steps[key] = role
        self._step_start(lane, role, None, agent_name=role)

    def _coworker(self, outer: _Lane, coworker: Coworker, key: _AgentKey) -> _Lane:
        """The lane of a coworker delegated to from ``outer``'s running tool call: a run
        nested in that call's scope (the current context), whose events are traced but
        not yielded (the stream is the crew's); an untraced run maps them to nothing."""
        nested = None
        if outer.builder.observed:
            nested = self._coworkers.open(
                key, coworker.role, mode=self.mode, requests=coworker.requests
            )
        builder = nested.builder if nested is not None else EventBuilder(NULL_OBSERVER)
        lane = _Lane(self, builder, nested=nested, outer=outer, task=coworker.task)
        self._lanes.enter(key, _in_lane(lane))
        return lane

    def on_agent_ended(self, source: Any, event: Any) -> None:
        """An agent's step ends by the agent's and the task's ids: in a crew, each agent
        takes its turn over its tasks; a coworker's run ends with its step."""
        key = _agent_key(event)
        lane = self._agent_lanes.pop(key, None)
        if lane is None:
            return
        self._settle(lane)
        role = lane.agent_steps.pop(key, None)
        if role is not None:
            self._step_end(lane, role)
        if lane.outer is None or lane.agent_steps:
            return
        # A coworker's execution ended (CrewAI may retry it: a run of its own again).
        if isinstance(event, AgentExecutionErrorEvent):
            self._coworkers.end(key, error=handled(str(event.error)))
        else:
            output = getattr(event, "output", None)
            reply = None if output is None else reply_of(output, lane.task)
            self._coworkers.end(key, reply=reply)
        self._lanes.leave(key)

    # -- model calls -----------------------------------------------------------------------
    def on_llm_started(self, source: Any, event: LLMCallStartedEvent) -> None:
        lane = self._lane()
        self._settle(lane)
        builder = lane.builder
        request = _BOUNDARY.detail(request_fields, event, lane.tools) if builder.observed else {}
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
            self._react[message_id] = ReActText()
        self._models.enter(message_id, builder.model_scope(message_id))

    def _message_lane(self, call_id: str) -> _Lane:
        return self._message_lanes.get(call_id) or self._lane()

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
        self._models.leave(call_id)
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
            **usage_of(event.usage),
        )

    def _ask(self, lane: _Lane, call_id: str, text: str) -> None:
        """A ReAct ``Action`` in the model's text is the tool call it asks for."""
        try:
            parsed = parse(text)
        except OutputParserError:
            return  # CrewAI feeds the format error back; there is no call to announce
        if not isinstance(parsed, AgentAction):
            return
        tool_call_id = _new_call_id()
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
        self._models.leave(event.call_id)
        self._streamed.discard(event.call_id)
        self._react.pop(event.call_id, None)
        lane.builder.message_end(event.call_id, error=handled(event.error))

    # -- tool calls (ReAct: the call the last message asked for) ------------------------------
    def on_tool_started(self, source: Any, event: ToolUsageStartedEvent) -> None:
        if not isinstance(source, ToolUsage):
            self._native_started(event)
            return
        lane = self._lane()
        name = str(event.tool_name)
        if lane.call is None or lane.call[1] != name:  # not a retry of the failed call
            self._settle(lane)
            asked, lane.asked = lane.asked, None
            if asked is not None and _same_tool(asked[1], name):
                lane.call = (asked[0], name)
            else:  # a call no message announced
                lane.call = (_new_call_id(), name)
        lane.call_error = None
        lane.ran = False
        if not self._time_function(source, name):
            self._tools.enter(lane.call[0], lane.builder.tool_scope(lane.call[0]))

    def _time_function(self, source: Any, name: str) -> bool:
        """Run the tool's scope around the tool's function itself, if it can be found.

        CrewAI emits the started event before its cache lookup and the argument
        schema it builds per call (1-3 ms), so the scope (where the span starts)
        wraps the function instead (:attr:`timing`, the adapter's wrapper). The
        structured tools a ``ToolUsage`` picks from are made per agent execution
        (``parse_tools``), so wrapping one changes no object of the user's; an async
        function keeps the scope of the event.
        """
        if self.timing is None:
            return False
        found = False
        for structured in getattr(source, "tools", None) or ():
            func = getattr(structured, "func", None)
            if not _same_tool(str(getattr(structured, "name", "")), name) or func is None:
                continue
            if inspect.iscoroutinefunction(func):
                return False
            structured.func = self.timing(self, func)
            found = True
        return found

    def function_started(self) -> _Running | None:
        """A tool's function starts (in the adapter's wrapper): the call of this
        context's lane runs in its scope, taken here under the lock (taking it opens
        the span: one lane at a time); ``None`` when no call of ours waits for it (one
        is running already, or the run is over)."""
        with self.lock:
            lane = self._lane()
            call = lane.call
            if call is None or lane.running or self.closed:
                return None
            scope = lane.builder.tool_scope(call[0])
            lane.running = lane.ran = True
            return lane, scope

    def function_ended(self, running: _Running | None, outcome: Any) -> None:
        """The function returned or raised (CrewAI reports which, by its events)."""
        if running is not None:
            running[0].running = False

    def _leave_tool(self, lane: _Lane) -> bool:
        """Leave the running tool's scope; False when no call is running.

        A call whose function never ran (a cached result, a failed validation)
        opens its span here, when CrewAI settles it."""
        if lane.call is None:
            return False
        call_id = lane.call[0]
        if not self._tools.leave(call_id) and not lane.ran:
            with lane.builder.tool_scope(call_id):
                lane.ran = True
        return True

    # -- native function calling: a call the model's response asked for, by id --------------
    def _native_started(self, event: ToolUsageStartedEvent) -> None:
        """CrewAI's executor runs a call of the last response (its event has no call
        id): it is the first asked call of that tool, with those arguments if one
        matches. Its scope opens here, in the thread that runs the tool."""
        lane = self._lane()
        name = str(event.tool_name)
        same = [c for c in lane.asked_native if _same_tool(c[1], name)]
        exact = [c for c in same if c[2] == event.tool_args]
        chosen = next(iter(exact or same), None)
        if chosen is None:  # a call no response announced: it runs as its own
            tool_call_id = _new_call_id()
            lane.builder.tool_start(tool_call_id, name, json.dumps(event.tool_args, default=str))
        else:
            lane.asked_native.remove(chosen)
            tool_call_id = chosen[0]
        self._tools.enter(tool_call_id, lane.builder.tool_scope(tool_call_id))
        self._native.setdefault(threading.get_ident(), []).append((lane, tool_call_id, name))

    def _native_ended(self, output: Any, error: BaseException | None) -> None:
        thread = threading.get_ident()
        running = self._native.get(thread)
        if not running:
            return
        lane, tool_call_id, name = running.pop()  # calls nest in a delegation
        if not running:
            del self._native[thread]
        self._tools.leave(tool_call_id)
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


def _new_call_id() -> str:
    """An id for a tool call CrewAI gives none (a ReAct action, an unannounced call)."""
    return f"call_{uuid.uuid4().hex[:12]}"


def _calls_functions(model: Any) -> bool:
    """Whether CrewAI drives ``model`` (an LLM event's source) by native function
    calling; else by ReAct text, whose every reply it parses for its final answer."""
    supports = getattr(model, "supports_function_calling", None)
    return bool(supports()) if callable(supports) else True


def _task_key(event: Any) -> str:
    """A task event's task id (CrewAI's own, or the event's copy of it)."""
    task = getattr(event, "task", None)
    return str(getattr(task, "id", None) or getattr(event, "task_id", None))


def _agent_key(event: Any) -> _AgentKey:
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
