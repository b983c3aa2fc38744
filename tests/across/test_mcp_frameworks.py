"""MCP through each framework's own MCP client, to a real server in another process.

The server (``tests/mcp_server_process.py``, the low-level ``Server`` over stdio or
streamable HTTP, traced with ``trace_server``) exports by OTLP to a loopback receiver; the
framework's run is captured in memory. The model is the framework's own offline
one. Per framework, in run and stream mode:

* the MCP tool is in the chat span's ``gen_ai.tool.definitions``;
* one ``execute_tool`` span of ours for the call;
* the ``params._meta`` carrier names that span, and the server's ``tools/call``
  span is its child, in the same trace.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from opentelemetry.sdk.trace import ReadableSpan
from tests.across.test_mcp_native import HttpServer
from tests.fidelity_helpers import MODES, run
from tests.loopback_process import child_env
from tests.mcp_checks import SERVER, check_the_server_saw, hexid, server_spans
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.testing import CapturedSpans, capture_spans

SERVER_ARGS = [str(SERVER), "lowlevel", "stdio"]
TRANSPORTS = ["stdio", "http"]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def tool_spans(captured: CapturedSpans) -> list[ReadableSpan]:
    return [s for s in captured.spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]


def check_the_call(captured: CapturedSpans, receiver: OtlpReceiver, tool_result: str) -> None:
    """One ``execute_tool add`` span; the carrier and the server's span name it."""
    (tool_span,) = tool_spans(captured)
    assert tool_span.name == "execute_tool add"
    check_the_server_saw(tool_span, receiver, tool_result)


def listed_tools(chat: ReadableSpan) -> dict[str, Any]:
    return {t["name"]: t for t in json.loads(attrs(chat)["gen_ai.tool.definitions"])}


def check_mcp_attributes(
    tool_span: ReadableSpan,
    receiver: OtlpReceiver,
    server: HttpServer | None,
    session_id: str | None = None,
) -> None:
    """The GenAI MCP attributes on our ``execute_tool`` span; ``session_id``: the one the
    framework's client exposes (then it is the session the server's span names)."""
    found = attrs(tool_span)
    assert found["mcp.method.name"] == "tools/call"
    if server is None:
        assert found["network.transport"] == "pipe"
        assert "server.address" not in found
    else:
        assert found["network.transport"] == "tcp"
        assert (found["server.address"], found["server.port"]) == ("127.0.0.1", server.port)
    assert found.get("mcp.session.id") == session_id
    if session_id is not None:
        (call,) = server_spans(receiver, "tools/call")
        assert call.attributes["mcp.session.id"] == session_id


# -- OpenAI Agents: MCPServerStdio, MCPServerStreamableHttp ---------------------------------------
def openai_agents_server(receiver: OtlpReceiver, server: HttpServer | None) -> Any:
    from agents.mcp import MCPServerStdio, MCPServerStdioParams, MCPServerStreamableHttp

    if server is not None:
        return MCPServerStreamableHttp(params={"url": server.url, "timeout": 30}, name="adder")
    params = MCPServerStdioParams(
        command=sys.executable, args=[*SERVER_ARGS, receiver.traces_url], env=child_env()
    )
    return MCPServerStdio(params=params, name="adder")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_openai_agents_mcp_server(
    receiver: OtlpReceiver, http_server: HttpServer | None, mode: str, transport: str
) -> None:
    pytest.importorskip("agents")
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
    async with openai_agents_server(receiver, http_server) as server:
        agent = Agent(name="mcp-user", model=model, mcp_servers=[server])
        core = CoreAgent("mcp-user", TracingRunner(OpenAIRunner(), capture_content=True), agent)
        with capture_spans(deterministic=False) as captured:
            await run(core, mode, prompt="2 + 40?")
    first, _ = sorted(captured.by_name("chat fake-model"), key=lambda s: s.start_time or 0)
    add = listed_tools(first)["add"]
    assert add["description"] == "Adds two numbers."
    assert add["parameters"]["required"] == ["a", "b"]
    (tool_span,) = tool_spans(captured)
    # The SDK hands the model the MCP text content as JSON: the server's answer is inside.
    content = json.loads(attrs(tool_span)["gen_ai.tool.call.result"])
    check_the_call(captured, receiver, content["text"])
    check_mcp_attributes(tool_span, receiver, http_server)  # the SDK exposes no session id


# -- ADK: McpToolset ------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("tracer", ["passed-through", "elsewhere"])
@pytest.mark.parametrize("mode", MODES)
async def test_adk_mcp_toolset(
    receiver: OtlpReceiver,
    http_server: HttpServer | None,
    mode: str,
    tracer: str,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``elsewhere``: an ADK whose tracer cannot be wrapped, so the run drives ADK under
    the unsampled quiet context (``runners.adk.quiet``); the server must not see it:
    the carriers name our spans, sampled (``core.quiet``)."""
    pytest.importorskip("google.adk")
    if tracer == "elsewhere":
        from runnertrace.runners.adk import quiet

        monkeypatch.setattr(quiet, "pass_through_adk_spans", lambda: False)
    from google.adk.agents import LlmAgent
    from google.adk.tools.mcp_tool import (
        McpToolset,
        StdioConnectionParams,
        StreamableHTTPConnectionParams,
    )
    from mcp import StdioServerParameters

    from runnertrace.runners.adk import GoogleADKRunner
    from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn

    connection: Any = (
        StreamableHTTPConnectionParams(url=http_server.url, timeout=30)
        if http_server is not None
        else StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable, args=[*SERVER_ARGS, receiver.traces_url], env=child_env()
            ),
            timeout=30,
        )
    )
    toolset = McpToolset(connection_params=connection)
    script = [Turn(calls=[("add", {"a": 2, "b": 40}, "c1")]), Turn(text="The sum is 42.")]
    native = LlmAgent(
        name="mcp_user", model=ScriptedAdkLlm(model="fake-llm", script=script), tools=[toolset]
    )
    core = CoreAgent("mcp_user", TracingRunner(GoogleADKRunner(), capture_content=True), native)
    try:
        with capture_spans(deterministic=False) as captured:
            await run(core, mode, prompt="2 + 40?")
    finally:
        await toolset.close()
    first, _ = sorted(captured.by_name("chat fake-llm"), key=lambda s: s.start_time or 0)
    # ADK fences an MCP tool's description as untrusted text, one line each side.
    description = listed_tools(first)["add"]["description"]
    assert description.splitlines()[1] == "Adds two numbers."
    (tool_span,) = tool_spans(captured)
    result = json.loads(attrs(tool_span)["gen_ai.tool.call.result"])
    check_the_call(captured, receiver, result["content"][0]["text"])
    # The method only: ADK keeps the connection parameters (transport, address) private.
    assert attrs(tool_span)["mcp.method.name"] == "tools/call"
    assert "network.transport" not in attrs(tool_span)
    # The session's initialize and tools/list reach the server sampled, in our trace:
    # ADK's quiet (unsampled) context must not travel to the server.
    trace_id = hexid(tool_span.context.trace_id, 32)
    for method in ("initialize", "tools/list"):
        assert wait_until(lambda m=method: len(server_spans(receiver, m)) >= 1, timeout_s=20)
        assert {s.trace_id for s in server_spans(receiver, method)} == {trace_id}
