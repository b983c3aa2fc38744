"""Incoming trace context: ``Runtime.run``/``stream`` join a W3C carrier's trace.

A valid ``traceparent`` makes the run span a child of the remote span, in both
modes; ``user.id`` in the baggage becomes the run's user; a bad or missing
carrier starts a new trace with one debug line and raises nothing; without a
carrier the current span stays the parent, as before.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.core.propagation import extract, inject
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing import traced
from runnertrace.tracing.config import Settings

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
QUESTION = "What is 1234 * 5678, plus 17?"


def make_runtime(mode: str = "sync") -> tuple[Runtime, Any]:
    runtime = Runtime(settings=Settings(trace={"enabled": False}, execution={"mode": mode}))
    NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
    agent = runtime.agents().get("math")
    agent.runner = traced(agent.runner)
    return runtime, agent


async def drive(runtime: Runtime, agent: Any, mode: str, carrier: Any) -> str:
    session = runtime.sessions().new("s-1")
    requests = [AgentRequestText(prompt=QUESTION)]
    if mode == "run":
        return str(await runtime.run(agent, session, requests, carrier=carrier))
    text = []
    async for chunk in runtime.stream(agent, session, requests, carrier=carrier):
        if chunk.delta:
            text.append(chunk.delta)
    return "".join(text)


def run_span(captured: CapturedSpans) -> ReadableSpan:
    (span,) = [s for s in captured.spans if s.name == "invoke_agent math"]
    return span


def hex_ids(span: ReadableSpan) -> tuple[str, str | None]:
    parent = span.parent
    return (
        format(span.context.trace_id, "032x"),
        format(parent.span_id, "016x") if parent is not None else None,
    )


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_run_joins_the_callers_trace(mode: str) -> None:
    runtime, agent = make_runtime()
    with capture_spans() as captured:
        answer = await drive(runtime, agent, mode, {"traceparent": TRACEPARENT})
    assert answer == "The answer is 7006669."
    assert hex_ids(run_span(captured)) == (TRACE_ID, SPAN_ID)
    # Every span of the run is in that trace, and only the run span has the remote parent.
    assert {format(s.context.trace_id, "032x") for s in captured.spans} == {TRACE_ID}
    remote_children = [s for s in captured.spans if s.parent is not None and s.parent.is_remote]
    assert [s.name for s in remote_children] == ["invoke_agent math"]


async def test_execution_mode_stream_carries_the_carrier_through_run() -> None:
    runtime, agent = make_runtime("stream")
    with capture_spans() as captured:
        reply = await runtime.run(
            agent,
            runtime.sessions().new("s-1"),
            [AgentRequestText(prompt=QUESTION)],
            carrier={"traceparent": TRACEPARENT},
        )
    assert str(reply) == "The answer is 7006669."
    assert hex_ids(run_span(captured)) == (TRACE_ID, SPAN_ID)
    assert run_span(captured).attributes["runnertrace.mode"] == "stream"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_baggage_user_becomes_the_runs_user(mode: str) -> None:
    runtime, agent = make_runtime()
    carrier = {"traceparent": TRACEPARENT, "baggage": "user.id=alice,session.id=conv-9"}
    with capture_spans() as captured:
        await drive(runtime, agent, mode, carrier)
    users = {s.attributes.get("user.id") for s in captured.spans}
    assert users == {"alice"}
    assert len(captured.spans) == 9
    # The traced runner registered on the agent is untouched for the next caller.
    with capture_spans() as again:
        await drive(runtime, agent, mode, None)
    assert {s.attributes.get("user.id") for s in again.spans} == {None}


def test_extract_reads_the_documented_baggage_keys() -> None:
    found = extract({"traceparent": TRACEPARENT, "baggage": "session.id=conv-9,user.id=alice"})
    assert (found.joins, found.session_id, found.user_id) == (True, "conv-9", "alice")
    conversation = extract({"baggage": "gen_ai.conversation.id=conv-7"})
    assert (conversation.joins, conversation.session_id, conversation.user_id) == (
        False,
        "conv-7",
        None,
    )
    # Header capitalisation does not matter (HTTP headers arrive in any case).
    assert extract({"Traceparent": TRACEPARENT}).joins


BAD_CARRIERS = [
    pytest.param({}, id="empty"),
    pytest.param({"traceparent": "not-a-traceparent"}, id="garbage"),
    pytest.param({"traceparent": f"00-{'0' * 32}-{SPAN_ID}-01"}, id="zero-trace-id"),
    pytest.param({"traceparent": f"00-{TRACE_ID}-{'0' * 16}-01"}, id="zero-span-id"),
    pytest.param({"traceparent": 12345}, id="not-a-string"),
    pytest.param({"tracestate": "congo=t61rcWkgMzE"}, id="tracestate-only"),
]


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("carrier", BAD_CARRIERS)
async def test_a_bad_or_missing_carrier_starts_a_new_trace_with_one_debug_line(
    mode: str, carrier: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    runtime, agent = make_runtime()
    with caplog.at_level(logging.DEBUG, logger="runnertrace"), capture_spans() as captured:
        answer = await drive(runtime, agent, mode, carrier)
    assert answer == "The answer is 7006669."
    span = run_span(captured)
    assert span.parent is None
    assert format(span.context.trace_id, "032x") != TRACE_ID
    lines = [r for r in caplog.records if r.name == "runnertrace"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.DEBUG
    assert "new trace" in lines[0].getMessage()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_without_a_carrier_the_current_span_stays_the_parent(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    runtime, agent = make_runtime()
    with caplog.at_level(logging.DEBUG, logger="runnertrace"), capture_spans() as captured:
        outer = captured.provider.get_tracer("app").start_span("request")
        with trace.use_span(outer, end_on_exit=True):
            await drive(runtime, agent, mode, None)
    span = run_span(captured)
    assert span.parent is not None and span.parent.span_id == outer.get_span_context().span_id
    assert [r for r in caplog.records if r.name == "runnertrace"] == []


async def test_a_valid_carrier_wins_over_the_current_span() -> None:
    runtime, agent = make_runtime()
    with capture_spans() as captured:
        outer = captured.provider.get_tracer("app").start_span("request")
        with trace.use_span(outer, end_on_exit=True):
            await drive(runtime, agent, "run", {"traceparent": TRACEPARENT})
    assert hex_ids(run_span(captured)) == (TRACE_ID, SPAN_ID)


async def test_an_abandoned_joined_stream_detaches_nothing_in_the_wrong_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime, agent = make_runtime()
    with caplog.at_level(logging.DEBUG), capture_spans() as captured:
        chunks = runtime.stream(
            agent,
            runtime.sessions().new("s-1"),
            [AgentRequestText(prompt=QUESTION)],
            carrier={"traceparent": TRACEPARENT},
        )
        first = await chunks.__anext__()
        await chunks.aclose()
        # After the stream, the caller's own context is as it was: no remote parent leaks.
        assert not trace.get_current_span().get_span_context().is_valid
    assert first.event is not None
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert run_span(captured).attributes.get("runnertrace.cancelled") is True


def test_inject_writes_the_current_span() -> None:
    provider = TracerProvider()
    span = provider.get_tracer("t").start_span("outgoing")
    with trace.use_span(span, end_on_exit=True):
        carrier = inject()
    context = span.get_span_context()
    version, trace_id, span_id, _flags = carrier["traceparent"].split("-")
    assert (version, trace_id, span_id) == (
        "00",
        format(context.trace_id, "032x"),
        format(context.span_id, "016x"),
    )
    assert extract(carrier).joins
