"""``GoogleADKRunner``: the runner contract over a Google ADK agent (``LlmAgent``).

How the contract maps onto ADK, per run:

* **The native call.** An ADK ``Runner`` over the user's agent, built per run
  from a per-run ``App`` (so the declared plugins and app settings apply to this
  run only) and driven with ``run_async``. Its session service belongs to the
  :class:`GoogleADKRunner` (an ``InMemorySessionService`` unless one is given),
  and the ADK session is keyed by our session id, under the app name of the
  agent and the runner's ``user_id``. The per-run ``Runner`` is closed after the
  run, as ADK closes a runner: the plugins' ``close()`` and the agent's toolsets
  (bounded by ``plugin_close_timeout``).
* **Session state.** After a successful run the ADK session's events are also
  stored under the session key ``"adk"`` (each run adds the copies of its own
  events); a runner that has not run the conversation yet (a fresh process, a
  session loaded from a durable store) replays them into its service first when
  the service lacks the session, so the conversation continues.
* **Framework context** (round-trips, filtered, accumulate-only). The loaded
  copy is merged into the ADK session state through ``state_delta``; after a
  successful run the session's state, minus ADK's scoped ``app:`` / ``user:`` /
  ``temp:`` keys, is written back (shallow-merged). Tool-added keys survive
  (``tool_context.state[...] = ...``), and so does anything else in the state.
* **Run options** go where ADK takes them: ``plugins`` (and the other ``App``
  settings: ``events_compaction_config``, ``context_cache_config``,
  ``resumability_config``) to the per-run ``App``; ``memory_service``,
  ``artifact_service``, ``credential_service`` and ``plugin_close_timeout`` to
  the per-run ``Runner``; everything else to ``run_async`` (``run_config``,
  ``abort_signal``; an unknown key is ADK's ``TypeError`` on the first run).
  The turn limit is ``run_config=RunConfig(max_llm_calls=N)``.
* **Stream mode** copies the declared ``run_config`` with
  ``streaming_mode=SSE`` (one warning per runner when the caller set another
  mode explicitly): partial responses become text (and reasoning) deltas, and
  the final non-partial response closes the message with its function calls and
  usage. Run mode honours the ``run_config`` as declared.

The three steps the template calls: :meth:`GoogleADKRunner.start` builds the plain
ADK call; :meth:`~GoogleADKRunner.install` (stream mode, or a traced run) registers
our plugin (:mod:`.adapter`) last on the per-run ADK runner, over a mapper of the
run (:mod:`.mapper`); :meth:`~GoogleADKRunner.quiet` (a traced run) silences ADK's
own spans (:mod:`.quiet`), so each call shows, and counts, once. An untraced
run-mode call adds no plugin; stream mode always needs it (the events are the
stream) but builds the request fields only when someone observes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, aclosing
from typing import Any, ClassVar, TypeVar

from google.adk.agents import BaseAgent, RunConfig

# ADK documents this import path; mypy sees it as an implicit re-export.
from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.events import Event
from google.adk.runners import Runner as ADKRunner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig

from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.runners._kit.adapter import bracket
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    save,
)
from runnertrace.runners.adk.adapter import _ObserverPlugin
from runnertrace.runners.adk.convert import final_text, reply_from, user_content_of
from runnertrace.runners.adk.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.adk.quiet import adk_spans_record, quiet_framework_telemetry, quieted

__all__ = ["DEFAULT_USER_ID", "STATE_KEY", "GoogleADKModule", "GoogleADKRunner"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "adk"
DEFAULT_USER_ID = "runnertrace"

# ADK's scoped state prefixes: app-, user- and invocation-wide values, not the run's context.
_SCOPED_PREFIXES = ("app:", "user:", "temp:")

# Where each run option goes (anything else goes to run_async).
_APP_OPTIONS = frozenset(App.model_fields) - {"name", "root_agent"}
_RUNNER_OPTIONS = frozenset(
    {"memory_service", "artifact_service", "credential_service", "plugin_close_timeout"}
)

T = TypeVar("T")


class _Run(FrameworkRun[None]):
    """One ADK invocation on a per-run ADK runner; what it produced so far (the final
    text) is the reply."""

    def __init__(
        self,
        setup: RunSetup[BaseAgent],
        runner: GoogleADKRunner,
        adk: ADKRunner,
        kwargs: dict[str, Any],
    ) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.runner = runner
        self.adk = adk
        self.kwargs = kwargs
        #: The run's mapping, once the install step put it in.
        self.mapper: _Mapper | None = None
        #: The scope a traced run drives ADK in, each step (the quiet step's): ADK's
        #: spans silenced there; ``None``: ADK is driven as it is.
        self.quieting: Callable[[None], AbstractContextManager[None]] | None = None
        self.output: str | None = None
        self.started = time.time()  # the run's events are the ones from here on

    def see(self, event: Event) -> None:
        """Keep the final response's text (the reply)."""
        text = final_text(event)
        if text:
            self.output = text

    async def _driven(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, a step of ADK's: in a traced run with ADK's spans silenced around
        it (never across a ``yield``; a fault there costs the silencing only)."""
        if self.quieting is None:
            return await call()
        return await bracket(_BOUNDARY, call, scope=self.quieting)

    async def _shut(self, native: AsyncGenerator[Event, None]) -> None:
        await native.aclose()
        await self.adk.close()

    async def events(self) -> AsyncGenerator[Event, None]:
        """ADK's events, each pulled in the quiet step's scope; at the end the per-run
        ADK runner is closed (its plugins and toolsets)."""
        native = self.adk.run_async(**self.kwargs)
        try:
            while True:
                try:
                    event = await self._driven(native.__anext__)
                except StopAsyncIteration:
                    break
                self.see(event)
                yield event
        finally:
            await self._driven(lambda: self._shut(native))

    async def call(self) -> None:
        async with aclosing(self.events()) as events:
            async for _ in events:
                pass

    def native_stream(self) -> AbstractAsyncContextManager[AsyncIterable[Any]]:
        # Closed at once when the consumer stops: ADK's per-run runner with it.
        return aclosing(self.events())

    def complete(self) -> None:
        if self.mapper is not None:  # what is still open closes (the last step)
            self.mapper.finish()

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        if self.mapper is not None:  # agent runs cut short by the failure: cancelled
            self.mapper.end_agent_runs()

    def close(self) -> None:
        if self.mapper is not None:  # the run stopped (cancelled, or its consumer left)
            self.mapper.end_agent_runs()

    async def outcome(self) -> None:
        return None

    async def save(self, result: None) -> None:
        await self.runner.save_run(self)

    def reply(self, result: None, prompt: str) -> AgentReply:
        return reply_from(self.native, self.output, prompt)


class GoogleADKRunner(FrameworkRunner[BaseAgent]):
    """Runs a Google ADK agent (an ``LlmAgent``, or any ``BaseAgent``) in run or stream mode.

    ``session_service`` keeps the ADK sessions (default: an ``InMemorySessionService``
    of this runner); ``user_id`` is the ADK user the sessions belong to.
    """

    framework: ClassVar[str] = "google_adk"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = BaseAgent
    native_what: ClassVar[str] = "a Google ADK agent"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "agent": "the runner runs the registered agent",
        "app": "the runner builds a per-run App; declare plugins and App settings as options",
        "app_name": "the runner names the app after the agent",
        "node": "the runner runs the registered agent",
        "session_service": "the session service belongs to the runner: GoogleADKRunner(...)",
        "auto_create_session": "the runner creates the ADK session from the session id",
        "user_id": "the ADK user is the runner's: GoogleADKRunner(user_id=...)",
        "session_id": "the ADK session is keyed by the session id",
        "new_message": "the runner builds the message from the requests",
        "state_delta": (
            "the runner passes the framework context as the state delta; "
            "set it with session.set_framework_context()"
        ),
        "invocation_id": "each run is a new invocation",
        "yield_user_message": "the runner does not map the user's message to events",
    }

    def __init__(
        self,
        session_service: BaseSessionService | None = None,
        *,
        user_id: str = DEFAULT_USER_ID,
    ) -> None:
        self.session_service = session_service or InMemorySessionService()
        self.user_id = user_id
        self._warned_streaming = False
        self._known: set[tuple[str, str]] = set()  # (app, session id) run by this runner

    def _streaming_config(self, agent: Agent, declared: Any) -> RunConfig:
        """A copy of the declared ``run_config`` in SSE mode (the stream mapping needs
        partial responses); one warning per runner when the caller chose another mode."""
        if declared is None:
            return RunConfig(streaming_mode=StreamingMode.SSE)
        if not isinstance(declared, RunConfig):
            raise TypeError(
                f"run option 'run_config' of agent {agent.name!r} must be a "
                f"google.adk.agents.RunConfig, got {type(declared).__name__}"
            )
        chosen = declared.streaming_mode
        explicit = "streaming_mode" in declared.model_fields_set
        if explicit and chosen != StreamingMode.SSE and not self._warned_streaming:
            self._warned_streaming = True
            logger.warning(
                "runnertrace: run_config.streaming_mode=%s of agent %r is replaced by SSE "
                "in stream mode (the stream is made of ADK's partial responses)",
                chosen,
                agent.name,
            )
        return declared.model_copy(update={"streaming_mode": StreamingMode.SSE})

    async def _ensure_session(self, app_name: str, session_id: str, stored: Any) -> None:
        """Replay the events saved in our session into a service that lacks the session.

        Only a conversation with saved events that this runner has not run yet is
        looked up; a new one is created by ADK (``auto_create_session``).
        """
        if not stored or (app_name, session_id) in self._known:
            return
        service, user_id = self.session_service, self.user_id
        found = await service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
        if found is None:
            created = await service.create_session(
                app_name=app_name, user_id=user_id, session_id=session_id
            )
            for event in stored["events"]:
                await service.append_event(created, event)
        self._known.add((app_name, session_id))

    async def start(self, setup: RunSetup[BaseAgent]) -> _Run:
        native, session, prepared = setup.native, setup.session, setup.prepared
        options = prepared.options
        app_options = {k: options.pop(k) for k in list(options) if k in _APP_OPTIONS}
        runner_options = {k: options.pop(k) for k in list(options) if k in _RUNNER_OPTIONS}
        app_options["plugins"] = list(app_options.get("plugins") or ())
        app = App(name=native.name, root_agent=native, **app_options)
        adk = ADKRunner(
            app=app,
            session_service=self.session_service,
            auto_create_session=True,
            **runner_options,
        )
        await self._ensure_session(native.name, session.id, prepared.state)
        if setup.streaming:
            options["run_config"] = self._streaming_config(setup.agent, options.get("run_config"))
        # Owned keys last, so no declared option can displace them.
        options["user_id"] = self.user_id
        options["session_id"] = session.id
        options["new_message"] = user_content_of(setup.requests)
        options["state_delta"] = dict(prepared.context) if prepared.context else None
        return _Run(setup, self, adk, options)

    def install(self, setup: RunSetup[BaseAgent], run: FrameworkRun[Any]) -> None:
        """Our plugin, last on the per-run ADK runner, over a mapper of this run."""
        assert isinstance(run, _Run)  # start()'s run, handed back
        run.mapper = _Mapper(setup.builder, model_scopes=not adk_spans_record())
        run.adk.plugin_manager.register_plugin(_ObserverPlugin(run.mapper))

    def quiet(self, setup: RunSetup[BaseAgent], run: FrameworkRun[Any]) -> None:
        """ADK's spans silenced while this traced run drives ADK (see :mod:`.quiet`)."""
        assert isinstance(run, _Run)  # start()'s run, handed back
        silenced, context = quiet_framework_telemetry()
        run.quieting = lambda _: quieted(context, silenced)
        if run.mapper is not None:
            run.mapper.silenced = silenced
            run.mapper.model_scopes = run.mapper.model_scopes or silenced

    async def save_run(self, run: _Run) -> None:
        """Copy this run's events and state out of the session service into the session."""
        native, session, prepared = run.native, run.setup.session, run.setup.prepared
        # Only this run's events are copied out of the service (the rest are saved already).
        found = await self.session_service.get_session(
            app_name=native.name,
            user_id=self.user_id,
            session_id=session.id,
            config=GetSessionConfig(after_timestamp=run.started),
        )
        if found is None:
            raise RuntimeError(f"the ADK session {session.id!r} is gone after the run")
        earlier = prepared.state["events"] if prepared.state else []
        state = {"events": [*earlier, *found.events]}
        produced = {k: v for k, v in found.state.items() if not k.startswith(_SCOPED_PREFIXES)}
        save(session, STATE_KEY, state, prepared, produced)
        self._known.add((native.name, session.id))


class GoogleADKModule(Module):
    """Registers Google ADK agents with the runtime, each paired with a
    :class:`GoogleADKRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``plugins``, services, ``plugin_close_timeout`` and ``run_config``.
    """

    runner_class = GoogleADKRunner
