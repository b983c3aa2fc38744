"""LangGraph's and smolagents' MCP clients (``mcp`` 1.x) against a real server in another process.

``langchain-mcp-adapters`` and ``smolagents[mcp]`` (through ``mcpadapt``) pin
``mcp<2``, which cannot share the main venv (``mcp`` 2.3): these tests run in
``.venv-mcp1`` (``.ci/extra-mcp1``) and skip elsewhere. ``mcp`` 1.x sends no trace
context; in traced runs runnertrace makes its ``ClientSession`` carry the current
span's in ``params._meta`` (``tracing.mcp_client``). The server
(``tests/mcp_server_process.py``: ``mcp`` 2's low-level ``Server``, traced with
``trace_server``, exporting by OTLP to a loopback receiver) needs ``mcp`` 2, so it
runs on another interpreter (``tests.mcp_checks.mcp2_python``). The models are the
frameworks' offline ones (``ScriptedChatModel``, ``ScriptedModel``).

Per framework's MCP path, over stdio and streamable HTTP, in run and stream mode:

* the MCP tool is in every chat span's ``gen_ai.tool.definitions``;
* one ``execute_tool`` span for the call, with ``mcp.method.name``;
* the carrier names that span, and the server's ``tools/call`` span is its child;
* the call is told once: no other tool span of ours, one ``tools/call`` on the
  server, and every request of the server's in our trace hangs under our span.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

REASON = (
    "langchain-mcp-adapters and smolagents[mcp] pin mcp<2; they run in a venv of "
    "their own (.ci/extra-mcp1)"
)
pytest.importorskip("langchain_mcp_adapters", reason=REASON)
pytest.importorskip("mcpadapt", reason=REASON)

from langchain_core.messages import AIMessage  # noqa: E402
from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from smolagents import MCPClient, ToolCallingAgent, ToolCollection  # noqa: E402
from smolagents.monitoring import LogLevel  # noqa: E402
from tests.fidelity_helpers import MODES, attrs, chat_spans, run  # noqa: E402
from tests.loopback_process import child_env  # noqa: E402
from tests.mcp_checks import (  # noqa: E402
    SERVER,
    HttpServer,
    check_the_server_saw,
    hexid,
    mcp2_python,
)
from tests.otlp_receiver import OtlpReceiver  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.runners.langgraph import LangGraphRunner  # noqa: E402
from runnertrace.runners.langgraph.testing import ScriptedChatModel  # noqa: E402
from runnertrace.runners.smolagents import SmolagentsRunner  # noqa: E402
from runnertrace.runners.smolagents.testing import ScriptedModel, calls  # noqa: E402
from runnertrace.testing import CapturedSpans, capture_spans  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    # create_react_agent's move to langchain.agents (langchain itself is not installed)
    "ignore::DeprecationWarning",
)

TRANSPORTS = ["stdio", "http"]


@dataclass
class Server:
    """Where the framework finds the MCP server: a command it starts (stdio), or the
    URL of one the test started (streamable HTTP)."""

    transport: str
    python: str = ""
    args: list[str] | None = None
    url: str = ""

    def stdio(self) -> StdioServerParameters:
        return StdioServerParameters(command=self.python, args=self.args or [], env=child_env())


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(params=TRANSPORTS)
def server(request: pytest.FixtureRequest, receiver: OtlpReceiver) -> Iterator[Server]:
    python = mcp2_python()
    if request.param == "stdio":
        yield Server("stdio", python, [str(SERVER), "lowlevel", "stdio", receiver.traces_url])
        return
    process = HttpServer("lowlevel", receiver.traces_url, python=python)
    try:
        yield Server("http", url=process.url)
    finally:
        process.stop()


def tool_spans(captured: CapturedSpans) -> list[ReadableSpan]:
    return [s for s in captured.spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]


def check_the_run(captured: CapturedSpans, receiver: OtlpReceiver, result_text: str) -> None:
    """What every MCP path must show (see the module docstring); ``result_text`` is the
    server's answer as the tool span recorded it."""
    for chat in chat_spans(captured):
        listed = {t["name"]: t for t in json.loads(attrs(chat)["gen_ai.tool.definitions"])}
        assert listed["add"]["description"] == "Adds two numbers."
        assert set(listed["add"]["parameters"]["properties"]) == {"a", "b"}
    assert len(chat_spans(captured)) == 2
    (tool_span,) = tool_spans(captured)
    assert tool_span.name == "execute_tool add"
    assert attrs(tool_span)["mcp.method.name"] == "tools/call"
    check_the_server_saw(tool_span, receiver, result_text)
    # Told once, and nothing of the server's in our trace hangs elsewhere: what the
    # call's own session sends from inside the tool (initialize, tools/list) is under it.
    trace_id = hexid(tool_span.context.trace_id, 32)
    ours = [s for s in receiver.spans if s.trace_id == trace_id]
    assert [s.attributes.get("mcp.method.name") for s in ours].count("tools/call") == 1
    assert {s.parent_span_id for s in ours} == {hexid(tool_span.context.span_id, 16)}


# -- LangGraph: langchain-mcp-adapters ------------------------------------------------------------
def connection(server: Server) -> dict[str, Any]:
    """The server as a ``MultiServerMCPClient`` connection."""
    if server.transport == "stdio":
        return {
            "transport": "stdio",
            "command": server.python,
            "args": server.args,
            "env": child_env(),
        }
    return {"transport": "streamable_http", "url": server.url}


def langgraph_agent(tools: list[Any]) -> Agent:
    model = ScriptedChatModel(
        responses=[
            AIMessage(
                content="", tool_calls=[{"name": "add", "args": {"a": 2, "b": 40}, "id": "c1"}]
            ),
            AIMessage(content="The sum is 42."),
        ]
    )
    graph = create_react_agent(model, tools, name="mcp-user")
    return Agent("mcp-user", TracingRunner(LangGraphRunner(), capture_content=True), graph)


def langgraph_result(captured: CapturedSpans) -> str:
    """The server's text: LangChain records an MCP tool's content as content blocks."""
    (tool_span,) = tool_spans(captured)
    (block,) = json.loads(attrs(tool_span)["gen_ai.tool.call.result"])
    return str(block["text"])


@pytest.mark.parametrize("mode", MODES)
async def test_langgraph_multi_server_client_tools(
    receiver: OtlpReceiver, server: Server, mode: str
) -> None:
    """``get_tools()``: each call opens a session of its own, inside the tool."""
    client = MultiServerMCPClient({"adder": connection(server)})
    agent = langgraph_agent(await client.get_tools())
    with capture_spans(deterministic=False) as captured:
        await run(agent, mode, prompt="2 + 40?")
    check_the_run(captured, receiver, langgraph_result(captured))


@pytest.mark.parametrize("mode", MODES)
async def test_langgraph_tools_of_an_open_session(receiver: OtlpReceiver, mode: str) -> None:
    """``load_mcp_tools(session)``: the calls go through a session opened before the run
    (its initialize and tools/list are outside our trace, its tools/call inside)."""
    python = mcp2_python()
    server = Server("stdio", python, [str(SERVER), "lowlevel", "stdio", receiver.traces_url])
    client = MultiServerMCPClient({"adder": connection(server)})
    async with client.session("adder") as session:
        agent = langgraph_agent(await load_mcp_tools(session))
        with capture_spans(deterministic=False) as captured:
            await run(agent, mode, prompt="2 + 40?")
    check_the_run(captured, receiver, langgraph_result(captured))


# -- smolagents: ToolCollection.from_mcp and MCPClient (mcpadapt) ---------------------------------
def smolagents_parameters(server: Server) -> Any:
    if server.transport == "stdio":
        return server.stdio()
    return {"url": server.url, "transport": "streamable-http"}


@asynccontextmanager
async def tool_collection(server: Server) -> AsyncIterator[list[Any]]:
    with ToolCollection.from_mcp(
        smolagents_parameters(server), trust_remote_code=True, structured_output=False
    ) as collection:
        yield list(collection.tools)


@asynccontextmanager
async def mcp_client(server: Server) -> AsyncIterator[list[Any]]:
    # A wider request timeout than mcpadapt's 5 s: the server's interpreter may start
    # slowly on a loaded machine (a bound, not a measurement).
    with MCPClient(
        smolagents_parameters(server),
        adapter_kwargs={"client_session_timeout_seconds": 30.0},
        structured_output=False,
    ) as tools:
        yield list(tools)


SMOLAGENTS_PATHS: dict[str, Callable[[Server], AbstractAsyncContextManager[list[Any]]]] = {
    "ToolCollection.from_mcp": tool_collection,
    "MCPClient": mcp_client,
}


@pytest.mark.parametrize("path", list(SMOLAGENTS_PATHS))
@pytest.mark.parametrize("mode", MODES)
async def test_smolagents_mcp_tools(
    receiver: OtlpReceiver, server: Server, mode: str, path: str
) -> None:
    """mcpadapt keeps one session on a loop of its own, in another thread; each call
    is handed to it from the tool (the context goes with it)."""
    async with SMOLAGENTS_PATHS[path](server) as tools:
        model = ScriptedModel(
            [calls(("add", {"a": 2, "b": 40})), calls(("final_answer", {"answer": "42"}))]
        )
        native = ToolCallingAgent(
            tools=tools, model=model, name="mcp_user", verbosity_level=LogLevel.OFF
        )
        agent = Agent("mcp_user", TracingRunner(SmolagentsRunner(), capture_content=True), native)
        with capture_spans(deterministic=False) as captured:
            await run(agent, mode, prompt="2 + 40?")
    (tool_span,) = tool_spans(captured)
    check_the_run(captured, receiver, str(attrs(tool_span)["gen_ai.tool.call.result"]))
