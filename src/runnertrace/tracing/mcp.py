"""MCP across processes: one ``execute_tool`` span per call, and servers that continue the trace.

``mcp`` 2.x (``pip install 'runnertrace[mcp]'``) carries trace context in each
request's ``params._meta`` (SEP-414) and makes client and server spans of its own
on the global provider. ``mcp`` 1.x (which CrewAI, ``langchain-mcp-adapters`` and
smolagents pin) sends no context.

**Every client, in traced runs** (:func:`propagate_from_runs`, called at each
traced run's start): once ``mcp`` is imported (then, or later: the frameworks
import it lazily), its client is made to send the context a carrier should name.
On 1.x, each request a ``ClientSession`` sends gets the W3C carrier of the current
span (our ``execute_tool`` span inside a tool) in ``params._meta``, and a
``tools/call`` under our ``execute_tool`` span gets ``mcp.method.name``. On both,
under a runner's quiet (unsampled) context (``core.quiet``) the carrier names our
span, sampled, so the server does not drop its spans.

**Client** (a tool of a traced run that calls an MCP server):
:func:`traced_session` wraps a ``ClientSession``. Its ``call_tool`` puts the
GenAI MCP attributes (``mcp.method.name``, ``mcp.session.id``,
``mcp.protocol.version``, ``network.transport``, ``server.address``/``port``) on
the ``execute_tool`` span current where it is called, the one our runner opened
for the tool, and keeps ``mcp``'s own ``MCP send tools/call`` span out, as the
conventions ask of an MCP instrumentation under a GenAI one: the call is told
once. ``_meta`` then carries the ``execute_tool`` span's context, with or
without an app provider, so the server's ``tools/call`` span is its child.
Other requests (``initialize``, ``tools/list``) keep ``mcp``'s spans. Outside a
traced tool, ``call_tool`` is ``mcp``'s own.

**Server**: :func:`trace_server` (one call, on a low-level ``Server`` or an
``MCPServer``, the 2.x FastMCP) swaps ``mcp``'s OpenTelemetry middleware for
ours: the same SERVER span per request (``{method} {target}``, child of the
``_meta`` context), on runnertrace's pipeline instead of the global provider,
plus ``mcp.session.id`` and ``network.transport``. A traced agent run inside a
tool nests under the ``tools/call`` span.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace._internal.errors import handle_internal_errors, internal_log
from runnertrace._internal.imports import require
from runnertrace.core.propagation import extract, inject
from runnertrace.core.quiet import sendable
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.remote import error_type, tracer_for

__all__ = [
    "TracedClientSession",
    "connect_stdio",
    "connect_streamable_http",
    "propagate_from_runs",
    "trace_server",
    "traced_session",
]

METHOD = "mcp.method.name"
SESSION_ID = "mcp.session.id"
PROTOCOL_VERSION = "mcp.protocol.version"
TRANSPORT = "network.transport"
TRANSPORTS = {"stdio": "pipe", "streamable-http": "tcp", "sse": "tcp"}

_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_mcp_quiet", default=False
)


class _GatedTracer(trace_api.Tracer):
    """``mcp``'s tracer, silent while :data:`_quiet` is set: a non-recording span that
    carries the current context (so ``_meta`` still gets it), as the API's no-op does.

    A span started with no explicit parent under a runner's quiet context has our
    span as its parent instead (``core.quiet``): ``mcp`` injects the context of the
    span it starts, and the quiet one is unsampled."""

    def __init__(self, inner: trace_api.Tracer) -> None:
        self.inner = inner
        self.noop = trace_api.NoOpTracer()

    def _chosen(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> trace_api.Tracer:
        if len(args) < 2 and kwargs.get("context") is None:  # no parent given
            kwargs["context"] = sendable()
        return self.noop if _quiet.get() else self.inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace_api.Span:
        return self._chosen(args, kwargs).start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._chosen(args, kwargs).start_as_current_span(*args, **kwargs)


def _gate_mcp_tracer() -> None:
    """Put the gate on ``mcp``'s module tracer (every span it makes goes through it).

    ``mcp`` has no public switch for its client spans, so this reaches its private
    module (checked against mcp 2.3). A release that moves it loses only the gate: the
    call is then told twice (ours and mcp's), logged once, and nothing else changes."""
    try:
        from mcp.shared import _otel
    except ImportError:
        _moved("mcp.shared._otel", "its client spans repeat our execute_tool spans")
        return
    tracer = getattr(_otel, "_tracer", None)
    if tracer is None:
        _moved("mcp.shared._otel._tracer", "its client spans repeat our execute_tool spans")
    elif not isinstance(tracer, _GatedTracer):
        _otel._tracer = _GatedTracer(tracer)  # noqa: SLF001 - mcp has no public seam for it


def _moved(name: str, effect: str) -> None:
    internal_log.warning(
        f"mcp-moved:{name}",
        "runnertrace: this mcp release has no %s (runnertrace was checked against mcp 2.3): %s",
        name,
        effect,
    )


@contextmanager
def _mcp_spans_off() -> Iterator[None]:
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


# -- every client, in traced runs ----------------------------------------------------------------
_CARRIES = "_runnertrace_carries_context"  # marks mcp 1.x's send_request as wrapped
_hooking = threading.Lock()
_hooked = False


def propagate_from_runs() -> None:
    """Make ``mcp``'s client send the right context (see the module), once ``mcp`` is
    imported: now, if it is, else when it is (a hook on its import; importing it here
    would cost every traced run's process about a second). Called at each traced
    run's start; after the first, one flag read."""
    global _hooked
    if _hooked:
        return
    with _hooking:
        if _hooked:
            return
        _hooked = True
        if "mcp" in sys.modules:
            _hook_mcp()
        elif importlib.util.find_spec("mcp") is not None:
            sys.meta_path.insert(0, _WhenImported("mcp", _hook_mcp))


class _WhenImported(importlib.abc.MetaPathFinder):
    """Runs ``then`` right after the module ``name`` is first imported (once): it finds
    the module's spec the ordinary way and wraps that spec's loader."""

    def __init__(self, name: str, then: Any) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        try:
            sys.meta_path.remove(self)  # found the ordinary way from here on
        except ValueError:  # another thread's import got here first
            return None
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec
        then = self.then

        def exec_then_hook(module: Any) -> None:
            exec_module(module)
            with handle_internal_errors("hooking mcp's client"):
                then()

        loader.exec_module = exec_then_hook  # type: ignore[union-attr,method-assign]  # its own
        return spec


def _mcp_major() -> int:
    try:
        return int(importlib.metadata.version("mcp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


def _hook_mcp() -> None:
    """``mcp`` 2.x: the gate on its tracer (which also swaps a quiet parent for ours);
    ``mcp`` 1.x: the carrier on every request a ``ClientSession`` sends."""
    if _mcp_major() >= 2:
        _gate_mcp_tracer()
        return
    from mcp.client.session import ClientSession

    send_request = ClientSession.send_request
    if getattr(send_request, _CARRIES, False):
        return

    @functools.wraps(send_request)
    async def send_request_with_context(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        with handle_internal_errors("carrying the trace context to an MCP server"):
            request = _with_carrier(request)
        return await send_request(self, request, *args, **kwargs)

    setattr(send_request_with_context, _CARRIES, True)
    # A public method, wrapped on the class as OpenTelemetry's instrumentations do:
    # mcp 1.x has no hook for outgoing requests.
    ClientSession.send_request = send_request_with_context  # type: ignore[method-assign]


def _with_carrier(request: Any) -> Any:
    """``request`` (an mcp 1.x ``ClientRequest``) with the current context's carrier in
    its ``params._meta`` (keys already there are kept); itself when there is none. A
    ``tools/call`` under our ``execute_tool`` span names its method there."""
    if getattr(request.root, "method", None) == "tools/call":
        span = _our_tool_span()
        if span is not None:
            span.set_attribute(METHOD, "tools/call")
    carrier = inject(context=sendable())
    if not carrier:
        return request
    data = request.model_dump(by_alias=True, exclude_none=True)
    params = data.get("params") or {}
    meta = params.get("_meta") or {}
    data["params"] = {**params, "_meta": {**carrier, **meta}}
    return type(request).model_validate(data)


def _our_tool_span() -> Any:
    """The current span when it is a recording ``execute_tool`` span, else ``None``."""
    span = trace_api.get_current_span()
    if not span.is_recording():
        return None
    attributes = getattr(span, "attributes", None) or {}
    return span if attributes.get(A.OPERATION) == "execute_tool" else None


class TracedClientSession:
    """A ``ClientSession`` whose ``call_tool`` is told once, on our ``execute_tool`` span.

    Everything else is the session's own (attribute access is delegated).
    """

    def __init__(
        self,
        session: Any,
        *,
        transport: str = "stdio",
        session_id: Any = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> None:
        require("mcp", "mcp")
        self.session = session
        self.transport = transport
        self._session_id = session_id
        self.server_address = server_address
        self.server_port = server_port
        _gate_mcp_tracer()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    @property
    def session_id(self) -> str | None:
        """The MCP session id: given, or read from a callable (streamable HTTP's getter)."""
        value = self._session_id() if callable(self._session_id) else self._session_id
        return value if isinstance(value, str) and value else None

    def attributes(self) -> dict[str, Any]:
        """The MCP attributes of a ``tools/call`` through this session."""
        found: dict[str, Any] = {METHOD: "tools/call"}
        transport = TRANSPORTS.get(self.transport, self.transport)
        if transport:
            found[TRANSPORT] = transport
        session_id = self.session_id
        if session_id:
            found[SESSION_ID] = session_id
        version = getattr(self.session, "protocol_version", None)
        if isinstance(version, str) and version:
            found[PROTOCOL_VERSION] = version
        if self.server_address:
            found["server.address"] = self.server_address
            if self.server_port:
                found["server.port"] = self.server_port
        return found

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        span = _our_tool_span()
        if span is None:
            return await self.session.call_tool(name, arguments, **kwargs)
        span.set_attributes(self.attributes())
        with _mcp_spans_off():
            result = await self.session.call_tool(name, arguments, **kwargs)
        if getattr(result, "is_error", False):
            span.set_attribute(A.ERROR_TYPE, "tool_error")
        return result


def traced_session(
    session: Any,
    *,
    transport: str = "stdio",
    session_id: Any = None,
    server_address: str | None = None,
    server_port: int | None = None,
) -> TracedClientSession:
    """Wrap an initialised ``mcp`` ``ClientSession`` (see the module docstring).

    ``transport`` is ``"stdio"`` or ``"streamable-http"``; ``session_id`` the MCP
    session id, or a callable returning it (it is known only after ``initialize``
    on streamable HTTP).
    """
    return TracedClientSession(
        session,
        transport=transport,
        session_id=session_id,
        server_address=server_address,
        server_port=server_port,
    )


@asynccontextmanager
async def connect_stdio(server: Any, **session_options: Any) -> AsyncIterator[TracedClientSession]:
    """Start the server process ``server`` (``StdioServerParameters``), open and initialise
    a session, and yield it traced: one call for a tool to reach a stdio server."""
    require("mcp", "mcp")
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with (
        stdio_client(server) as (read, write),
        ClientSession(read, write, **session_options) as session,
    ):
        await session.initialize()
        yield traced_session(session, transport="stdio")


@asynccontextmanager
async def connect_streamable_http(
    url: str, *, headers: dict[str, str] | None = None, **session_options: Any
) -> AsyncIterator[TracedClientSession]:
    """Open and initialise a session with the streamable-HTTP server at ``url``, traced,
    with the server's ``Mcp-Session-Id`` as ``mcp.session.id``."""
    require("mcp", "mcp")
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    seen: dict[str, str] = {}

    async def record(response: Any) -> None:
        value = response.headers.get("mcp-session-id")
        if value:
            seen["id"] = value

    parts = urlsplit(url)
    async with create_mcp_http_client(headers=headers) as http:
        http.event_hooks["response"].append(record)
        async with (
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write, **session_options) as session,
        ):
            await session.initialize()
            yield traced_session(
                session,
                transport="streamable-http",
                session_id=lambda: seen.get("id"),
                server_address=parts.hostname,
                server_port=parts.port,
            )


# -- the server side ------------------------------------------------------------------------------
class ServerSpans:
    """Server middleware: one SERVER span per inbound MCP message, on runnertrace's pipeline."""

    def __init__(self, settings: TraceConfig | None = None) -> None:
        self.settings = settings

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        tracer = tracer_for(None, self.settings)
        if tracer is None:
            return await call_next(ctx)
        method = ctx.method
        params = ctx.params or {}
        name = params.get("name") if isinstance(params, Mapping) else None
        target = name if isinstance(name, str) else None
        attributes: dict[str, Any] = {METHOD: method}
        version = getattr(ctx, "protocol_version", None)
        if version:
            attributes[PROTOCOL_VERSION] = version
        if ctx.request_id is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        if method == "tools/call":
            attributes[A.OPERATION] = "execute_tool"
            if target is not None:
                attributes[A.TOOL_NAME] = target
        elif method == "prompts/get" and target is not None:
            attributes["gen_ai.prompt.name"] = target
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        attributes[TRANSPORT] = "tcp" if headers is not None else "pipe"
        if headers is not None:
            session_id = headers.get("mcp-session-id")
            if session_id:
                attributes[SESSION_ID] = session_id
        incoming = extract(dict(ctx.meta) if ctx.meta else None, source="MCP params._meta")
        if incoming.user_id:
            attributes[A.USER_ID] = incoming.user_id
        span = tracer.start_span(
            f"{method} {target}" if target else method,
            context=incoming.context if incoming.joins else None,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        with trace_api.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            try:
                result = await call_next(ctx)
            except Exception as exc:
                code = getattr(getattr(exc, "error", None), "code", None)
                span.set_attribute(A.ERROR_TYPE, str(code) if code is not None else error_type(exc))
                if code is None:
                    span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
                raise
            if method == "tools/call" and _is_tool_error(result):
                span.set_attribute(A.ERROR_TYPE, "tool_error")
                span.set_status(Status(StatusCode.ERROR))
            return result


def _is_tool_error(result: Any) -> bool:
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True


def trace_server(server: Any, settings: TraceConfig | None = None) -> Any:
    """Trace an MCP server with runnertrace (a low-level ``Server`` or an ``MCPServer``).

    ``mcp``'s own OpenTelemetry middleware is replaced, so each request is one
    span; ``settings`` is the ``trace`` section to export with (``None``: the
    configuration's). Returns ``server``. Calling it twice changes nothing.
    """
    require("mcp", "mcp")
    mcp_spans: type | None = None  # mcp's own server middleware, replaced by ours
    try:  # private, like the client's gate (checked against mcp 2.3)
        from mcp.server._otel import OpenTelemetryMiddleware

        mcp_spans = OpenTelemetryMiddleware
    except ImportError:  # then mcp's own server spans stay beside ours
        _moved("mcp.server._otel", "its server spans stay beside ours")

    chain = server.middleware
    if any(isinstance(m, ServerSpans) for m in chain):
        return server
    kept = [m for m in chain if mcp_spans is None or not isinstance(m, mcp_spans)]
    chain[:] = [ServerSpans(settings), *kept]
    return server
