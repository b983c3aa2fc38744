"""An app that owns its global provider, running a traced agent whose tool is on an MCP server.

``python tests/mcp_app_process.py FRAMEWORK ENDPOINT [URL]``

* ``FRAMEWORK``: ``maf`` (``MCPStdioTool``, or ``MCPStreamableHTTPTool`` with a URL),
  ``pydantic-ai`` (``MCPToolset``), ``openai-agents`` (``MCPServerStdio``, or
  ``MCPServerStreamableHttp``) or ``google-adk`` (``McpToolset``);
* ``ENDPOINT``: the OTLP traces URL the stdio server (started by the framework) exports to;
* ``URL``: a streamable-HTTP MCP server to use instead of stdio.

Everything that records spans in this process lands in one in-memory exporter: ours
(the ``app`` backend), the framework's, FastMCP's and ``mcp``'s own, so a call told
twice would show. Prints one JSON line: per mode, the finished spans (name, scope,
ids, parent, the MCP attributes).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider, exporter = TracerProvider(), InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from loopback_process import child_env  # noqa: E402 - after the provider, as an app does
from runnertrace import traced  # noqa: E402
from runnertrace.core import Session  # noqa: E402
from runnertrace.core.agent import Agent as CoreAgent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.tracing.config import TraceConfig  # noqa: E402

SERVER = str(Path(__file__).resolve().parent / "mcp_server_process.py")
KEPT = ("mcp.method.name", "gen_ai.operation.name", "gen_ai.tool.call.result")
APP = TraceConfig(type="app", capture_content=True)


def stdio_args(endpoint: str) -> list[str]:
    return [SERVER, "lowlevel", "stdio", endpoint]


def maf_agent(tool: Any) -> CoreAgent:
    from agent_framework import Agent

    from runnertrace.runners.maf import MAFRunner
    from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

    client = ScriptedChatClient([call(("c1", "add", {"a": 2, "b": 40})), say("42.")])
    native = Agent(client, name="mcp_user", tools=[tool])
    runner = traced(MAFRunner(), TraceConfig(type="app", capture_content=True))
    return CoreAgent("mcp_user", runner, native)


def maf_tool(endpoint: str, url: str | None) -> Any:
    from agent_framework import MCPStdioTool, MCPStreamableHTTPTool

    if url is not None:
        return MCPStreamableHTTPTool(name="adder", url=url)
    return MCPStdioTool(
        name="adder", command=sys.executable, args=stdio_args(endpoint), env=child_env()
    )


def pydantic_ai_tool(endpoint: str, url: str | None) -> Any:
    from fastmcp.client import Client
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    if url is not None:
        return MCPToolset(Client(url, init_timeout=30))
    transport = StdioTransport(command=sys.executable, args=stdio_args(endpoint), env=child_env())
    return MCPToolset(Client(transport, init_timeout=30))


def pydantic_ai_agent(toolset: Any) -> CoreAgent:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    from runnertrace.runners.pydantic_ai import PydanticAIRunner
    from runnertrace.runners.pydantic_ai.testing import function_model

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        if messages[-1].parts[-1].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("42.")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 40}, tool_call_id="c1")])

    native = Agent(function_model(respond), name="mcp_user", toolsets=[toolset])
    runner = traced(PydanticAIRunner(), TraceConfig(type="app", capture_content=True))
    return CoreAgent("mcp_user", runner, native)


def openai_agents_tool(endpoint: str, url: str | None) -> Any:
    from agents.mcp import MCPServerStdio, MCPServerStdioParams, MCPServerStreamableHttp

    if url is not None:
        return MCPServerStreamableHttp(params={"url": url, "timeout": 30}, name="adder")
    params = MCPServerStdioParams(
        command=sys.executable, args=stdio_args(endpoint), env=child_env()
    )
    return MCPServerStdio(params=params, name="adder")


def openai_agents_agent(server: Any) -> CoreAgent:
    from agents import Agent
    from agents.testing import ModelStep, assistant_message, function_call

    from runnertrace.runners.openai_agents import OpenAIRunner
    from runnertrace.runners.openai_agents.testing import FakeModel

    model = FakeModel(
        [
            ModelStep(output=[function_call("add", {"a": 2, "b": 40}, call_id="c1")]),
            [assistant_message("The sum is 42.")],
        ]
    )
    native = Agent(name="mcp-user", model=model, mcp_servers=[server])
    return CoreAgent("mcp-user", traced(OpenAIRunner(), APP), native)


@asynccontextmanager
async def adk_tool(endpoint: str, url: str | None) -> AsyncIterator[Any]:
    from google.adk.tools.mcp_tool import (
        McpToolset,
        StdioConnectionParams,
        StreamableHTTPConnectionParams,
    )
    from mcp import StdioServerParameters

    connection: Any = (
        StreamableHTTPConnectionParams(url=url, timeout=30)
        if url is not None
        else StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable, args=stdio_args(endpoint), env=child_env()
            ),
            timeout=30,
        )
    )
    toolset = McpToolset(connection_params=connection)
    try:
        yield toolset
    finally:
        await toolset.close()


def adk_agent(toolset: Any) -> CoreAgent:
    from google.adk.agents import LlmAgent

    from runnertrace.runners.adk import GoogleADKRunner
    from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn

    script = [Turn(calls=[("add", {"a": 2, "b": 40}, "c1")]), Turn(text="The sum is 42.")]
    native = LlmAgent(
        name="mcp_user", model=ScriptedAdkLlm(model="fake-llm", script=script), tools=[toolset]
    )
    return CoreAgent("mcp_user", traced(GoogleADKRunner(), APP), native)


FRAMEWORKS = {
    "maf": (maf_tool, maf_agent),
    "pydantic-ai": (pydantic_ai_tool, pydantic_ai_agent),
    "openai-agents": (openai_agents_tool, openai_agents_agent),
    "google-adk": (adk_tool, adk_agent),
}


def finished() -> list[dict[str, Any]]:
    provider.force_flush()  # a first priced call's span ends once the price table is in
    found = [
        {
            "name": s.name,
            "scope": s.instrumentation_scope.name if s.instrumentation_scope else "",
            "trace": format(s.context.trace_id, "032x"),
            "id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
            **{k: v for k, v in (s.attributes or {}).items() if k in KEPT},
        }
        for s in exporter.get_finished_spans()
    ]
    exporter.clear()
    return found


async def main(framework: str, endpoint: str, url: str | None) -> None:
    make_tool, make_agent = FRAMEWORKS[framework]
    report: dict[str, Any] = {}
    for mode in ("run", "stream"):
        async with make_tool(endpoint, url) as tool:
            exporter.clear()  # the connection's spans, made before the run, are not its
            core = make_agent(tool)
            requests = [AgentRequestText(prompt="2 + 40?")]
            if mode == "run":
                await core.runner.run(core, Session(mode), requests)
            else:
                async for _ in core.runner.stream(core, Session(mode), requests):
                    pass
            report[mode] = finished()
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
