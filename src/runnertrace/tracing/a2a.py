"""A2A across processes: the conventions' client and server spans, and the trace carried over.

``a2a-sdk`` (1.3) propagates no trace context and makes no A2A span
(``pip install 'runnertrace[a2a]'``). Two calls close the gap:

* **Client**: :func:`traced_client` wraps an ``a2a`` ``Client``. Its
  ``send_message`` is one A2A CLIENT span (``SendMessage`` or
  ``SendStreamingMessage``, with ``a2a.method.name``, ``a2a.message.id``,
  ``a2a.task.id``/``a2a.task.state`` when the answer is a task,
  ``gen_ai.conversation.id`` from the context id, the target card's
  ``gen_ai.agent.*`` and ``server.address``/``port``), current while the call
  runs, and its context goes in the request's headers (``traceparent``,
  ``tracestate``, ``baggage``). An HTTP client instrumentation, if the app has
  one, nests under it. Inside a traced tool the span is the ``execute_tool``
  span's child.
* **Server**: :class:`RuntimeAgentExecutor` is an ``a2a`` ``AgentExecutor``
  that runs an agent of a :class:`~runnertrace.core.Runtime`: one A2A SERVER
  span per request, child of the headers' context, and the agent's run under
  it, in the session named by the A2A context id (so ``gen_ai.conversation.id``
  is the context id on every span of the run).

``a2a-sdk``'s own method spans (its request handler, event queue and transports,
``@trace_class``) go to the global provider. With an app-wide provider they
repeat these calls under other names: ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``
turns them off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace._internal.imports import require
from runnertrace.core.models import AgentRequestText
from runnertrace.core.propagation import carrier_of, extract, inject
from runnertrace.core.runtime import Runtime
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.remote import error_type, tracer_for

__all__ = ["RuntimeAgentExecutor", "TracedA2AClient", "traced_client"]

METHOD = "a2a.method.name"
MESSAGE_ID = "a2a.message.id"
TASK_ID = "a2a.task.id"
TASK_STATE = "a2a.task.state"
PROTOCOL_VERSION = "a2a.protocol.version"


def _card_attributes(card: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if card is None:
        return found
    for key, field in (
        (A.AGENT_NAME, "name"),
        ("gen_ai.agent.description", "description"),
        ("gen_ai.agent.version", "version"),
    ):
        value = getattr(card, field, None)
        if isinstance(value, str) and value:
            found[key] = value
    interfaces = list(getattr(card, "supported_interfaces", None) or [])
    if interfaces:
        url = urlsplit(str(getattr(interfaces[0], "url", "")))
        if url.hostname:
            found["server.address"] = url.hostname
            if url.port:
                found["server.port"] = url.port
        version = getattr(interfaces[0], "protocol_version", None)
        if isinstance(version, str) and version:
            found[PROTOCOL_VERSION] = version
    return found


def _state_name(state: Any) -> str | None:
    try:
        from a2a.types.a2a_pb2 import TaskState

        return str(TaskState.Name(state))
    except (ImportError, ValueError, TypeError):
        return None


def _record_answer(span: Any, event: Any) -> None:
    """What an answer tells about the task: its id, state and context."""
    for field in ("task", "status_update", "artifact_update", "message"):
        has = getattr(event, "HasField", None)
        if has is None or not has(field):
            continue
        item = getattr(event, field)
        task_id = getattr(item, "task_id", None) or (
            getattr(item, "id", None) if field == "task" else None
        )
        if task_id:
            span.set_attribute(TASK_ID, task_id)
        context_id = getattr(item, "context_id", None)
        if context_id:
            span.set_attribute(A.CONVERSATION_ID, context_id)
        status = getattr(item, "status", None)
        if status is not None and field in ("task", "status_update"):
            name = _state_name(status.state)
            if name:
                span.set_attribute(TASK_STATE, name)
        return


class TracedA2AClient:
    """An ``a2a`` ``Client`` whose ``send_message`` is the A2A client span and carries the
    trace (see the module docstring). Everything else is the client's own."""

    def __init__(self, client: Any, settings: TraceConfig | None = None) -> None:
        require("a2a", "a2a")
        self.client = client
        self.settings = settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> TracedA2AClient:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)

    def _streaming(self) -> bool:
        config = getattr(self.client, "_config", None)
        card = getattr(self.client, "_card", None)
        capabilities = getattr(card, "capabilities", None)
        return bool(getattr(config, "streaming", False)) and bool(
            getattr(capabilities, "streaming", False)
        )

    async def send_message(self, request: Any, *, context: Any = None) -> AsyncIterator[Any]:
        tracer = tracer_for(None, self.settings) if self.settings is not None else None
        if tracer is None:
            tracer = _current_tracer()
        method = "SendStreamingMessage" if self._streaming() else "SendMessage"
        attributes: dict[str, Any] = {METHOD: method}
        attributes.update(_card_attributes(getattr(self.client, "_card", None)))
        message: Any = getattr(request, "message", None)
        if getattr(message, "message_id", None):
            attributes[MESSAGE_ID] = message.message_id
        if getattr(message, "context_id", None):
            attributes[A.CONVERSATION_ID] = message.context_id
        if getattr(message, "task_id", None):
            attributes[TASK_ID] = message.task_id
        span = (tracer or trace_api.NoOpTracer()).start_span(
            method, kind=SpanKind.CLIENT, attributes=attributes
        )
        span_context = trace_api.set_span_in_context(span)
        context = _with_headers(context, inject(context=span_context))
        events = self.client.send_message(request, context=context).__aiter__()
        try:
            while True:
                token = otel_context.attach(span_context)
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    otel_context.detach(token)
                _record_answer(span, event)
                yield event
        except GeneratorExit:
            span.set_attribute("runnertrace.cancelled", True)
            raise
        except BaseException as exc:
            span.set_attribute(A.ERROR_TYPE, error_type(exc))
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
            raise
        finally:
            span.end()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()


def _current_tracer() -> Any:
    """The tracer of runnertrace's pipeline that the current span came from (a tool span
    of a traced run), so the client span lands with the run's spans."""
    from runnertrace.tracing.runner import _setup_override
    from runnertrace.tracing.state import active_run

    override = _setup_override.get()
    if override is not None:
        return override.tracer
    run = active_run.get()
    return getattr(run, "tracer", None)


def _with_headers(context: Any, headers: dict[str, str]) -> Any:
    from a2a.client.client import ClientCallContext

    if context is None:
        context = ClientCallContext()
    parameters = dict(context.service_parameters or {})
    parameters.update(headers)
    context.service_parameters = parameters
    return context


def traced_client(client: Any, settings: TraceConfig | None = None) -> TracedA2AClient:
    """Wrap an ``a2a`` ``Client`` (from ``ClientFactory`` or ``create_client``).

    Its spans go on the pipeline of the traced run it is called in; ``settings``
    names one for calls outside any run.
    """
    return TracedA2AClient(client, settings)


# -- the server side ------------------------------------------------------------------------------
def _executor_base() -> type:
    require("a2a", "a2a")
    from a2a.server.agent_execution import AgentExecutor

    return AgentExecutor


_MIXED: dict[type, type] = {}


class RuntimeAgentExecutor:
    """An ``a2a`` ``AgentExecutor`` running ``agent`` of ``runtime``, joining the caller's trace.

    Use it where ``a2a-sdk`` takes an executor (``DefaultRequestHandler(agent_executor=...)``).
    The reply is one agent ``Message`` in the request's context.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # a2a-sdk is imported on first use, so the AgentExecutor base is mixed in then
        # (once per class): ``isinstance(executor, AgentExecutor)`` holds.
        base = _executor_base()
        if not issubclass(cls, base):
            mixed = _MIXED.get(cls)
            if mixed is None:
                mixed = _MIXED[cls] = type(cls.__name__, (cls, base), {})
            cls = mixed
        return object.__new__(cls)

    def __init__(
        self,
        runtime: Runtime,
        agent: str,
        *,
        card: Any = None,
        settings: TraceConfig | None = None,
    ) -> None:
        self.runtime = runtime
        self.agent_name = agent
        self.card = card
        self.settings = settings

    async def execute(self, context: Any, event_queue: Any) -> None:
        from a2a.helpers.proto_helpers import new_text_message

        agent = self.runtime.agents().get(self.agent_name)
        call = getattr(context, "call_context", None)
        state = getattr(call, "state", None) or {}
        carrier = carrier_of(state.get("headers"))
        method = str(state.get("method") or "SendMessage")
        context_id = context.context_id or ""
        session = self.runtime.sessions().get_or_new(context_id or "a2a")
        tracer = tracer_for(agent.runner, self.settings or self.runtime.settings.trace)
        requests = [AgentRequestText(prompt=context.get_user_input())]
        if tracer is None:
            reply = await self.runtime.run(agent, session, requests, carrier=carrier or None)
        else:
            incoming = extract(carrier, source="A2A request headers")
            attributes: dict[str, Any] = {METHOD: method, A.CONVERSATION_ID: context_id}
            attributes.update(_card_attributes(self.card))
            attributes[A.AGENT_NAME] = agent.name
            attributes.pop("server.port", None)
            attributes.pop("server.address", None)
            message: Any = getattr(context, "message", None)
            if getattr(message, "message_id", None):
                attributes[MESSAGE_ID] = message.message_id
            if context.task_id:
                attributes[TASK_ID] = context.task_id
            if incoming.user_id:
                attributes[A.USER_ID] = incoming.user_id
            span = tracer.start_span(
                method,
                context=incoming.context if incoming.joins else None,
                kind=SpanKind.SERVER,
                attributes=attributes,
            )
            inner = inject(context=trace_api.set_span_in_context(span, incoming.context))
            try:
                reply = await self.runtime.run(agent, session, requests, carrier=inner)
            except BaseException as exc:
                span.set_attribute(A.ERROR_TYPE, error_type(exc))
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
                span.end()
                raise
            span.end()
        await event_queue.enqueue_event(
            new_text_message(str(reply), context_id=context_id or None, task_id=context.task_id)
        )

    async def cancel(self, context: Any, event_queue: Any) -> None:
        raise NotImplementedError("cancelling a run is not supported")
