"""``PydanticAIRunner``: the runner contract over a ``pydantic_ai.Agent``.

What the runner does, per run:

* **Session state.** The conversation (``result.all_messages()``) is stored under
  the session key ``"pydantic_ai"`` and passed back as ``message_history`` on the
  next run. It is saved only when the run succeeds.
* **Input and replies**: :mod:`.convert`.
* **Framework context** (full round trip). The session's framework context is
  loaded as a deep copy and passed as ``deps=``; tools mutate that very dict
  through ``RunContext.deps``, and it is written back (shallow-merged) only
  after the native call succeeded. Without a stored context, tools get a
  throw-away ``{}``.
* **Run options.** The agent's declared and factory options are copied, then the
  keys this runner owns are written last: ``user_prompt``, ``message_history``,
  ``deps`` and ``capabilities`` (the caller's capabilities are kept, ours are
  appended). ``event_stream_handler`` is honoured in run mode and dropped, with
  one warning per runner, in stream mode, where the runner consumes the native
  event stream itself. Unknown keys reach ``agent.run`` (which rejects them).

The three steps of the template (:class:`~runnertrace.runners._kit.skeleton.FrameworkRunner`):

* :meth:`PydanticAIRunner.start`: the plain ``agent.run`` / ``run_stream_events``
  call, with nothing of ours in it (but the marker of :mod:`.nesting` inside a traced
  run's tool);
* :meth:`PydanticAIRunner.install`: the mapping, one run-time capability
  (:mod:`.adapter`; stream mode always needs it, the events are the stream, but
  builds the request fields only when someone observes), and in a traced run the
  delegation hook (:mod:`.nesting`);
* :meth:`PydanticAIRunner.quiet`: Pydantic AI's own spans silenced (:mod:`.quiet`).

``stream()`` yields the builder's queue after each native event it pulls (no task
or extra hop per event).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities.abstract import AbstractCapability
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent

from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.core.observer import in_traced_run
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    save,
)
from runnertrace.runners.pydantic_ai.adapter import _Observer, _StreamObserver, _UntracedStream
from runnertrace.runners.pydantic_ai.convert import reply_of_run, user_prompt_of
from runnertrace.runners.pydantic_ai.mapper import _BOUNDARY, IN_TRACED_TOOL, _Mapper
from runnertrace.runners.pydantic_ai.mcp import mcp_toolsets
from runnertrace.runners.pydantic_ai.nesting import OWN_RUN, install_delegation_hook
from runnertrace.runners.pydantic_ai.quiet import quiet_framework_telemetry

__all__ = ["STATE_KEY", "PydanticAIModule", "PydanticAIRunner"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "pydantic_ai"


class _Run(FrameworkRun[AgentRunResult[Any]]):
    """One Pydantic AI run: ``agent.run`` (run mode) or ``run_stream_events`` (stream mode).

    ``options`` are the plain call's keywords; the install step sets ``observer`` and
    the quiet step ``silencers``, which the call appends to the declared capabilities.
    """

    def __init__(self, setup: RunSetup[AbstractAgent[Any, Any]], options: dict[str, Any]) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.options = options
        self.observer: _Observer | None = None
        self.silencers: list[AbstractCapability[Any]] = []
        self.results: list[AgentRunResult[Any]] = []

    def _call_options(self) -> dict[str, Any]:
        capabilities = [*self.options["capabilities"], *self.silencers]
        if self.observer is not None:
            capabilities.append(self.observer)
        return {**self.options, "capabilities": capabilities}

    async def call(self) -> AgentRunResult[Any]:
        return await self.native.run(**self._call_options())

    def native_stream(self) -> AbstractAsyncContextManager[AsyncIterable[Any]]:
        return self.native.run_stream_events(**self._call_options())

    def map(self, item: Any) -> None:
        if isinstance(item, AgentRunResultEvent):  # the hooks map everything else
            self.results.append(item.result)

    async def outcome(self) -> AgentRunResult[Any]:
        if not self.results:
            raise RuntimeError("the Pydantic AI event stream ended without a run result")
        return self.results[-1]

    async def save(self, result: AgentRunResult[Any]) -> None:
        setup = self.setup
        save(setup.session, STATE_KEY, result.all_messages(), setup.prepared, self.options["deps"])

    def reply(self, result: AgentRunResult[Any], prompt: str) -> AgentReply:
        return reply_of_run(result, prompt)


class PydanticAIRunner(FrameworkRunner[AbstractAgent[Any, Any]]):
    """Runs a ``pydantic_ai.Agent`` (any ``AbstractAgent``) in run or stream mode."""

    framework: ClassVar[str] = "pydantic_ai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = AbstractAgent
    native_what: ClassVar[str] = "a pydantic_ai agent"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "user_prompt": "the runner builds the prompt from the requests",
        "message_history": (
            f"the runner restores the conversation from the session (key {STATE_KEY!r})"
        ),
        "deps": (
            "the runner passes the session's framework context as deps; "
            "set it with session.set_framework_context()"
        ),
        "conversation": (
            "the runner passes the session's history as message_history, and Pydantic AI "
            "rejects conversation= alongside it"
        ),
    }

    def __init__(self) -> None:
        self._warned_stream_handler = False

    async def start(self, setup: RunSetup[AbstractAgent[Any, Any]]) -> _Run:
        """The plain call's keywords (``deps`` is the loaded framework context)."""
        prepared = setup.prepared
        options = prepared.options
        dropped = setup.streaming and options.pop("event_stream_handler", None) is not None
        if dropped and not self._warned_stream_handler:
            self._warned_stream_handler = True
            logger.warning(
                "runnertrace: run option 'event_stream_handler' of agent %r is ignored in "
                "stream mode (the runner consumes the event stream itself); "
                "use a capability to observe events in both modes",
                setup.agent.name,
            )
        capabilities = list(options.get("capabilities") or [])
        if IN_TRACED_TOOL.get():  # inside a traced run's tool: not a delegate
            capabilities.append(OWN_RUN)
        # Owned keys last, so no declared option can displace them.
        options["user_prompt"] = user_prompt_of(setup.requests)
        options["message_history"] = list(prepared.state or [])
        options["deps"] = prepared.context if prepared.context is not None else {}
        options["capabilities"] = capabilities
        return _Run(setup, options)

    # The template hands install and quiet the run start() made: a _Run.
    def install(self, setup: RunSetup[AbstractAgent[Any, Any]], run: _Run) -> None:  # type: ignore[override]
        """The mapping capability; in a traced run, the delegation hook too. The hook is
        process-wide and stays (idle, it costs one context-variable read: see
        :mod:`.nesting`), so nothing goes on ``run.exits``; the capability is the run's own."""
        if setup.streaming:
            mapper = _Mapper(setup.builder, setup.agent.name, detailed=setup.observed)
            run.observer = _StreamObserver(mapper) if setup.observed else _UntracedStream(mapper)
        else:
            run.observer = _Observer(_Mapper(setup.builder, setup.agent.name, detailed=True))
        if in_traced_run():
            install_delegation_hook()
            run.observer.mapper.mcp_toolsets = mcp_toolsets(setup.native, run.options)

    def quiet(self, setup: RunSetup[AbstractAgent[Any, Any]], run: _Run) -> None:  # type: ignore[override]
        """Pydantic AI's own spans, silenced for this run (see :mod:`.quiet`)."""
        run.silencers = quiet_framework_telemetry(setup.native, run.options)


class PydanticAIModule(Module):
    """Registers ``pydantic_ai.Agent`` objects with the runtime, each paired with a
    :class:`PydanticAIRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``usage_limits``, ``model_settings``, ``capabilities``, ...).
    """

    naming = ("the pydantic_ai agent", "Agent(..., name='assistant')")
    runner_class = PydanticAIRunner
