"""ADK's MCP tools (``McpToolset``'s ``McpTool``), told once.

A tool an ``McpToolset`` lists is an ``McpTool``; its call reaches our tool
callbacks like any other and gets our ``execute_tool`` span, on which the kit
(:func:`~runnertrace.runners._kit.mcp.mcp_call`) puts ``mcp.method.name`` and keeps
``mcp``'s own client span for the request out, so that with an app provider the call
is told once and the carrier in ``params._meta`` names our span. The transport and
the server's address are left out: ADK keeps the connection parameters private.
"""

from __future__ import annotations

import sys
from typing import Any

_MCP_TOOL_MODULE = "google.adk.tools.mcp_tool.mcp_tool"


def is_mcp_tool(tool: Any) -> bool:
    """Whether ``tool`` is ADK's ``McpTool`` (its module is loaded once a toolset is: a
    run that uses none never imports ``mcp``)."""
    module = sys.modules.get(_MCP_TOOL_MODULE)
    kind = getattr(module, "McpTool", None) if module is not None else None
    return kind is not None and isinstance(tool, kind)
