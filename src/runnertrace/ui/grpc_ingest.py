"""OTLP/gRPC traces in, beside OTLP/HTTP: an SDK or a Collector set to gRPC sends as it is.

The ``grpc`` extra (grpcio). The service decodes nothing itself: gRPC hands over
the parsed ``ExportTraceServiceRequest``, which goes to the app's own ingest
(``app.state.ingest``), the one the HTTP endpoint uses: the same conversion, the
same writer, the same store. The keys are the HTTP endpoint's too: the
``authorization: Bearer <key>`` metadata must carry an ingest key or the UI
token whenever either is set.

Status codes are the ones OTLP exporters act on: ``UNAVAILABLE`` for a store
that cannot take the spans now (the exporter retries), ``INVALID_ARGUMENT`` for
a request that can never be stored, ``UNAUTHENTICATED`` without a valid key.
Metrics are answered as over HTTP: a partial success rejecting every point.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from runnertrace._internal.imports import require
from runnertrace.store import StoreError
from runnertrace.ui.auth import is_allowed
from runnertrace.ui.ingest import IngestError, refuse_metrics

__all__ = ["start_grpc"]

_REFUSAL = "this dashboard needs its ingest key or token: authorization: Bearer <key>"


def start_grpc(
    ingest: Callable[[Any], int],
    *,
    host: str,
    port: int,
    token: str | None,
    ingest_keys: tuple[str, ...],
) -> tuple[Any, int]:
    """Serve OTLP/gRPC on ``host:port`` (0: a free port); the server and its port."""
    grpc = require("grpc", "grpc")
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    # The generated service stubs, untyped (and importable only with grpcio).
    trace_service_pb2_grpc: Any = require(
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc", "grpc"
    )
    metrics_service_pb2_grpc: Any = require(
        "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc", "grpc"
    )

    def allowed(context: Any) -> bool:
        metadata = dict(context.invocation_metadata() or ())
        bearer = str(metadata.get("authorization", ""))
        given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else None
        return is_allowed(given, ingest=True, token=token, keys=ingest_keys)

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            if not allowed(context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
            try:
                ingest(request)  # decoded whole before anything is stored
            except IngestError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except StoreError as exc:
                context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            if not allowed(context):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
            response = metrics_service_pb2.ExportMetricsServiceResponse()
            refuse_metrics(request, response)
            return response

    server = grpc.server(
        ThreadPoolExecutor(max_workers=8, thread_name_prefix="runnertrace-ui-grpc"),
        options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound
