"""Small pieces the vendor mappings share.

Mappings run at export time on the exporter's worker thread, on a copy of each
span (see :class:`~runnertrace.tracing.export.MappedSpanExporter`), so they may
read anything on the finished span but never change what other backends see.
"""

from __future__ import annotations

from datetime import UTC, datetime

from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["is_local_root", "iso_time"]


def is_local_root(span: ReadableSpan) -> bool:
    """True when ``span`` starts a trace in this process (no parent, or a remote one)."""
    parent = span.parent
    return parent is None or parent.is_remote


def iso_time(ns: int) -> str:
    """An epoch-nanosecond timestamp as an ISO-8601 UTC string (microsecond precision)."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")
