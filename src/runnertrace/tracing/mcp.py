"""MCP across processes: one ``execute_tool`` span per call, and servers that continue the trace.

``mcp`` 2.x (``pip install 'runnertrace[mcp]'``) carries trace context in each
request's ``params._meta`` (SEP-414) and makes client and server spans of its own
on the global provider. ``mcp`` 1.x (which CrewAI, ``langchain-mcp-adapters`` and
smolagents pin) sends no context.

**Every client, in traced runs**: see :mod:`.mcp_client` (``mcp`` 1.x clients get
the carrier in ``params._meta``; a runner's quiet context is never what is sent).

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

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace._internal.imports import require
from runnertrace.core.propagation import extract
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.mcp_client import (
    METHOD,
    PROTOCOL_VERSION,
    SESSION_ID,
    TRANSPORT,
    TRANSPORTS,
    gate_mcp_tracer,
    mcp_spans_off,
    moved,
    our_tool_span,
    propagate_from_runs,
)
from runnertrace.tracing.remote import error_type, tracer_for

__all__ = [
    "TracedClientSession",
    "connect_stdio",
    "connect_streamable_http",
    "propagate_from_runs",
    "trace_server",
    "traced_session",
]


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
        gate_mcp_tracer()

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
        span = our_tool_span()
        if span is None:
            return await self.session.call_tool(name, arguments, **kwargs)
        span.set_attributes(self.attributes())
        with mcp_spans_off():
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
        moved("mcp.server._otel", "its server spans stay beside ours")

    chain = server.middleware
    if any(isinstance(m, ServerSpans) for m in chain):
        return server
    kept = [m for m in chain if mcp_spans is None or not isinstance(m, mcp_spans)]
    chain[:] = [ServerSpans(settings), *kept]
    return server
