"""An MCP server in a process of its own, traced by runnertrace with one call.

``python tests/mcp_server_process.py KIND TRANSPORT ENDPOINT [PORT]``

* ``KIND``: ``lowlevel`` (``mcp.server.lowlevel.Server``), ``mcpserver``
  (``MCPServer``, the 2.x FastMCP) or ``fastmcp`` (the ``fastmcp`` package's ``FastMCP``);
* ``TRANSPORT``: ``stdio``, or ``http`` (streamable HTTP on 127.0.0.1:PORT, path ``/mcp``);
* ``ENDPOINT``: the OTLP/HTTP traces URL the server's spans go to
  (``-``: untraced, mcp's own middleware left in place).

One tool, ``add(a, b)``: its text is JSON with the sum and the ``traceparent``
the request's ``params._meta`` carried, so the client can check the carrier.
The spans are exported at exit (the server ends when stdin closes, or on SIGTERM).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.mcp import trace_server

try:  # the full FastMCP, for KIND fastmcp (FastMCP reads the tool's annotations from here)
    from fastmcp import Context as FastMCPContext
except ImportError:
    FastMCPContext = Any  # type: ignore[misc,assignment]


def answer(a: float, b: float, meta: Any) -> str:
    traceparent = meta.get("traceparent") if isinstance(meta, dict) else None
    return json.dumps({"sum": a + b, "traceparent": traceparent})


def lowlevel_server() -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        }
        return types.ListToolsResult(
            tools=[types.Tool(name="add", description="Adds two numbers.", input_schema=schema)]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        text = answer(args["a"], args["b"], dict(ctx.meta) if ctx.meta else None)
        return types.CallToolResult(content=[types.TextContent(text=text)])

    return Server("adder", on_list_tools=list_tools, on_call_tool=call_tool)


def mcpserver_server() -> Any:
    server = MCPServer("adder")

    @server.tool()
    def add(a: float, b: float, ctx: Context) -> str:
        """Adds two numbers."""
        meta = ctx.request_context.meta
        return answer(a, b, dict(meta) if meta else None)

    return server


def fastmcp_server() -> Any:
    from fastmcp import FastMCP

    server = FastMCP("adder")

    @server.tool()
    def add(a: float, b: float, ctx: FastMCPContext) -> str:
        """Adds two numbers."""
        meta = ctx.request_context.meta if ctx.request_context is not None else None
        return answer(a, b, dict(meta) if meta else None)

    return server


def app_provider(endpoint: str) -> None:
    """A global provider exporting to ``endpoint`` too, as an app's would: FastMCP's own
    spans land there (and so beside ours), unless they are suppressed."""
    import atexit

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)


def serve_fastmcp(transport: str, endpoint: str, port: int) -> None:
    """The FastMCP (``fastmcp`` package) server, with its own runners; with
    ``MCP_SERVER_APP_PROVIDER=1`` in the environment, under an app provider."""
    if os.environ.get("MCP_SERVER_APP_PROVIDER") == "1" and endpoint != "-":
        app_provider(endpoint)
    server = fastmcp_server()
    if endpoint != "-":
        trace_server(server, TraceConfig(type="otlp", otlp={"endpoint": endpoint}))
    if transport == "stdio":
        import anyio

        anyio.run(lambda: server.run_stdio_async(show_banner=False))
    else:
        import uvicorn

        uvicorn.run(server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="warning")


def main(kind: str, transport: str, endpoint: str, port: int = 0) -> None:
    if kind == "fastmcp":
        serve_fastmcp(transport, endpoint, port)
        return
    server = lowlevel_server() if kind == "lowlevel" else mcpserver_server()
    if endpoint != "-":
        trace_server(server, TraceConfig(type="otlp", otlp={"endpoint": endpoint}))
    lowlevel = server if kind == "lowlevel" else server._lowlevel_server  # noqa: SLF001
    if transport == "stdio":
        import anyio
        from mcp.server.stdio import stdio_server

        async def serve() -> None:
            async with stdio_server() as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        anyio.run(serve)
    else:
        import uvicorn

        app = lowlevel.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
