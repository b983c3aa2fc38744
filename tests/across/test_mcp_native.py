"""MCP from a native tool: a plain ``mcp`` ``ClientSession`` to a server in another process.

The server (``tests/mcp_server_process.py``: the low-level ``Server`` and
``MCPServer``, over stdio and streamable HTTP) is traced by runnertrace with
``trace_server`` and exports by OTLP to a loopback receiver; the client's spans
are captured in memory. Per call, in run and stream mode:

* one ``execute_tool`` span of ours, with the GenAI MCP attributes;
* the ``params._meta`` carrier names that span, and the server's ``tools/call``
  SERVER span (in the same trace) is its child;
* with an app-wide provider (``mcp``'s own spans recording), ``mcp``'s client
  span for ``tools/call`` is kept out: the call is told once; its spans for the
  other requests stay, each once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import StdioServerParameters
from mcp.shared import _otel as mcp_otel
from opentelemetry.sdk.trace import ReadableSpan
from tests.loopback_process import child_env
from tests.mcp_checks import SERVER, HttpServer, check_the_server_saw, hexid, server_spans
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import (
    Agent,
    LlmResponse,
    NativeModule,
    ScriptedLlm,
    ToolCall,
    tool,
)
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing import traced
from runnertrace.tracing.config import Settings
from runnertrace.tracing.mcp import connect_stdio, connect_streamable_http

SERVER_KIND = 2  # OTLP's SPAN_KIND_SERVER


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture
def app_provider_for_mcp() -> Iterator[Callable[[CapturedSpans], None]]:
    """``mcp``'s spans recording, as with an app-wide SDK provider: its module tracer is
    pointed at the test's capture (restored afterwards)."""
    saved = mcp_otel._tracer  # noqa: SLF001 - mcp's module tracer, the one its spans use

    def install(captured: CapturedSpans) -> None:
        mcp_otel._tracer = captured.provider.get_tracer("mcp-python-sdk")  # noqa: SLF001

    yield install
    mcp_otel._tracer = saved  # noqa: SLF001


def remote_tool(connect: Any) -> Any:
    @tool(name="add_remote")
    async def add_remote(a: float, b: float) -> str:
        """Adds two numbers on the MCP server."""
        async with connect() as session:
            result = await session.call_tool("add", {"a": a, "b": b})
        return str(result.content[0].text)

    return add_remote


def stdio_connect(kind: str, endpoint: str) -> Any:
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER), kind, "stdio", endpoint], env=child_env()
    )
    return lambda: connect_stdio(params)


async def run_agent(add_remote: Any, mode: str) -> str:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    llm = ScriptedLlm(
        turns=[
            LlmResponse(
                content=[ToolCall("call_1", "add_remote", {"a": 2, "b": 40})],
                finish_reason="tool_calls",
            ),
            "The sum is 42.",
        ]
    )
    NativeModule([Agent(llm, tools=[add_remote], name="mcp-user")], runtime=runtime)
    agent = runtime.agents().get("mcp-user")
    agent.runner = traced(agent.runner)
    session = runtime.sessions().new("s")
    requests = [AgentRequestText(prompt="2 + 40?")]
    if mode == "run":
        await runtime.run(agent, session, requests)
    else:
        async for _ in runtime.stream(agent, session, requests):
            pass
    (result,) = [
        c
        for c in llm.requests[1].contents
        if getattr(c, "tool_call_id", None) == "call_1" and hasattr(c, "status")
    ]
    return str(result.text)


def check_the_call(
    captured: CapturedSpans, receiver: OtlpReceiver, tool_result: str, transport: str
) -> ReadableSpan:
    (tool_span,) = captured.by_name("execute_tool add_remote")
    attrs = tool_span.attributes
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["network.transport"] == ("pipe" if transport == "stdio" else "tcp")
    assert attrs["mcp.protocol.version"]
    if transport == "http":
        assert attrs["mcp.session.id"]
        assert (attrs["server.address"], attrs["server.port"]) == (
            "127.0.0.1",
            attrs["server.port"],
        )
    else:
        assert "mcp.session.id" not in attrs
    call = check_the_server_saw(tool_span, receiver, tool_result)
    assert call.kind == SERVER_KIND
    assert call.attributes["gen_ai.tool.name"] == "add"
    assert call.attributes["network.transport"] == attrs["network.transport"]
    if transport == "http":
        assert call.attributes["mcp.session.id"] == attrs["mcp.session.id"]
    # Our spans: one execute_tool for the one call, none of mcp's recording here.
    tools = [
        s for s in captured.spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"
    ]
    assert tools == [tool_span]
    return tool_span


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("kind", ["lowlevel", "mcpserver"])
async def test_stdio_server_continues_the_trace_from_execute_tool(
    receiver: OtlpReceiver, kind: str, mode: str
) -> None:
    with capture_spans(deterministic=False) as captured:
        result = await run_agent(remote_tool(stdio_connect(kind, receiver.traces_url)), mode)
    check_the_call(captured, receiver, result, "stdio")
    # initialize and tools/list of the same session reach the server too, each once.
    assert wait_until(lambda: len(server_spans(receiver, "initialize")) == 1, timeout_s=20)


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("kind", ["lowlevel", "mcpserver"])
async def test_streamable_http_server_continues_the_trace_from_execute_tool(
    receiver: OtlpReceiver, kind: str, mode: str
) -> None:
    server = HttpServer(kind, receiver.traces_url)
    try:
        with capture_spans(deterministic=False) as captured:
            result = await run_agent(remote_tool(lambda: connect_streamable_http(server.url)), mode)
        tool_span = check_the_call(captured, receiver, result, "http")
    finally:
        server.stop()
    assert tool_span.attributes["server.port"] == server.port


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_with_mcps_own_spans_recording_the_call_is_told_once(
    receiver: OtlpReceiver, app_provider_for_mcp: Any, transport: str
) -> None:
    server = HttpServer("mcpserver", receiver.traces_url) if transport == "http" else None
    connect = (
        stdio_connect("mcpserver", receiver.traces_url)
        if server is None
        else (lambda: connect_streamable_http(server.url))
    )
    try:
        with capture_spans(deterministic=False) as captured:
            app_provider_for_mcp(captured)
            result = await run_agent(remote_tool(connect), "run")
        tool_span = check_the_call(captured, receiver, result, transport)
    finally:
        if server is not None:
            server.stop()
    mcp_spans = [s for s in captured.spans if s.instrumentation_scope.name == "mcp-python-sdk"]
    methods = [s.attributes["mcp.method.name"] for s in mcp_spans]
    assert "tools/call" not in methods
    assert methods.count("initialize") == 1
    # The tools/list that call_tool sends itself (to check the result) is part of the call:
    # no client span of mcp's, the server's span under our execute_tool.
    assert "tools/list" not in methods
    (listing,) = server_spans(receiver, "tools/list")
    assert listing.parent_span_id == hexid(tool_span.context.span_id, 16)
    # mcp's own client spans sit under our execute_tool span (they ran inside the tool),
    # and the server's initialize span is the child of mcp's client span for it.
    assert {s.parent.span_id for s in mcp_spans if s.parent} == {tool_span.context.span_id}
    (init_client,) = [s for s in mcp_spans if s.attributes["mcp.method.name"] == "initialize"]
    (init_server,) = server_spans(receiver, "initialize")
    assert init_server.parent_span_id == hexid(init_client.context.span_id, 16)


async def test_outside_a_traced_tool_call_tool_is_mcps_own(receiver: OtlpReceiver) -> None:
    """No execute_tool span of ours is current: the session adds nothing and hides nothing."""
    with capture_spans(deterministic=False) as captured:
        async with stdio_connect("lowlevel", receiver.traces_url)() as session:
            result = await session.call_tool("add", {"a": 1, "b": 2})
    assert json.loads(result.content[0].text) == {"sum": 3, "traceparent": None}
    assert captured.spans == []
    assert wait_until(lambda: len(server_spans(receiver, "tools/call")) == 1, timeout_s=20)
    assert server_spans(receiver, "tools/call")[0].parent_span_id is None


def test_an_mcp_release_without_the_private_tracer_loses_only_the_gate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The client gate and the server swap reach mcp's private ``_otel`` modules; a
    release that moves them must not break the app: one warning, and mcp's spans stay."""
    import logging
    import sys

    import mcp.shared

    from runnertrace.tracing import mcp as traced_mcp

    monkeypatch.delattr(mcp.shared, "_otel")
    monkeypatch.setitem(sys.modules, "mcp.shared._otel", None)  # importing it raises
    monkeypatch.setitem(sys.modules, "mcp.server._otel", None)
    caplog.set_level(logging.WARNING, logger="runnertrace")
    session = object()
    assert traced_mcp.TracedClientSession(session).session is session

    class Server:
        middleware: list[object] = []

    server = Server()
    assert traced_mcp.trace_server(server) is server
    assert [type(m) for m in server.middleware] == [traced_mcp.ServerSpans]
    moved = [r for r in caplog.records if "checked against mcp 2.3" in r.getMessage()]
    assert len(moved) == 2


def sent(carrier: dict[str, str]) -> tuple[str, bool]:
    """The parent span id a ``traceparent`` names, and whether it says sampled."""
    _, _, span_id, flags = carrier["traceparent"].split("-")
    return span_id, bool(int(flags, 16) & 1)


def test_a_quiet_copy_is_sent_as_its_original_and_our_spans_under_it_as_themselves() -> None:
    """``core.quiet``: the carrier written under a runner's unsampled quiet copy names the
    span it copies, sampled; a sampled span of ours started under it is sent as itself."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace as trace_api

    from runnertrace.core.propagation import inject
    from runnertrace.core.quiet import quiet_copy, sendable

    with capture_spans(deterministic=False) as captured:
        tracer = captured.provider.get_tracer("test")
        with tracer.start_as_current_span("run") as run_span:
            token = otel_context.attach(quiet_copy())
            try:
                quiet = trace_api.get_current_span().get_span_context()
                assert not quiet.trace_flags.sampled
                ids = hexid(run_span.get_span_context().span_id, 16)
                assert sent(inject()) == (ids, False)  # as it is: unsampled
                assert sent(inject(context=sendable())) == (ids, True)
                # Our spans take their parent explicitly (the sampler drops any other).
                parent = trace_api.set_span_in_context(run_span)
                with tracer.start_as_current_span("tool", context=parent):
                    assert sendable() is None
            finally:
                otel_context.detach(token)
        assert sendable() is None
