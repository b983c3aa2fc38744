"""The contexts our spans are made current in keep the caller's context values.

A caller that sets OTel baggage (a tenant, a request id) before it starts a run expects
to read it in the tools the run calls, and a baggage span processor expects to find it
on every span's parent context. The context a scope attaches is ours to build: it is
the context current where the scope is entered (whatever the framework set there
holds inside too), with our span set and with the run caller's values that context
lacks, as on a thread the framework started with an empty context (a worker thread
here, as a framework's own thread pool does).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry.context import Context, attach, create_key, detach, get_value, set_value
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from tests.tracing_helpers import ForeignAgent, ForeignSession

from runnertrace import TracingRunner
from runnertrace.core.models import AgentReplyText
from runnertrace.core.observer import claim_observer, stream_observer
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.testing import CapturedSpans

_MARK = create_key("runnertrace-test-caller-mark")  # a context value that is not baggage
_FRAMEWORK = create_key("runnertrace-test-framework-mark")  # one the framework sets


class BaggageSeen(SpanProcessor):
    """What a baggage span processor would copy: each span's parent-context baggage."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, object]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.seen[span.name] = dict(baggage.get_all(parent_context))

    def on_end(self, span: ReadableSpan) -> None:
        pass


class ThreadedToolRunner:
    """A runner of ours (on the builder) whose framework makes the model request and
    runs the tool on a thread of its own, which starts with an empty context: their
    scopes are entered there."""

    framework = "threaded"

    def __init__(self, captured: CapturedSpans) -> None:
        self.captured = captured
        self.inside: dict[str, Any] = {}

    def _worker(self, builder: EventBuilder, message: str) -> None:
        """The framework's worker thread: it sets a context value of its own, then makes
        the model request and runs the tool in their scopes."""
        token = attach(set_value(_FRAMEWORK, "worker"))
        try:
            with builder.model_scope(message):
                self.inside["model"] = self._seen()
            with builder.tool_scope("c1"):
                self.inside["tool"] = self._seen()
                tracer = self.captured.provider.get_tracer("user-code")
                with tracer.start_as_current_span("db.query"):
                    pass
        finally:
            detach(token)

    def _seen(self) -> tuple[Any, ...]:
        span = trace.get_current_span().get_span_context()
        return (span, baggage.get_baggage("tenant"), get_value(_MARK), get_value(_FRAMEWORK))

    def _steps(self, builder: EventBuilder) -> None:
        builder.step_start("plan", 0)
        message = builder.message_start(model="fake")
        # A reasoning block: the message's span is a parent before its scope is entered.
        builder.reasoning("hmm", message)
        builder.tool_call('{"q": 1}', tool_call_id="c1", name="lookup", index=0)
        worker = threading.Thread(target=self._worker, args=(builder, message))
        worker.start()
        worker.join()
        builder.message_end(finish_reason="tool_calls")
        builder.tool_result("c1", "found")
        builder.step_end("plan", 0)

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        with claim_observer() as observer:
            self._steps(EventBuilder(observer))
        return AgentReplyText(text="done", prompt="go")

    async def stream(self, agent: Any, session: Any, requests: Any) -> AsyncIterator[Any]:
        observer = stream_observer()
        builder = EventBuilder(observer, queue=True)
        self._steps(builder)
        for event in builder.drain():
            yield event
            await asyncio.sleep(0)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_scopes_on_a_framework_thread_keep_the_callers_and_the_frameworks_values(
    mode: str, captured_spans: CapturedSpans
) -> None:
    seen = BaggageSeen()
    captured_spans.provider.add_span_processor(seen)
    base = ThreadedToolRunner(captured_spans)
    runner = TracingRunner(base)
    token = attach(set_value(_MARK, "caller", baggage.set_baggage("tenant", "acme")))
    try:
        if mode == "run":
            await runner.run(ForeignAgent(), ForeignSession(), [])
        else:
            async for _ in runner.stream(ForeignAgent(), ForeignSession(), []):
                pass
    finally:
        detach(token)
    (tool_span,) = captured_spans.by_name("execute_tool lookup")
    (chat_span,) = captured_spans.by_name("chat fake")
    # Each scope made our span current there, with the caller's values restored and the
    # framework's own value kept.
    assert base.inside == {
        "model": (chat_span.context, "acme", "caller", "worker"),
        "tool": (tool_span.context, "acme", "caller", "worker"),
    }
    # Every span started under one of ours finds the caller's baggage on its parent
    # context: the user's span in the tool, and each of ours.
    names = ["invoke_agent foreign", "agent_step plan", "chat fake", "reasoning"]
    names += ["execute_tool lookup", "db.query"]
    assert {name: seen.seen[name] for name in names} == {name: {"tenant": "acme"} for name in names}
