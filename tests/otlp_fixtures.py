"""Fixtures and helpers for testing the network backends against :mod:`otlp_receiver`.

Import the fixtures into a test module (``from otlp_fixtures import receiver_fixture``;
they register as ``receiver`` and ``make_receiver``);
they live here rather than in the shared ``conftest.py``.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from otlp_receiver import Mode, OtlpReceiver
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.export import BoundedBatchSpanProcessor
from runnertrace.tracing.setup import get_tracing_setup

QUESTION = "What is 1234 * 5678, plus 17?"
ANSWER = "The answer is 7006669."
SESSION_ID = "session-42"  # contains "session" on purpose: Logfire's scrubber matches it
USER_ID = "user-7"

LANGFUSE_PUBLIC = "pk-lf-test"
LANGFUSE_SECRET = "sk-lf-very-secret"
LOGFIRE_TOKEN = "pylf_v1_us_0123456789abcdef"
TRACELOOP_KEY = "tl-very-secret"

# The spans of one native run: 1 run, 3 steps, 3 model calls, 2 tool calls.
NATIVE_SPAN_COUNTS = {
    "invoke_agent math": 1,
    "agent_step math": 3,
    "chat scripted-1": 3,
    "execute_tool calculator": 2,
}


@dataclass(frozen=True)
class Target:
    """How one backend is pointed at a receiver, and what it must send."""

    backend: str
    path: str
    auth: str | None

    def section(self, receiver: OtlpReceiver) -> dict[str, Any]:
        """The ``trace.<backend>`` section that points it at ``receiver``."""
        return {
            "otlp": {"endpoint": receiver.traces_url},
            "langfuse": {
                "host": receiver.url,
                "public_key": LANGFUSE_PUBLIC,
                "secret_key": LANGFUSE_SECRET,
            },
            "logfire": {"base_url": receiver.url, "token": LOGFIRE_TOKEN},
            "openllmetry": {"base_url": receiver.url, "api_key": TRACELOOP_KEY},
        }[self.backend]


_BASIC = base64.b64encode(f"{LANGFUSE_PUBLIC}:{LANGFUSE_SECRET}".encode()).decode()
TARGETS: dict[str, Target] = {
    "otlp": Target("otlp", "/v1/traces", None),
    "langfuse": Target("langfuse", "/api/public/otel/v1/traces", f"Basic {_BASIC}"),
    "logfire": Target("logfire", "/v1/traces", LOGFIRE_TOKEN),
    "openllmetry": Target("openllmetry", "/v1/traces", f"Bearer {TRACELOOP_KEY}"),
}
SECRETS = (LANGFUSE_SECRET, LOGFIRE_TOKEN, TRACELOOP_KEY)


def trace_config(
    backends: str | list[str], receivers: dict[str, OtlpReceiver], **extra: Any
) -> TraceConfig:
    """A trace config sending to ``receivers`` (backend name -> its receiver)."""
    names = [backends] if isinstance(backends, str) else backends
    sections = {name: TARGETS[name].section(receivers[name]) for name in names}
    return TraceConfig(type=backends, user_id=USER_ID, **sections, **extra)


async def traced_run(
    config: TraceConfig, mode: str = "run", *, session_id: str = SESSION_ID
) -> str:
    """One traced native run (run or stream mode); returns the answer text."""
    runner = TracingRunner(NativeRunner(), settings=config)
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    requests = [AgentRequestText(prompt=QUESTION)]
    if mode == "run":
        reply = await runner.run(agent, Session(session_id), requests)
        return str(reply)
    events = [e async for e in runner.stream(agent, Session(session_id), requests)]
    return "".join(
        getattr(e, "delta", "") for e in events if getattr(e, "type", "") == "text_delta"
    )


def batch_processors(config: TraceConfig) -> dict[str, BoundedBatchSpanProcessor]:
    """Our batch processors in ``config``'s pipeline, by backend name."""
    return {
        p.name: p
        for p in get_tracing_setup(config).processors
        if isinstance(p, BoundedBatchSpanProcessor)
    }


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until true or ``timeout_s`` passes (a bound, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


# Vendor and OTel settings the shared conftest does not clear; any of them in the
# developer's environment would redirect or alter what these tests send.
_VENDOR_ENV = (
    "LANGFUSE_BASE_URL",
    "LOGFIRE_BASE_URL",
    "TRACELOOP_API_KEY",
    "TRACELOOP_BASE_URL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture(name="clean_vendor_env", autouse=True)
def clean_vendor_env_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Autouse in every module that imports it: no stray vendor/OTel env var."""
    for name in _VENDOR_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(name="make_receiver")
def make_receiver_fixture() -> Iterator[Callable[..., OtlpReceiver]]:
    """A factory of started receivers (any mode); all are stopped after the test."""
    started: list[OtlpReceiver] = []

    def make(mode: Mode = "healthy", **kwargs: Any) -> OtlpReceiver:
        receiver = OtlpReceiver(mode, **kwargs).start()
        started.append(receiver)
        return receiver

    yield make
    for receiver in started:
        receiver.stop()


@pytest.fixture(name="receiver")
def receiver_fixture(make_receiver: Callable[..., OtlpReceiver]) -> OtlpReceiver:
    """One healthy receiver."""
    return make_receiver()
