"""``AgentService`` and its HTTP surface: REST run, SSE stream, post-hooks, errors, the trace.

In process through ``stream_multi``/``run_multi``, and over HTTP through the
Starlette app (httpx's ASGI transport: the same task, so the captured spans are
the test's). The service span wraps the runtime's run and joins the caller's
``traceparent``; a bad one is a new trace with one debug line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from runnertrace.core import PostHook, Runtime
from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyText, AgentRequestText
from runnertrace.runners.native import Agent, LlmRequest, NativeModule, ScriptedLlm, calculator
from runnertrace.serve import AgentService, ServiceClient, create_app
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing import traced
from runnertrace.tracing.config import Settings

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
QUESTION = "What is 1234 * 5678, plus 17?"
ANSWER = "The answer is 7006669."


class DropToolArgs(PostHook):
    """Drops every ``tool_call_args`` event and upper-cases text deltas."""

    async def on_stream_event(self, session: Any, agent: Any, event: Any) -> Any:
        if event.type == "tool_call_args":
            return None
        if event.type == "text_delta":
            return event.model_copy(update={"delta": event.delta.upper()})
        return event


def failing(request: LlmRequest) -> Any:
    raise RuntimeError("the model is down")


def make_runtime(*, hooks: bool = False, fail: bool = False) -> Runtime:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    llm = ScriptedLlm(turns=[failing]) if fail else ScriptedLlm()
    module = NativeModule([Agent(llm, tools=[calculator], name="math")], runtime=runtime)
    agent = runtime.agents().get("math")
    agent.runner = traced(agent.runner)
    if hooks:
        module.post_hook(agent, DropToolArgs())
    return runtime


def one(captured: CapturedSpans, name: str) -> ReadableSpan:
    found = captured.by_name(name)
    assert len(found) == 1, captured.names()
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


# -- in process ---------------------------------------------------------------------------------
async def test_stream_multi_chunks_after_post_hooks_delta_only_for_text() -> None:
    service = AgentService(make_runtime(hooks=True)).select("math", "s-1")
    with capture_spans():
        chunks = [c async for c in service.stream_multi([AgentRequestText(prompt=QUESTION)])]
    types = [c.event.type if c.event else None for c in chunks]
    assert "tool_call_args" not in types
    assert "tool_call_start" in types
    assert chunks[-1].done and chunks[-1].event is None and chunks[-1].error is None
    assert all(c.done is False for c in chunks[:-1])
    assert {c.session_id for c in chunks} == {"s-1"}
    assert all((c.delta is not None) == (t == "text_delta") for c, t in zip(chunks, types))
    assert "".join(c.delta for c in chunks if c.delta) == ANSWER.upper()


async def test_stream_multi_failure_is_the_last_chunk_and_an_error_span() -> None:
    service = AgentService(make_runtime(fail=True)).select("math", "s-1")
    with capture_spans() as captured:
        chunks = [c async for c in service.stream_multi([AgentRequestText(prompt=QUESTION)])]
    assert chunks[-1].done is True
    assert chunks[-1].error == "RuntimeError: the model is down"
    assert [c for c in chunks if c.error] == [chunks[-1]]
    span = one(captured, "agent_service stream")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "RuntimeError"


@pytest.mark.parametrize("operation", ["run", "stream"])
async def test_the_service_span_wraps_the_run_and_joins_the_carrier(operation: str) -> None:
    service = AgentService(make_runtime()).select("math", "s-1")
    carrier = {"traceparent": TRACEPARENT}
    requests = [AgentRequestText(prompt=QUESTION)]
    with capture_spans() as captured:
        if operation == "run":
            reply = await service.run_multi(requests, carrier=carrier)
            assert str(reply) == ANSWER
        else:
            [c async for c in service.stream_multi(requests, carrier=carrier)]
    span = one(captured, f"agent_service {operation}")
    assert span.kind is SpanKind.INTERNAL
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert parent_of(span) == int(SPAN_ID, 16)
    assert parent_of(one(captured, "invoke_agent math")) == span.context.span_id
    assert span.attributes["runnertrace.service.operation"] == operation
    assert span.attributes["gen_ai.conversation.id"] == "s-1"
    assert {s.context.trace_id for s in captured.spans} == {int(TRACE_ID, 16)}


async def test_select_needs_a_name_when_several_agents_are_registered() -> None:
    runtime = make_runtime()
    NativeModule([Agent(ScriptedLlm(), name="other")], runtime=runtime)
    with pytest.raises(KeyError, match="math, other"):
        AgentService(runtime).select()
    assert AgentService(runtime).select("other").agent.name == "other"


# -- over HTTP ----------------------------------------------------------------------------------
def client_for(runtime: Runtime) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(runtime)), base_url="http://service"
    )


def sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


@pytest.mark.parametrize("route", ["run", "stream"])
async def test_http_joins_the_traceparent_and_honours_the_baggage(route: str) -> None:
    headers = {"traceparent": TRACEPARENT, "baggage": "session.id=conv-9,user.id=alice"}
    async with client_for(make_runtime()) as http:
        with capture_spans() as captured:
            response = await http.post(f"/{route}", json={"prompt": QUESTION}, headers=headers)
    assert response.status_code == 200
    if route == "run":
        assert response.json() == {
            "session_id": "conv-9",
            "reply": {"type": "text", "text": ANSWER, "prompt": QUESTION},
        }
    else:
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = sse(response.text)
        assert "".join(c.get("delta", "") for c in chunks) == ANSWER
        assert chunks[-1] == {"done": True, "session_id": "conv-9"}
    span = one(captured, f"POST /{route}")
    assert span.kind is SpanKind.SERVER
    assert parent_of(span) == int(SPAN_ID, 16)
    assert span.attributes["http.route"] == f"/{route}"
    assert span.attributes["http.response.status_code"] == 200
    run = one(captured, "invoke_agent math")
    assert parent_of(run) == span.context.span_id
    assert run.attributes["gen_ai.conversation.id"] == "conv-9"
    assert {s.attributes.get("user.id") for s in captured.spans} == {"alice"}


@pytest.mark.parametrize("route", ["run", "stream"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"traceparent": "00-zz-yy-01"}, {"traceparent": f"00-{'0' * 32}-{SPAN_ID}-01"}],
    ids=["none", "garbage", "zeros"],
)
async def test_http_bad_or_missing_traceparent_is_a_new_trace_and_one_debug_line(
    route: str, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with client_for(make_runtime()) as http:
        with caplog.at_level(logging.DEBUG, logger="runnertrace"), capture_spans() as captured:
            response = await http.post(f"/{route}", json={"prompt": QUESTION}, headers=headers)
    assert response.status_code == 200
    span = one(captured, f"POST /{route}")
    assert span.parent is None
    assert parent_of(one(captured, "invoke_agent math")) == span.context.span_id
    lines = [r for r in caplog.records if r.name == "runnertrace"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.DEBUG


async def test_http_stream_applies_post_hooks_and_sends_errors_as_chunks() -> None:
    async with client_for(make_runtime(hooks=True)) as http:
        with capture_spans():
            response = await http.post("/stream", json={"prompt": QUESTION})
    chunks = sse(response.text)
    assert "tool_call_args" not in {c.get("event", {}).get("type") for c in chunks}
    assert "".join(c.get("delta", "") for c in chunks) == ANSWER.upper()

    async with client_for(make_runtime(fail=True)) as http:
        with capture_spans() as captured:
            failed = await http.post("/stream", json={"prompt": QUESTION, "session_id": "x"})
    assert failed.status_code == 200
    last = sse(failed.text)[-1]
    assert last == {"done": True, "error": "RuntimeError: the model is down", "session_id": "x"}
    span = one(captured, "POST /stream")
    assert span.status.status_code is StatusCode.ERROR


async def test_http_run_failure_is_a_500_with_the_error() -> None:
    async with client_for(make_runtime(fail=True)) as http:
        with capture_spans() as captured:
            response = await http.post("/run", json={"prompt": QUESTION, "session_id": "x"})
    assert response.status_code == 500
    assert response.json() == {"error": "RuntimeError: the model is down", "session_id": "x"}
    span = one(captured, "POST /run")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["http.response.status_code"] == 500


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 400),
        ({"prompt": 3}, 400),
        ({"prompt": "hi", "nope": 1}, 400),
        ({"agent": "x", "prompt": "hi"}, 404),
    ],
)
async def test_http_rejects_bad_bodies_and_unknown_agents(
    body: dict[str, Any], status: int
) -> None:
    async with client_for(make_runtime()) as http:
        response = await http.post("/run", json=body)
    assert response.status_code == status
    assert "error" in response.json()


async def test_the_client_runs_streams_and_keeps_the_session() -> None:
    runtime = make_runtime()
    async with client_for(runtime) as http, ServiceClient("http://service", http=http) as client:
        with capture_spans() as captured:
            outer = captured.provider.get_tracer("app").start_span("caller")
            with trace.use_span(outer, end_on_exit=True):
                reply = await client.run(QUESTION)
                chunks = [c async for c in client.stream(QUESTION)]
    assert isinstance(reply, AgentReplyText) and reply.text == ANSWER
    assert {type(c.event) for c in chunks if c.event} >= {ev.TextDelta, ev.ToolCallStart}
    assert "".join(c.delta or "" for c in chunks) == ANSWER
    assert chunks[-1].done
    # Both calls in one session (the client keeps it), both under the caller's span.
    assert {
        s.attributes["gen_ai.conversation.id"] for s in captured.by_name("invoke_agent math")
    } == {client.session_id}
    for name in ("POST /run", "POST /stream"):
        assert parent_of(one(captured, name)) == outer.get_span_context().span_id
