"""Agent Framework's MCP tools (``MCPStdioTool``, ``MCPStreamableHTTPTool``), told once.

Agent Framework turns each tool an MCP server lists into a ``FunctionTool`` of the
run (``MCPTool.functions``), so a call reaches our function middleware like any
other tool and gets our ``execute_tool`` span. What is particular to MCP:

* **The GenAI MCP attributes** on that span (:func:`call_scope`): ``mcp.method.name``
  (``tools/call``), ``network.transport`` (``pipe`` over stdio, ``tcp`` over HTTP or
  a websocket) and, for a URL, ``server.address`` and ``server.port``. The
  conventions' ``mcp.session.id`` is left out: neither Agent Framework nor ``mcp``'s
  ``Client`` exposes the session id publicly (the server's span has it).
* **No call told twice**: Agent Framework wraps the call in a ``tools/call`` CLIENT
  span of its own (``create_mcp_client_span``), decided by a later read of its
  settings than the one our tool scope keeps quiet, so an MCP tool's whole body
  runs quiet (:func:`.quiet.tool_quiet`).
* **The carrier**: Agent Framework injects the current context into the request's
  ``_meta``; with its span quiet, that is our ``execute_tool`` span's, so the
  server's span is its child.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from agent_framework import FunctionTool, MCPStdioTool, MCPStreamableHTTPTool, MCPWebsocketTool

from runnertrace.runners._kit.mcp import mcp_call

TRANSPORTS: dict[type[Any], str] = {
    MCPStdioTool: "pipe",
    MCPStreamableHTTPTool: "tcp",
    MCPWebsocketTool: "tcp",
}
"""The MCP tool class -> the ``network.transport`` of its calls."""


def server_of(function: FunctionTool, servers: Iterable[Any]) -> Any:
    """The MCP tool among ``servers`` that made ``function`` (``None``: not an MCP call)."""
    for server in servers:
        if any(made is function for made in server.functions):
            return server
    return None


def call_scope(server: Any) -> AbstractContextManager[None]:
    """The body of a ``tools/call`` through ``server``, told by our span (the kit's)."""
    transport = next((t for kind, t in TRANSPORTS.items() if isinstance(server, kind)), None)
    return mcp_call(transport, url=getattr(server, "url", None))


def mcp_servers(native: Any, options: Mapping[str, Any]) -> list[Any]:
    """The MCP tools of a run: the agent's (``Agent.mcp_tools``) and those passed to this
    run with the ``tools`` option."""
    servers = list(getattr(native, "mcp_tools", None) or ())
    passed = options.get("tools")
    listed = passed if isinstance(passed, (list, tuple)) else [passed]
    servers += [t for t in listed if isinstance(t, tuple(TRANSPORTS)) and t not in servers]
    return servers
