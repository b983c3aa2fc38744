"""The row codec: a finished SDK span as a database row, and a row back as a :class:`StoredSpan`.

Ids are hex, attributes, events and the resource JSON text (the same text in
both engines, so a search means the same in both and a copy between them is
byte for byte).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from runnertrace.store.jsontext import dumps as _dumps
from runnertrace.store.records import StoredSpan
from runnertrace.tracing import attributes as attr

__all__ = ["ROW_WIDTH", "span_row", "stored_row", "stored_span", "tokens"]

ROW_WIDTH = 17  # the columns of SPAN_COLUMNS, one value each in span_row()


# Every span of a process shares one Resource: encode it once, not per span.
_resource_json: dict[int, tuple[Resource, str]] = {}


def _resource(resource: Resource) -> str:
    cached = _resource_json.get(id(resource))
    if cached is not None and cached[0] is resource:
        return cached[1]
    text = _dumps(dict(resource.attributes))
    if len(_resource_json) >= 32:
        _resource_json.clear()
    _resource_json[id(resource)] = (resource, text)
    return text


def tokens(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# Enum members' names, looked up per span (an enum's .name is a descriptor call).
_KIND_NAMES = {kind: kind.name for kind in SpanKind}
_STATUS_NAMES = {code: code.name for code in StatusCode}


def span_row(span: ReadableSpan) -> tuple[object, ...]:
    """The database row for one finished span."""
    context = span.context
    if context is None:
        raise ValueError(f"span {span.name!r} has no context")
    parent = span.parent
    attributes = dict(span.attributes or {})
    span_events = span.events
    events = (
        _dumps(
            [
                {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
                for e in span_events
            ]
        )
        if span_events
        else "[]"
    )
    start = span.start_time or 0
    span_type = attributes.get(attr.SPAN_TYPE)
    status = span.status
    return (
        format(context.trace_id, "032x"),
        format(context.span_id, "016x"),
        format(parent.span_id, "016x") if parent is not None else None,
        1 if parent is None or parent.is_remote else 0,
        span.name,
        _KIND_NAMES[span.kind],
        span_type if isinstance(span_type, str) else None,
        start,
        span.end_time or start,
        _STATUS_NAMES[status.status_code],
        status.description,
        tokens(attributes.get(attr.INPUT_TOKENS)),
        tokens(attributes.get(attr.OUTPUT_TOKENS)),
        _dumps(attributes),
        events,
        _resource(span.resource),
        span.instrumentation_scope.name if span.instrumentation_scope else None,
    )


def stored_row(row: Sequence[Any]) -> StoredSpan:
    return StoredSpan(
        trace_id=row[0],
        span_id=row[1],
        parent_span_id=row[2],
        is_root=bool(row[3]),
        name=row[4],
        kind=row[5],
        start_ns=row[7],
        end_ns=row[8],
        status_code=row[9],
        status_description=row[10],
        attributes=json.loads(row[13]),
        events=json.loads(row[14]),
        resource=json.loads(row[15]),
        scope=row[16],
    )


def stored_span(span: ReadableSpan) -> StoredSpan:
    """A finished span as the viewers see it (what reading its stored row back gives)."""
    return stored_row(span_row(span))
