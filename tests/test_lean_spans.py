"""The lean tracer exports exactly what the OTel SDK's tracer would.

Every traced scenario below runs twice, on two providers built the same way
(sequential ids, in-memory export): once through ``LeanTracer`` (what a
provider runnertrace owns gets) and once through the SDK's own tracer (what an
application's provider gets). The exported spans must be identical, field by
field, except for timestamps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from tests.tracing_helpers import (
    ForeignAgent,
    ForeignRunner,
    ForeignSession,
    OpenSpanTracker,
    scripted_events,
)

from runnertrace import TracingRunner
from runnertrace.core import events as ev
from runnertrace.core.config import TraceConfig
from runnertrace.testing import SequentialIdGenerator
from runnertrace.tracing.runner import _setup_override
from runnertrace.tracing.setup import TracingSetup
from runnertrace.tracing.spans import LeanSpan, LeanTracer, lean_tracer_for

REDACT = "runnertrace.tracing.content.redact_secrets_and_emails"


def _provider(**kwargs: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SequentialIdGenerator(), **kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextmanager
def _pipeline(lean: bool, **kwargs: Any) -> Iterator[tuple[InMemorySpanExporter, TracingSetup]]:
    provider, exporter = _provider(**kwargs)
    # owns_provider decides the tracer: True -> lean, False -> the SDK's own.
    setup = TracingSetup(provider, owns_provider=lean)
    assert isinstance(setup.tracer, LeanTracer) is lean
    token = _setup_override.set(setup)
    try:
        yield exporter, setup
    finally:
        _setup_override.reset(token)
        provider.shutdown()


_CLOCK_KEYS = {
    "gen_ai.response.time_to_first_chunk",
    "gen_ai.client.operation.time_to_first_chunk",
}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _describe(span: ReadableSpan) -> dict[str, Any]:
    """Everything an exporter reads from a span, except the clock."""
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time <= span.end_time
    return {
        "name": span.name,
        "kind": span.kind,
        "context": (
            span.context.trace_id,
            span.context.span_id,
            int(span.context.trace_flags),
            tuple(span.context.trace_state.items()),
        ),
        "parent": None if span.parent is None else (span.parent.trace_id, span.parent.span_id),
        "attributes": {
            k: "<clock>" if k in _CLOCK_KEYS else _plain(v)
            for k, v in (span.attributes or {}).items()
        },
        "attribute_order": list(span.attributes or {}),
        "dropped_attributes": span.dropped_attributes,
        "status": (span.status.status_code, span.status.description),
        "events": [
            (e.name, {k: _plain(v) for k, v in (e.attributes or {}).items()}) for e in span.events
        ],
        "dropped_events": span.dropped_events,
        "links": [(link.context.span_id, dict(link.attributes or {})) for link in span.links],
        "resource": dict(span.resource.attributes),
        "scope": (span.instrumentation_scope.name, span.instrumentation_scope.version)
        if span.instrumentation_scope
        else None,
    }


def _both(
    scenario: Callable[[], None], **provider_kwargs: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    results = []
    for lean in (True, False):
        with _pipeline(lean, **provider_kwargs) as (exporter, _):
            scenario()
            results.append([_describe(s) for s in exporter.get_finished_spans()])
    return results[0], results[1]


def _run(make: Callable[[], Any], mode: str = "run", **settings: Any) -> Callable[[], None]:
    """A scenario: one traced run of a fresh runner from ``make``."""

    def scenario() -> None:
        traced = TracingRunner(make(), TraceConfig(**settings))

        async def go() -> None:
            if mode == "run":
                await traced.run(ForeignAgent(), ForeignSession(), [])
            else:
                async for _ in traced.stream(ForeignAgent(), ForeignSession(), []):
                    pass

        try:
            asyncio.run(go())
        except RuntimeError as exc:
            assert str(exc) == "boom"

    return scenario


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"capture_content": True},
        {"capture_content": True, "deltas": "events"},
        {
            "capture_content": True,
            "redact": "runnertrace.tracing.content.redact_secrets_and_emails",
        },
        {"user_id": "u-7"},
    ],
    ids=["default", "content", "delta-events", "redacted", "user"],
)
def test_lean_and_sdk_tracers_export_identical_spans(mode: str, settings: dict[str, Any]) -> None:
    lean, sdk = _both(_run(ForeignRunner, mode, **settings))
    assert len(lean) == 7
    assert lean == sdk


@pytest.mark.parametrize("mode", ["run", "stream"])
def test_identical_on_failure_and_malformed_streams(mode: str) -> None:
    lean, sdk = _both(_run(lambda: ForeignRunner(fail_at=7), mode))
    assert lean == sdk
    run = next(s for s in lean if s["name"].startswith("invoke_agent"))
    assert run["status"][0] is StatusCode.ERROR
    assert [name for name, _ in run["events"]] == ["exception"]

    events = scripted_events()
    malformed = [
        events[3],
        *events[:2],
        events[1],
        ev.ToolCallResult(tool_call_id="nope", content="x"),
    ]
    lean, sdk = _both(_run(lambda: ForeignRunner(malformed), mode))
    assert lean == sdk


def test_identical_under_span_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    # A count limit below what our spans carry, and a value-length limit: the
    # lean tracer must drop and truncate exactly as the SDK's BoundedAttributes.
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "6")
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "5")
    monkeypatch.setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", "1")
    lean, sdk = _both(_run(ForeignRunner, "stream", capture_content=True, deltas="events"))
    assert lean == sdk
    assert all(len(s["attributes"]) <= 6 for s in lean)
    assert any(s["dropped_attributes"] > 0 for s in lean)
    assert any(s["dropped_events"] > 0 for s in lean)
    assert all(
        len(v) <= 5
        for s in lean
        for v in s["attributes"].values()
        if isinstance(v, str) and v != "<clock>"
    )


def test_identical_for_direct_api_use() -> None:
    """Code that finds our span as the current span uses the plain OTel API on it."""

    class Weird:
        def __str__(self) -> str:
            return "weird"

    def scenario() -> None:
        tracer = _setup_override.get().tracer  # type: ignore[union-attr]
        root = tracer.start_span("root", attributes={"a": 1, "seq": [1, 2], "bad": Weird()})  # type: ignore[dict-item]
        child = tracer.start_span(
            "child", context=trace_api.set_span_in_context(root), kind=SpanKind.CLIENT
        )
        child.set_attribute("a", "x")
        child.set_attributes({"b": True, "c": 1.5, "seq": ("x", "y")})
        child.set_attribute("a", "again")  # re-set: moves to the newest position
        child.add_event("note", {"k": "v", "n": [1, 2]})
        child.set_status(Status(StatusCode.OK))
        child.set_status(StatusCode.ERROR, "ignored: OK is final")
        child.update_name("child-renamed")
        child.add_link(root.get_span_context(), {"why": "test"})
        try:
            raise ValueError("bad input")
        except ValueError as exc:
            root.record_exception(exc, {"extra": 1})
        root.set_status(StatusCode.UNSET)
        root.set_status(StatusCode.ERROR, "failed")
        child.end()
        root.end()
        with tracer.start_as_current_span("current") as current:
            assert trace_api.get_current_span() is current

    lean, sdk = _both(scenario)
    for spans in (lean, sdk):
        root = next(s for s in spans if s["name"] == "root")
        stacktrace = root["events"][0][1]["exception.stacktrace"]
        root["events"][0][1]["exception.stacktrace"] = stacktrace.splitlines()[-1]
    assert lean == sdk
    child = next(s for s in lean if s["name"] == "child-renamed")
    assert child["attribute_order"][-1] == "a"
    assert child["status"] == (StatusCode.OK, None)


def test_ended_lean_span_is_frozen(caplog: pytest.LogCaptureFixture) -> None:
    with _pipeline(lean=True) as (exporter, setup):
        span = setup.tracer.start_span("s", attributes={"k": 1})
        assert isinstance(span, LeanSpan) and span.is_recording()
        span.end()
        caplog.set_level(logging.WARNING, logger="runnertrace")
        span.set_attribute("k", 2)
        span.add_event("late")
        span.set_status(StatusCode.ERROR)
        span.end()
        (exported,) = exporter.get_finished_spans()
    assert exported is span and not span.is_recording()
    assert dict(exported.attributes or {}) == {"k": 1}
    assert exported.events == () and exported.status.status_code is StatusCode.UNSET
    assert sum("ended span" in r.getMessage() for r in caplog.records) == 4


class _EndingTracker(OpenSpanTracker):
    """Also counts the SDK's ``_on_ending`` hook (called just before ``on_end``)."""

    def __init__(self) -> None:
        super().__init__()
        self.endings: list[str] = []

    def _on_ending(self, span: Any) -> None:
        assert span.context.span_id in self.open  # before on_end, as the SDK orders it
        self.endings.append(span.name)


def test_processors_see_every_lean_span_start_and_end() -> None:
    tracker = _EndingTracker()
    provider, exporter = _provider()
    provider.add_span_processor(tracker)
    setup = TracingSetup(provider, owns_provider=True)
    token = _setup_override.set(setup)
    try:
        _run(ForeignRunner, "stream")()
    finally:
        _setup_override.reset(token)
    assert tracker.started == len(exporter.get_finished_spans()) == 7
    assert tracker.open == {}
    assert sorted(tracker.endings) == sorted(s.name for s in exporter.get_finished_spans())


def test_a_processor_added_later_still_gets_its_ending_hook() -> None:
    """The "no processor has _on_ending" shortcut is per processor tuple, not for good."""
    provider, exporter = _provider()
    tracer = lean_tracer_for(provider, "t", "1")
    assert tracer is not None
    tracer.start_span("before").end()  # no _on_ending anywhere: the shortcut is taken
    assert tracer.without_ending is not None
    tracker = _EndingTracker()
    provider.add_span_processor(tracker)
    root = tracer.start_span("root")
    assert isinstance(root, LeanSpan)
    tracer.start_child("child", root, SpanKind.INTERNAL, {}, 1).end()
    root.end()
    assert tracker.endings == ["child", "root"]
    assert tracker.open == {}
    assert [s.name for s in exporter.get_finished_spans()] == ["before", "child", "root"]


def test_span_ids_from_the_default_generator_are_valid_and_distinct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = TracerProvider()  # the SDK's RandomIdGenerator
    tracer = lean_tracer_for(provider, "t", "1")
    assert tracer is not None
    root = tracer.start_span("root")
    assert isinstance(root, LeanSpan)
    ids = {
        tracer.start_child("c", root, SpanKind.INTERNAL, {}, 1).get_span_context().span_id
        for _ in range(2000)
    }
    assert len(ids) == 2000 and 0 not in ids
    # A draw of 0 (an invalid id) falls back to the generator, which redraws.
    monkeypatch.setattr(tracer, "quick_span_id", lambda bits: 0)
    monkeypatch.setattr(tracer, "new_span_id", lambda: 42)
    child = tracer.start_child("c", root, SpanKind.INTERNAL, {}, 1)
    assert child.get_span_context().span_id == 42 and child.get_span_context().is_valid


def test_unsampled_run_records_nothing_and_propagates_the_decision() -> None:
    sampler = ParentBased(TraceIdRatioBased(0.0))
    seen: list[Any] = []

    class Peeking(ForeignRunner):
        async def run(self, agent: Any, session: Any, requests: Any) -> Any:
            seen.append(trace_api.get_current_span().get_span_context())
            return await super().run(agent, session, requests)

    lean, sdk = _both(_run(Peeking), sampler=sampler)
    assert lean == sdk == []
    assert len(seen) == 2
    assert all(ctx.is_valid and not ctx.trace_flags.sampled for ctx in seen)


def test_random_trace_id_flag_matches_the_sdk() -> None:
    provider = TracerProvider()  # random ids: the W3C random-trace-id flag is set
    lean = lean_tracer_for(provider, "t", "1")
    assert lean is not None
    ours = lean.start_span("a")
    theirs = provider.get_tracer("t", "1").start_span("a")
    assert int(ours.get_span_context().trace_flags) == int(theirs.get_span_context().trace_flags)
    ours.end()
    theirs.end()


def test_lean_tracer_is_only_used_for_plain_providers() -> None:
    class CustomProvider(TracerProvider):
        pass

    assert lean_tracer_for(TracerProvider(), "t", "1") is not None
    assert lean_tracer_for(CustomProvider(), "t", "1") is None
    assert lean_tracer_for(trace_api.NoOpTracerProvider(), "t", "1") is None
    concurrent = TracerProvider(active_span_processor=ConcurrentMultiSpanProcessor())
    assert lean_tracer_for(concurrent, "t", "1") is None
    custom = ParentBased(TraceIdRatioBased(0.5), local_parent_sampled=TraceIdRatioBased(0.5))
    tracer = lean_tracer_for(TracerProvider(sampler=custom), "t", "1")
    assert tracer is not None and not tracer.trusting  # children go through the sampler


def test_fast_span_context_equals_the_api_constructor() -> None:
    from opentelemetry.trace import TraceFlags, TraceState

    from runnertrace.tracing.spans import _span_context

    state = TraceState([("vendor", "value")])
    for trace_id, span_id, flags in (
        (1, 2, TraceFlags(TraceFlags.SAMPLED)),
        ((1 << 128) - 1, (1 << 64) - 1, TraceFlags(TraceFlags.SAMPLED | 2)),
        (0x5B8EFFF798038103D269B633813FC60C, 0xEEE19B7EC3C1B174, TraceFlags(0)),
    ):
        fast = _span_context(trace_id, span_id, flags, state)
        real = trace_api.SpanContext(trace_id, span_id, False, flags, state)
        assert type(fast) is trace_api.SpanContext
        assert tuple(fast) == tuple(real)
        assert (fast.trace_id, fast.span_id, fast.is_remote) == (trace_id, span_id, False)
        assert fast.is_valid and fast.trace_flags == flags and fast.trace_state is state


def test_lean_child_spans_carry_the_parent_trace_and_a_fresh_valid_id() -> None:
    provider, exporter = _provider()
    tracer = lean_tracer_for(provider, "t", "1")
    assert tracer is not None
    root = tracer.start_span("root")
    assert isinstance(root, LeanSpan)
    child = tracer.start_child("child", root, SpanKind.CLIENT, {"k": "v"}, 5)
    child.end(9)
    root.end()
    exported = {s.name: s for s in exporter.get_finished_spans()}
    assert exported["child"].parent == root.get_span_context()
    context = exported["child"].context
    assert context is not None and context.is_valid
    assert context.trace_id == root.get_span_context().trace_id
    assert context.span_id not in (0, root.get_span_context().span_id)
    assert exported["child"].kind is SpanKind.CLIENT
    assert (exported["child"].start_time, exported["child"].end_time) == (5, 9)
    assert dict(exported["child"].attributes or {}) == {"k": "v"}
