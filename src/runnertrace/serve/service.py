"""``AgentService``: one conversation with one agent, through the Runtime, traced at its edge.

``select()`` picks the agent and the session; ``run_multi()`` returns the reply,
``stream_multi()`` yields :class:`~runnertrace.core.models.StreamChunk` s after
the post-hooks (``delta`` only for text deltas), a failure being one last chunk
with ``error`` set and ``done`` true. Both take the caller's W3C carrier.

Around each call the service opens one span on the agent's tracing pipeline
(the *service span*: ``{method} {route}``, kind SERVER, behind the HTTP app;
``agent_service {run|stream}``, INTERNAL, in process). It is a child of the
carrier's remote parent (a new trace when the carrier names none), and the
run's ``invoke_agent`` span is its child. An untraced agent gets no service
span; its run still joins the carrier's trace.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText, StreamChunk
from runnertrace.core.propagation import Incoming, extract, inject
from runnertrace.core.runtime import Runtime
from runnertrace.core.session import Session
from runnertrace.tracing import attributes as A
from runnertrace.tracing.remote import error_type, tracer_for

__all__ = ["AgentService", "HttpRoute"]

OPERATION = "runnertrace.service.operation"


@dataclass(frozen=True)
class HttpRoute:
    """The HTTP request a service call serves: names its span and sets its HTTP attributes."""

    method: str
    route: str
    path: str | None = None
    status_code: int | None = None


class AgentService:
    """A conversation of one session with one agent (``select`` them first)."""

    def __init__(self, runtime: Runtime | None = None) -> None:
        self.runtime = runtime or Runtime.current()
        self._agent: Agent | None = None
        self._session: Session | None = None

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            self.select()
        assert self._agent is not None
        return self._agent

    @property
    def session(self) -> Session:
        if self._session is None:
            self.select()
        assert self._session is not None
        return self._session

    def select(self, agent: str | None = None, session_id: str | None = None) -> AgentService:
        """Pick the agent (by name; the only registered one when ``None``) and the session
        (loaded or made; a new id when ``None``). Returns the service itself."""
        names = self.runtime.agents().names()
        if agent is None:
            if len(names) != 1:
                raise KeyError(
                    f"name the agent: registered are {', '.join(sorted(names)) or 'none'}"
                )
            agent = names[0]
        self._agent = self.runtime.agents().get(agent)
        self._session = self.runtime.sessions().get_or_new(session_id or uuid.uuid4().hex)
        return self

    async def run(self, prompt: str, *, carrier: Mapping[str, str] | None = None) -> AgentReply:
        """One text prompt: :meth:`run_multi` with one :class:`AgentRequestText`."""
        return await self.run_multi([AgentRequestText(prompt=prompt)], carrier=carrier)

    async def run_multi(
        self,
        requests: Sequence[AgentRequest],
        *,
        carrier: Mapping[str, str] | None = None,
        http: HttpRoute | None = None,
    ) -> AgentReply:
        """The agent's reply; a runner exception propagates unchanged."""
        agent, session = self.agent, self.session
        span, carrier = self._open("run", agent, session, carrier, http)
        if span is None:
            return await self.runtime.run(agent, session, requests, carrier=carrier)
        try:
            reply = await self.runtime.run(agent, session, requests, carrier=carrier)
        except BaseException as exc:
            _fail(span, exc, http)
            raise
        _succeed(span, http)
        return reply

    async def stream_multi(
        self,
        requests: Sequence[AgentRequest],
        *,
        carrier: Mapping[str, str] | None = None,
        http: HttpRoute | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """The run's chunks after the post-hooks; a failure is the last chunk, with ``error``."""
        agent, session = self.agent, self.session
        span, carrier = self._open("stream", agent, session, carrier, http)
        failed: BaseException | None = None
        try:
            chunks = self.runtime.stream(agent, session, requests, carrier=carrier)
            async with aclosing(chunks):  # type: ignore[type-var]
                async for chunk in chunks:
                    yield chunk
        except Exception as exc:  # noqa: BLE001 - a failure is a chunk for the client
            failed = exc
            yield StreamChunk(error=_describe(exc), done=True, session_id=session.id)
        except BaseException as exc:  # cancelled, or the consumer closed the stream
            failed = exc
            raise
        finally:
            if span is not None:
                if failed is None:
                    _succeed(span, http)
                else:
                    _fail(span, failed, http)

    # -- the service span -----------------------------------------------------------------------
    def _open(
        self,
        operation: str,
        agent: Agent,
        session: Session,
        carrier: Mapping[str, str] | None,
        http: HttpRoute | None,
    ) -> tuple[Any, Mapping[str, str] | None]:
        """The service span, started (``None`` when untraced), and the carrier for the run:
        the service span's context plus the caller's baggage."""
        tracer = tracer_for(agent.runner, self.runtime.settings.trace)
        if tracer is None:
            return None, carrier
        incoming = (
            extract(carrier, source="HTTP headers" if http else "carrier")
            if carrier is not None
            else Incoming()
        )
        attributes: dict[str, Any] = {
            OPERATION: operation,
            A.AGENT_NAME: agent.name,
            A.CONVERSATION_ID: session.id,
        }
        if incoming.user_id:
            attributes[A.USER_ID] = incoming.user_id
        if http is not None:
            attributes["http.request.method"] = http.method
            attributes["http.route"] = http.route
            if http.path:
                attributes["url.path"] = http.path
        span = tracer.start_span(
            f"{http.method} {http.route}" if http else f"agent_service {operation}",
            context=incoming.context,
            kind=SpanKind.SERVER if http else SpanKind.INTERNAL,
            attributes=attributes,
        )
        context = trace_api.set_span_in_context(span, incoming.context)
        return span, inject(context=context)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _succeed(span: Any, http: HttpRoute | None) -> None:
    if http is not None:
        span.set_attribute("http.response.status_code", http.status_code or 200)
    span.end()


def _fail(span: Any, exc: BaseException, http: HttpRoute | None) -> None:
    import asyncio

    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        span.set_attribute("runnertrace.cancelled", True)
    else:
        span.set_attribute(A.ERROR_TYPE, error_type(exc))
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)[:200] or type(exc).__name__))
        if http is not None and http.status_code is None:
            span.set_attribute("http.response.status_code", 500)
    span.end()
