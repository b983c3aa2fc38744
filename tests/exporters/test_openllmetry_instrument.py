"""``trace.openllmetry.instrument``: OpenLLMetry's own instrumentors, opted into, nest under ours.

traceloop-sdk brings the instrumentors; it lives in a venv of its own
(``.ci/extra-openllmetry``), so the main suite skips this module. The model is an
OpenAI-compatible server on 127.0.0.1, driven by the native runner's
``OpenAICompatibleLlm`` through the real ``openai`` client, which OpenLLMetry's
OpenAI instrumentor patches.
"""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.instrumentation.openai")

from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply
from tests.otlp_fixtures import (  # noqa: F401 - fixtures
    make_receiver_fixture,
    receiver_fixture,
    trace_config,
)
from tests.otlp_receiver import OtlpReceiver

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, calculator
from runnertrace.runners.native.openai_compat import OpenAICompatibleLlm
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.setup import get_tracing_setup


async def test_openai_calls_are_instrumented_under_our_chat_spans(receiver: OtlpReceiver) -> None:
    config = trace_config("openllmetry", {"openllmetry": receiver})
    config.openllmetry.instrument = ["openai"]  # type: ignore[attr-defined]
    script = [
        Reply(tool_calls=[FakeToolCall("call_1", "calculator", {"expression": "6 * 7"})]),
        Reply(text="42."),
    ]
    setup = get_tracing_setup(config)
    try:
        with FakeOpenAIServer(script) as server:
            llm = OpenAICompatibleLlm(server.model, base_url=server.base_url, api_key="sk-test")
            runner = TracingRunner(NativeRunner(), settings=config)
            agent = CoreAgent("math", runner, Agent(llm, tools=[calculator], name="math"))
            reply = await runner.run(agent, Session("s"), [AgentRequestText(prompt="6 * 7?")])
        assert "42" in str(reply)
        assert setup.flush()
    finally:
        setup.shutdown()  # un-instruments the openai client again

    chats = [s for s in receiver.spans if s.attributes.get("runnertrace.span.type") == "message"]
    openai_spans = [
        s for s in receiver.spans if s.scope.startswith("opentelemetry.instrumentation")
    ]
    assert len(chats) == 2 and len(openai_spans) == 2, sorted(s.name for s in receiver.spans)
    # Each HTTP-level call of the instrumentor sits under the chat span that made it.
    assert {s.parent_span_id for s in openai_spans} == {c.span_id for c in chats}
    assert {s.trace_id for s in receiver.spans} == {chats[0].trace_id}
