"""Which agents Agent Framework runs by itself inside a run of ours, and their runs.

Agent Framework runs agents of its own in two places, where no runner of ours is
called for them:

* **an agent run as a tool** (``agent.as_tool()``, or a workflow's
  ``as_agent().as_tool()``): each run of an inner agent in such a tool's body is a run
  of its own, nested under the ``execute_tool`` span, with its own steps, chat and tool
  spans under its own name; nested ``as_tool()`` agents nest the same way, one run per
  level. Agent Framework's own spans (the workflow's included) stay quiet in the whole
  body of such a tool: ours stand for them;
* **a workflow registered as the agent** (``workflow.as_agent()``, the orchestrations
  of ``agent-framework-orchestrations`` included): each run of one of its agents (an
  ``AgentExecutor``'s, a handoff's clone, a group chat's ``orchestrator_agent``, those
  of nested workflows) is a nested run under the run span, in sequence or side by side
  as the workflow runs them. In stream mode their events are the run's stream too
  (queued there, not reported to the run, which has them through its nested runs).
  The framework context is lent to each agent's session while it runs (a workflow's
  agents have sessions of their own), so its tools find it where an ``Agent``'s do.

This module is the discovery (:func:`delegates_of`, :func:`workflow_agents`: which
agents, read from the tool's function or the workflow's executors) and the record of
the agents one tool call or one workflow run maps (:class:`_Delegation`). The life of
each inner run, from its open under the current span to its one end (with its reply,
its error, or cancelled), is the kit's :class:`~runnertrace.runners._kit.nesting.
NestedAgentRun`. Our middleware on those agents (:mod:`.adapter`) hands each run's
progress to its own :class:`~runnertrace.runners.maf.mapper._Mapper`.

A :class:`_Delegation` is ``@guarded``: a fault in the discovery or in an inner run's
bookkeeping costs that run's telemetry (and, for a workflow, the context's lending),
never the run.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from agent_framework import Agent as MAFAgent
from agent_framework import (
    AgentContext,
    AgentExecutor,
    AgentSession,
    WorkflowAgent,
    WorkflowExecutor,
)

from runnertrace.core.context import reset_var
from runnertrace.core.events import StreamEvent
from runnertrace.core.observer import NULL_OBSERVER, Observer, can_nest_runs
from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.nesting import NestedAgentRun
from runnertrace.runners.maf.convert import CONTEXT_KEY
from runnertrace.runners.maf.mapper import _BOUNDARY, _Mapper

# -- discovery -------------------------------------------------------------------------------------


def tool_target(function: Any) -> Any:
    """The agent behind a tool made by ``agent.as_tool()`` (its wrapper function holds
    the agent as ``self``), else ``None``."""
    func = getattr(function, "func", None)
    code = getattr(func, "__code__", None)
    if code is None or not func.__qualname__.endswith(".as_tool.<locals>._agent_wrapper"):  # type: ignore[union-attr]
        return None
    if "self" not in code.co_freevars:
        return None
    return func.__closure__[code.co_freevars.index("self")].cell_contents  # type: ignore[union-attr]


def delegates_of(function: Any) -> tuple[MAFAgent[Any], ...]:
    """The agents a tool runs that we can map: the agent of ``agent.as_tool()``, or
    the agents of a workflow's ``as_agent().as_tool()`` (see :func:`workflow_agents`).
    Only an ``Agent`` runs middleware, so any other keeps Agent Framework's own spans."""
    target = tool_target(function)
    if isinstance(target, MAFAgent):
        return (target,)
    if isinstance(target, WorkflowAgent):
        return workflow_agents(target.workflow)
    return ()


def workflow_agents(workflow: Any) -> tuple[MAFAgent[Any], ...]:
    """The agents a workflow runs, each once: its ``AgentExecutor`` s' agents (the
    orchestrations' participants, a handoff's clones included), an orchestrator's own
    agent (a group chat's ``orchestrator_agent``), and those of the workflows nested in
    it (a ``WorkflowExecutor``, a ``WorkflowAgent`` as an executor's agent)."""
    found: dict[int, MAFAgent[Any]] = {}
    seen: set[int] = set()

    def visit(flow: Any) -> None:
        if id(flow) in seen:
            return
        seen.add(id(flow))
        for executor in getattr(flow, "executors", {}).values():
            if isinstance(executor, WorkflowExecutor):
                visit(executor.workflow)
                continue
            # An orchestrator keeps its agent as ``_agent`` (no public accessor)
            agent = (
                executor.agent
                if isinstance(executor, AgentExecutor)
                else getattr(executor, "_agent", None)
            )
            if isinstance(agent, MAFAgent):
                found.setdefault(id(agent), agent)
            elif isinstance(agent, WorkflowAgent):
                visit(agent.workflow)

    visit(workflow)
    return tuple(found.values())


def lend(context: dict[str, Any] | None, session: AgentSession | None) -> dict[str, Any] | None:
    """The framework context, in an inner run's session state while it runs (where its
    tools look: a workflow's agents have sessions of their own), unless that state
    has one of its own; returns the state it was put in (to take it back from)."""
    if context is None or session is None or CONTEXT_KEY in session.state:
        return None
    session.state[CONTEXT_KEY] = context
    return session.state


# -- the inner runs --------------------------------------------------------------------------------


class _ForwardingBuilder(EventBuilder):
    """An inner agent's builder: each event goes to its nested run (if one traces it)
    and, in a stream-mode run of a workflow, onto the workflow's own stream too (those
    are the events a consumer reads: what the workflow's agents say), queued there
    without being reported to the workflow's run, which has them through its nested runs."""

    def __init__(self, observer: Observer, forward: Callable[[StreamEvent], None] | None) -> None:
        super().__init__(observer)
        self.forward = forward

    def emit(self, event: StreamEvent) -> None:
        self.observer(event)
        if self.forward is not None:
            self.forward(event)


class _Arrivals:
    """A stream-mode workflow run's agents' events: queued on the run's builder, to be
    yielded (not reported: the run has them through its nested runs), and a wake-up
    for the stream, which would otherwise yield them only with the workflow's next
    output (an agent whose output is not the workflow's would stream nothing live)."""

    __slots__ = ("queue", "ready")

    def __init__(self, builder: EventBuilder) -> None:
        queue = builder._queue  # noqa: SLF001 - the kit's builder has no "queue only" call
        assert queue is not None  # a stream-mode builder queues
        self.queue = queue
        self.ready = asyncio.Event()

    def put(self, event: StreamEvent) -> None:
        self.queue.append(event)
        self.ready.set()

    async def merged(self, native: AsyncIterable[Any]) -> AsyncGenerator[Any, None]:
        """``native``'s items, and a ``None`` whenever events arrived in between (the
        template drains the builder after each item). The pull runs as a task of its
        own, created in the consumer's step; it is cancelled if the consumer stops."""
        iterator = native.__aiter__()
        pull: asyncio.Future[Any] | None = None
        try:
            while True:
                if pull is None:
                    pull = asyncio.ensure_future(iterator.__anext__())
                if not self.ready.is_set():
                    wake = asyncio.ensure_future(self.ready.wait())
                    try:
                        await asyncio.wait((pull, wake), return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        wake.cancel()
                if self.ready.is_set():
                    self.ready.clear()
                    yield None
                if pull.done():
                    try:
                        item = pull.result()
                    except StopAsyncIteration:
                        return
                    finally:
                        pull = None
                    yield item
        finally:
            if pull is not None and not pull.done():
                pull.cancel()
                await asyncio.gather(pull, return_exceptions=True)


class _AgentRun:
    """One run of an inner agent in a delegation: its nested run (``None`` when nothing
    traces it), the mapping of its progress (``None`` when nothing maps it: a run we
    only lend the framework context to), and the session state we lent the context to."""

    __slots__ = ("agent", "delegation", "ended", "lent", "mapper", "nested")

    def __init__(
        self,
        delegation: _Delegation,
        agent: MAFAgent[Any],
        nested: NestedAgentRun | None,
        mapper: _Mapper | None,
        lent: dict[str, Any] | None,
    ) -> None:
        self.delegation = delegation
        self.agent = agent
        self.nested = nested
        self.mapper = mapper
        self.lent = lent
        self.ended = False

    def finish(
        self,
        reply: str | None = None,
        error: BaseException | None = None,
        response: Any = None,
        *,
        cancelled: bool = False,
    ) -> None:
        """The run ended (once): the context is taken back, the mapping ends (the last
        step, or what is open with the error), then the nested run."""
        if self.ended:
            return
        self.ended = True
        if self.lent is not None:
            self.lent.pop(CONTEXT_KEY, None)
        mapper, nested = self.mapper, self.nested
        if cancelled:
            if nested is not None:
                nested.cancel()
        elif error is not None:
            if nested is not None:  # what is open ends with it (a cancellation: cancelled,
                nested.fail(error)  # with it, as the tracing layer ends one)
            elif mapper is not None:
                mapper.builder.fail(error)  # only forwarded: the stream's messages end
        else:  # (the stream's hooks may run in any order: the response is here too)
            if mapper is not None:
                mapper.run_finished(response)
            if nested is not None:
                nested.end(reply)


@guarded(_BOUNDARY)
class _Delegation:
    """The agents one tool call (in a traced run) or one workflow run of ours maps:
    each run of one of them (from our middleware attached to it) starts an
    :class:`_AgentRun` and ends it when the agent's run ends; the tool's (or the
    workflow's) end ends whatever is left. ``mapped``: whether the agents' runs are
    mapped (a workflow's are from the install step on; before it, a workflow's agents
    are only lent the framework context); ``forward``: where a stream-mode workflow
    run queues its agents' events; ``context``: the framework context the agents'
    tools see in their session's state."""

    def __init__(
        self,
        agents: tuple[MAFAgent[Any], ...],
        *,
        mapped: bool = True,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.agents = agents
        self.mapped = mapped
        self.context = context
        self.forward: Callable[[StreamEvent], None] | None = None
        self.runs: dict[int, _AgentRun] = {}  # id(agent) -> its run in progress

    @classmethod
    def for_tool(cls, function: Any) -> _Delegation | None:
        """The delegation of a traced run's tool that runs agents we can map, else
        ``None`` (also when nothing here would trace their runs, or after a fault)."""
        agents = delegates_of(function)
        return cls(agents) if agents and can_nest_runs() else None

    @classmethod
    def for_workflow(cls, workflow: Any, context: dict[str, Any]) -> _Delegation | None:
        """A workflow run's delegation: its agents, lent ``context``, mapped once
        :meth:`map` is called (``None`` after a fault)."""
        return cls(workflow_agents(workflow), mapped=False, context=context)

    def map(self, forward: Callable[[StreamEvent], None] | None) -> None:
        """Map the agents' runs from now on (nested runs when someone traces; their
        events put on the run's stream with ``forward``)."""
        self.mapped = True
        self.forward = forward

    def start(self, agent: MAFAgent[Any], context: AgentContext) -> _AgentRun | None:
        """A run of ``agent`` starts in this delegation's scope: its nested run opens
        under the current span (when someone traces it), its mapping starts, and the
        framework context is lent to its session. ``None``: nothing to do for it."""
        lent = lend(self.context, context.session)
        mapper = nested = None
        if self.mapped and any(a is agent for a in self.agents):
            name = agent.name or type(agent).__name__
            forward = self.forward
            nested = NestedAgentRun.open(
                _BOUNDARY,
                name,
                mode="stream" if context.stream else "run",
                builder=partial(_ForwardingBuilder, forward=forward),
            )
            if nested is not None:
                mapper = _Mapper(nested.builder, name, detailed=True)
            elif forward is not None:  # nothing traces it, but its events are the stream's
                mapper = _Mapper(_ForwardingBuilder(NULL_OBSERVER, forward), name, detailed=False)
        if mapper is None and lent is None:
            return None
        run = self.runs[id(agent)] = _AgentRun(self, agent, nested, mapper, lent)
        return run

    def mapper_of(self, agent: MAFAgent[Any]) -> _Mapper | None:
        """The mapping of the run of ``agent`` in progress, if it is mapped."""
        current = self.runs.get(id(agent))
        return current.mapper if current is not None else None

    def end(
        self,
        run: _AgentRun,
        reply: str | None = None,
        error: BaseException | None = None,
        response: Any = None,
    ) -> None:
        """``run`` ended, with its reply (and the response it was built from) or error."""
        if self.runs.get(id(run.agent)) is run:
            del self.runs[id(run.agent)]
        run.finish(reply, error, response)

    def cancel(self) -> None:
        """The delegation's scope ended (the tool's body, the workflow's run): the runs
        still open end cancelled, as the kit's registry ends them (a branch a workflow
        cancelled, a run its caller abandoned)."""
        while self.runs:
            _, run = self.runs.popitem()
            run.finish(cancelled=True)


_delegation: contextvars.ContextVar[_Delegation | None] = contextvars.ContextVar(
    "runnertrace_maf_delegation", default=None
)


@contextmanager
def delegation_as(delegation: _Delegation | None) -> Iterator[None]:
    """The delegation whose agents' runs the code here belongs to, for the block."""
    token = _delegation.set(delegation)
    try:
        yield
    finally:
        reset_var(_delegation, token)


def current_delegation() -> _Delegation | None:
    return _delegation.get()


def delegated_mapper(agent: MAFAgent[Any]) -> _Mapper | None:
    """The mapping of the run of ``agent`` the delegation here maps, if any."""
    delegation = _delegation.get()
    return delegation.mapper_of(agent) if delegation is not None else None
