"""Fixtures the cross-process tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def http_server(request: pytest.FixtureRequest, receiver: Any) -> Iterator[Any]:
    """The MCP server over streamable HTTP, exporting to ``receiver``, for a test whose
    ``transport`` parameter is ``"http"``; ``None`` for any other transport."""
    if request.node.callspec.params["transport"] != "http":
        yield None
        return
    from tests.across.test_mcp_native import HttpServer  # needs mcp: imported when used

    server = HttpServer("lowlevel", receiver.traces_url)
    try:
        yield server
    finally:
        server.stop()
