"""A real OTLP/HTTP trace and metrics receiver on 127.0.0.1, for testing exporters on the wire.

It decodes ``ExportTraceServiceRequest`` protobuf bodies (plain, gzip or
deflate) with ``opentelemetry-proto`` and records, per request, the path, the
headers and every span (name, ids, parent, kind, status, attributes and resource
attributes decoded to Python values). Requests to ``.../v1/metrics`` are decoded
as ``ExportMetricsServiceRequest`` into data points (sums and histograms) and
kept apart, in ``metric_requests``, so ``requests`` stays the trace requests.

Modes (switchable while running, via ``receiver.mode``):

* ``healthy``: answers 200 with an empty ``ExportTraceServiceResponse``.
* ``500``: answers 500 (records nothing).
* ``hang``: holds each request open for ``hang_s`` seconds (longer than any
  exporter timeout in the tests) before answering; ``stop()`` releases it.
* ``refuse``: nothing listens on the port (connection refused). The port stays bound
  (a socket that never listens) until ``stop()``, so no receiver started meanwhile can be
  given it: a refused backend's exports can never land on a healthy receiver.
* ``down``: the port accepts connections but drops every request unanswered,
  as a crashed process behind a proxy does.

``expect_headers`` makes it answer 401 to a request missing any of them, like a
vendor rejecting credentials. A ``verifier`` (``tests/sigv4_receiver.py``'s SigV4
check, as X-Ray does it) judges each request from what arrived (method, path,
headers, exact body): its verdict is kept on the request, and one that is not
``ok`` is answered 403.

``arrived`` holds every request as it came in, whatever the mode answered (with
its raw body and verdict); ``requests`` only the trace requests it accepted. A
POST to a path that is neither ``.../v1/traces`` nor ``.../v1/metrics`` is not
decoded: it arrives and is answered an empty 200.
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

Mode = Literal["healthy", "500", "hang", "refuse", "down"]


class Verifier(Protocol):
    """Judges a request as received; the verdict has at least ``ok`` and ``reason``."""

    def verify(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Any: ...


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as the Python value it encodes."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which)


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    kind: int
    status_code: int
    status_message: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    events: list[tuple[str, dict[str, Any]]]


@dataclass
class ReceivedPoint:
    """One metric data point: a sum's value, or a histogram's count, sum and buckets."""

    name: str
    unit: str
    kind: str  # "sum" or "histogram"
    temporality: int  # 1 delta, 2 cumulative (AggregationTemporality in the proto)
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    value: float = 0.0
    count: int = 0
    bounds: list[float] = field(default_factory=list)
    bucket_counts: list[int] = field(default_factory=list)


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]  # names in lower case
    encoding: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    body: bytes = b""  # as sent (still compressed)
    verdict: Any = None  # the verifier's, when the receiver has one

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def decode_metrics(body: bytes) -> list[ReceivedPoint]:
    """Every data point of an ``ExportMetricsServiceRequest`` (sums and histograms)."""
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    points: list[ReceivedPoint] = []
    for resource_metrics in request.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                common = {
                    "name": metric.name,
                    "unit": metric.unit,
                    "resource": resource,
                    "scope": scope_metrics.scope.name,
                }
                which = metric.WhichOneof("data")
                if which == "sum":
                    for p in metric.sum.data_points:
                        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        points.append(
                            ReceivedPoint(
                                **common,
                                kind="sum",
                                temporality=metric.sum.aggregation_temporality,
                                attributes=attributes(p.attributes),
                                value=float(value),
                            )
                        )
                elif which == "histogram":
                    for h in metric.histogram.data_points:
                        points.append(
                            ReceivedPoint(
                                **common,
                                kind="histogram",
                                temporality=metric.histogram.aggregation_temporality,
                                attributes=attributes(h.attributes),
                                value=h.sum,
                                count=h.count,
                                bounds=list(h.explicit_bounds),
                                bucket_counts=list(h.bucket_counts),
                            )
                        )
    return points


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        kind=span.kind,
                        status_code=span.status.code,
                        status_message=span.status.message,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=attributes(span.attributes),
                        resource=resource,
                        scope=scope_spans.scope.name,
                        events=[(e.name, attributes(e.attributes)) for e in span.events],
                    )
                )
    return spans


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as r:`` (or ``start()``/``stop()``)."""

    def __init__(
        self,
        mode: Mode = "healthy",
        *,
        hang_s: float = 30.0,
        expect_headers: dict[str, str] | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.mode: Mode = mode
        self.hang_s = hang_s
        self.expect_headers = {k.lower(): v for k, v in (expect_headers or {}).items()}
        self.verifier = verifier
        self.requests: list[ReceivedRequest] = []  # traces
        self.metric_requests: list[ReceivedRequest] = []
        self.arrived: list[ReceivedRequest] = []  # every request, whatever it was answered
        self.attempts = 0
        self.held = 0  # requests held unanswered right now (mode "hang")
        self._lock = threading.Lock()
        self._arrival = threading.Condition(self._lock)
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._reserved: socket.socket | None = None  # mode "refuse": bound, never listening
        self.port = 0

    def hold(self) -> bool:
        """Hold a request for ``hang_s`` (counted in ``held``); ``True`` if stopped meanwhile.

        A test of a bounded wait checks ``held`` when the wait returns: a request
        still held means the client gave up on it rather than waited it out.
        """
        with self._lock:
            self.held += 1
        try:
            return self._release.wait(self.hang_s)
        finally:
            with self._lock:
                self.held -= 1

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> OtlpReceiver:
        if self.mode == "refuse":
            # Bound but never listening: a connection is refused, and the kernel cannot hand
            # the port to the next receiver (closing it could, and that receiver would then
            # get this one's traffic).
            self._reserved = socket.socket()
            self._reserved.bind(("127.0.0.1", 0))
            self.port = self._reserved.getsockname()[1]
            return self
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    # -- what arrived -----------------------------------------------------------------------
    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return [s for r in self.requests for s in r.spans]

    def by_name(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    @property
    def points(self) -> list[ReceivedPoint]:
        with self._lock:
            return [p for r in self.metric_requests for p in r.points]

    def by_type(self, span_type: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.attributes.get("runnertrace.span.type") == span_type]

    def names(self) -> set[str]:
        return {s.name for s in self.spans}

    def wait_for(self, count: int = 1, timeout_s: float = 10.0) -> list[ReceivedRequest]:
        """Block until ``count`` requests arrived, and return them (a readiness wait with a
        bound, not a timing assertion)."""
        with self._arrival:
            if not self._arrival.wait_for(lambda: len(self.arrived) >= count, timeout_s):
                raise AssertionError(f"expected {count} requests, got {len(self.arrived)}")
            return list(self.arrived)

    def arrive(self, request: ReceivedRequest) -> None:
        with self._arrival:
            self.arrived.append(request)
            self._arrival.notify_all()

    def record_metrics(self, request: ReceivedRequest) -> None:
        with self._lock:
            self.metric_requests.append(request)

    def record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            with receiver._lock:  # noqa: SLF001 - the receiver's own state, shared with its handler
                receiver.attempts += 1
            mode = receiver.mode
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            encoding = headers.get("content-encoding", "")
            verdict = None
            if receiver.verifier is not None:
                verdict = receiver.verifier.verify("POST", self.path, headers, body)
            request = ReceivedRequest(self.path, headers, encoding, body=body, verdict=verdict)
            receiver.arrive(request)
            if mode == "down":
                self.close_connection = True
                return  # no response at all: the client sees the connection drop
            if mode == "hang" and receiver.hold():
                self.close_connection = True
                return  # the receiver is stopping: drop the held request
            if mode == "500":
                self._answer(500, b"internal error")
                return
            if any(headers.get(k) != v for k, v in receiver.expect_headers.items()):
                self._answer(401, b"unauthorized")
                return
            if verdict is not None and not verdict.ok:
                self._answer(403, str(verdict.reason).encode())
                return
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path.endswith("/v1/metrics"):
                request.points = decode_metrics(body)
                receiver.record_metrics(request)
                self._answer(200, ExportMetricsServiceResponse().SerializeToString())
                return
            if not self.path.endswith("/v1/traces"):
                # not an OTLP export (the CloudWatch tests' boto3 API call): it arrived, and
                # an empty 200 is all the verifier's tests need of it
                self._answer(200, b"")
                return
            request.spans = decode(body)
            receiver.record(request)
            self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (its timeout); fine

    return Handler


_REFUSING: list[OtlpReceiver] = []  # kept for the process, so their ports stay refused


def refused_port() -> int:
    """A loopback port that refuses connections for the rest of the process.

    A port found by binding and closing a probe socket is free for the kernel to give to
    the next server a test starts, which would then receive what was meant to be refused."""
    receiver = OtlpReceiver("refuse").start()
    _REFUSING.append(receiver)
    return receiver.port


def closed_port_url() -> str:
    """A loopback traces URL on which nothing listens (connection refused), for good."""
    return f"http://127.0.0.1:{refused_port()}/v1/traces"
