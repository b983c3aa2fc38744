"""Spans come from the OTel SDK's own tracer, on every path.

runnertrace once had a lean span of its own for providers it built. It read
SDK private names and drifted from the SDK (span limits, link limits, new SDK
features). These tests pin the one path that replaced it: whether the provider
is ours or the application's, the spans are the SDK's, so the SDK's sampler,
span limits and processor hooks apply to them unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

from runnertrace import TracingRunner
from runnertrace.testing import SequentialIdGenerator
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.runner import _setup_override
from runnertrace.tracing.setup import TracingSetup


class Recording(SpanProcessor):
    """Remembers what the SDK hands a processor at start and at end."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        self.started.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


@contextmanager
def pipeline(
    owns: bool, **provider_kwargs: Any
) -> Iterator[tuple[InMemorySpanExporter, Recording]]:
    """A setup on a fresh SDK provider, as runnertrace builds it (``owns``) or an app's."""
    exporter, recording = InMemorySpanExporter(), Recording()
    provider = TracerProvider(id_generator=SequentialIdGenerator(), **provider_kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(recording)
    token = _setup_override.set(TracingSetup(provider, owns_provider=owns))
    try:
        yield exporter, recording
    finally:
        _setup_override.reset(token)
        provider.shutdown()


def run_once(runner: Any, mode: str = "run", **settings: Any) -> None:
    traced = TracingRunner(runner, TraceConfig(**settings))

    async def go() -> None:
        if mode == "run":
            await traced.run(ForeignAgent(), ForeignSession(), [])
        else:
            async for _ in traced.stream(ForeignAgent(), ForeignSession(), []):
                pass

    asyncio.run(go())


@pytest.mark.parametrize("owns", [True, False])
@pytest.mark.parametrize("mode", ["run", "stream"])
def test_every_span_is_the_sdks_own(owns: bool, mode: str) -> None:
    with pipeline(owns) as (exporter, recording):
        run_once(ForeignRunner(), mode)
    spans = exporter.get_finished_spans()
    assert len(spans) == 7
    assert recording.started and all(isinstance(s, SdkSpan) for s in recording.started)
    assert [s.context.span_id for s in recording.ended] == [s.context.span_id for s in spans]
    assert {s.instrumentation_scope.name for s in spans if s.instrumentation_scope} == {
        "runnertrace"
    }


def test_the_setup_uses_the_providers_own_tracer() -> None:
    for owns in (True, False):
        setup = TracingSetup(TracerProvider(), owns_provider=owns)
        assert type(setup.tracer) is Tracer


def test_sdk_span_limits_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    # The env is read when the provider is built, as for any SDK span.
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "3")
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    with pipeline(True) as (exporter, _):
        run_once(ForeignRunner())
    spans = exporter.get_finished_spans()
    assert spans and all(len(s.attributes or {}) <= 3 for s in spans)
    assert all(s.dropped_attributes > 0 for s in spans)
    strings = [v for s in spans for v in (s.attributes or {}).values() if isinstance(v, str)]
    assert strings and all(len(v) <= 4 for v in strings)


def test_sdk_link_limit_applies_to_spans_opened_in_a_traced_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user span made inside a traced run goes through the same SDK limits."""
    monkeypatch.setenv("OTEL_SPAN_LINK_COUNT_LIMIT", "1")
    links: list[Any] = []

    class Linking(ForeignRunner):
        async def run(self, agent: Any, session: Any, requests: Any) -> Any:
            current = trace_api.get_current_span().get_span_context()
            link = trace_api.Link(current)
            span = provider_tracer.start_span("user", links=[link, link, link])
            links.append((len(span.links), span.dropped_links))  # type: ignore[attr-defined]
            span.end()
            return await super().run(agent, session, requests)

    with pipeline(True) as (exporter, _):
        provider_tracer = _setup_override.get().tracer  # type: ignore[union-attr]
        run_once(Linking())
    assert links == [(1, 2)]
    assert "user" in {s.name for s in exporter.get_finished_spans()}


def test_unsampled_run_records_nothing_and_propagates_the_decision() -> None:
    seen: list[Any] = []

    class Peeking(ForeignRunner):
        async def run(self, agent: Any, session: Any, requests: Any) -> Any:
            seen.append(trace_api.get_current_span().get_span_context())
            return await super().run(agent, session, requests)

    with pipeline(True, sampler=ParentBased(TraceIdRatioBased(0.0))) as (exporter, recording):
        run_once(Peeking())
    assert exporter.get_finished_spans() == ()
    assert len(recording.started) == 0
    assert len(seen) == 1 and seen[0].is_valid and not seen[0].trace_flags.sampled
