"""HTTP out: a native tool's instrumented HTTP client sends the trace on, from its tool span.

With OpenTelemetry's ``httpx`` and ``requests`` instrumentations, the
``traceparent`` a loopback server receives names the client span the
instrumentation made under our ``execute_tool`` span (when the instrumentation
records, on the app's provider), or the ``execute_tool`` span itself (when it
does not: no SDK provider of the app's, so its span is non-recording and passes
our context through). Run and stream mode.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import requests
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, LlmResponse, NativeModule, ScriptedLlm, ToolCall, tool
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing import traced
from runnertrace.tracing.config import Settings


class HeaderServer:
    """A loopback HTTP server that records the ``traceparent`` of every GET."""

    def __init__(self) -> None:
        seen: list[str | None] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.headers.get("traceparent"))
                body = b"sunny"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/weather"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[HeaderServer]:
    s = HeaderServer()
    yield s
    s.close()


def weather_agent(runtime: Runtime, fetch: Any) -> Any:
    llm = ScriptedLlm(
        turns=[
            LlmResponse(content=[ToolCall("call_1", "weather", {})], finish_reason="tool_calls"),
            "It is sunny.",
        ]
    )
    NativeModule([Agent(llm, tools=[fetch], name="weather-bot")], runtime=runtime)
    agent = runtime.agents().get("weather-bot")
    agent.runner = traced(agent.runner)
    return agent


async def drive(runtime: Runtime, agent: Any, mode: str) -> None:
    session = runtime.sessions().new("s")
    requests_ = [AgentRequestText(prompt="weather?")]
    if mode == "run":
        assert str(await runtime.run(agent, session, requests_)) == "It is sunny."
    else:
        async for _ in runtime.stream(agent, session, requests_):
            pass


def traceparent_span_id(header: str | None) -> int:
    assert header is not None
    return int(header.split("-")[2], 16)


def one(captured: CapturedSpans, name: str) -> ReadableSpan:
    found = captured.by_name(name)
    assert len(found) == 1, captured.names()
    return found[0]


def make_tools(url: str) -> dict[str, Any]:
    @tool(name="weather")
    async def weather_httpx() -> str:
        """The weather, fetched with httpx."""
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).text

    @tool(name="weather")
    def weather_requests() -> str:
        """The weather, fetched with requests."""
        return requests.get(url, timeout=10).text

    return {"httpx": weather_httpx, "requests": weather_requests}


INSTRUMENTORS = {"httpx": HTTPXClientInstrumentor, "requests": RequestsInstrumentor}


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("client", ["httpx", "requests"])
async def test_the_header_names_the_instrumentations_client_span_under_execute_tool(
    server: HeaderServer, client: str, mode: str
) -> None:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    agent = weather_agent(runtime, make_tools(server.url)[client])
    instrumentor = INSTRUMENTORS[client]()
    with capture_spans() as captured:
        instrumentor.instrument(tracer_provider=captured.provider)
        try:
            await drive(runtime, agent, mode)
        finally:
            instrumentor.uninstrument()
    tool_span = one(captured, "execute_tool weather")
    (http_span,) = [s for s in captured.spans if s.name == "GET"]
    assert http_span.parent is not None and http_span.parent.span_id == tool_span.context.span_id
    assert server.seen and len(server.seen) == 1
    assert traceparent_span_id(server.seen[0]) == http_span.context.span_id
    assert int(server.seen[0].split("-")[1], 16) == tool_span.context.trace_id


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("client", ["httpx", "requests"])
async def test_without_an_app_provider_the_header_names_execute_tool(
    server: HeaderServer, client: str, mode: str
) -> None:
    """The instrumentation on the global (no-op) provider: its span records nothing and
    carries our tool span's context, so the server's parent is ``execute_tool``."""
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    agent = weather_agent(runtime, make_tools(server.url)[client])
    instrumentor = INSTRUMENTORS[client]()
    with capture_spans() as captured:
        instrumentor.instrument()
        try:
            await drive(runtime, agent, mode)
        finally:
            instrumentor.uninstrument()
    tool_span = one(captured, "execute_tool weather")
    assert len(server.seen) == 1
    assert traceparent_span_id(server.seen[0]) == tool_span.context.span_id
    assert "GET" not in captured.names()
