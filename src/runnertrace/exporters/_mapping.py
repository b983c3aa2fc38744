"""Small pieces the vendor mappings share.

Mappings run at export time on the exporter's worker thread, on a copy of each
span (see :class:`~runnertrace.tracing.export.MappedSpanExporter`), so they may
read anything on the finished span but never change what other backends see.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import AttributeValue

from runnertrace.tracing.export import MappedSpanExporter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from opentelemetry.sdk.trace.export import SpanExporter

    from runnertrace.tracing.backend import Backend

__all__ = ["PruningMappedSpanExporter", "is_local_root", "iso_time"]


def is_local_root(span: ReadableSpan) -> bool:
    """True when ``span`` starts a trace in this process (no parent, or a remote one)."""
    parent = span.parent
    return parent is None or parent.is_remote


def iso_time(ns: int) -> str:
    """An epoch-nanosecond timestamp as an ISO-8601 UTC string (microsecond precision)."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


class PruningMappedSpanExporter(MappedSpanExporter):
    """A :class:`MappedSpanExporter` that also removes the backend's ``dropped_attributes``.

    A mapping can only add keys; a vendor that mangles some key (Logfire scrubs
    anything named like ``session``) needs the key gone from its copy.
    """

    def __init__(self, inner: SpanExporter, backend: Backend, dropped: frozenset[str]) -> None:
        super().__init__(inner, backend)
        self.dropped = dropped

    def map_span(self, span: ReadableSpan) -> ReadableSpan:
        mapped = super().map_span(span)
        attributes: Mapping[str, AttributeValue] = mapped.attributes or {}
        if self.dropped.isdisjoint(attributes):
            return mapped
        return ReadableSpan(
            name=mapped.name,
            context=mapped.context,
            parent=mapped.parent,
            resource=mapped.resource,
            attributes={k: v for k, v in attributes.items() if k not in self.dropped},
            events=mapped.events,
            links=mapped.links,
            kind=mapped.kind,
            status=mapped.status,
            start_time=mapped.start_time,
            end_time=mapped.end_time,
            instrumentation_scope=mapped.instrumentation_scope,
        )
