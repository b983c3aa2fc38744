"""OTLP/HTTP traces in: ``POST /v1/traces`` (protobuf or JSON) decoded into SDK spans.

Why SDK ``ReadableSpan`` objects: the local store already has one writer,
:meth:`SpanStore.write`, which keeps the ``runs`` table and the live feed's
sequence in step with the spans. Building the objects its exporter receives
means a foreign app's spans are stored exactly as our own are, by the same
code, and a change to the writer needs no change here.

A request is decoded whole before anything is stored: a body that is
malformed anywhere (bad protobuf, bad JSON, an id of the wrong length) is
refused with a one-line reason and nothing of it is kept.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from runnertrace.store import StoredSpan
from runnertrace.ui.dialects import normalise

__all__ = [
    "MAX_BODY",
    "IngestError",
    "decode",
    "export_json",
    "metrics_refusal",
    "readable_spans",
    "refuse_metrics",
    "response_body",
]

MAX_BODY = 16 * 1024 * 1024  # bytes, before and after decompression
PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# OTLP's SpanKind counts from UNSPECIFIED = 0; the SDK's from INTERNAL = 0.
_KINDS = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class IngestError(ValueError):
    """The request body cannot be taken; the message says why, in one line."""


def _decompress(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    decoders = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
    if encoding not in decoders:
        raise IngestError(f"Content-Encoding {encoding!r} is not supported: gzip, deflate")
    inflater = zlib.decompressobj(decoders[encoding])
    try:
        out = inflater.decompress(body, MAX_BODY + 1)
    except zlib.error as exc:
        raise IngestError(f"the {encoding} body cannot be decompressed: {exc}") from None
    if len(out) > MAX_BODY or inflater.unconsumed_tail:
        raise IngestError(f"the decompressed body is over the {MAX_BODY // 2**20} MiB limit")
    return out


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64 for bytes."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str) and value:
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise IngestError(f"{key} {value[:40]!r} is not hex") from None
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def decode(body: bytes, content_type: str, content_encoding: str = "") -> ExportTraceServiceRequest:
    """The request in ``body``, or :class:`IngestError` with the reason it was refused."""
    if len(body) > MAX_BODY:
        raise IngestError(f"the body is over the {MAX_BODY // 2**20} MiB limit")
    raw = _decompress(body, content_encoding)
    media = content_type.split(";")[0].strip().lower()
    request = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(raw)
        except DecodeError as exc:
            raise IngestError(f"the body is not an OTLP protobuf trace request: {exc}") from None
    elif media == JSON:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise IngestError("the body is not an OTLP JSON trace request (not an object)")
        _hex_ids_to_base64(data)
        try:
            json_format.ParseDict(data, request)
        except json_format.ParseError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else "malformed"
            raise IngestError(f"the body is not an OTLP JSON trace request: {reason}") from None
    else:
        raise IngestError(
            f"Content-Type {media or '(none)'!r} is not supported: {PROTOBUF} or {JSON}"
        )
    return request


def response_body(content_type: str) -> tuple[bytes, str]:
    """The empty success response, in the request's own encoding."""
    if content_type.split(";")[0].strip().lower() == JSON:
        return b"{}", JSON
    return ExportTraceServiceResponse().SerializeToString(), PROTOBUF


def metrics_refusal(
    body: bytes, content_type: str, content_encoding: str = ""
) -> tuple[bytes, str]:
    """The answer to an OTLP metrics export: every data point rejected, with the reason.

    Why answer at all: the ``otlp`` backend pointed at ``runnertrace ui`` sends
    its run metrics beside the traces. A 404 would be logged by the exporter on
    every interval; a partial success says, in OTLP's own terms, that nothing
    was kept and why (the dashboard charts are computed from the spans).
    """
    if len(body) > MAX_BODY:
        raise IngestError(f"the body is over the {MAX_BODY // 2**20} MiB limit")
    raw = _decompress(body, content_encoding)
    media = content_type.split(";")[0].strip().lower()
    request = ExportMetricsServiceRequest()
    response = ExportMetricsServiceResponse()
    try:
        if media == JSON:
            json_format.Parse(raw, request)
        else:
            request.ParseFromString(raw)
    except (DecodeError, json_format.ParseError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "malformed"
        raise IngestError(f"the body is not an OTLP metrics request: {reason}") from None
    refuse_metrics(request, response)
    if media == JSON:
        return json_format.MessageToJson(response).encode(), JSON
    return response.SerializeToString(), PROTOBUF


def refuse_metrics(
    request: ExportMetricsServiceRequest, response: ExportMetricsServiceResponse
) -> None:
    """Mark every data point of ``request`` rejected in ``response``, saying why (HTTP, gRPC)."""
    points = 0
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                which = metric.WhichOneof("data")
                points += len(getattr(metric, which).data_points) if which else 0
    if points:
        response.partial_success.rejected_data_points = points
        response.partial_success.error_message = (
            "runnertrace ui keeps traces only; its charts are computed from the spans"
        )


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        items = [_value(v) for v in value.array_value.values]
        # An OTel attribute holds a list of one primitive type; anything else is kept as JSON.
        kinds = {type(i) for i in items}
        if len(kinds) <= 1 and not kinds & {dict, list, type(None), bytes}:
            return tuple(items)
        return json.dumps(items, default=str, ensure_ascii=False)
    if which == "kvlist_value":
        return json.dumps(_attributes(value.kvlist_value.values), default=str, ensure_ascii=False)
    return getattr(value, which)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        value = _value(pair.value)
        if value is not None:
            out[pair.key] = value
    return out


def _id(raw: bytes, size: int, what: str, span_name: str) -> int:
    if len(raw) != size:
        raise IngestError(f"span {span_name[:60]!r} has a {what} of {len(raw)} bytes, not {size}")
    number = int.from_bytes(raw, "big")
    if number == 0:
        raise IngestError(f"span {span_name[:60]!r} has an all-zero {what}")
    return number


# OTLP span flags (trace.proto SpanFlags): bit 8 says whether bit 9 is known; bit 9 says
# the parent is in another process. The store keeps such a span as a root of its process's
# part of the trace, as it does for a span written in-process with a remote parent.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200


def _parent_is_remote(flags: int) -> bool:
    return bool(flags & _HAS_IS_REMOTE and flags & _IS_REMOTE)


def _span(span: ProtoSpan, resource: Resource, scope: InstrumentationScope | None) -> ReadableSpan:
    trace_id = _id(span.trace_id, 16, "trace id", span.name)
    flags = TraceFlags(span.flags & 0xFF or TraceFlags.SAMPLED)
    context = SpanContext(trace_id, _id(span.span_id, 8, "span id", span.name), False, flags)
    parent = (
        SpanContext(
            trace_id,
            _id(span.parent_span_id, 8, "parent span id", span.name),
            _parent_is_remote(span.flags),
        )
        if span.parent_span_id
        else None
    )
    attributes = normalise(_attributes(span.attributes), span.name, scope.name if scope else None)
    events = [
        Event(
            e.name,
            _attributes(e.attributes),
            timestamp=e.time_unix_nano or span.start_time_unix_nano,
        )
        for e in span.events
    ]
    links = [
        Link(
            SpanContext(
                _id(link.trace_id, 16, "link trace id", span.name),
                _id(link.span_id, 8, "link span id", span.name),
                True,
            ),
            _attributes(link.attributes),
        )
        for link in span.links
    ]
    status = Status(_STATUS.get(span.status.code, StatusCode.UNSET), span.status.message or None)
    start = span.start_time_unix_nano
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=attributes,
        events=events,
        links=links,
        kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
        status=status,
        start_time=start,
        end_time=max(start, span.end_time_unix_nano),
        instrumentation_scope=scope,
    )


def readable_spans(request: ExportTraceServiceRequest) -> Sequence[ReadableSpan]:
    """Every span of ``request`` as the SDK's exporter would receive it."""
    spans: list[ReadableSpan] = []
    for resource_spans in request.resource_spans:
        resource = Resource(_attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = (
                InstrumentationScope(scope_spans.scope.name, scope_spans.scope.version or None)
                if scope_spans.scope.name
                else None
            )
            spans.extend(_span(span, resource, scope) for span in scope_spans.spans)
    return spans


# -- out: a stored trace as OTLP/JSON, which /v1/traces takes back ------------------------------
_KIND_NAMES = {kind.name: kind for kind in SpanKind}


def _attribute(value: Any) -> Any:
    # Stored as JSON, a list comes back as a list; the SDK's attributes hold tuples.
    return tuple(value) if isinstance(value, list) else value


def _readable(span: StoredSpan) -> ReadableSpan:
    trace_id = int(span.trace_id, 16)
    parent = (
        SpanContext(trace_id, int(span.parent_span_id, 16), False) if span.parent_span_id else None
    )
    return ReadableSpan(
        name=span.name,
        context=SpanContext(trace_id, int(span.span_id, 16), False, TraceFlags(1)),
        parent=parent,
        resource=Resource({k: _attribute(v) for k, v in span.resource.items()}),
        attributes={k: _attribute(v) for k, v in span.attributes.items()},
        events=[
            Event(
                str(e.get("name", "")),
                {k: _attribute(v) for k, v in (e.get("attributes") or {}).items()},
                timestamp=int(e.get("time_ns") or span.start_ns),
            )
            for e in span.events
        ],
        kind=_KIND_NAMES.get(span.kind, SpanKind.INTERNAL),
        status=Status(StatusCode[span.status_code], span.status_description),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=InstrumentationScope(span.scope) if span.scope else None,
    )


def _ids_to_hex(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _ids_to_hex(value)
    elif isinstance(node, list):
        for item in node:
            _ids_to_hex(item)


def export_json(spans: Sequence[StoredSpan]) -> dict[str, Any]:
    """The trace as an OTLP/JSON ``ExportTraceServiceRequest`` (ids in hex, as OTLP/JSON has)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data: dict[str, Any] = json_format.MessageToDict(encode_spans([_readable(s) for s in spans]))
    _ids_to_hex(data)
    return data
