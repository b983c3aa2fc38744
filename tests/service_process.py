"""The REST/SSE service in a process of its own: an agent whose tools cross two more processes.

``python tests/service_process.py PORT ENDPOINT A2A_URL``: ``create_app`` on
127.0.0.1:PORT serving the native agent ``planner``, traced by OTLP to
``ENDPOINT``. Each run asks for two tools at once: ``add_remote`` calls the MCP
server of ``tests/mcp_server_process.py`` over stdio (a process this one starts,
exporting to the same endpoint), ``ask_math`` the A2A agent at ``A2A_URL``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from runnertrace.core import Runtime
from runnertrace.runners.native import Agent, LlmResponse, NativeModule, ScriptedLlm, ToolCall, tool
from runnertrace.serve import create_app
from runnertrace.tracing import traced
from runnertrace.tracing.config import Settings, TraceConfig

TESTS = Path(__file__).resolve().parent
QUESTION = "What is 1234 * 5678, plus 17?"


def tools(endpoint: str, a2a_url: str) -> list[Any]:
    from a2a.client import ClientConfig, create_client
    from a2a.helpers.proto_helpers import get_message_text, new_text_message
    from a2a.types.a2a_pb2 import Role, SendMessageRequest
    from mcp import StdioServerParameters

    from runnertrace.tracing.a2a import traced_client
    from runnertrace.tracing.mcp import connect_stdio

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(TESTS / "mcp_server_process.py"), "lowlevel", "stdio", endpoint],
        env={**os.environ, "OTEL_SERVICE_NAME": "mcp-server"},
    )

    @tool(name="add_remote")
    async def add_remote(a: float, b: float) -> str:
        """Adds two numbers on the MCP server."""
        async with connect_stdio(params) as session:
            result = await session.call_tool("add", {"a": a, "b": b})
        return str(result.content[0].text)

    @tool(name="ask_math")
    async def ask_math(question: str) -> str:
        """Asks the remote math agent over A2A."""
        client = await create_client(a2a_url, client_config=ClientConfig(streaming=False))
        async with traced_client(client) as remote:
            message = new_text_message(question, role=Role.ROLE_USER)
            texts = [
                get_message_text(e.message)
                async for e in remote.send_message(SendMessageRequest(message=message))
                if e.HasField("message")
            ]
        return "".join(texts)

    return [add_remote, ask_math]


def script(runs: int) -> list[Any]:
    calls = LlmResponse(
        content=[
            ToolCall("call_mcp", "add_remote", {"a": 2, "b": 40}),
            ToolCall("call_a2a", "ask_math", {"question": QUESTION}),
        ],
        finish_reason="tool_calls",
    )
    return [calls, "Both answered."] * runs


def app(endpoint: str, a2a_url: str) -> Any:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    agent = Agent(ScriptedLlm(turns=script(10)), tools=tools(endpoint, a2a_url), name="planner")
    NativeModule([agent], runtime=runtime)
    registered = runtime.agents().get("planner")
    registered.runner = traced(
        registered.runner, TraceConfig(type="otlp", otlp={"endpoint": endpoint})
    )
    return create_app(runtime)


if __name__ == "__main__":
    import uvicorn

    port, endpoint, a2a_url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(app(endpoint, a2a_url), host="127.0.0.1", port=port, log_level="warning")
