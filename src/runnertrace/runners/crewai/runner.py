"""``CrewAIRunner``: the runner contract over a CrewAI ``Agent``, one crew per run.

How the contract maps onto CrewAI, per run:

- **The native agent** is a ``crewai.Agent``. Each run builds a ``Crew`` of it
  and one ``Task`` made from the requests (:mod:`.convert`). A crew takes its agents
  over (it sets their crew and executor), so a run that starts while another run of
  the same agent is in flight gets a copy of the agent instead.
  The declared run options are the ``Crew(...)`` keywords; ``verbose=False`` is
  a default they can override. ``agents``, ``tasks``, ``memory`` and ``stream``
  are the runner's (``RESERVED_RUN_OPTIONS``). ``before_kickoff_callbacks``
  declared by the caller are kept; the runner adds its own after them.
- **A registered crew.** A ``crewai.Crew`` runs as built (its agents, tasks and
  process are the user's): the request, after the session's earlier turns, is its
  ``{request}`` input; the run sets only ``stream`` and adds its ``before_kickoff``
  callback, and gives both back after. Run options are refused (they are an
  Agent's ``Crew(...)`` keywords). A concurrent run of the same crew gets a copy.
  Its tasks, agents, async tasks and delegations map as :mod:`.mapper` and
  :mod:`.nesting` say; each agent's chat and tool spans carry its role as the agent
  name.
- **Session state.** CrewAI keeps no conversation between kickoffs, so the
  runner keeps the turns under the session key ``"crewai"`` (per agent) and
  puts them in front of the next task's description. Saved only after a run
  that succeeded.
- **Framework context** is not supported: a session's context is neither
  injected nor written back, and one warning per runner says so.
- **Run mode** is ``kickoff_async``; **stream mode** builds the crew with
  ``stream=True`` and pulls CrewAI's chunk stream; each chunk is a moment to hand
  over the events made so far (the spans start on time regardless). CrewAI's
  stream yields model chunks only, so the events after a message's last chunk
  (its tool call, the tool's result) reach the consumer with the next chunk or at
  the end of the run.

The three steps the template calls: :meth:`CrewAIRunner.start` builds the plain
crew (no callback, no sink: what an untraced run mode runs);
:meth:`~CrewAIRunner.install` (stream mode, or a traced run) makes the run's mapper
(:mod:`.mapper`) and its stream sink, and adds our ``before_kickoff`` callback,
which adds the sink inside the kickoff (:mod:`.adapter`); :meth:`~CrewAIRunner.quiet`
(a traced run) drives the crew with other OTel instrumentation silenced
(:mod:`.quiet`), so each call is one span, ours.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from crewai import Agent as CrewAgent
from crewai import Crew, Task
from crewai.types.streaming import CrewStreamingOutput

from runnertrace.core.models import AgentReply, AgentRequest, prompt_of
from runnertrace.core.module import Module
from runnertrace.runners._kit.adapter import bracket
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    Prepared,
    RunSetup,
    reply_of,
    save,
)
from runnertrace.runners.crewai.adapter import (
    _Sink,
    attach_sink,
    detach_sink,
    timed,
)
from runnertrace.runners.crewai.convert import EXPECTED_OUTPUT, reply_value, task_description
from runnertrace.runners.crewai.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.crewai.quiet import quiet_framework_telemetry

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent

__all__ = ["STATE_KEY", "CrewAIModule", "CrewAIRunner"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "crewai"
T = TypeVar("T", CrewAgent, Crew)
R = TypeVar("R")

_Quieting = Callable[[object], AbstractContextManager[None]]


class _QuietStart:
    """CrewAI's chunk stream, its first step driven in the quiet step's scope: CrewAI
    starts the crew's task there (``Crew.kickoff`` in a thread), in a copy of that
    context, so a traced stream's crew runs quiet, as run mode's."""

    __slots__ = ("_items", "_quieting")

    def __init__(self, native: AsyncIterable[Any], quieting: _Quieting) -> None:
        self._items = native.__aiter__()
        self._quieting: _Quieting | None = quieting

    def __aiter__(self) -> _QuietStart:
        return self

    async def __anext__(self) -> Any:
        quieting, self._quieting = self._quieting, None
        if quieting is None:
            return await self._items.__anext__()
        # entered and left in this one step (no yield in between)
        return await bracket(_BOUNDARY, self._items.__anext__, scope=quieting)


def _nothing() -> None:
    """Giving back a copy of an agent: nothing to do."""


class _Run(FrameworkRun[Any]):
    """One crew's kickoff: ``kickoff_async`` (run mode), or its streaming output.

    ``inputs`` are the kickoff's (a registered crew's ``{request}``), ``None`` for the
    one-task crew of a registered agent, whose task is the request itself.
    """

    def __init__(
        self, setup: RunSetup[CrewAgent | Crew], crew: Crew, inputs: dict[str, Any] | None = None
    ) -> None:
        super().__init__(setup)
        self.crew = crew
        self.inputs = inputs
        #: The run's mapping and the sink that feeds it, once the install step put them in.
        self.mapper: _Mapper | None = None
        self.sink: _Sink | None = None
        #: The scope a traced run drives CrewAI in (the quiet step's); ``None``: as it is.
        self.quieting: _Quieting | None = None
        self.native: CrewStreamingOutput | None = None

    async def _driven(self, call: Callable[[], Awaitable[R]]) -> R:
        """``call()`` in the quiet step's scope, if any (a fault there costs the
        silencing only)."""
        if self.quieting is None:
            return await call()
        return await bracket(_BOUNDARY, call, scope=self.quieting)

    async def call(self) -> Any:
        return await self._driven(lambda: self.crew.kickoff_async(inputs=self.inputs))

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        kickoff = await self.crew.kickoff_async(inputs=self.inputs)
        native = self.native = cast(CrewStreamingOutput, kickoff)
        # A consumer that stops early closes both at once: ours, then CrewAI's stream.
        async with native:
            yield native if self.quieting is None else _QuietStart(native, self.quieting)

    def fail(self, error: BaseException) -> None:
        if self.mapper is not None:
            self.mapper.fail(error)

    def close(self) -> None:
        if self.mapper is not None:
            self.mapper.close()

    async def outcome(self) -> Any:
        assert self.native is not None  # set when the stream opened
        return self.native.result

    async def save(self, result: Any) -> None:
        setup = self.setup
        agent, prepared = setup.agent, setup.prepared
        text = str(getattr(result, "raw", reply_value(result)))
        turn = {"request": prompt_of(setup.requests), "reply": text}
        state = dict(prepared.state or {})
        state[agent.name] = [*(state.get(agent.name) or []), turn]
        save(setup.session, STATE_KEY, state, prepared)

    def reply(self, result: Any, prompt: str) -> AgentReply:
        return reply_of(reply_value(result), prompt)


class CrewAIRunner(FrameworkRunner[CrewAgent | Crew]):
    """Runs a CrewAI ``Agent`` as a one-task crew, or a registered ``Crew`` as built
    (its agents taking their turns over its tasks), in run (``kickoff_async``) or
    stream (``stream=True``) mode."""

    framework: ClassVar[str] = "crewai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = CrewAgent
    native_what: ClassVar[str] = "a CrewAI Agent or Crew"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
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
        copies its agents and tasks): a crew's id is how its run's sink is found.
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
        worker: CrewAgent,
        prepared: Prepared,
        requests: list[AgentRequest],
        turns: list[Mapping[str, str]],
        *,
        stream: bool,
    ) -> Crew:
        task = Task(
            description=task_description(requests, turns),
            expected_output=EXPECTED_OUTPUT,
            agent=worker,
        )
        options = {"verbose": False, **prepared.options}
        return Crew(agents=[worker], tasks=[task], stream=stream, **options)

    def _registered_crew(self, setup: RunSetup[CrewAgent | Crew], native: Crew) -> _Run:
        """A registered crew runs as built, with the request as its ``{request}`` input
        (with the session's earlier turns in front, as an agent's task has them): the
        run sets only its ``stream``, and gives it back after the run."""
        if setup.prepared.options:
            raise ValueError(
                f"agent {setup.agent.name!r} is a registered CrewAI Crew, which runs as built: "
                f"run options ({', '.join(sorted(setup.prepared.options))}) apply to an Agent"
            )
        crew, give_back = self._take(native)
        # A copy of a crew another run is using has that run's callback too.
        detach_sink(crew)
        streamed = crew.stream
        crew.stream = setup.streaming

        def restore() -> None:
            crew.stream = streamed
            give_back()

        turns = (setup.prepared.state or {}).get(setup.agent.name) or []
        try:
            inputs = {"request": task_description(setup.requests, turns)}
        except BaseException:
            restore()
            raise
        run = _Run(setup, crew, inputs)
        run.exits.callback(restore)
        return run

    async def start(self, setup: RunSetup[CrewAgent | Crew]) -> _Run:
        self._warn_context(setup.prepared)
        if isinstance(setup.native, Crew):
            return self._registered_crew(setup, setup.native)
        worker, give_back = self._take(setup.native)
        turns = (setup.prepared.state or {}).get(setup.agent.name) or []
        try:
            crew = self._crew(worker, setup.prepared, setup.requests, turns, stream=setup.streaming)
        except BaseException:
            give_back()
            raise
        run = _Run(setup, crew)
        run.exits.callback(give_back)
        return run

    def install(self, setup: RunSetup[CrewAgent | Crew], run: FrameworkRun[Any]) -> None:
        """The run's mapper and its sink, added by our callback at the crew's kickoff."""
        assert isinstance(run, _Run)  # start()'s run, handed back
        mode = "stream" if setup.streaming else "run"
        run.mapper = _Mapper(setup.builder, mode=mode, timing=timed)
        run.sink = _Sink(run.mapper)
        run.exits.callback(detach_sink, run.crew)  # first: it undoes a partial attach too
        attach_sink(run.crew, run.sink)
        run.mapper.expect(run.crew)

    def quiet(self, setup: RunSetup[CrewAgent | Crew], run: FrameworkRun[Any]) -> None:
        """The crew driven with other OTel instrumentation silenced (see :mod:`.quiet`)."""
        assert isinstance(run, _Run)  # start()'s run, handed back
        run.quieting = quiet_framework_telemetry()
        if run.sink is not None:
            run.sink.quiet = True


class CrewAIModule(Module):
    """Registers CrewAI agents with the runtime, paired with a :class:`CrewAIRunner`.

    An agent's name is its ``role``; pass ``(name, agent)`` pairs, or
    ``add(agent, name=...)``, to choose another.
    """

    runner_class = CrewAIRunner

    def agent_name(self, native: Any) -> str:
        role = getattr(native, "role", None)
        if isinstance(role, str) and role:
            return role
        return super().agent_name(native)
