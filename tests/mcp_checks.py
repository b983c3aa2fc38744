"""What the MCP tests check across processes, for every client's test (any ``mcp``).

The server is ``tests/mcp_server_process.py`` (``mcp`` 2's servers traced with
``trace_server``), exporting by OTLP to the test's loopback receiver. Nothing here
imports ``mcp``: the CrewAI venv's tests (``mcp`` 1.x on the client side) use it too,
and start the server with another interpreter.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from tests.loopback_process import TESTS, ServerProcess, free_port
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

SERVER = TESTS / "mcp_server_process.py"


def mcp2_python() -> str:
    """The interpreter the server runs on, one with ``mcp`` 2 (the client under test may
    have 1.x): ``MCP2_PYTHON`` (the CI scripts set it to the main venv's), else the
    repository's ``.venv``; set but missing fails, neither skips."""
    given = os.environ.get("MCP2_PYTHON")
    if given:
        assert Path(given).is_file(), f"MCP2_PYTHON={given} is no interpreter"
        return given
    default = TESTS.parent / ".venv" / "bin" / "python"
    if not default.is_file():
        pytest.skip("no interpreter with mcp 2 for the server (MCP2_PYTHON)")
    return str(default)


class HttpServer(ServerProcess):
    """The MCP server over streamable HTTP, in a process the test starts and stops
    (run by ``python``: an interpreter with ``mcp`` 2)."""

    def __init__(self, kind: str, endpoint: str, python: str = sys.executable) -> None:
        port = free_port()
        super().__init__(SERVER.name, [kind, "http", endpoint, str(port)], port, python=python)
        self.url = f"http://127.0.0.1:{port}/mcp"


def hexid(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def server_spans(receiver: OtlpReceiver, method: str) -> list[ReceivedSpan]:
    return [s for s in receiver.spans if s.attributes.get("mcp.method.name") == method]


def check_the_server_saw(
    tool_span: ReadableSpan, receiver: OtlpReceiver, tool_result: str
) -> ReceivedSpan:
    """The carrier the server found in ``params._meta`` names ``tool_span``, and the
    server's span for the call is one, in our trace, under it; returns that span."""
    trace_id = hexid(tool_span.context.trace_id, 32)
    span_id = hexid(tool_span.context.span_id, 16)
    seen = json.loads(tool_result)
    assert seen["sum"] == 42
    assert seen["traceparent"].split("-")[1:3] == [trace_id, span_id]
    assert wait_until(lambda: len(server_spans(receiver, "tools/call")) >= 1, timeout_s=20)
    (call,) = server_spans(receiver, "tools/call")
    assert call.name == "tools/call add"
    assert (call.trace_id, call.parent_span_id) == (trace_id, span_id)
    return call
