"""Quiet contexts: an unsampled copy of our span's context, marked with the span it copies.

A runner that cannot switch a framework's own spans off drives the framework under
an unsampled copy of our span's context (ADK's fallback, ``runners.adk.quiet``):
parent-based samplers then drop what the framework starts there. That flag would
also travel in every carrier written there, so a server in another process (an MCP
server's parent-based sampler) would drop its spans too, and the trace would end at
the process edge.

So the copy carries the span it copies (:func:`quiet_copy`), and code that writes a
carrier to another process asks :func:`sendable` for the context to write: the
original span's (sampled), wherever the current span is the quiet copy or an
unsampled span started under it, in the same trace. Anywhere else it is ``None``:
the current context is sent as it is. Our own spans are sampled, so a tool span
opened under the quiet context is sent as itself.

It lives in ``core`` because the runners make the copy and ``tracing`` (the MCP
propagation) reads it, and the two layers do not see each other. OpenTelemetry is
imported on first use, as in :mod:`.propagation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext

__all__ = ["quiet_copy", "sendable"]

_ORIGINAL = "runnertrace.quiet-original"
"""The context key of the span context a quiet copy was made from."""


def quiet_copy(context: Context | None = None) -> Context:
    """The current span's (or ``context``'s) ids as an unsampled, non-recording span,
    marked with the span it copies. A copy of a copy keeps the first original."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    current = trace.get_current_span(context).get_span_context()
    original = _original_of(context) or current
    quiet = trace.SpanContext(
        trace_id=current.trace_id,
        span_id=current.span_id,
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
        trace_state=current.trace_state,
    )
    copied = trace.set_span_in_context(trace.NonRecordingSpan(quiet), context)
    return otel_context.set_value(_ORIGINAL, original, copied)


def sendable(context: Context | None = None) -> Context | None:
    """The context to carry to another process in place of the current one (or
    ``context``): the original span's where the current span is quiet; ``None`` where
    the current context is to be sent as it is."""
    from opentelemetry import trace

    original = _original_of(context)
    if original is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(original), context)


def _original_of(context: Context | None) -> SpanContext | None:
    """The marked original, when the current span is unsampled and in its trace."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    original = otel_context.get_value(_ORIGINAL, context)
    if not isinstance(original, trace.SpanContext):
        return None
    span = trace.get_current_span(context).get_span_context()
    if span.trace_flags.sampled or span.trace_id != original.trace_id:
        return None
    return original
