"""The OTel current context, switched and read as cheaply as the runtime allows.

A traced stream sets and resets the current context around every event, and a
run reads it once to find its parent. Through the API's Python wrappers
(``attach``/``detach``/``get_current``, ``get_current_span`` with its ABC
``isinstance``) that costs more than the rest of the switch. With the default
runtime context, which is one ``ContextVar``, the variable's own C methods do
exactly the same. Any other runtime context (chosen with
``OTEL_PYTHON_CONTEXT``) gets the API's functions, unchanged.

Our attach and detach always happen within one step of one task, so the API's
"Failed to detach context" safety net (which logs instead of raising) is never
needed here.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace.propagation import _SPAN_KEY

__all__ = ["attach", "current_span", "detach", "get_current"]


def _switches() -> tuple[Callable[[Context], Any], Callable[[Any], None], Callable[[], Context]]:
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    if isinstance(runtime, ContextVarsRuntimeContext) and isinstance(var, contextvars.ContextVar):
        return var.set, var.reset, var.get
    return otel_context.attach, otel_context.detach, otel_context.get_current


attach, detach, get_current = _switches()

_Span = trace_api.Span
_INVALID_SPAN = trace_api.INVALID_SPAN


def current_span(context: Context | None = None) -> trace_api.Span:
    """``trace.get_current_span``: the span in ``context`` (default: the current one)."""
    span = (get_current() if context is None else context).get(_SPAN_KEY)
    if span is None or not isinstance(span, _Span):
        return _INVALID_SPAN
    return span
