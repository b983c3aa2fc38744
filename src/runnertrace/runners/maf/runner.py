"""``MAFRunner``: the runner, its per-run class and its module (see the package).

A run is the framework's own call (:meth:`MAFRunner.start`); the template puts our
middleware in when the run is streamed or traced (:meth:`MAFRunner.install`) and
silences Agent Framework's own spans inside a traced run (:meth:`MAFRunner.quiet`).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager, aclosing, asynccontextmanager
from functools import partial
from typing import Any, ClassVar

from agent_framework import Agent as MAFAgent
from agent_framework import (
    AgentResponse,
    AgentSession,
    WorkflowAgent,
    normalize_function_invocation_configuration,
)

from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    native_of,
    reply_of,
    save,
)
from runnertrace.runners.maf.adapter import _RunContext, attach, observers
from runnertrace.runners.maf.convert import CONTEXT_KEY, listed, messages_of, reply_output
from runnertrace.runners.maf.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.maf.mcp import mcp_servers
from runnertrace.runners.maf.nesting import _Arrivals, _Delegation
from runnertrace.runners.maf.quiet import quiet_framework_telemetry

STATE_KEY = "maf"

_CONFIGURATION_OPTION = "function_invocation_configuration"
_CONFIGURATION_KEYS: frozenset[str] = frozenset(
    normalize_function_invocation_configuration(None).keys()
)


def _with_configuration(native: MAFAgent[Any], declared: Mapping[str, Any]) -> MAFAgent[Any]:
    """A shallow copy of ``native`` over a copy of its client carrying ``declared``
    on top of the client's function-invocation configuration."""
    client = copy.copy(native.client)
    merged = {**client.function_invocation_configuration, **declared}  # type: ignore[attr-defined]
    client.function_invocation_configuration = normalize_function_invocation_configuration(  # type: ignore[attr-defined]
        merged  # type: ignore[arg-type]
    )
    agent = copy.copy(native)
    agent.client = client
    return agent


def _native_session(native: Any, stored: Any, session_id: str) -> AgentSession:
    """The stored Agent Framework session, else a new one with our session's id."""
    if isinstance(stored, dict):
        return AgentSession.from_dict(stored)
    session: AgentSession = native.create_session(session_id=session_id)
    return session


class _Run(FrameworkRun["AgentResponse[Any] | None"]):
    """One Agent Framework run: ``agent.run()`` or ``agent.run(stream=True)``.

    ``context`` makes what the framework's code of the run sees of ours (its quiet
    setting, in a traced run): ``None`` for a plain run, which then is the framework's
    call and nothing else.
    """

    def __init__(
        self,
        setup: RunSetup[Any],
        target: Any,
        kwargs: dict[str, Any],
        native_session: AgentSession,
    ) -> None:
        super().__init__(setup)
        self.target = target
        self.kwargs = kwargs
        self.native_session = native_session
        self.context: Callable[[], AbstractContextManager[None]] | None = None

    # -- what the runner's install and quiet steps put in -----------------------------------
    def instrument(self, setup: RunSetup[Any]) -> None:
        """Our middleware, after the caller's (ours are innermost)."""
        mapper = _Mapper(setup.builder, setup.agent.name, detailed=setup.observed)
        kwargs = self.kwargs
        servers = mcp_servers(setup.native, kwargs)
        kwargs["middleware"] = [*listed(kwargs.get("middleware")), *observers(mapper, servers)]

    def silence(self) -> None:
        """Agent Framework's own spans quiet in the framework's code of this run."""
        self.context = partial(_RunContext, True, None)

    # -- calling the framework --------------------------------------------------------------
    async def call(self) -> AgentResponse[Any]:
        context = self.context
        if context is None:
            plain: AgentResponse[Any] = await self.target.run(**self.kwargs)
            return plain
        with context():
            response: AgentResponse[Any] = await self.target.run(**self.kwargs)
        return response

    def _open(self) -> Any:
        """The framework's stream, with every pull in this run's context (if any)."""
        context = self.context
        if context is None:
            return self.target.run(stream=True, **self.kwargs)
        with context():
            native_stream = self.target.run(stream=True, **self.kwargs)
        native_stream.with_pull_context_manager(context)
        return native_stream

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        # Closing the native stream too: a consumer that stops early leaves no
        # suspended provider stream behind.
        native_stream = self._open()
        async with native_stream:
            yield native_stream
            await native_stream.get_final_response()

    async def outcome(self) -> None:
        return None

    # -- after success ----------------------------------------------------------------------
    async def save(self, result: AgentResponse[Any] | None) -> None:
        setup, native_session = self.setup, self.native_session
        produced = native_session.state.pop(CONTEXT_KEY, None)
        if not isinstance(produced, Mapping):
            produced = setup.prepared.context
        save(setup.session, STATE_KEY, native_session.to_dict(), setup.prepared, produced)

    def reply(self, result: AgentResponse[Any] | None, prompt: str) -> AgentReply:
        assert result is not None  # run mode
        return reply_of(reply_output(result), prompt)


class _WorkflowRun(_Run):
    """One run of a ``WorkflowAgent`` (``workflow.as_agent()``): the workflow's run is
    this run; each run of one of its agents is the delegation's (:mod:`.nesting`):
    always lent the framework context (our dispatchers are on its agents for the run:
    a ``WorkflowAgent`` runs no middleware of its own), and from the install step on a
    nested run under this one. In stream mode the agents' events are also this run's
    stream, in the order they happen. Agent Framework's own spans (the workflow's, its
    executors' and its agents') stay quiet in a traced run."""

    def __init__(
        self,
        setup: RunSetup[Any],
        target: Any,
        kwargs: dict[str, Any],
        native_session: AgentSession,
        delegation: _Delegation | None,
    ) -> None:
        super().__init__(setup, target, kwargs, native_session)
        self.delegation = delegation
        self.arrivals: _Arrivals | None = None
        if delegation is not None:  # the workflow's code sees it: each pull's tasks too
            self.context = partial(_RunContext, False, delegation)

    def instrument(self, setup: RunSetup[Any]) -> None:
        """Map the agents' runs (in stream mode, their events are the stream)."""
        delegation = self.delegation
        if delegation is None:  # its discovery failed (reported): the agents run unmapped
            return
        arrivals = self.arrivals = _Arrivals(setup.builder) if setup.streaming else None
        delegation.map(arrivals.put if arrivals is not None else None)

    def silence(self) -> None:
        self.context = partial(_RunContext, True, self.delegation)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        native_stream = self._open()
        async with native_stream:
            arrivals = self.arrivals
            if arrivals is None:
                yield native_stream
            else:  # closed first: its pull must not outlive the native stream
                async with aclosing(arrivals.merged(native_stream)) as items:
                    yield items
            await native_stream.get_final_response()

    def close(self) -> None:
        """The agents' runs still open when the workflow's ends (a branch the workflow
        cancelled when its sibling failed) end cancelled."""
        if self.delegation is not None:
            self.delegation.cancel()


class MAFRunner(FrameworkRunner[Any]):
    """Runs an ``agent_framework.Agent``, or a workflow as an agent
    (``workflow.as_agent()``, a ``WorkflowAgent``), in run or stream mode."""

    framework: ClassVar[str] = "maf"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = MAFAgent
    native_what: ClassVar[str] = "an agent_framework.Agent or WorkflowAgent"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "messages": "the runner builds the input messages from the requests",
        "session": (
            f"the runner restores the Agent Framework session from the session (key {STATE_KEY!r})"
        ),
        "stream": "the runner chooses the mode (run() or stream())",
    }

    @classmethod
    def validate_run_options(cls, options: Mapping[str, Any]) -> None:
        """Reserved keys, and a ``function_invocation_configuration`` that Agent
        Framework would not understand."""
        super().validate_run_options(options)
        config = options.get(_CONFIGURATION_OPTION)
        if config is None:
            return
        allowed = ", ".join(sorted(_CONFIGURATION_KEYS))
        if not isinstance(config, Mapping):
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r} must be a mapping of {allowed}; "
                f"got {config!r}"
            )
        for key in config:
            if key not in _CONFIGURATION_KEYS:
                raise ValueError(
                    f"run option {_CONFIGURATION_OPTION!r} has unknown key {key!r} "
                    f"(value {config[key]!r}); allowed: {allowed}"
                )
        try:
            normalize_function_invocation_configuration(dict(config))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r}: {exc} (got {config!r})"
            ) from exc

    def native_of(self, agent: CoreAgent) -> Any:
        """The agent's ``Agent`` or ``WorkflowAgent`` (anything else: a ``TypeError``)."""
        if isinstance(agent.native, WorkflowAgent):
            return agent.native
        return native_of(agent, MAFAgent, self.native_what)

    async def start(self, setup: RunSetup[Any]) -> _Run:
        if isinstance(setup.native, WorkflowAgent):
            return self._start_workflow(setup)
        native, prepared = setup.native, setup.prepared
        options = prepared.options
        declared = options.pop(_CONFIGURATION_OPTION, None)
        target = native if declared is None else _with_configuration(native, declared)
        native_session = _native_session(native, prepared.state, setup.session.id)
        native_session.state[CONTEXT_KEY] = prepared.context if prepared.context is not None else {}
        # Owned keys last, so no declared option can displace them.
        options["messages"] = messages_of(setup.requests)
        options["session"] = native_session
        return _Run(setup, target, options, native_session)

    def _start_workflow(self, setup: RunSetup[Any]) -> _WorkflowRun:
        """A ``WorkflowAgent``'s run: its options (``tools``, ``function_invocation_kwargs``,
        ``client_kwargs``, ``checkpoint_storage``, ...) go to its ``run``. Our dispatchers
        are on its agents for the run, always: they lend them the framework context
        (functionality, not telemetry: an untraced run needs it too), and map their
        runs once :meth:`install` has run."""
        native, prepared = setup.native, setup.prepared
        options = prepared.options
        if _CONFIGURATION_OPTION in options:
            raise ValueError(
                f"run option {_CONFIGURATION_OPTION!r} applies to an agent_framework.Agent; a "
                f"workflow's agents keep it on their chat clients (agent {setup.agent.name!r})"
            )
        native_session = _native_session(native, prepared.state, setup.session.id)
        context = prepared.context if prepared.context is not None else {}
        native_session.state[CONTEXT_KEY] = context
        options["messages"] = messages_of(setup.requests)
        options["session"] = native_session
        # Guarded: a fault in the discovery is reported and costs the lending and the
        # agents' telemetry, not the run.
        delegation = _Delegation.for_workflow(native.workflow, context)
        run = _WorkflowRun(setup, native, options, native_session, delegation)
        if delegation is not None:
            attach(delegation, run.exits)
        return run

    def install(self, setup: RunSetup[Any], run: FrameworkRun[Any]) -> None:
        """Our middleware into ``run`` (a stream, or a traced run)."""
        assert isinstance(run, _Run)
        run.instrument(setup)

    def quiet(self, setup: RunSetup[Any], run: FrameworkRun[Any]) -> None:
        """Agent Framework's own spans off where ours stand for them (see :mod:`.quiet`)."""
        assert isinstance(run, _Run)
        quiet_framework_telemetry()
        run.silence()


class MAFModule(Module):
    """Registers ``agent_framework.Agent`` objects with the runtime, each paired with a
    :class:`MAFRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``options``, ``tools``, ``middleware``,
    ``function_invocation_configuration``, ...).
    """

    naming = ("the Agent Framework agent", "Agent(client, name='assistant')")
    runner_class = MAFRunner
