"""OpenAI Agents' MCP servers (``MCPServerStdio``, ``MCPServerStreamableHttp``, ``MCPServerSse``),
told once.

The SDK turns each tool a server lists into a ``FunctionTool`` whose origin
(``agents.tool.get_function_tool_origin``) says it came from MCP and from which
server (by name), so a call
reaches ``on_tool_start`` like any other tool and gets our ``execute_tool`` span.
What is particular to MCP, put on that span in the tool's task (:func:`mark_call`):

* **The GenAI MCP attributes**: ``mcp.method.name`` (``tools/call``),
  ``network.transport`` (``pipe`` over stdio, ``tcp`` over HTTP) and, for a URL,
  ``server.address`` and ``server.port``. ``mcp.session.id`` is left out: the SDK
  does not expose it publicly (the server's span has it).
* **No call told twice**: with an app provider, ``mcp``'s own client span for the
  request (``MCP send tools/call ...``) would stand beside ours and the carrier in
  ``params._meta`` would name it; the kit's gate keeps it out, so the server's span
  is our span's child.
"""

from __future__ import annotations

import sys
from typing import Any

from agents.tool import FunctionTool, get_function_tool_origin

from runnertrace.runners._kit.mcp import mark_mcp_call

_SERVER_MODULE = "agents.mcp.server"
_TRANSPORTS = {"MCPServerStdio": "pipe", "MCPServerStreamableHttp": "tcp", "MCPServerSse": "tcp"}
"""The SDK's server class (by name, in ``agents.mcp.server``) -> ``network.transport``."""


def server_of(agent: Any, tool: Any) -> Any:
    """The MCP server of ``agent`` that lists ``tool`` (``None``: not an MCP tool).

    The tool's origin names its server; a server is matched by that name and by the
    tool's name in the listing the SDK made for the turn (``cached_tools``), so two
    servers of one name are told apart by what they offered.
    """
    origin = get_function_tool_origin(tool) if isinstance(tool, FunctionTool) else None
    if origin is None or origin.type != "mcp":  # ToolOriginType is a str enum
        return None
    name = getattr(tool, "name", None)
    servers = list(getattr(agent, "mcp_servers", None) or ())
    offering = [s for s in servers if any(t.name == name for t in (s.cached_tools or ()))]
    named = [s for s in offering if s.name == origin.mcp_server_name]
    found = named or offering
    return found[0] if len(found) == 1 else None


def _transport(server: Any) -> str | None:
    module = sys.modules.get(_SERVER_MODULE)
    if module is None:
        return None
    for class_name, transport in _TRANSPORTS.items():
        kind = getattr(module, class_name, None)
        if kind is not None and isinstance(server, kind):
            return transport
    return None


def mark_call(agent: Any, tool: Any) -> None:
    """In the tool's task, under its span: mark an MCP tool's call (nothing for another)."""
    server = server_of(agent, tool)
    if server is None:
        return
    params = getattr(server, "params", None)
    url = params.get("url") if isinstance(params, dict) else None
    mark_mcp_call(_transport(server), url=url)
