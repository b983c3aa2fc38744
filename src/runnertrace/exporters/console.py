"""``console``: print finished traces to stderr, for quick looks and debugging.

stderr, not stdout: the app's own output stays clean (it may be a pipe, a CLI's
answer, or JSON). ``trace.console.format: tree`` (the default) prints one compact
span tree per finished trace, drawn like ``runnertrace show``; ``json`` prints
the OTel SDK's raw JSON for each span.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from runnertrace._internal.forksafe import relock_after_fork
from runnertrace.exporters.console_config import ConsoleConfig
from runnertrace.tracing.backend import Backend

__all__ = ["ConsoleBackend", "TreeConsoleExporter"]


class TreeConsoleExporter(SpanExporter):
    """Collects a trace's spans and draws the tree when its top span (in this process) ends."""

    def __init__(self) -> None:
        self._pending: dict[int, list[ReadableSpan]] = {}
        self._lock = threading.Lock()
        relock_after_fork(self, _lock=threading.Lock)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context = span.context
            if context is None:
                continue
            with self._lock:
                pending = self._pending.setdefault(context.trace_id, [])
                pending.append(span)
                if span.parent is not None and not span.parent.is_remote:
                    continue
                del self._pending[context.trace_id]
            self._draw(pending)
        return SpanExportResult.SUCCESS

    @staticmethod
    def _draw(spans: list[ReadableSpan]) -> None:
        from rich.console import Console

        from runnertrace.exporters.local_store import stored_span
        from runnertrace.exporters.trace_tree import render_trace_tree

        Console(file=sys.stderr, highlight=False).print(
            render_trace_tree([stored_span(s) for s in spans])
        )

    def shutdown(self) -> None:
        with self._lock:
            self._pending.clear()


class ConsoleBackend(Backend):
    name = "console"
    config_model = ConsoleConfig

    def exporter(self) -> SpanExporter:
        if self.trace_config.section(self.name, ConsoleConfig).format == "json":
            return ConsoleSpanExporter(out=sys.stderr)
        return TreeConsoleExporter()

    def processors(self) -> list[SpanProcessor]:
        # Synchronous on purpose: console output should appear as spans end.
        return [SimpleSpanProcessor(self.exporter())]
