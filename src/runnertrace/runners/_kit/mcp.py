"""What every runner does for a tool call that goes to an MCP server through its framework.

The GenAI MCP conventions put the MCP attributes (``mcp.method.name``,
``mcp.session.id``, ``network.transport``, ``server.address``/``port``) on the
``execute_tool`` span when a GenAI instrumentation's span stands for the call. A
runner knows, in a traced run's tool scope, that the tool is an MCP one and how it
is reached; :func:`mcp_call`, around the call's body, puts what it knows on that
span, the current one there (any other current span, an untraced run's or the
app's, is left alone), and keeps ``mcp``'s own client spans out of the call
(:mod:`runnertrace._internal.mcp_gate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace

from runnertrace._internal.mcp_gate import (
    gate_mcp_client_spans,
    mark_mcp_call_for_this_task,
    marked_mcp_call,
)

__all__ = ["mark_mcp_call", "mcp_call", "url_attributes"]

DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def url_attributes(url: Any) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of an MCP server's URL (none for another value)."""
    if not isinstance(url, str) or not url:
        return {}
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    found: dict[str, Any] = {"server.address": parts.hostname}
    if port is not None:
        found["server.port"] = port
    return found


def _our_tool_span() -> Any:
    """The current span if it is our recording ``execute_tool`` span, else ``None``."""
    span = trace.get_current_span()
    recorded = getattr(span, "attributes", None) or {}
    if not span.is_recording() or recorded.get("gen_ai.operation.name") != "execute_tool":
        return None
    return span


def _put_attributes(span: Any, transport: str | None, session_id: str | None, url: Any) -> None:
    found: dict[str, Any] = {"mcp.method.name": "tools/call", **url_attributes(url)}
    if transport:
        found["network.transport"] = transport
    if session_id:
        found["mcp.session.id"] = session_id
    span.set_attributes(found)
    gate_mcp_client_spans()


@contextmanager
def mcp_call(
    transport: str | None, *, session_id: str | None = None, url: Any = None
) -> Iterator[None]:
    """The body of a ``tools/call`` told by our ``execute_tool`` span, if it is current:
    the MCP attributes on it (``transport`` is ``network.transport``: ``pipe`` for stdio,
    ``tcp`` over HTTP), and ``mcp``'s own client spans for the call kept out."""
    span = _our_tool_span()
    if span is None:
        yield
        return
    _put_attributes(span, transport, session_id, url)
    with marked_mcp_call(span.get_span_context().span_id):
        yield


def mark_mcp_call(transport: str | None, *, session_id: str | None = None, url: Any = None) -> None:
    """:func:`mcp_call` for a framework whose tool scope is entered in the task that runs
    the call and never left (the task ends with it: OpenAI Agents): the same attributes
    and gate, the mark lasting as long as the task."""
    span = _our_tool_span()
    if span is not None:
        _put_attributes(span, transport, session_id, url)
        mark_mcp_call_for_this_task(span.get_span_context().span_id)
