"""The docs/phoenix.md recipe against a real Phoenix server (only where arize-phoenix is installed).

Phoenix is an optional, heavy dependency, so this one test skips itself, with
the reason shown, when the server package cannot be imported.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from tests.otlp_fixtures import ANSWER, clean_vendor_env_fixture, traced_run  # noqa: F401

from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.setup import get_tracing_setup

PROJECT = "runnertrace-recipe"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def phoenix_url(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip(
        "phoenix.server.main",
        reason="arize-phoenix is not installed (optional; pip install arize-phoenix to run the "
        "Phoenix recipe test)",
    )
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_WORKING_DIR": str(tmp_path),
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "phoenix.server.main", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        else:
            pytest.fail("Phoenix did not become healthy within 90 s")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def read_spans(url: str, expected: int) -> list[dict[str, object]]:
    """The project's spans over Phoenix's REST API, waiting (bounded) for ingestion."""
    spans: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(spans) < expected:
        response = requests.get(
            f"{url}/v1/projects/{PROJECT}/spans", params={"limit": 100}, timeout=5
        )
        if response.ok:
            spans = response.json()["data"]
        time.sleep(0.5)
    return spans


async def test_phoenix_recipe_shows_the_run_as_an_agent_tree(
    phoenix_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={PROJECT}")
    config = TraceConfig(type="otlp", otlp={"endpoint": f"{phoenix_url}/v1/traces"})
    assert await traced_run(config) == ANSWER
    assert get_tracing_setup(config).flush()
    spans = read_spans(phoenix_url, expected=9)
    names = sorted(str(s["name"]) for s in spans)
    assert names == sorted(
        ["invoke_agent math"]
        + ["agent_step math"] * 3
        + ["chat scripted-1"] * 3
        + ["execute_tool calculator"] * 2
    )
    kinds = {str(s["name"]): str(s.get("span_kind", "")).upper() for s in spans}
    assert kinds["invoke_agent math"] == "AGENT"
    assert kinds["agent_step math"] == "CHAIN"
    assert kinds["chat scripted-1"] == "LLM"
    assert kinds["execute_tool calculator"] == "TOOL"
