"""Pydantic AI's MCP toolset (``pydantic_ai.mcp.MCPToolset``, on the FastMCP client), told once.

A tool the server lists is a tool of the run, so its call gets our ``execute_tool``
span like any other (Pydantic AI's own spans are silenced by :mod:`.quiet`). What is
particular to MCP, in a traced run's tool scope (:func:`mcp_call`):

* **The GenAI MCP attributes** on that span: ``mcp.method.name``,
  ``network.transport`` (``pipe`` for FastMCP's stdio transports, ``tcp`` for
  HTTP), ``server.address``/``port`` and ``mcp.session.id`` from the FastMCP
  transport (``get_session_id()``, known once the session is open over HTTP).
* **No call told twice**: FastMCP makes a ``tools/call`` CLIENT span of its own;
  its public ``suppress_fastmcp_telemetry()`` keeps it out for the call while the
  trace context still goes into ``_meta``, so the server's span is our span's child.

Which toolset a call belongs to: an MCP toolset's tool definitions carry the MCP
tool's ``meta`` and ``annotations`` in ``ToolDefinition.metadata``; with one MCP
toolset in the run that toolset is the server, with several the transport is not
told (the call still is, once, as MCP).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from runnertrace.runners._kit.mcp import mcp_call as the_call

MCP_DEFINITION_KEYS = frozenset({"meta", "annotations"})
"""What ``MCPToolset`` puts in each ``ToolDefinition.metadata`` it makes."""

TRANSPORTS: dict[str, str] = {
    "StdioTransport": "pipe",
    "PythonStdioTransport": "pipe",
    "NodeStdioTransport": "pipe",
    "UvStdioTransport": "pipe",
    "UvxStdioTransport": "pipe",
    "NpxStdioTransport": "pipe",
    "StreamableHttpTransport": "tcp",
    "SSETransport": "tcp",
}
"""FastMCP's transport class name -> the ``network.transport`` of its calls (by name, so
this module never imports FastMCP: ``pydantic_ai.mcp`` raises without it)."""


def mcp_toolsets(native: Any, options: Mapping[str, Any]) -> list[Any]:
    """The ``MCPToolset`` s of a run (the agent's, and those of its ``toolsets`` option);
    none when ``pydantic_ai.mcp`` was never imported (then no run has one)."""
    module = sys.modules.get("pydantic_ai.mcp")
    if module is None:
        return []
    kind = module.MCPToolset
    found: list[Any] = []

    def visit(toolset: Any) -> None:
        if isinstance(toolset, kind) and toolset not in found:
            found.append(toolset)

    for toolset in [*getattr(native, "toolsets", ()), *(options.get("toolsets") or ())]:
        toolset.apply(visit)
    return found


def is_mcp_definition(tool_def: Any) -> bool:
    metadata = getattr(tool_def, "metadata", None)
    return isinstance(metadata, Mapping) and metadata.keys() >= MCP_DEFINITION_KEYS


def _transport(toolset: Any) -> Any:
    client = getattr(toolset, "client", None)
    return getattr(client, "transport", None)


@contextmanager
def mcp_call(toolsets: list[Any], tool_def: Any) -> Iterator[None]:
    """Inside our tool scope: for an MCP tool, the MCP attributes on our span and
    FastMCP's own spans suppressed; any other tool runs as it is."""
    if not toolsets or not is_mcp_definition(tool_def):
        yield
        return
    from fastmcp.telemetry import suppress_fastmcp_telemetry

    transport = _transport(toolsets[0]) if len(toolsets) == 1 else None
    session_id = transport.get_session_id() if transport is not None else None
    told = the_call(
        TRANSPORTS.get(type(transport).__name__) if transport is not None else None,
        session_id=session_id if isinstance(session_id, str) else None,
        url=getattr(transport, "url", None),
    )
    with told, suppress_fastmcp_telemetry():
        yield
