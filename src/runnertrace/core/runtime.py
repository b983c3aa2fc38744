"""The Runtime: hooks, session locking and persistence around a runner."""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from runnertrace.core.agent import Agent
from runnertrace.core.context import ToolContext, run_scope
from runnertrace.core.events import StreamEvent
from runnertrace.core.models import (
    AgentReply,
    AgentReplyText,
    AgentRequest,
    StreamChunk,
    prompt_of,
)
from runnertrace.core.propagation import Incoming, extract, joined
from runnertrace.core.session import InMemorySessionStore, Session, SessionStore

if TYPE_CHECKING:
    from runnertrace.tracing.config import Settings

__all__ = ["AgentRegistry", "Runtime", "SessionRegistry"]

_current_runtime: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "runnertrace_current_runtime", default=None
)
_default_runtime: Runtime | None = None


class AgentRegistry:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._agents: dict[str, Agent] = {}

    def register(self, agent: Agent) -> Agent:
        """Register ``agent``; wraps its runner for tracing when ``trace.enabled``."""
        if agent.name in self._agents and self._agents[agent.name] is not agent:
            raise ValueError(f"an agent named {agent.name!r} is already registered")
        settings = self._runtime.settings
        if settings.trace.enabled and not getattr(agent.runner, "is_tracing_runner", False):
            from runnertrace.tracing import TracingRunner

            agent.runner = TracingRunner(agent.runner, settings=settings.trace)
        self._agents[agent.name] = agent
        return agent

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise KeyError(f"no agent named {name!r}; registered: {known}") from None

    def names(self) -> list[str]:
        return list(self._agents)

    def __iter__(self) -> Iterator[Agent]:
        return iter(list(self._agents.values()))


class SessionRegistry:
    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def get(self, session_id: str) -> Session | None:
        return self.store.load(session_id)

    def new(self, session_id: str) -> Session:
        session = Session(session_id)
        self.store.save(session)
        return session

    def get_or_new(self, session_id: str) -> Session:
        return self.get(session_id) or self.new(session_id)


class Runtime:
    """Applies hooks, locks the session, calls the runner and persists the session.

    ``settings`` defaults to :func:`runnertrace.tracing.config.load_settings` (the
    YAML file plus ``RUNNERTRACE_*`` env vars), read lazily on first use.
    """

    def __init__(
        self, settings: Settings | None = None, session_store: SessionStore | None = None
    ) -> None:
        self._settings = settings
        self._store = session_store or InMemorySessionStore()
        self._agents = AgentRegistry(self)
        self._sessions = SessionRegistry(self._store)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = _settings_or_defaults()
        return self._settings

    # -- registries ---------------------------------------------------------------
    def agents(self) -> AgentRegistry:
        return self._agents

    def sessions(self) -> SessionRegistry:
        return self._sessions

    @classmethod
    def current(cls) -> Runtime:
        """The runtime activated in this context, else the process default (made lazily)."""
        runtime = _current_runtime.get()
        if runtime is not None:
            return runtime
        global _default_runtime
        if _default_runtime is None:
            _default_runtime = cls()
        return _default_runtime

    @contextmanager
    def activate(self) -> Iterator[Runtime]:
        """Make this runtime ``Runtime.current()`` inside the block."""
        token = _current_runtime.set(self)
        try:
            yield self
        finally:
            _current_runtime.reset(token)

    # -- execution ----------------------------------------------------------------
    async def _apply_pre_hooks(
        self, session: Session, agent: Agent, requests: list[AgentRequest]
    ) -> list[AgentRequest] | AgentReply:
        for hook in agent.pre_hooks:
            result = await hook.on_run(session, agent, requests)
            if not isinstance(result, list):
                return result
            requests = result
        return requests

    def _tool_context(self, agent: Agent, session: Session, requests: list[Any]) -> ToolContext:
        return ToolContext(agent=agent, session=session, requests=requests, runtime=self)

    async def run(
        self,
        agent: Agent,
        session: Session,
        requests: Sequence[AgentRequest],
        *,
        carrier: Mapping[str, str] | None = None,
    ) -> AgentReply:
        """Run ``agent`` once. Exceptions from the runner propagate unchanged.

        With ``execution.mode: stream`` the run is driven through :meth:`stream`
        (the runner's ``stream()``, post-hooks per event) and the reply is
        assembled from the streamed text, so callers keep one call for both modes.

        ``carrier`` is the caller's W3C trace context (``traceparent``,
        ``tracestate``, ``baggage``; see :mod:`runnertrace.core.propagation`):
        the run joins that trace, and a ``user.id`` in its baggage becomes the
        traced run's user. Without one the current span stays the parent.
        """
        if self.settings.execution.mode == "stream":
            return await self._run_streamed(agent, session, requests, carrier)
        incoming = None if carrier is None else extract(carrier)
        runner = agent.runner if incoming is None else _runner_for(agent.runner, incoming)
        with run_scope(agent, session):
            async with self._store.lock(session.id):
                try:
                    prepared = await self._apply_pre_hooks(session, agent, list(requests))
                    if not isinstance(prepared, list):
                        return prepared
                    with self._tool_context(agent, session, prepared).activate():
                        if incoming is None:
                            reply: AgentReply = await runner.run(agent, session, prepared)
                        else:
                            with joined(incoming):
                                reply = await runner.run(agent, session, prepared)
                    for hook in agent.post_hooks:
                        reply = await hook.on_run(session, agent, prepared, reply)
                    return reply
                finally:
                    session.end_run()
                    self._store.save(session)

    async def _run_streamed(
        self,
        agent: Agent,
        session: Session,
        requests: Sequence[AgentRequest],
        carrier: Mapping[str, str] | None = None,
    ) -> AgentReply:
        """The reply of a streamed run: the text of its last assistant message."""
        texts: dict[str, list[str]] = {}
        last: str | None = None  # the latest message that carried text: the answer
        async for chunk in self.stream(agent, session, requests, carrier=carrier):
            event = chunk.event
            if event is not None and event.type == "text_delta":
                if event.message_id != last:
                    last = event.message_id
                    texts[last] = []
                texts[last].append(event.delta)
        text = "".join(texts[last]) if last is not None else ""
        return AgentReplyText(text=text, prompt=prompt_of(list(requests)))

    async def _post_process(
        self, session: Session, agent: Agent, event: StreamEvent
    ) -> list[StreamEvent]:
        events: list[StreamEvent] = [event]
        for hook in agent.post_hooks:
            next_events: list[StreamEvent] = []
            for ev in events:
                out = await hook.on_stream_event(session, agent, ev)
                if out is None:
                    continue
                if isinstance(out, Sequence):
                    next_events.extend(out)
                else:
                    next_events.append(out)
            events = next_events
        return events

    async def stream(
        self,
        agent: Agent,
        session: Session,
        requests: Sequence[AgentRequest],
        *,
        carrier: Mapping[str, str] | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """Stream ``agent``'s events as :class:`StreamChunk` after post-hook filtering.

        A runner exception propagates to the consumer; the session is persisted
        either way. ``carrier`` is as for :meth:`run`.
        """
        incoming = None if carrier is None else extract(carrier)
        runner = agent.runner if incoming is None else _runner_for(agent.runner, incoming)
        with run_scope(agent, session):
            async with self._store.lock(session.id):
                try:
                    prepared = await self._apply_pre_hooks(session, agent, list(requests))
                    if not isinstance(prepared, list):
                        yield StreamChunk(session_id=session.id, done=True)
                        return
                    with self._tool_context(agent, session, prepared).activate():
                        events = runner.stream(agent, session, prepared)
                        source: Any = (
                            events if incoming is None else _joined_events(events, incoming)
                        )
                        try:
                            async for event in source:
                                for out in await self._post_process(session, agent, event):
                                    yield StreamChunk(
                                        delta=getattr(out, "delta", None)
                                        if out.type == "text_delta"
                                        else None,
                                        event=out,
                                        session_id=session.id,
                                    )
                        finally:
                            if source is not events:
                                await source.aclose()
                            aclose = getattr(events, "aclose", None)
                            if aclose is not None:
                                await aclose()
                    yield StreamChunk(session_id=session.id, done=True)
                finally:
                    session.end_run()
                    self._store.save(session)


async def _joined_events(events: Any, incoming: Incoming) -> AsyncIterator[Any]:
    """``events``, each step of the runner run under the caller's context.

    The context is attached and detached around each ``__anext__``, in this
    generator's own step, so no token is ever held across a ``yield``.
    """
    iterator = events.__aiter__()
    while True:
        with joined(incoming):
            try:
                event = await iterator.__anext__()
            except StopAsyncIteration:
                return
        yield event


_by_user: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_USERS_PER_RUNNER = 256


def _runner_for(runner: Any, incoming: Incoming) -> Any:
    """The runner for a run whose caller named a user in its baggage.

    A traced runner is used as a copy whose ``trace.user_id`` is that user (the
    same pipeline: the user id is not part of it), cached per runner and user;
    any other runner is used as it is.
    """
    user = incoming.user_id
    if not user or not getattr(runner, "is_tracing_runner", False):
        return runner
    settings = getattr(runner, "settings", None)
    if settings is None or getattr(settings, "user_id", None) == user:
        return runner
    try:
        cached = _by_user.setdefault(runner, {})
    except TypeError:  # a runner that cannot be weakly referenced: no cache
        cached = {}
    variant = cached.get(user)
    if variant is None:
        from runnertrace.tracing import TracingRunner

        variant = TracingRunner(runner.base, settings=settings.model_copy(update={"user_id": user}))
        if len(cached) >= _USERS_PER_RUNNER:
            cached.pop(next(iter(cached)))
        cached[user] = variant
    return variant


def _settings_or_defaults() -> Settings:
    """The configuration; a broken one is reported once and the defaults (untraced) used.

    The configuration belongs to tracing, and tracing must never stop the host:
    a malformed ``runnertrace.yaml`` is one error line, not a crashed app.
    """
    import logging

    from runnertrace.tracing.config import ConfigError, Settings, load_settings

    try:
        return load_settings()
    except ConfigError as exc:
        logging.getLogger("runnertrace").error(
            "runnertrace: the configuration is invalid, so runs are not traced: %s", exc
        )
        return Settings.model_construct()
