"""The fast OTel context switches behave exactly like the API's functions."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.context.context import _RuntimeContext
from opentelemetry.sdk.trace import TracerProvider

from runnertrace.tracing import otelctx


def test_default_runtime_uses_the_context_variable_directly() -> None:
    runtime: Any = otel_context._RUNTIME_CONTEXT
    assert otelctx.attach == runtime._current_context.set
    assert otelctx.get_current == runtime._current_context.get


def test_attach_and_detach_agree_with_the_api() -> None:
    span = TracerProvider().get_tracer("t").start_span("s")
    before = otel_context.get_current()
    token = otelctx.attach(trace_api.set_span_in_context(span))
    try:
        assert trace_api.get_current_span() is span
        assert otelctx.current_span() is span
        assert otelctx.get_current() is otel_context.get_current()
    finally:
        otelctx.detach(token)
    assert otel_context.get_current() is before
    assert otelctx.current_span() is trace_api.INVALID_SPAN


def test_current_span_reads_an_explicit_context_and_rejects_non_spans() -> None:
    span = TracerProvider().get_tracer("t").start_span("s")
    assert otelctx.current_span(trace_api.set_span_in_context(span)) is span
    assert otelctx.current_span(Context()) is trace_api.INVALID_SPAN
    from opentelemetry.trace.propagation import _SPAN_KEY

    not_a_span = otel_context.set_value(_SPAN_KEY, "nope", Context())
    assert otelctx.current_span(not_a_span) is trace_api.INVALID_SPAN
    assert trace_api.get_current_span(not_a_span) is trace_api.INVALID_SPAN


class _OtherRuntime(_RuntimeContext):
    """A runtime context that is not the default ContextVar one."""

    def __init__(self) -> None:
        self.current = Context()

    def attach(self, context: Context) -> object:
        previous, self.current = self.current, context
        return previous

    def get_current(self) -> Context:
        return self.current

    def detach(self, token: object) -> None:
        assert isinstance(token, Context)
        self.current = token


def test_any_other_runtime_context_gets_the_api_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", _OtherRuntime())
    attach, detach, get_current = otelctx._switches()
    assert (attach, detach, get_current) == (
        otel_context.attach,
        otel_context.detach,
        otel_context.get_current,
    )
    token = attach(Context({"k": 1}))
    assert get_current().get("k") == 1
    detach(token)
    assert get_current().get("k") is None
