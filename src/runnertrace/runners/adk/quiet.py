"""ADK's own OpenTelemetry spans: silenced in traced runs.

ADK sends ``invoke_workflow`` / ``invoke_agent`` / ``generate_content`` /
``execute_tool`` spans to the global tracer provider, which is also ours when the
application installed an SDK provider (runnertrace then reuses it). Next to ours
each call would show twice and its tokens count twice. So the first traced run
wraps ADK's tracer (the one object all of ADK's modules share) once per process
(:func:`quiet_framework_telemetry`): where :data:`_ADK_SPANS_OFF` says so, its spans
are OpenTelemetry's no-op spans, which pass the current context through, as with the
global provider left at its default. A traced run sets it while it drives ADK, each
pull of ADK's event stream (:func:`quieted`; the tasks ADK starts inherit it, an
``AgentTool``'s sub-runner included), and unsets it inside a tool's own code
(:func:`spans_recorded`), so an untraced ADK runner a tool starts keeps its spans;
untraced runs keep ADK's spans untouched and pay one context-variable read per span.

Should an ADK keep its tracer elsewhere, a traced run falls back to driving ADK
under an *unsampled* copy of the run span's context (:func:`quiet_context`):
parent-based samplers (the SDK default) then drop ADK's spans, and, while they
record (:func:`adk_spans_record`), the chat span is not made current in a model call
(spans opened there are dropped with ADK's), and an ``AgentTool``'s sub-runner runs
under an unsampled copy of its tool span's context (:func:`attached`). That context is
marked with our span (``core.quiet``): what carries the trace to another process
(an MCP request's ``params._meta``) sends our span, sampled, not the unsampled copy.

Every function here is called from the runner's ``quiet`` or ``install`` step, or
from guarded code (the mapper, the kit's bracket around each pull): a fault in one
costs the silencing, never the run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from runnertrace.core.context import reset_var
from runnertrace.core.quiet import quiet_copy

__all__ = [
    "adk_spans_record",
    "attached",
    "pass_through_adk_spans",
    "quiet_context",
    "quiet_framework_telemetry",
    "quieted",
    "spans_recorded",
]

# Where ADK's tracer passes the context through instead of starting spans: set while
# a traced run drives ADK (inherited by the tasks ADK starts, an AgentTool's
# sub-runner included), unset again inside a tool's own code.
_ADK_SPANS_OFF: ContextVar[bool] = ContextVar("runnertrace_adk_spans_off", default=False)
_NOOP_TRACER = trace.NoOpTracer()
_PASSING = "_runnertrace_passes_through"  # marks ADK's tracer as wrapped
_wrapping = threading.Lock()


def quiet_framework_telemetry() -> tuple[bool, otel_context.Context | None]:
    """Silence ADK's spans for a traced run: whether its tracer passes the context
    through (``silenced``), else the quiet context to drive ADK in (see the module)."""
    silenced = pass_through_adk_spans()
    return silenced, None if silenced else quiet_context()


def pass_through_adk_spans() -> bool:
    """Wrap ADK's tracer, once per process, so that where :data:`_ADK_SPANS_OFF` is
    set its spans are OpenTelemetry's no-op spans, which keep the current context
    (anywhere else it is left as it is: one context-variable read per span). Whether
    it is wrapped; ``False`` when this ADK keeps its tracer elsewhere.

    ADK's modules share one tracer object (``google.adk.telemetry.tracing.tracer``),
    so its two methods are replaced on that object.
    """
    try:
        from google.adk.telemetry import tracing as adk_tracing
    except ImportError:
        return False
    tracer = getattr(adk_tracing, "tracer", None)
    if tracer is None:
        return False
    if getattr(tracer, _PASSING, False):
        return True
    with _wrapping:
        if getattr(tracer, _PASSING, False):
            return True
        start_span = tracer.start_span
        start_as_current_span = tracer.start_as_current_span

        def quiet_start_span(*args: Any, **kwargs: Any) -> Any:
            chosen = _NOOP_TRACER.start_span if _ADK_SPANS_OFF.get() else start_span
            return chosen(*args, **kwargs)

        def quiet_start_as_current_span(*args: Any, **kwargs: Any) -> Any:
            if _ADK_SPANS_OFF.get():
                return _NOOP_TRACER.start_as_current_span(*args, **kwargs)
            return start_as_current_span(*args, **kwargs)

        try:
            setattr(tracer, "start_span", quiet_start_span)  # noqa: B010 - a method, replaced
        except (AttributeError, TypeError):  # a tracer whose methods cannot be replaced
            return False
        setattr(tracer, "start_as_current_span", quiet_start_as_current_span)  # noqa: B010
        setattr(tracer, _PASSING, True)
    return True


def adk_spans_record() -> bool:
    """Whether ADK's spans would be recorded: an application set a global provider.

    ADK takes its tracer from the global provider; left at OpenTelemetry's
    default, its spans are no-ops that keep the current context.
    """
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def quiet_context() -> otel_context.Context:
    """The context a traced run drives ADK in: the current span's ids, not sampled.

    Parent-based samplers drop what ADK starts under it; a sampler that ignores
    the parent would keep ADK's spans, nested under our span. The copy is marked
    with our span (``core.quiet``), so a carrier written under it (an MCP request's
    ``params._meta``) names our span, sampled, not the unsampled copy.
    """
    return quiet_copy()


@contextmanager
def quieted(context: otel_context.Context | None, silenced: bool) -> Iterator[None]:
    """Where a traced run drives ADK: its tracer passing the context through
    (``silenced``), else under the quiet ``context``."""
    spans_off = _ADK_SPANS_OFF.set(True) if silenced else None
    token = otel_context.attach(context) if context is not None else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)
        if spans_off is not None:
            _ADK_SPANS_OFF.reset(spans_off)


@contextmanager
def spans_recorded() -> Iterator[None]:
    """A tool's own code, in a run that silences ADK's tracer: ADK's spans record there
    as anywhere (an untraced ADK runner the tool starts keeps them)."""
    token = _ADK_SPANS_OFF.set(False)
    try:
        yield
    finally:
        reset_var(_ADK_SPANS_OFF, token)  # left in another context: nothing to undo


@contextmanager
def attached(context: otel_context.Context) -> Iterator[None]:
    """``context`` current inside the block (an AgentTool's sub-runner under a quiet one)."""
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
