"""``mcp``'s own client spans kept out of an MCP call that our ``execute_tool`` span tells.

``mcp`` 2.x makes a CLIENT span per request (``MCP send tools/call add``) on the
global provider, and injects *its* context into ``params._meta``. When a
framework's MCP client calls a tool inside a traced run, our ``execute_tool`` span
already stands for the call, and a runner marks it as an MCP call (it carries
``mcp.method.name``: ``runners/_kit/mcp.py``). With an app provider ``mcp``'s span
would tell the call again, and the server's span would hang under it instead of
under ours. So :func:`gate_mcp_client_spans` puts a gate on ``mcp``'s module tracer:
in the body of a marked call (:func:`marked_mcp_call`), while the current span is
still ours, ``mcp`` starts a non-recording span carrying the current context (as the
API's no-op does), so ``_meta`` carries our span's context. Everywhere else ``mcp``'s
spans are its own.

It lives at the bottom layer because the runners (which know a call is an MCP one)
install it, and they see neither ``tracing`` nor ``mcp``'s internals otherwise.
``mcp`` has no public switch for its client spans, so this reaches its private
``mcp.shared._otel._tracer`` (checked against mcp 2.3); a release that moves it loses
only the gate (logged once): the call is then told twice, nothing else changes.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

from runnertrace._internal.errors import internal_log

__all__ = [
    "gate_mcp_client_spans",
    "in_marked_mcp_call",
    "mark_mcp_call_for_this_task",
    "marked_mcp_call",
]

MCP_OTEL_MODULE = "mcp.shared._otel"

_marked: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "runnertrace_marked_mcp_call", default=None
)
"""The span id of our ``execute_tool`` span marked as an MCP call, in that call's body."""


@contextmanager
def marked_mcp_call(span_id: int) -> Iterator[None]:
    """The body of the MCP call our span ``span_id`` tells (see the module)."""
    token = _marked.set(span_id)
    try:
        yield
    finally:
        _marked.reset(token)


def mark_mcp_call_for_this_task(span_id: int) -> None:
    """Mark the rest of the current task as the body of the MCP call our span
    ``span_id`` tells, with nothing to undo: for a framework that runs each tool call
    in a task of its own, whose context ends with the call."""
    _marked.set(span_id)


def in_marked_mcp_call() -> bool:
    """Whether a request made here is the marked call's own: the current span is our
    marked span, or a non-recording one carrying its context (a framework's silenced
    span around the call), not a span someone opened inside the call."""
    marked = _marked.get()
    return marked is not None and trace.get_current_span().get_span_context().span_id == marked


class _MarkedCallGate(trace.Tracer):
    """``mcp``'s tracer, silent inside a marked MCP call (:func:`in_marked_mcp_call`)."""

    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner
        self.noop = trace.NoOpTracer()

    def _tracer(self) -> trace.Tracer:
        return self.noop if in_marked_mcp_call() else self.inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._tracer().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._tracer().start_as_current_span(*args, **kwargs)


def gate_mcp_client_spans() -> None:
    """Put the gate on ``mcp``'s module tracer, once, if ``mcp`` is loaded (an MCP client
    of any framework loads it before its first request)."""
    module = sys.modules.get(MCP_OTEL_MODULE)
    if module is None:
        return
    tracer = getattr(module, "_tracer", None)
    if tracer is None:
        internal_log.warning(
            "mcp-moved:mcp.shared._otel._tracer",
            "runnertrace: this mcp release has no mcp.shared._otel._tracer (runnertrace was "
            "checked against mcp 2.3): its client spans repeat our execute_tool spans",
        )
    elif not _gated(tracer):
        setattr(module, "_tracer", _MarkedCallGate(tracer))  # noqa: B010 - mcp's private tracer


def _gated(tracer: Any) -> bool:
    """Whether the gate is on ``tracer`` or on a tracer it wraps (``inner``: another
    wrapper, ``runnertrace.tracing.mcp``'s, may sit over ours)."""
    seen = 0
    while tracer is not None and seen < 8:
        if isinstance(tracer, _MarkedCallGate):
            return True
        tracer, seen = getattr(tracer, "inner", None), seen + 1
    return False
