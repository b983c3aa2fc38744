"""``console``: print finished spans to stdout (for quick looks and debugging)."""

from __future__ import annotations

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter

from runnertrace.tracing.backend import Backend


class ConsoleBackend(Backend):
    name = "console"

    def exporter(self) -> SpanExporter:
        return ConsoleSpanExporter()

    def processors(self) -> list[SpanProcessor]:
        # Synchronous on purpose: console output should appear as spans end.
        return [SimpleSpanProcessor(self.exporter())]
