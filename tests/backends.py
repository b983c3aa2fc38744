"""User-style backends loaded by dotted path in tests (``trace.type: tests.backends.X``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runnertrace.tracing.backend import Backend


class _SharedMemoryExporter(InMemorySpanExporter):
    """Survives shutdown (setups are reset between tests), so tests can keep reading it."""

    def shutdown(self) -> None:
        return None


MEMORY = _SharedMemoryExporter()
RELEASE_HANG = threading.Event()


class MemoryBackend(Backend):
    name = "memory"

    def exporter(self) -> SpanExporter:
        return MEMORY


class HangingExporter(SpanExporter):
    """An exporter that never returns until released, like a backend that hangs."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        RELEASE_HANG.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        RELEASE_HANG.wait(30)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        RELEASE_HANG.wait(30)
        return True


class HangingBackend(Backend):
    name = "hanging"

    def exporter(self) -> SpanExporter:
        return HangingExporter()


class RaisingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionError("backend exploded")

    def shutdown(self) -> None:
        return None


class RaisingBackend(Backend):
    name = "raising"

    def exporter(self) -> SpanExporter:
        return RaisingExporter()


def redact_planted(text: str) -> str:
    """A user redaction hook: masks the planted secrets of the content tests."""
    return text.replace("sk-test-0123456789abcdefXYZ", "[KEY]").replace(
        "alice@example.com", "[EMAIL]"
    )


def redact_to_none(text: str) -> None:
    """A broken redaction hook: returns nothing instead of the redacted text."""
    return None
