"""The dashboard's ASGI app: JSON APIs, the live feed, the trace page and the static front end.

Everything is served from this process: the page loads nothing from elsewhere
(its Content-Security-Policy allows only this origin), so it works on an
air-gapped laptop and leaks nothing. Handlers are plain functions, which
Starlette runs on its thread pool: SQLite calls block, and must not block the
event loop that also streams the live feed.
"""

from __future__ import annotations

import asyncio
import csv
import html
import io
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

from runnertrace.report import FORMAT_SCRIPT, render_report
from runnertrace.store import SpanStore, StoreError, StoreUrl, TraceNotFoundError
from runnertrace.store import feedback as feedback_store
from runnertrace.ui.auth import TokenMiddleware
from runnertrace.ui.compare import by_position
from runnertrace.ui.ingest import (
    MAX_BODY,
    IngestError,
    decode,
    export_json,
    metrics_refusal,
    readable_spans,
    response_body,
)
from runnertrace.ui.queries import (
    MAX_NS,
    MAX_PAGE,
    Dashboard,
    QueryError,
    RunFilter,
    int_param,
    run_json,
    text_param,
)

__all__ = ["LOOPBACK_HOSTS", "create_app"]

STATIC = Path(__file__).parent / "static"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# The front end's own origin only; the trace frame is the report page, which
# carries its own stricter policy (inline only, no fetches at all).
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)
_REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "frame-ancestors 'self'"
)
_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
LIVE_POLL_S = 0.5
LIVE_MAX_S = 60.0  # a stream ends now and then; EventSource reconnects where it left off


def _json(data: object, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=_HEADERS)


def _guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Turn bad parameters into 400, unknown traces into 404, store faults into 503."""

    def endpoint(request: Request) -> Response:
        try:
            return handler(request)
        except QueryError as exc:
            return _json({"error": str(exc)}, 400)
        except TraceNotFoundError as exc:
            return _json({"error": str(exc)}, 404)
        except StoreError as exc:
            return _json({"error": str(exc)}, 503)

    endpoint.__name__ = handler.__name__
    return endpoint


CSV_COLUMNS = (
    "trace_id", "start_ns", "end_ns", "duration_ns", "name", "agent", "framework", "mode",
    "status", "span_count", "error_count", "input_tokens", "output_tokens", "cost",
    "cost_status", "unpriced_calls", "unpriced_models", "model_calls", "tool_calls", "errors",
    "nested_runs", "derived", "session_id", "user_id", "input_preview", "output_preview",
    "service_name", "feedback", "feedback_comment", "feedback_up", "feedback_down",
)  # fmt: skip
"""The runs list's columns. ``cost`` is the sum of the priced calls; ``cost_status`` says
whether that is all of them (``priced``), not (``partial``: ``unpriced_calls`` calls had no
price, for the ``unpriced_models``), or none (``unpriced``). ``derived``: the numbers were
summed from the trace's model-call spans, its run spans carrying no totals. ``service_name``:
the app (project) the run came from. ``feedback`` and ``feedback_comment``: the run's own
thumb (``up``/``down``) and note; ``feedback_up``/``feedback_down``: the thumbs the run and
its spans got in all."""
FEEDBACK_BODY_MAX = 16 * 1024
CSV_MAX_ROWS = 100_000


def _csv_cell(value: object) -> object:
    # A cell starting with = + - @ is a formula to a spreadsheet: quote it as text.
    if isinstance(value, list | tuple):
        value = "; ".join(str(v) for v in value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def _not_found_page(reason: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>trace not found · runnertrace</title></head>"
        '<body style="font: 14px system-ui, sans-serif; padding: 24px">'
        f'<h1 id="not-found">No such trace in this store</h1><p>{html.escape(reason)}.</p>'
        "<p>A trace id (or a unique prefix of one) comes from the runs list, "
        "<code>runnertrace traces</code>, or an app's logs.</p></body></html>"
    )


def _int(request: Request, key: str, default: int, low: int = 0, high: int = MAX_NS) -> int:
    return int_param(request.query_params.get(key), key, default=default, low=low, high=high)


def create_app(
    db: str | Path | StoreUrl,
    *,
    allowed_hosts: Sequence[str] | None = LOOPBACK_HOSTS,
    token: str | None = None,
    ingest_keys: Sequence[str] = (),
) -> Starlette:
    """The dashboard over the store at ``db`` (a SQLite file or a PostgreSQL URL).

    ``allowed_hosts`` checks the Host header, so a web page elsewhere cannot
    reach this server through DNS rebinding; ``None`` accepts any host.
    ``token``, when given, is required on every request, OTLP included (see
    :mod:`runnertrace.ui.auth`). ``ingest_keys`` open the OTLP endpoints only.
    ``app.state.ingest`` stores one decoded OTLP request (the gRPC service's way in).
    """
    dashboard = Dashboard(db)
    writer: list[SpanStore] = []  # opened on the first OTLP request or feedback
    writer_lock = threading.Lock()

    def runs(request: Request) -> Response:
        params = request.query_params
        filters = RunFilter.from_params(params)
        order = text_param(params, "dir") or "desc"
        if order not in ("asc", "desc"):
            raise QueryError(f"dir={order!r} is not asc or desc")
        return _json(
            dashboard.runs(
                filters,
                cursor=text_param(params, "cursor"),
                limit=_int(request, "limit", 50, 1, MAX_PAGE),
                sort=text_param(params, "sort") or "start",
                descending=order == "desc",
            )
        )

    def facets(request: Request) -> Response:
        return _json(dashboard.facets())

    def run(request: Request) -> Response:
        store = dashboard.store()
        trace_id = store.resolve(request.path_params["trace_id"])
        return _json(run_json(store.get_run(trace_id)))

    def run_agents(request: Request) -> Response:
        """The trace's per-agent table: each agent's own work and with what it started."""
        trace_id = dashboard.store().resolve(request.path_params["trace_id"])
        return _json({"trace_id": trace_id, "agents": dashboard.trace_agents(trace_id)})

    def export_trace(request: Request) -> Response:
        """One trace as OTLP/JSON: a file that ``POST /v1/traces`` (here or anywhere) takes."""
        store = dashboard.store()
        trace_id = store.resolve(request.path_params["trace_id"])
        body = json.dumps(export_json(store.get_trace(trace_id)), ensure_ascii=False)
        return Response(
            body,
            media_type="application/json",
            headers={
                **_HEADERS,
                "Content-Disposition": f'attachment; filename="trace-{trace_id}.otlp.json"',
            },
        )

    def runs_csv(request: Request) -> Response:
        """The filtered runs list as CSV (up to ``CSV_MAX_ROWS`` rows, newest first)."""
        filters = RunFilter.from_params(request.query_params)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        cursor: str | None = None
        written = 0
        while written < CSV_MAX_ROWS:
            page = dashboard.runs(filters, cursor=cursor, limit=MAX_PAGE)
            for run in page["runs"]:
                judged = run["feedback"]
                run = {**run, **{f"feedback_{k}": judged[k] for k in ("comment", "up", "down")}}
                run["feedback"] = judged["score"]
                writer.writerow([_csv_cell(run.get(column)) for column in CSV_COLUMNS])
            written += len(page["runs"])
            cursor = page["next"]
            if cursor is None:
                break
        return Response(
            out.getvalue(),
            media_type="text/csv",
            headers={**_HEADERS, "Content-Disposition": 'attachment; filename="runs.csv"'},
        )

    def trace_export(request: Request) -> Response:
        """One trace as JSON with what the store holds beside its spans: the run's row and its
        feedback (the OTLP file holds spans only, so that any OTLP receiver takes it)."""
        store = dashboard.store()
        trace_id = store.resolve(request.path_params["trace_id"])
        body = {
            "run": run_json(store.get_run(trace_id)),
            "feedback": dashboard.feedback(trace_id),
            "spans": [span.to_json() for span in store.get_trace(trace_id)],
        }
        return Response(
            json.dumps(body, ensure_ascii=False),
            media_type="application/json",
            headers={
                **_HEADERS,
                "Content-Disposition": f'attachment; filename="trace-{trace_id}.json"',
            },
        )

    def trace_feedback(request: Request) -> Response:
        trace_id = dashboard.store().resolve(request.path_params["trace_id"])
        return _json({"trace_id": trace_id, "feedback": dashboard.feedback(trace_id)})

    def writer_store() -> SpanStore:
        """The store's writer (OTLP and feedback), opened on first use; a viewer never writes."""
        with writer_lock:
            if not writer:
                writer.append(SpanStore(dashboard.url))
            return writer[0]

    def give_feedback(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise feedback_store.FeedbackError(f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise feedback_store.FeedbackError(
                "the body is not a JSON object: {trace_id, score, comment?, span_id?}"
            )
        unknown = sorted(set(data) - {"trace_id", "span_id", "score", "comment"})
        if unknown:
            raise feedback_store.FeedbackError(
                f"unknown field {unknown[0]!r}: trace_id, score, comment, span_id"
            )
        given = feedback_store.give(
            writer_store(),
            data.get("trace_id"),
            data.get("score"),
            data.get("comment"),
            data.get("span_id"),
            source="ui",
        )
        return given.to_json()

    async def post_feedback(request: Request) -> Response:
        """``POST /api/feedback``: thumbs up or down and a note on a run or a span.

        JSON only: a page elsewhere cannot send JSON here without the browser asking first
        (a CORS preflight this server never grants), so a loopback dashboard, which has no
        token, takes no feedback forged by another site's form.
        """
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return _json({"error": "send the feedback as application/json"}, 415)
        body = await request.body()
        if len(body) > FEEDBACK_BODY_MAX:
            return _json({"error": f"the body is over {FEEDBACK_BODY_MAX // 1024} KiB"}, 413)
        try:
            stored = await run_in_threadpool(give_feedback, body)
        except feedback_store.FeedbackTargetError as exc:
            return _json({"error": str(exc)}, 404)
        except feedback_store.FeedbackError as exc:
            return _json({"error": str(exc)}, 400)
        except StoreError as exc:
            return _json({"error": str(exc)}, 503)
        return _json({"feedback": stored})

    def compare(request: Request) -> Response:
        first = text_param(request.query_params, "a")
        second = text_param(request.query_params, "b")
        if not first or not second:
            raise QueryError("a and b are required: the two trace ids (or prefixes) to compare")
        return _json(by_position(dashboard.compare(first, second), dashboard.store()))

    def trace_page(request: Request) -> Response:
        headers = {**_HEADERS, "Content-Security-Policy": _REPORT_CSP}
        store = dashboard.store()
        try:
            trace_id = store.resolve(request.path_params["trace_id"])
        except TraceNotFoundError as exc:
            # A page is what a browser opened: a page that says so, not raw JSON.
            return HTMLResponse(_not_found_page(str(exc)), status_code=404, headers=headers)
        # The trace's waterfall page: the HTML report's own renderer.
        return HTMLResponse(
            render_report(store.get_trace(trace_id), store.get_run(trace_id)), headers=headers
        )

    def sessions(request: Request) -> Response:
        return _json({"sessions": dashboard.sessions(_int(request, "limit", 100, 1, 500))})

    def conversation(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        return _json(
            {
                "session_id": session_id,
                "turns": dashboard.conversation(session_id),
                "agents": dashboard.session_agents(session_id),
            }
        )

    def errors(request: Request) -> Response:
        since = _int(request, "since", 0)
        return _json({"errors": dashboard.errors(since or None)})

    def error_runs(request: Request) -> Response:
        error_type = text_param(request.query_params, "type")
        if not error_type:
            raise QueryError("type is required: an error.type value from /api/errors")
        return _json({"error_type": error_type, "runs": dashboard.error_runs(error_type)})

    def metrics(request: Request) -> Response:
        since = _int(request, "since", 0) or None
        until = _int(request, "until", 0) or None
        return _json(
            dashboard.metrics(
                text_param(request.query_params, "by") or "agent",
                since_ns=since,
                until_ns=until,
                buckets=_int(request, "buckets", 24, 1, 200),
            )
        )

    def store_spans(body: bytes, content_type: str, encoding: str) -> int:
        return ingest(decode(body, content_type, encoding))

    def ingest(request: ExportTraceServiceRequest) -> int:
        """Store one OTLP request's spans through the store's writer (either engine)."""
        spans = readable_spans(request)
        return writer_store().write(spans)

    async def otlp_traces(request: Request) -> Response:
        """OTLP/HTTP trace export: decoded whole, then stored through the store's writer."""
        content_type = request.headers.get("content-type", "")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            return _json({"error": f"the body is over the {MAX_BODY // 2**20} MiB limit"}, 400)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                return _json({"error": f"the body is over the {MAX_BODY // 2**20} MiB limit"}, 400)
            chunks.append(chunk)
        try:
            await run_in_threadpool(
                store_spans,
                b"".join(chunks),
                content_type,
                request.headers.get("content-encoding", ""),
            )
        except IngestError as exc:
            return _json({"error": str(exc)}, 400)
        except StoreError as exc:
            return _json({"error": str(exc)}, 503)
        body, media = response_body(content_type)
        return Response(body, media_type=media, headers=_HEADERS)

    async def otlp_metrics(request: Request) -> Response:
        """OTLP metrics are not kept: the answer says so (a partial success rejecting all)."""
        body = await request.body()
        content_type = request.headers.get("content-type", "")
        try:
            answer, media = metrics_refusal(
                body, content_type, request.headers.get("content-encoding", "")
            )
        except IngestError as exc:
            return _json({"error": str(exc)}, 400)
        return Response(answer, media_type=media, headers=_HEADERS)

    async def live(request: Request) -> Response:
        """Server-Sent Events: every run written or updated after ``after`` (a ``seq``)."""
        # A reconnecting EventSource sends the last id it saw: resume from there.
        try:
            after = int_param(
                request.headers.get("last-event-id"),
                "Last-Event-ID",
                default=-1,
                low=0,
                high=MAX_NS,
            )
            if after < 0:
                after = _int(request, "after", -1, -1)
        except QueryError as exc:
            return _json({"error": str(exc)}, 400)
        if after < 0:
            after = await run_in_threadpool(dashboard.last_seq)

        async def stream() -> AsyncIterator[str]:
            nonlocal after
            yield f"retry: 1000\nevent: hello\ndata: {json.dumps({'seq': after})}\n\n"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LIVE_MAX_S
            while loop.time() < deadline and not await request.is_disconnected():
                seq, changed = await run_in_threadpool(dashboard.changes, after)
                if changed:
                    after = seq
                    payload = json.dumps({"seq": seq, "runs": changed})
                    yield f"id: {seq}\nevent: runs\ndata: {payload}\n\n"
                else:
                    yield ": idle\n\n"
                await asyncio.sleep(LIVE_POLL_S)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={**_HEADERS, "Cache-Control": "no-store"},
        )

    def index(request: Request) -> Response:
        return FileResponse(
            STATIC / "index.html", headers={**_HEADERS, "Content-Security-Policy": _CSP}
        )

    def format_script(request: Request) -> Response:
        # The report's own number format, so the list and the trace page print one figure
        # the same way (a separate file: the page's policy allows scripts from here only).
        return Response(FORMAT_SCRIPT, media_type="text/javascript", headers=_HEADERS)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(dashboard.prepare)
        dashboard.start()
        try:
            yield
        finally:
            dashboard.close()
            for store in writer:
                store.close()

    routes: list[Any] = [
        Route("/", index),
        Route("/api/runs", _guarded(runs)),
        Route("/api/runs.csv", _guarded(runs_csv)),
        Route("/api/compare", _guarded(compare)),
        Route("/api/runs/{trace_id}/otlp", _guarded(export_trace)),
        Route("/api/runs/{trace_id}/agents", _guarded(run_agents)),
        Route("/api/runs/{trace_id}/feedback", _guarded(trace_feedback)),
        Route("/api/runs/{trace_id}/export", _guarded(trace_export)),
        Route("/api/feedback", post_feedback, methods=["POST"]),
        Route("/api/facets", _guarded(facets)),
        Route("/api/runs/{trace_id}", _guarded(run)),
        Route("/trace/{trace_id}", _guarded(trace_page)),
        Route("/api/sessions", _guarded(sessions)),
        Route("/api/sessions/{session_id:path}", _guarded(conversation)),
        Route("/api/errors", _guarded(errors)),
        Route("/api/errors/runs", _guarded(error_runs)),
        Route("/api/metrics", _guarded(metrics)),
        Route("/api/live", live),
        Route("/v1/traces", otlp_traces, methods=["POST"]),
        Route("/v1/metrics", otlp_metrics, methods=["POST"]),
        Route("/static/format.js", format_script),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    if token is not None or ingest_keys:
        middleware.append(Middleware(TokenMiddleware, token=token, ingest_keys=tuple(ingest_keys)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.dashboard = dashboard
    app.state.ingest = ingest
    return app
