"""``cloudwatch``: spans to X-Ray's OTLP endpoint (SigV4), run metrics and a dashboard.

What goes where:

* **Spans**: OTLP/HTTP protobuf, gzipped, ``POST`` to
  ``https://xray.<region>.amazonaws.com/v1/traces``, signed with SigV4 (service
  ``xray``) by botocore over the exact compressed body. The signing happens in
  a ``requests.Session`` subclass handed to the stock ``OTLPSpanExporter``, so
  the exporter's batching, retries and timeouts stay as they are.
  ``trace.cloudwatch.endpoint`` replaces the URL and is still signed; without
  it, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (a CloudWatch agent or collector,
  which signs for us) is used unsigned.
* **Mapping**: the resource gets ``aws.service.type=gen_ai_agent`` (and
  ``aws.log.group.names``); every span gets ``session.id``, which CloudWatch's
  GenAI view requires (our spans carry it; spans of other instrumentations
  nested in a run inherit the run's); content
  attributes are cut harder than elsewhere, since AWS wants large content off spans.
* **Metrics**: a span processor aggregates each top-level run (duration,
  tokens, tool calls, errors) and a background thread sends them with
  ``put_metric_data``. The run never waits for it.
* **Dashboard**: :func:`deploy_dashboard` fills the packaged template and calls
  ``put_dashboard`` (create or update).

boto3/botocore are imported only when this backend is built.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import re
import string
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

from runnertrace._internal.errors import handle_internal_errors, internal_log
from runnertrace._internal.imports import require
from runnertrace.core.config import ConfigError
from runnertrace.exporters.cloudwatch_config import CloudWatchConfig, region_problem
from runnertrace.exporters.otlp import (
    ScopedSession,
    lookup,
    otlp_http_exporter,
    probe_endpoint,
    safe_url,
    validate_url,
)
from runnertrace.tracing import attributes as attr
from runnertrace.tracing.backend import Backend, Check

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from runnertrace.core.config import TraceConfig

__all__ = [
    "CloudWatchBackend",
    "RunMetricsProcessor",
    "SigV4Session",
    "dashboard_body",
    "deploy_dashboard",
    "resolve_region",
]

EXTRA = "cloudwatch"
XRAY_SERVICE = "xray"
TRACES_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
INSTRUMENTATION_SCOPE = "runnertrace"
"""Only spans from our own tracer are aggregated into run metrics."""

CONTENT_KEYS = (
    attr.INPUT_MESSAGES,
    attr.OUTPUT_MESSAGES,
    attr.SYSTEM_INSTRUCTIONS,
    attr.TOOL_ARGUMENTS,
    attr.TOOL_RESULT,
    attr.INPUT_VALUE,
    attr.OUTPUT_VALUE,
)
DASHBOARD_TEMPLATE = "cloudwatch_dashboard.json"
_DASHBOARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_MAX_DATUMS_PER_CALL = 1000


# -- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegionSource:
    """A resolved region and where it came from (for messages; never a secret)."""

    region: str | None
    source: str


def resolve_region(config: CloudWatchConfig) -> RegionSource:
    """The region from config, ``AWS_REGION``, ``AWS_DEFAULT_REGION`` or the AWS config file.

    A malformed value raises :class:`ConfigError` naming ``trace.cloudwatch.region``:
    the region becomes part of a hostname, so it must not smuggle in anything else.
    """
    if config.region:
        return RegionSource(config.region, "trace.cloudwatch.region")
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        value = os.environ.get(var, "").strip()
        if value:
            _validate_region(value, var)
            return RegionSource(value, var)
    try:
        botocore_session = require("botocore.session", EXTRA)
    except ImportError:
        return RegionSource(None, "not configured")
    exceptions = require("botocore.exceptions", EXTRA)
    try:
        value = botocore_session.get_session().get_config_variable("region")
    except exceptions.BotoCoreError as exc:  # e.g. AWS_PROFILE names a missing profile
        return RegionSource(None, f"not configured (AWS config unreadable: {type(exc).__name__})")
    if value:
        _validate_region(str(value), "the AWS config file")
        return RegionSource(str(value), "the AWS config file")
    return RegionSource(None, "not configured")


def _validate_region(value: str, source: str) -> None:
    problem = region_problem(value)
    if problem:
        raise ConfigError(
            f"trace.cloudwatch.region: {problem}, taken from {source}; "
            "set trace.cloudwatch.region (or AWS_REGION) to a region such as 'us-east-1'"
        )


def _require_region(found: RegionSource, why: str) -> str:
    if found.region is None:
        raise ConfigError(
            f"trace.cloudwatch.region: no AWS region is configured, and {why} needs one; "
            "set trace.cloudwatch.region or AWS_REGION (e.g. 'us-east-1')"
        )
    return found.region


@dataclass(frozen=True)
class TracesTarget:
    """Where spans go and whether we sign them."""

    url: str
    signed: bool
    source: str


def traces_target(config: CloudWatchConfig, region: RegionSource) -> TracesTarget:
    """Pick the traces URL.

    Precedence: ``trace.cloudwatch.endpoint`` (signed), then
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (unsigned: an agent or collector signs),
    then X-Ray in the region (signed). Our explicit key wins over the generic env
    var, so a signed loopback test is possible with the env var set.
    """
    if config.endpoint:
        return TracesTarget(config.endpoint, True, "trace.cloudwatch.endpoint")
    env_url = lookup(TRACES_ENV, None, TRACES_ENV)
    if env_url.value is not None:
        url = validate_url(
            env_url, "the OTLP/HTTP traces URL of your CloudWatch agent or collector"
        )
        return TracesTarget(url, False, TRACES_ENV)
    name = _require_region(region, "the X-Ray endpoint https://xray.<region>.amazonaws.com")
    return TracesTarget(f"https://xray.{name}.amazonaws.com/v1/traces", True, "the region")


# -- signing ------------------------------------------------------------------------------------


def _signing_host(url: str) -> str:
    """The Host header value: netloc without user info, and without a default port."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    if (parts.scheme, parts.port) in (("http", 80), ("https", 443)):
        host = host.rsplit(":", 1)[0]
    return host


class MissingCredentialsError(RuntimeError):
    """No AWS credentials were found in the standard chain."""


class SigV4Session(ScopedSession):
    """A ``requests`` session that SigV4-signs each request just before it is sent.

    As a :class:`ScopedSession` it forwards no ``OTEL_EXPORTER_OTLP_HEADERS`` (meant
    for the user's collector, not AWS) and verifies TLS with the default trust store.

    Signing in :meth:`send` sees the final URL and the exact body bytes (already
    gzipped by the exporter). Signed headers: host, content-type,
    content-encoding, x-amz-date (and x-amz-security-token for temporary
    credentials); the rest may be changed by proxies without breaking the signature.
    Credentials are looked up lazily, on the exporter's thread, so a slow
    credential source (instance metadata) never delays a run.
    """

    SIGNED = ("Content-Type", "Content-Encoding")

    def __init__(
        self,
        region: str,
        service: str = XRAY_SERVICE,
        credentials: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__({})
        self.region = region
        self.service = service
        self._lookup = credentials or _default_credentials
        self._credentials: Any = None

    def _frozen_credentials(self) -> Any:
        if self._credentials is None:
            self._credentials = self._lookup()
        if self._credentials is None:
            raise MissingCredentialsError(
                "no AWS credentials found; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE, or use an instance/task role"
            )
        return self._credentials.get_frozen_credentials()

    def sign(self, request: requests.PreparedRequest) -> None:
        """Add ``Authorization``, ``X-Amz-Date`` (and the token) to ``request``."""
        auth_module = require("botocore.auth", EXTRA)
        awsrequest = require("botocore.awsrequest", EXTRA)
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        url = str(request.url)
        headers = {"Host": _signing_host(url)}
        for name in self.SIGNED:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        aws_request = awsrequest.AWSRequest(
            method=request.method, url=url, data=body, headers=headers
        )
        auth_module.SigV4Auth(self._frozen_credentials(), self.service, self.region).add_auth(
            aws_request
        )
        request.headers["Host"] = headers["Host"]
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            value = aws_request.headers.get(name)
            if value is not None:
                request.headers[name] = value

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.sign(request)
        return super().send(request, **kwargs)


def _default_credentials() -> Any:
    return require("botocore.session", EXTRA).get_session().get_credentials()


# -- run metrics --------------------------------------------------------------------------------


@dataclass
class _RunStats:
    input_tokens: int = 0
    output_tokens: int = 0
    tools: Counter[str] = field(default_factory=Counter)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: object, default: str) -> str:
    return value if isinstance(value, str) and value else default


class RunMetricsProcessor(SpanProcessor):
    """Aggregates each top-level run from its spans; sends the metrics off-thread.

    * A *root* is one of our spans whose parent is not one of ours (the run
      span; a nested agent run under our tool span counts toward its caller).
      Parent links are known at start, attributes at end, so structure is
      tracked in ``on_start`` and numbers are added in ``on_end``.
    * Memory is bounded: at most ``max_spans`` open spans and ``max_runs`` open
      runs are tracked; the oldest are forgotten beyond that (counted).
    * The send queue holds ``queue_size`` runs; a full queue drops the run's
      metrics (counted, logged once). ``put_metric_data`` failures are counted
      and logged once per minute. Nothing here blocks the run.
    * It also remembers each trace's session id, which the attribute mapping
      uses for child spans that lack one.
    """

    def __init__(
        self,
        *,
        namespace: str,
        region: str | None,
        endpoint_url: str | None,
        send: bool = True,
        queue_size: int = 256,
        timeout_s: float = 5.0,
        flush_timeout_s: float = 5.0,
        max_runs: int = 1024,
        max_spans: int = 16384,
        max_sessions: int = 4096,
    ) -> None:
        self.namespace = namespace
        self.region = region
        self.endpoint_url = endpoint_url
        self.send_metrics = send
        self.timeout_s = timeout_s
        self.flush_timeout_s = flush_timeout_s
        self.max_runs = max_runs
        self.max_spans = max_spans
        self.max_sessions = max_sessions
        self.sent_runs = 0
        self.dropped_runs = 0
        self.failed_runs = 0
        self.forgotten = 0
        self._owner: OrderedDict[tuple[int, int], tuple[int, int]] = OrderedDict()
        self._runs: OrderedDict[tuple[int, int], _RunStats] = OrderedDict()
        self._sessions: OrderedDict[int, str] = OrderedDict()
        self._span_sessions: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._lock = threading.Lock()
        self._queue: queue.Queue[list[dict[str, Any]] | None] = queue.Queue(queue_size)
        self._pending = 0
        self._idle = threading.Condition()
        self._worker: threading.Thread | None = None
        self._client: Any = None
        self._shutdown = False

    # -- session ids ---------------------------------------------------------------------------
    def session_for(self, span: ReadableSpan) -> str | None:
        """The session of ``span``'s run: inherited from its ancestors, else its trace's."""
        context = span.context
        with self._lock:
            return self._span_sessions.get(
                (context.trace_id, context.span_id)
            ) or self._sessions.get(context.trace_id)

    def _track_session(
        self,
        key: tuple[int, int],
        parent: tuple[int, int] | None,
        attributes: Mapping[str, object] | None,
    ) -> None:
        """Record ``key``'s session: its own, else its parent's (caller locks)."""
        session = attr.session_of(attributes or {})
        if not isinstance(session, str) or not session:
            session = self._span_sessions.get(parent) if parent else None
            session = session or self._sessions.get(key[0])
        if not session:
            return
        self._span_sessions[key] = session
        if len(self._span_sessions) > self.max_spans:
            self._span_sessions.popitem(last=False)
        if key[0] not in self._sessions:
            self._sessions[key[0]] = session
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)

    # -- SpanProcessor -------------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with handle_internal_errors("cloudwatch run metrics"):
            context = span.get_span_context()
            key = (context.trace_id, context.span_id)
            parent = span.parent
            parent_key = (parent.trace_id, parent.span_id) if parent else None
            scope = span.instrumentation_scope
            ours = scope is not None and scope.name == INSTRUMENTATION_SCOPE
            with self._lock:
                self._track_session(key, parent_key, span.attributes)
                if not ours:
                    return
                root = self._owner.get(parent_key) if parent_key else None
                if root is None:
                    root = key
                    self._runs[root] = _RunStats()
                    if len(self._runs) > self.max_runs:
                        self._runs.popitem(last=False)
                        self.forgotten += 1
                self._owner[key] = root
                if len(self._owner) > self.max_spans:
                    self._owner.popitem(last=False)
                    self.forgotten += 1

    def on_end(self, span: ReadableSpan) -> None:
        with handle_internal_errors("cloudwatch run metrics"):
            self._on_end(span)

    def _on_end(self, span: ReadableSpan) -> None:
        context = span.context
        attributes = span.attributes or {}
        key = (context.trace_id, context.span_id)
        with self._lock:
            if attr.session_of(attributes):
                self._track_session(key, None, attributes)
            root = self._owner.pop(key, None)
            stats = self._runs.get(root) if root is not None else None
            if stats is None:
                return
            kind = attributes.get(attr.SPAN_TYPE)
            if kind != "run":
                stats.input_tokens += _int(attributes.get(attr.INPUT_TOKENS))
                stats.output_tokens += _int(attributes.get(attr.OUTPUT_TOKENS))
            if kind == "tool":
                stats.tools[_str(attributes.get(attr.TOOL_NAME), "unknown")] += 1
            if root != key:
                return
            del self._runs[root]
        if kind == "run" and self.send_metrics:
            self._enqueue(self.datums(span, stats))

    def datums(self, span: ReadableSpan, stats: _RunStats) -> list[dict[str, Any]]:
        """The ``MetricData`` entries for one finished run."""
        attributes = span.attributes or {}
        agent = _str(attributes.get(attr.AGENT_NAME), "unknown")
        framework = _str(attributes.get(attr.FRAMEWORK), "unknown")
        dims = [{"Name": "Agent", "Value": agent}, {"Name": "Framework", "Value": framework}]
        end_ns = span.end_time or time.time_ns()
        when = dt.datetime.fromtimestamp(end_ns / 1e9, tz=dt.UTC)
        duration_ms = max(0.0, (end_ns - (span.start_time or end_ns)) / 1e6)
        failed = span.status.status_code is StatusCode.ERROR

        def datum(
            name: str, value: float, unit: str, dimensions: list[dict[str, str]]
        ) -> dict[str, Any]:
            return {
                "MetricName": name,
                "Dimensions": dimensions,
                "Timestamp": when,
                "Value": float(value),
                "Unit": unit,
            }

        data = [
            datum("Runs", 1, "Count", dims),
            datum("Errors", 1 if failed else 0, "Count", dims),
            datum("RunDuration", duration_ms, "Milliseconds", dims),
            datum("InputTokens", stats.input_tokens, "Count", dims),
            datum("OutputTokens", stats.output_tokens, "Count", dims),
            datum("ToolCalls", sum(stats.tools.values()), "Count", dims),
        ]
        for tool, count in sorted(stats.tools.items()):
            tool_dims = [{"Name": "Agent", "Value": agent}, {"Name": "Tool", "Value": tool}]
            data.append(datum("ToolCalls", count, "Count", tool_dims))
        return data

    def _enqueue(self, data: list[dict[str, Any]]) -> None:
        if self._shutdown:
            return
        self._ensure_worker()
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait(data)
        except queue.Full:
            with self._idle:
                self._pending -= 1
                self.dropped_runs += 1
            internal_log.warning(
                "cloudwatch-metrics-queue-full",
                "runnertrace: cloudwatch metrics queue is full; dropping run metrics "
                "(%d runs dropped so far)",
                self.dropped_runs,
            )

    # -- worker --------------------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name="runnertrace-cloudwatch-metrics", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < 50:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._send(batch)
                    return
                batch.append(more)
            self._send(batch)

    def client(self) -> Any:
        """The boto3 CloudWatch client (made on the worker thread, on first use)."""
        if self._client is None:
            self._client = cloudwatch_client(self.region, self.endpoint_url, self.timeout_s)
        return self._client

    def _send(self, runs: list[list[dict[str, Any]]]) -> None:
        data = [datum for run in runs for datum in run]
        try:
            client = self.client()
            for start in range(0, len(data), _MAX_DATUMS_PER_CALL):
                client.put_metric_data(
                    Namespace=self.namespace, MetricData=data[start : start + _MAX_DATUMS_PER_CALL]
                )
            self.sent_runs += len(runs)
        except Exception as exc:  # noqa: BLE001 - AWS faults never reach the host
            self.failed_runs += len(runs)
            internal_log.warning(
                "cloudwatch-metrics-failed",
                "runnertrace: sending run metrics to CloudWatch failed (%d runs lost so far): %s",
                self.failed_runs,
                type(exc).__name__,
            )
        finally:
            with self._idle:
                self._pending -= len(runs)
                self._idle.notify_all()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._idle:
            while self._pending > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self.force_flush(int(self.flush_timeout_s * 1000))
        self._shutdown = True
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            # The worker is stuck on a hung call; it is a daemon thread, so leave it.
            return


def cloudwatch_client(region: str | None, endpoint_url: str | None, timeout_s: float) -> Any:
    """A boto3 CloudWatch client with short timeouts and few retries.

    ``endpoint_url=None`` leaves botocore's own resolution in place, which
    honours ``AWS_ENDPOINT_URL_CLOUDWATCH`` and ``AWS_ENDPOINT_URL``.
    """
    boto3 = require("boto3", EXTRA)
    config = require("botocore.config", EXTRA).Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"total_max_attempts": 2, "mode": "standard"},
    )
    return boto3.session.Session(region_name=region).client(
        "cloudwatch", endpoint_url=endpoint_url, config=config
    )


# -- the backend --------------------------------------------------------------------------------


class CloudWatchBackend(Backend):
    """Spans to X-Ray (OTLP + SigV4), run metrics with boto3, a dashboard template."""

    name = "cloudwatch"
    config_model = CloudWatchConfig

    def __init__(self, config: TraceConfig) -> None:
        super().__init__(config)
        self.settings = config.section(self.name, CloudWatchConfig)
        self.timeout_s = self.settings.timeout_s or config.flush_timeout_s
        self.region = resolve_region(self.settings)
        self.target = traces_target(self.settings, self.region)
        needs_aws = self.target.signed or self.settings.metrics
        if needs_aws:
            require("boto3", EXTRA)
        if self.settings.metrics:
            _require_region(self.region, "sending run metrics (trace.cloudwatch.metrics)")
        self.run_metrics = RunMetricsProcessor(
            namespace=self.settings.namespace,
            region=self.region.region,
            endpoint_url=self.settings.metrics_endpoint,
            send=self.settings.metrics,
            queue_size=self.settings.metrics_queue_size,
            timeout_s=self.timeout_s,
            flush_timeout_s=config.flush_timeout_s,
        )

    def exporter(self) -> SpanExporter:
        # Signed: a scoped, signing session (only our headers go to AWS). Unsigned: the
        # user's agent or collector, which gets the OTEL_* headers/TLS like any OTel exporter.
        session = self.signing_session() if self.target.signed else None
        return otlp_http_exporter(
            self.target.url,
            {},
            timeout_s=self.timeout_s,
            compression="gzip",
            scoped=self.target.signed,
            session=session,
        )

    def signing_session(self) -> SigV4Session:
        return SigV4Session(_require_region(self.region, "SigV4 signing"), XRAY_SERVICE)

    def processors(self) -> list[SpanProcessor]:
        # Spans first: flush and shutdown go through processors in order within one
        # time budget, so a hung metrics API must not use up the spans' share. The
        # order does not matter for session tracking: mapping happens at export
        # time, after the run span's on_start has recorded the session.
        return [*super().processors(), self.run_metrics]

    def resource_attributes(self) -> Mapping[str, AttributeValue]:
        extra: dict[str, AttributeValue] = {"aws.service.type": "gen_ai_agent"}
        if self.settings.log_group_names:
            extra["aws.log.group.names"] = tuple(self.settings.log_group_names)
        return extra

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        attributes = span.attributes or {}
        extra: dict[str, AttributeValue] = {}
        if not attributes.get(attr.SESSION_ID):
            session = attr.session_of(attributes) or self.run_metrics.session_for(span)
            if isinstance(session, str) and session:
                extra[attr.SESSION_ID] = session
        limit = self.settings.max_content_length
        for key in CONTENT_KEYS:
            value = attributes.get(key)
            if isinstance(value, str) and len(value) > limit:
                extra[key] = f"{value[:limit]}...[truncated {len(value) - limit} chars]"
        return extra or None

    def check(self) -> list[Check]:
        return cloudwatch_checks(self.trace_config)


def cloudwatch_checks(trace_config: TraceConfig, *, probe: bool = True) -> list[Check]:
    """``runnertrace doctor`` findings; works even when the backend cannot be built.

    Checks boto3, the region, the traces endpoint, metrics and credentials (their
    source only, never a value), then, if all is well and ``probe`` is set, POSTs
    an empty signed export to the endpoint to see that it answers and accepts
    the signature.
    """
    name = CloudWatchBackend.name
    settings = trace_config.section(CloudWatchBackend.name, CloudWatchConfig)
    checks: list[Check] = []
    fix_region = "set trace.cloudwatch.region or AWS_REGION (e.g. 'us-east-1')"
    try:
        require("boto3", EXTRA)
        checks.append(Check(name, "boto3", "ok", "boto3 is installed"))
        have_boto3 = True
    except ImportError:
        fix = "pip install 'runnertrace[cloudwatch]'"
        checks.append(Check(name, "boto3", "fail", "boto3 is not installed", fix))
        have_boto3 = False
    try:
        region = resolve_region(settings)
    except ConfigError as exc:
        checks.append(Check(name, "region", "fail", str(exc), fix_region))
        return checks
    if region.region:
        checks.append(Check(name, "region", "ok", f"{region.region} (from {region.source})"))
    try:
        target = traces_target(settings, region)
    except ConfigError as exc:
        fix = fix_region if region.region is None else f"fix {TRACES_ENV}"
        checks.append(Check(name, "endpoint", "fail", str(exc), fix))
        return checks
    how = "SigV4-signed (service xray)" if target.signed else "unsigned, to an agent/collector"
    checks.append(
        Check(name, "endpoint", "ok", f"{safe_url(target.url)}: {how}, from {target.source}")
    )
    if settings.metrics and region.region is None:
        fix = f"{fix_region}, or trace.cloudwatch.metrics: false"
        checks.append(Check(name, "metrics", "fail", "run metrics need a region", fix))
    elif settings.metrics:
        checks.append(Check(name, "metrics", "ok", f"namespace {settings.namespace}"))
    needs_credentials = target.signed or settings.metrics
    if not needs_credentials:
        checks.append(Check(name, "credentials", "ok", "not needed (unsigned, no metrics)"))
    elif have_boto3:
        try:
            credentials = _default_credentials()
        except require("botocore.exceptions", EXTRA).BotoCoreError as exc:
            fix = "check AWS_PROFILE and your AWS config files"
            detail = f"the AWS credential chain failed: {type(exc).__name__}"
            checks.append(Check(name, "credentials", "fail", detail, fix))
            return checks
        if credentials is None:
            fix = (
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
                "or run with an instance/task role"
            )
            checks.append(
                Check(name, "credentials", "fail", "no AWS credentials in the standard chain", fix)
            )
        else:
            method = getattr(credentials, "method", "unknown")
            checks.append(Check(name, "credentials", "ok", f"found (source: {method})"))
    if probe and all(check.status == "ok" for check in checks):
        session: requests.Session = (
            SigV4Session(region.region or "", XRAY_SERVICE) if target.signed else requests.Session()
        )
        timeout = min(3.0, trace_config.flush_timeout_s)
        with session:
            checks.append(probe_endpoint(name, target.url, {}, timeout_s=timeout, session=session))
    return checks


# -- dashboard ----------------------------------------------------------------------------------


def dashboard_body(namespace: str, region: str) -> str:
    """The packaged dashboard template with namespace and region filled in (a JSON string)."""
    template = json.loads(
        resources.files("runnertrace.exporters").joinpath(DASHBOARD_TEMPLATE).read_text("utf-8")
    )
    values = {"namespace": namespace, "region": region}

    def fill(node: Any) -> Any:
        if isinstance(node, str):
            return string.Template(node).substitute(values)
        if isinstance(node, list):
            return [fill(item) for item in node]
        if isinstance(node, dict):
            return {key: fill(value) for key, value in node.items()}
        return node

    return json.dumps(fill(template), separators=(",", ":"))


def deploy_dashboard(name: str, trace_config: TraceConfig) -> dict[str, Any]:
    """Create or update the CloudWatch dashboard ``name``; returns the ``put_dashboard`` response.

    Raises :class:`ConfigError` for a bad dashboard name or a missing/malformed
    region, and ``MissingExtraError`` when boto3 is not installed. AWS API
    errors (credentials, permissions) propagate as botocore exceptions.
    """
    if not _DASHBOARD_NAME.match(name):
        raise ConfigError(
            f"dashboard name {name!r} is invalid; use 1-255 letters, digits, '-' or '_'"
        )
    settings = trace_config.section(CloudWatchBackend.name, CloudWatchConfig)
    region = _require_region(resolve_region(settings), "a CloudWatch dashboard")
    timeout = settings.timeout_s or trace_config.flush_timeout_s
    client = cloudwatch_client(region, settings.metrics_endpoint, timeout)
    response: dict[str, Any] = client.put_dashboard(
        DashboardName=name, DashboardBody=dashboard_body(settings.namespace, region)
    )
    return response
