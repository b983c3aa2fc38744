"""An OTLP/HTTP traces receiver on 127.0.0.1 that verifies AWS SigV4 like X-Ray would.

* :class:`SigV4Verifier` recomputes the signature with botocore from what was
  received (method, path, the headers named in ``SignedHeaders``, the exact
  body) and the known test credentials, and compares it with the one sent.
* :class:`OtlpReceiver` records every request, verifies it when asked, decodes
  the ``ExportTraceServiceRequest`` (gzip or plain), and can misbehave on
  purpose: answer 500, or hang without answering.
"""

from __future__ import annotations

import calendar
import gzip
import hmac
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_TIMESTAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    service: str = ""
    region: str = ""
    signed_headers: tuple[str, ...] = ()


class SigV4Verifier:
    """Checks a request's SigV4 signature against known credentials, as AWS does."""

    def __init__(
        self,
        access_key: str,
        secret_key: str,
        token: str | None = None,
        *,
        max_skew_s: float | None = 300.0,
    ) -> None:
        self.credentials = Credentials(access_key, secret_key, token)
        self.max_skew_s = max_skew_s

    def verify(
        self, method: str, path: str, headers: dict[str, str], body: bytes, scheme: str = "http"
    ) -> Verdict:
        """``headers`` are the received ones (any case); ``path`` includes the query."""
        lower = {k.lower(): v for k, v in headers.items()}
        match = _AUTH.match(lower.get("authorization", ""))
        if match is None:
            return Verdict(False, "missing or malformed Authorization header")
        signed = tuple(match["signed"].split(";"))
        service, region = match["service"], match["region"]

        def fail(reason: str) -> Verdict:
            return Verdict(False, reason, service, region, signed)

        if match["key"] != self.credentials.access_key:
            return fail("unknown access key")
        if "host" not in signed or "x-amz-date" not in signed:
            return fail("host and x-amz-date must be signed")
        if list(signed) != sorted(signed):
            return fail("SignedHeaders not sorted")
        missing = [name for name in signed if name not in lower]
        if missing:
            return fail(f"signed headers not received: {missing}")
        amz_date = lower["x-amz-date"]
        if amz_date[:8] != match["date"]:
            return fail("credential scope date differs from X-Amz-Date")
        if self.max_skew_s is not None:
            sent = calendar.timegm(time.strptime(amz_date, _TIMESTAMP))
            if abs(time.time() - sent) > self.max_skew_s:
                return fail("request time too skewed")
        if self.credentials.token and lower.get("x-amz-security-token") != self.credentials.token:
            return fail("security token missing or wrong")
        request = AWSRequest(
            method=method,
            url=f"{scheme}://{lower['host']}{path}",
            data=body,
            headers={name: lower[name] for name in signed},
        )
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(self.credentials, service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, match["signature"]):
            return fail("signature mismatch")
        return Verdict(True, "ok", service, region, signed)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    verdict: Verdict | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def decoded(self) -> ExportTraceServiceRequest:
        data = self.body
        if self.header("content-encoding") == "gzip":
            data = gzip.decompress(data)
        return ExportTraceServiceRequest.FromString(data)

    def spans(self) -> Iterator[ReceivedSpan]:
        for resource_spans in self.decoded().resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    yield ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        resource=resource,
                        status_code=span.status.code,
                    )


Mode = Literal["ok", "500", "hang"]


@dataclass
class OtlpReceiver:
    """A threaded HTTP server on 127.0.0.1; use as a context manager."""

    verifier: SigV4Verifier | None = None
    mode: Mode = "ok"
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._release = threading.Event()
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                item = Received("POST", self.path, headers, body)
                if receiver.verifier is not None:
                    item.verdict = receiver.verifier.verify("POST", self.path, headers, body)
                with receiver._arrived:
                    receiver.received.append(item)
                    receiver._arrived.notify_all()
                if receiver.mode == "hang":
                    receiver._release.wait(60)
                    return
                if receiver.mode == "500":
                    self._reply(500, b"internal error", "text/plain")
                    return
                if item.verdict is not None and not item.verdict.ok:
                    self._reply(403, item.verdict.reason.encode(), "text/plain")
                    return
                payload = ExportTraceServiceResponse().SerializeToString()
                self._reply(200, payload, "application/x-protobuf")

            def _reply(self, code: int, payload: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, count: int = 1, timeout_s: float = 10.0) -> list[Received]:
        """Block until ``count`` requests arrived (a readiness wait, not a timing assertion)."""
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while len(self.received) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"expected {count} requests, got {len(self.received)}")
                self._arrived.wait(remaining)
            return list(self.received)

    def spans(self) -> list[ReceivedSpan]:
        return [span for item in self.received for span in item.spans()]


def closed_port_url() -> str:
    """A loopback URL on which nothing listens (connection refused)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}/v1/traces"
