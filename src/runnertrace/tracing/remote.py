"""Spans at the process edge (the service, MCP, A2A): on runnertrace's own pipeline.

The service span, the MCP server spans and the A2A spans are made on the same
provider as the runs they hold, so they land in the same store or OTLP
receiver: a traced runner's pipeline when there is one, else the pipeline of
the ``trace`` settings given (or of ``runnertrace.yaml``); none when tracing is
off. Inside ``runnertrace.testing.capture_spans()`` that is the capture's.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace as trace_api

from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.runner import _setup_override
from runnertrace.tracing.setup import get_tracing_setup

__all__ = ["error_type", "tracer_for"]


def tracer_for(runner: Any = None, settings: TraceConfig | None = None) -> trace_api.Tracer | None:
    """The tracer for a span around ``runner``'s runs (see the module docstring).

    ``settings`` is used when ``runner`` is not traced; ``None`` reads the
    configuration (``trace.enabled`` must be on for it to trace).
    """
    override = _setup_override.get()
    if override is not None:
        return None if override.disabled else override.tracer
    setup = getattr(runner, "setup", None) if getattr(runner, "is_tracing_runner", False) else None
    if setup is None:
        if settings is None:
            from runnertrace.tracing.config import load_settings

            settings = load_settings().trace
            if not settings.enabled:
                return None
        setup = get_tracing_setup(settings)
    return None if setup.disabled else setup.tracer


def error_type(exc: BaseException) -> str:
    """``error.type`` for an exception: its class name (low cardinality)."""
    return type(exc).__qualname__ or "_OTHER"
