"""Tracing: ``TracingRunner`` / ``traced`` turn runner events into OpenTelemetry spans."""

from runnertrace.tracing.runner import TracingRunner, traced
from runnertrace.tracing.setup import get_tracing_setup, reset_tracing_setups

__all__ = ["TracingRunner", "get_tracing_setup", "reset_tracing_setups", "traced"]
