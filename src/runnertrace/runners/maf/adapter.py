"""The framework adapter: the middleware of ours that Agent Framework calls.

**A run of ours** passes three middleware with ``run(middleware=...)``, which Agent
Framework appends to the agent's and the client's own (so every user middleware still
runs exactly once, and ours are innermost, nearest to the model and the tool):

* :class:`_ChatObserver`: a step and a message start when a model request is sent,
  with what it is sent (:mod:`.request`); the request runs in the model scope. In run
  mode the response becomes the message's events; in stream mode the model stream's
  own hooks report each update (a pull context manager keeps the model scope current
  while the provider produces) and end the message with the final response's usage;
* :class:`_FunctionObserver`: each tool runs in the tool scope (a span opened in the
  tool nests under ``execute_tool``); a tool that raises is reported with its
  exception, whether Agent Framework feeds it back to the model (its default) or the
  run fails (``MiddlewareFailure``). A tool that runs agents (``agent.as_tool()``) opens
  a delegation (:mod:`.nesting`) for its body;
* :class:`_AgentObserver`: it ends the last step. In stream mode its "after" runs
  before the stream is consumed, so it registers a result hook on the agent's stream.

**An inner agent** (one a delegation maps: an ``as_tool()`` agent, a workflow's agents)
runs no middleware of ours by itself: ``as_tool()`` calls ``agent.run`` with none, and
a ``WorkflowAgent`` runs none of its own. So for the delegation our dispatchers
(:class:`_DelegatedAgent`, :class:`_DelegatedChat`, :class:`_DelegatedFunction`) are
appended to each inner agent's ``middleware`` list (:data:`_ATTACHMENTS`:
reference-counted over concurrent delegations, removed when the last one ends); they
read the delegation of the context they run in and pass every other run of the agent
straight through.

Every class the framework calls is ``@guarded(_BOUNDARY)``: a fault in any of our
parts is reported once and costs telemetry only. Each ``process`` calls into the
framework (``call_next``), so it is ``@passes_through``, written with the kit's
:func:`~runnertrace.runners._kit.adapter.bracket`: our parts around the call (its
start, its scope, its end) run in the boundary, and the call's own exceptions are the
agent's and propagate unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from functools import partial
from types import TracebackType
from typing import Any

from agent_framework import Agent as MAFAgent
from agent_framework import (
    AgentContext,
    AgentMiddleware,
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    FunctionInvocationContext,
    FunctionMiddleware,
    ResponseStream,
)

from runnertrace.runners._kit.adapter import bracket, guarded, passes_through
from runnertrace.runners.maf.convert import listed
from runnertrace.runners.maf.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.maf.mcp import call_scope, server_of
from runnertrace.runners.maf.nesting import (
    _AgentRun,
    _Delegation,
    current_delegation,
    delegated_mapper,
    delegation_as,
)
from runnertrace.runners.maf.quiet import quiet_as, quiet_here, tool_quiet

CallNext = Callable[[], Awaitable[None]]

# -- a run of ours ---------------------------------------------------------------------------------


@guarded(_BOUNDARY)
class _ChatObserver(ChatMiddleware):
    """Reports each model request; innermost chat middleware, so it sees what is sent."""

    def __init__(self, mapper: _Mapper | None) -> None:
        self._mapper = mapper

    def mapper(self) -> _Mapper | None:
        """The mapping this request belongs to (``None``: it runs unmapped)."""
        return self._mapper

    @passes_through
    async def process(self, context: ChatContext, call_next: CallNext) -> None:
        mapper = self.mapper()
        message_id = mapper.chat_started(context) if mapper is not None else None
        if mapper is None or message_id is None:  # unmapped, or its start went unreported
            await call_next()
            return
        await bracket(
            _BOUNDARY,
            call_next,
            start=lambda: message_id,
            scope=mapper.builder.model_scope,
            done=lambda message_id, _: self.answered(mapper, context, message_id),
            failed=mapper.failed,
        )

    def answered(self, mapper: _Mapper, context: ChatContext, message_id: str) -> None:
        """The request returned: a stream is reported by its own hooks as it is consumed
        (after we return), with the model scope current during each pull; a response
        at once."""
        result = context.result
        if isinstance(result, ResponseStream):
            if mapper.builder.observed:
                result.with_pull_context_manager(partial(mapper.builder.model_scope, message_id))
            context.stream_transform_hooks.append(partial(mapper.update, message_id))
            context.stream_result_hooks.append(partial(mapper.finished, message_id))
        elif isinstance(result, ChatResponse):
            mapper.response(message_id, result)
            mapper.finished(message_id, result)


class _ToolCall:
    """One tool call as our bracket carries it: its id and name, and whether it runs in
    a traced run (whose framework call runs quiet)."""

    __slots__ = ("id", "name", "traced")

    def __init__(self, call_id: str, name: str, traced: bool) -> None:
        self.id = call_id
        self.name = name
        self.traced = traced


@guarded(_BOUNDARY)
class _FunctionObserver(FunctionMiddleware):
    """Runs each tool in its tool scope and reports its result or its exception; an
    agent run as a tool (``agent.as_tool()``) gets its own nested run there, and a call
    to an MCP server (one of ``servers``, the run's MCP tools) is told once (:mod:`.mcp`)."""

    def __init__(self, mapper: _Mapper | None, servers: Sequence[Any] = ()) -> None:
        self._mapper = mapper
        self._servers = servers

    def mapper(self) -> _Mapper | None:
        """The mapping this tool call belongs to (``None``: it runs unmapped)."""
        return self._mapper

    def servers(self) -> Sequence[Any]:
        """The MCP tools whose functions this run's model may call."""
        return self._servers

    def started(self, context: FunctionInvocationContext) -> _ToolCall:
        return _ToolCall(
            str(context.metadata.get("call_id") or ""), context.function.name, quiet_here()
        )

    @passes_through
    async def process(self, context: FunctionInvocationContext, call_next: CallNext) -> None:
        mapper = self.mapper()
        call = self.started(context) if mapper is not None else None
        if mapper is None or call is None:  # unmapped, or its start went unreported
            await call_next()
            return
        await bracket(
            _BOUNDARY,
            call_next,
            start=lambda: call,
            scope=partial(self._running, mapper, context),
            done=lambda call, _: mapper.tool_returned(call.id, call.name, context.result),
            failed=lambda call, error: mapper.tool_failed(call.id, call.name, error),
        )

    @contextmanager
    def _running(
        self, mapper: _Mapper, context: FunctionInvocationContext, call: _ToolCall
    ) -> Iterator[None]:
        """The tool's scope: its span current; in a traced run, Agent Framework's own
        spans quiet (in the whole body when it runs an agent we map, whose spans are
        ours, or calls an MCP server; else only the tool's own span), and the
        delegation of its agents open."""
        with mapper.builder.tool_scope(call.id):
            server = server_of(context.function, self.servers()) if call.traced else None
            delegation = _Delegation.for_tool(context.function) if call.traced else None
            whole = delegation is not None or server is not None
            quiet = tool_quiet(whole) if call.traced else False
            mcp = call_scope(server) if server is not None else nullcontext()
            with mcp, quiet_as(quiet), _delegating(delegation):
                yield


@guarded(_BOUNDARY)
class _AgentObserver(AgentMiddleware):
    """Ends the run's last step: after the call in run mode, and in stream mode from
    the agent stream's result hook (its "after" runs before the stream is consumed)."""

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper

    @passes_through
    async def process(self, context: AgentContext, call_next: CallNext) -> None:
        await bracket(_BOUNDARY, call_next, done=lambda _, __: self.answered(context))

    def answered(self, context: AgentContext) -> None:
        if isinstance(context.result, ResponseStream):
            context.stream_result_hooks.append(self.mapper.run_finished)
        else:
            self.mapper.run_finished(context.result)


def observers(mapper: _Mapper, servers: Sequence[Any] = ()) -> list[Any]:
    """Our three middleware of one run, as ``run(middleware=...)`` takes them; ``servers``:
    the run's MCP tools."""
    return [_AgentObserver(mapper), _ChatObserver(mapper), _FunctionObserver(mapper, servers)]


# -- the framework's code of a run -----------------------------------------------------------------


@guarded(_BOUNDARY)
class _RunContext:
    """What the framework's code of one run sees of ours: the quiet setting of a traced
    run, and the delegation a workflow's agents' runs belong to. Entered around the
    run's call, and around the creation and each pull of its stream (the tasks a pull
    starts take it along); a fresh one each time. Each part is entered and left in the
    boundary, on its own: a fault costs the silence or the nesting, never the other,
    never the run."""

    __slots__ = ("delegated", "delegation", "quiet", "quieted")

    def __init__(self, quiet: bool, delegation: _Delegation | None) -> None:
        self.quiet = quiet
        self.delegation = delegation
        self.quieted: AbstractContextManager[None] | None = None
        self.delegated: AbstractContextManager[None] | None = None

    def __enter__(self) -> None:
        if self.quiet:
            self.quieted = self.silence()
        if self.delegation is not None:
            self.delegated = self.delegate(self.delegation)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.delegated is not None:
            self.leave(self.delegated)
        if self.quieted is not None:
            self.leave(self.quieted)

    def silence(self) -> AbstractContextManager[None]:
        """Agent Framework's own spans off, until :meth:`leave` (``None`` after a fault)."""
        scope = quiet_as(True)
        scope.__enter__()
        return scope

    def delegate(self, delegation: _Delegation) -> AbstractContextManager[None]:
        """``delegation`` current, until :meth:`leave` (``None`` after a fault)."""
        scope = delegation_as(delegation)
        scope.__enter__()
        return scope

    def leave(self, scope: AbstractContextManager[None]) -> None:
        scope.__exit__(None, None, None)


# -- inner agents ----------------------------------------------------------------------------------


@guarded(_BOUNDARY)
class _DelegatedAgent(AgentMiddleware):
    """On an agent a delegation may run: a run of it in the delegation's scope starts
    its own run (:meth:`_Delegation.start <.nesting._Delegation.start>`), ended when
    its call returns, its stream ends, or a pull of its stream fails (a workflow
    cancels the other branches when one fails); any other run passes straight through."""

    def __init__(self, agent: MAFAgent[Any]) -> None:
        self.agent = agent

    def started(self, context: AgentContext) -> _AgentRun | None:
        delegation = current_delegation()
        return delegation.start(self.agent, context) if delegation is not None else None

    @passes_through
    async def process(self, context: AgentContext, call_next: CallNext) -> None:
        run = self.started(context)
        if run is None:
            await call_next()
            return
        await bracket(
            _BOUNDARY,
            call_next,
            start=lambda: run,
            done=lambda run, _: self.answered(context, run),
            failed=self.failed,
            cancelled=self.failed,  # a branch the workflow cancels ends there, cancelled
        )

    def answered(self, context: AgentContext, run: _AgentRun) -> None:
        result = context.result
        if isinstance(result, ResponseStream):
            result.with_pull_context_manager(partial(_EndedByFailure, self, run))
            context.stream_result_hooks.append(partial(self.ended, run))
        else:
            self.ended(run, result)

    def ended(self, run: _AgentRun, response: Any) -> None:
        """The run ended with ``response``: its nested run ends with the text."""
        text = getattr(response, "text", None)
        run.delegation.end(run, text if isinstance(text, str) else None, None, response)

    def failed(self, run: _AgentRun, error: BaseException) -> None:
        run.delegation.end(run, None, error)


class _EndedByFailure:
    """Around each pull of a delegated agent's stream: a pull that fails ends its run
    (a cancellation: cancelled), through the guarded :meth:`_DelegatedAgent.failed`."""

    __slots__ = ("hooks", "run")

    def __init__(self, hooks: _DelegatedAgent, run: _AgentRun) -> None:
        self.hooks = hooks
        self.run = run

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None and not isinstance(error, StopAsyncIteration):
            self.hooks.failed(self.run, error)


@guarded(_BOUNDARY)
class _DelegatedChat(_ChatObserver):
    """A model request of a delegated agent: mapped by its run in this context, if any."""

    def __init__(self, agent: MAFAgent[Any]) -> None:
        super().__init__(None)
        self.agent = agent

    def mapper(self) -> _Mapper | None:
        return delegated_mapper(self.agent)


@guarded(_BOUNDARY)
class _DelegatedFunction(_FunctionObserver):
    """A tool call of a delegated agent: mapped by its run in this context, if any."""

    def __init__(self, agent: MAFAgent[Any]) -> None:
        super().__init__(None)
        self.agent = agent

    def mapper(self) -> _Mapper | None:
        return delegated_mapper(self.agent)

    def servers(self) -> Sequence[Any]:
        return self.agent.mcp_tools


class _Attachment:
    """Our middleware on one agent, and how many delegations use it now."""

    __slots__ = ("bundle", "count", "had_none")

    def __init__(self, bundle: list[Any], had_none: bool) -> None:
        self.bundle = bundle
        self.had_none = had_none
        self.count = 0


@guarded(_BOUNDARY)
class _Attachments:
    """Our dispatching middleware on the agents delegations may run, appended to each
    agent's own ``middleware`` (innermost, as in a run of ours) while at least one
    delegation of it is open, and taken off when the last one ends."""

    def __init__(self) -> None:
        self._on: dict[int, _Attachment] = {}  # id(agent) -> ours on it
        self._lock = threading.Lock()

    def attach(self, agent: MAFAgent[Any]) -> bool:
        """Ours on ``agent`` (once for any number of delegations); ``True`` when it is,
        to be undone with :meth:`detach`."""
        key = id(agent)
        with self._lock:
            attachment = self._on.get(key)
            if attachment is None:
                bundle: list[Any] = [
                    _DelegatedAgent(agent),
                    _DelegatedChat(agent),
                    _DelegatedFunction(agent),
                ]
                before = agent.middleware
                attachment = self._on[key] = _Attachment(bundle, before is None)
                agent.middleware = [*listed(before), *bundle]
            attachment.count += 1
        return True

    def detach(self, agent: MAFAgent[Any]) -> None:
        key = id(agent)
        with self._lock:
            attachment = self._on[key]
            attachment.count -= 1
            if attachment.count == 0:
                del self._on[key]
                ours = attachment.bundle
                kept = [m for m in listed(agent.middleware) if all(m is not o for o in ours)]
                agent.middleware = kept if kept or not attachment.had_none else None


_ATTACHMENTS = _Attachments()


def attach(delegation: _Delegation, exits: ExitStack) -> None:
    """Ours on each of ``delegation``'s agents until ``exits`` closes."""
    for agent in delegation.agents:
        if _ATTACHMENTS.attach(agent):
            exits.callback(_ATTACHMENTS.detach, agent)


@contextmanager
def _delegating(delegation: _Delegation | None) -> Iterator[None]:
    """A tool's body: the delegation it runs (or none: a run of an agent there is not
    the enclosing delegation's), with ours on its agents. The inner runs still open
    when the body ends, end then, cancelled."""
    if delegation is None and current_delegation() is None:
        yield
        return
    with ExitStack() as stack:
        stack.enter_context(delegation_as(delegation))
        if delegation is not None:
            attach(delegation, stack)
            stack.callback(delegation.cancel)  # first out: before ours come off the agents
        yield
