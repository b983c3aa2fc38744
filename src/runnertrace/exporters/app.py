"""``app``: join the application's own tracing, as it stands, and export nothing ourselves.

For apps that already configured a vendor SDK (``logfire.configure()``, the
Langfuse client, ``Traceloop.init()``) or their own OpenTelemetry pipeline: our
spans are created on the app's global provider, so they go through its
processors (scrubbing, sampling, its exporters) exactly like the app's own
spans, and reach each of its backends once.
"""

from __future__ import annotations

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from runnertrace.tracing.backend import Backend, Check
from runnertrace.tracing.config import ConfigError

__all__ = ["AppBackend"]


class AppBackend(Backend):
    """No processors of its own: the app's provider decides where spans go."""

    name = "app"

    def processors(self) -> list[SpanProcessor]:
        return []

    def exporter(self) -> SpanExporter:
        raise ConfigError(
            "trace.type: app has no exporter; spans go where the app's provider sends them"
        )

    def check(self) -> list[Check]:
        provider = type(trace_api.get_tracer_provider())
        return [
            Check(
                self.name,
                "provider",
                "ok",
                "spans go to whatever OpenTelemetry provider the application installs "
                f"(in this process: {provider.__module__}.{provider.__qualname__})",
                fix="configure your app's tracing (e.g. logfire.configure()) before the first run",
            )
        ]
