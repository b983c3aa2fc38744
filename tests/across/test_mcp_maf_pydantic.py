"""MCP through Agent Framework's and Pydantic AI's own MCP clients, to a server in another process.

The server (``tests/mcp_server_process.py``, traced with ``trace_server``) runs
over stdio (the framework starts it) or streamable HTTP on loopback (the test
starts it); it exports by OTLP to a loopback receiver. The model is the
framework's own offline one. Per framework and transport, in run and stream mode:

* the MCP tool is in the chat span's ``gen_ai.tool.definitions``;
* one ``execute_tool`` span of ours for the call, with the GenAI MCP attributes;
* the ``params._meta`` carrier names that span, and the server's ``tools/call``
  span is its child, in the same trace.

With an app provider (a child process that owns its global provider, where the
framework's, FastMCP's and ``mcp``'s own spans land beside ours), the call is
still told once: none of theirs for the ``tools/call``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.across.test_mcp_frameworks import (
    SERVER_ARGS,
    TRANSPORTS,
    attrs,
    check_mcp_attributes,
    check_the_call,
    listed_tools,
    receiver,
    tool_spans,
)
from tests.across.test_mcp_native import HttpServer, server_spans
from tests.fidelity_helpers import MODES, run
from tests.loopback_process import TESTS, child_env
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.testing import capture_spans

__all__ = ["receiver"]  # the shared fixture, used here by name

REPO = TESTS.parent


# -- Microsoft Agent Framework: MCPStdioTool, MCPStreamableHTTPTool -------------------------------
def maf_tool(receiver: OtlpReceiver, server: HttpServer | None) -> Any:
    from agent_framework import MCPStdioTool, MCPStreamableHTTPTool

    if server is not None:
        return MCPStreamableHTTPTool(name="adder", url=server.url)
    return MCPStdioTool(
        name="adder",
        command=sys.executable,
        args=[*SERVER_ARGS, receiver.traces_url],
        env=child_env(),
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_maf_mcp_tool(
    receiver: OtlpReceiver, http_server: HttpServer | None, mode: str, transport: str
) -> None:
    pytest.importorskip("agent_framework")
    from agent_framework import Agent

    from runnertrace.runners.maf import MAFRunner
    from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

    client = ScriptedChatClient([call(("c1", "add", {"a": 2, "b": 40})), say("The sum is 42.")])
    async with maf_tool(receiver, http_server) as tool:
        native = Agent(client, name="mcp_user", tools=[tool])
        core = CoreAgent("mcp_user", TracingRunner(MAFRunner(), capture_content=True), native)
        with capture_spans(deterministic=False) as captured:
            await run(core, mode, prompt="2 + 40?")
    first, _ = sorted(captured.by_name("chat scripted-1"), key=lambda s: s.start_time or 0)
    add = listed_tools(first)["add"]
    assert add["description"] == "Adds two numbers."
    assert add["parameters"]["required"] == ["a", "b"]
    (tool_span,) = tool_spans(captured)
    check_the_call(captured, receiver, attrs(tool_span)["gen_ai.tool.call.result"])
    # Neither Agent Framework nor mcp's Client exposes the MCP session id.
    check_mcp_attributes(tool_span, receiver, http_server)


# -- Pydantic AI: MCPToolset (the FastMCP client) -------------------------------------------------
def pydantic_ai_toolset(receiver: OtlpReceiver, server: HttpServer | None) -> Any:
    """An ``MCPToolset`` on a FastMCP client whose handshake may take 30 s (a bound on the
    server process starting on a loaded machine; FastMCP's default is shorter)."""
    pytest.importorskip("fastmcp")
    from fastmcp.client import Client
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    if server is not None:
        return MCPToolset(Client(server.url, init_timeout=30))
    args = [*SERVER_ARGS, receiver.traces_url]
    transport = StdioTransport(command=sys.executable, args=args, env=child_env())
    return MCPToolset(Client(transport, init_timeout=30))


def add_then_answer() -> Any:
    """Pydantic AI's ``FunctionModel`` (both modes): ``add(2, 40)``, then the answer."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    from runnertrace.runners.pydantic_ai.testing import function_model

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        if messages[-1].parts[-1].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("The sum is 42.")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 40}, tool_call_id="c1")])

    return function_model(respond, model_name="offline")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_pydantic_ai_mcp_toolset(
    receiver: OtlpReceiver, http_server: HttpServer | None, mode: str, transport: str
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent

    from runnertrace.runners.pydantic_ai import PydanticAIRunner

    async with pydantic_ai_toolset(receiver, http_server) as toolset:
        native = Agent(add_then_answer(), name="mcp_user", toolsets=[toolset])
        runner = TracingRunner(PydanticAIRunner(), capture_content=True)
        core = CoreAgent("mcp_user", runner, native)
        with capture_spans(deterministic=False) as captured:
            await run(core, mode, prompt="2 + 40?")
        # FastMCP's public getter (4.1.7 returns None over HTTP too: its header hook
        # does not take); what it says is what our span has.
        session_id = toolset.client.transport.get_session_id()
    first, _ = sorted(captured.by_name("chat offline"), key=lambda s: s.start_time or 0)
    add = listed_tools(first)["add"]
    assert add["description"] == "Adds two numbers."
    assert add["parameters"]["required"] == ["a", "b"]
    (tool_span,) = tool_spans(captured)
    check_the_call(captured, receiver, attrs(tool_span)["gen_ai.tool.call.result"])
    check_mcp_attributes(tool_span, receiver, http_server, session_id)


# -- with an app provider: the framework's, FastMCP's and mcp's own spans beside ours -------------
NEEDS = {
    "maf": "agent_framework",
    "pydantic-ai": "fastmcp",
    "openai-agents": "agents",
    "google-adk": "google.adk",
}
"""The module each framework's MCP client needs."""
RESULT_TEXT = {
    "maf": lambda result: result,
    "pydantic-ai": lambda result: result,
    "openai-agents": lambda result: json.loads(result)["text"],  # the MCP text content
    "google-adk": lambda result: json.loads(result)["content"][0]["text"],  # the MCP result
}
"""The server's answer inside the tool result each framework hands the model."""


def app_run(framework: str, receiver: OtlpReceiver, server: HttpServer | None) -> dict[str, Any]:
    """What the app's provider saw, per mode (``tests/mcp_app_process.py``, a child
    process that owns its global provider)."""
    env = {k: v for k, v in child_env().items() if not k.startswith("RUNNERTRACE_")}
    args = [framework, receiver.traces_url, *([server.url] if server is not None else [])]
    done = subprocess.run(
        [sys.executable, str(TESTS / "mcp_app_process.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("framework", ["maf", "pydantic-ai", "openai-agents", "google-adk"])
def test_with_an_app_provider_the_mcp_call_is_told_once(
    receiver: OtlpReceiver, http_server: HttpServer | None, framework: str, transport: str
) -> None:
    pytest.importorskip(NEEDS[framework])
    report = app_run(framework, receiver, http_server)
    assert wait_until(lambda: len(server_spans(receiver, "tools/call")) == len(MODES), 20)
    calls = {s.trace_id: s for s in server_spans(receiver, "tools/call")}
    for mode in MODES:
        spans = report[mode]
        # Every span of the app's provider that stands for a tools/call: ours, once.
        (tool_span,) = [s for s in spans if s.get("mcp.method.name") == "tools/call"]
        assert (tool_span["name"], tool_span["scope"]) == ("execute_tool add", "runnertrace")
        assert [s["name"] for s in spans if "tools/call" in s["name"]] == [], spans
        seen = json.loads(RESULT_TEXT[framework](tool_span["gen_ai.tool.call.result"]))
        assert seen["traceparent"].split("-")[1:3] == [tool_span["trace"], tool_span["id"]]
        assert calls[tool_span["trace"]].parent_span_id == tool_span["id"]
        # Agent Framework's own spans stay quiet in a traced run (not only the MCP one).
        assert [s["name"] for s in spans if s["scope"] == "agent_framework"] == []
