"""CrewAI's MCP tools (``crewai.mcp``) against a real server in another process.

CrewAI pins ``mcp<2``, whose client sends no trace context: in traced runs
runnertrace makes its ``ClientSession`` carry the current span's in
``params._meta`` (``tracing.mcp``). The server (``tests/mcp_server_process.py``:
``mcp`` 2's low-level ``Server``, traced with ``trace_server``, exporting by OTLP to
a loopback receiver) needs ``mcp`` 2, so it runs on another interpreter: the
``MCP2_PYTHON`` one (``.ci/extra-crewai`` sets it to the main venv's),
else the repository's ``.venv``. The model is ``ScriptedLLM``. Per transport
(stdio; streamable HTTP, where CrewAI's own call fails, see ``HTTP``) and mode:

* the MCP tool is in each chat span's ``gen_ai.tool.definitions``;
* one ``execute_tool`` span for the call, with ``mcp.method.name``;
* the carrier names that span, and the server's ``tools/call`` span is its child;
* every request the server got (CrewAI's discovery session's, and the call's own
  session's ``initialize`` and ``tools/list``) is in our trace, under one of our spans.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
pytest.importorskip("crewai", reason="the crewai extra lives in its own venv (.ci/extra-crewai)")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from crewai import Agent as CrewAgent  # noqa: E402
from crewai.mcp import MCPServerHTTP, MCPServerStdio  # noqa: E402
from tests.fidelity_helpers import MODES, run  # noqa: E402
from tests.loopback_process import child_env  # noqa: E402
from tests.mcp_checks import (  # noqa: E402
    SERVER,
    HttpServer,
    check_the_server_saw,
    hexid,
    mcp2_python,
)
from tests.otlp_fixtures import wait_until  # noqa: E402
from tests.otlp_receiver import OtlpReceiver  # noqa: E402
from tests.runners.crewai.test_crewai import sandbox  # noqa: E402, F401 - autouse

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.runners.crewai import CrewAIRunner  # noqa: E402
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final  # noqa: E402
from runnertrace.testing import CapturedSpans, capture_spans  # noqa: E402


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


HTTP = pytest.param(
    "http",
    marks=pytest.mark.xfail(
        strict=True,
        reason="CrewAI 1.15.30: a tool call to a streamable-HTTP MCP server fails, traced or "
        "not ('Error during MCP client disconnect: no running event loop'); discovery works",
    ),
)


@pytest.fixture(params=["stdio", HTTP])
def server(request: pytest.FixtureRequest, receiver: OtlpReceiver) -> Iterator[Any]:
    """The agent's ``mcps`` entry: the server over stdio (CrewAI starts it), or over
    streamable HTTP (the test starts it)."""
    python = mcp2_python()
    if request.param == "stdio":
        yield MCPServerStdio(
            command=python,
            args=[str(SERVER), "lowlevel", "stdio", receiver.traces_url],
            env=child_env(),
        )
        return
    process = HttpServer("lowlevel", receiver.traces_url, python=python)
    try:
        yield MCPServerHTTP(url=process.url)
    finally:
        process.stop()


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def mcp_agent(server: Any) -> CrewAgent:
    """An agent whose one tool is the server's ``add``: the model asks for it by the
    name CrewAI gave it (the server's name, then the tool's), read off the executor."""

    def ask_for_add(_: Any) -> str:
        (add,) = agent.agent_executor.tools  # type: ignore[union-attr]
        return action(add.name, a=2, b=40)

    agent = CrewAgent(
        role="calc",
        goal="Answer arithmetic questions.",
        backstory="You are precise.",
        llm=ScriptedLLM([ask_for_add, final("42")]),
        mcps=[server],
    )
    return agent


@pytest.mark.parametrize("mode", MODES)
async def test_crewai_mcp_tool_call_is_one_span_and_the_server_joins_the_trace(
    receiver: OtlpReceiver, server: Any, mode: str
) -> None:
    native = mcp_agent(server)
    agent = Agent("calc", TracingRunner(CrewAIRunner(), capture_content=True), native)
    with capture_spans(deterministic=False) as captured:
        await run(agent, mode, prompt="2 + 40?")
    (tool_span,) = tool_spans(captured)
    name = attrs(tool_span)["gen_ai.tool.name"]
    assert tool_span.name == f"execute_tool {name}"
    assert attrs(tool_span)["mcp.method.name"] == "tools/call"
    chats = captured.by_name("chat scripted")
    assert len(chats) == 2
    for chat in chats:
        (listed,) = json.loads(attrs(chat)["gen_ai.tool.definitions"])
        assert listed["name"] == name
        assert listed["description"] == "Adds two numbers."
    check_the_server_saw(tool_span, receiver, attrs(tool_span)["gen_ai.tool.call.result"])
    # Two sessions: CrewAI's discovery (initialize, tools/list) and the call's own
    # (initialize, tools/call, and the tools/list mcp 1.x sends to check the result).
    assert wait_until(lambda: len(requests_served(receiver)) == 5, timeout_s=20)
    ours = {hexid(s.context.span_id, 16) for s in captured.spans}
    served = requests_served(receiver)
    assert sorted(s.attributes["mcp.method.name"] for s in served) == [
        "initialize",
        "initialize",
        "tools/call",
        "tools/list",
        "tools/list",
    ]
    assert {s.trace_id for s in served} == {hexid(tool_span.context.trace_id, 32)}
    assert {s.parent_span_id for s in served} <= ours


def tool_spans(captured: CapturedSpans) -> list[Any]:
    return [s for s in captured.spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]


def requests_served(receiver: OtlpReceiver) -> list[Any]:
    """The server's spans for requests (notifications carry no ``_meta`` context)."""
    return [
        s
        for s in receiver.spans
        if not str(s.attributes.get("mcp.method.name", "")).startswith("notifications/")
    ]
