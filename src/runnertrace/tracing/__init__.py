"""Tracing: ``TracingRunner`` / ``traced`` turn runner events into OpenTelemetry spans.

The OpenTelemetry version is checked before anything is imported from it, and a
dependency that breaks our imports anyway (an ``AttributeError`` at import time,
which a lazy ``runnertrace.TracingRunner`` lookup would otherwise report as a
missing attribute) surfaces as an ``ImportError`` that names the installed versions.
"""

from runnertrace._internal.imports import check_otel_version, otel_upgrade_hint, otel_versions

check_otel_version()

try:
    from runnertrace.tracing.runner import TracingRunner, traced
    from runnertrace.tracing.setup import get_tracing_setup, reset_tracing_setups
except AttributeError as exc:
    raise ImportError(f"{exc}; {otel_upgrade_hint(otel_versions())}") from exc

__all__ = ["TracingRunner", "get_tracing_setup", "reset_tracing_setups", "traced"]
