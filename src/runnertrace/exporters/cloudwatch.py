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
* **Metrics**: the GenAI metrics (see :mod:`runnertrace.tracing.metrics`) go
  to CloudWatch with ``put_metric_data``, as delta points from the metric
  reader's thread; the run never waits for them. Durations keep their buckets
  (``Values``/``Counts``) for percentiles; token counts are exact statistics.
* **Dashboard**: :func:`deploy_dashboard` fills the packaged template and calls
  ``put_dashboard`` (create or update).

boto3/botocore are imported only when this backend is built.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import string
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.types import AttributeValue

from runnertrace._internal.errors import handle_internal_errors, internal_log
from runnertrace._internal.forksafe import relock_after_fork
from runnertrace._internal.imports import require
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
from runnertrace.tracing.backend import Backend, BackendConfig, Check
from runnertrace.tracing.config import ConfigError
from runnertrace.tracing.metrics import delta_temporality, our_points

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "CloudWatchBackend",
    "CloudWatchMetricExporter",
    "SessionTracker",
    "SigV4Session",
    "dashboard_body",
    "deploy_dashboard",
    "metric_datums",
    "resolve_region",
]

EXTRA = "cloudwatch"
XRAY_SERVICE = "xray"
TRACES_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"

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


# -- sessions -----------------------------------------------------------------------------------


class SessionTracker(SpanProcessor):
    """Remembers each trace's session id, for child spans that lack one.

    CloudWatch's GenAI view needs ``session.id`` on every span, including the
    spans of other instrumentations nested in a run. Parent links are known at
    start, so a span inherits its parent's session there; memory is bounded
    (``max_spans`` spans and ``max_sessions`` traces, the oldest forgotten first).
    """

    def __init__(self, *, max_spans: int = 16384, max_sessions: int = 4096) -> None:
        self.max_spans = max_spans
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, str] = OrderedDict()
        self._span_sessions: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._lock = threading.Lock()
        relock_after_fork(self, _lock=threading.Lock)

    def session_for(self, span: ReadableSpan) -> str | None:
        """The session of ``span``'s run: inherited from its ancestors, else its trace's."""
        context = span.context
        with self._lock:
            return self._span_sessions.get(
                (context.trace_id, context.span_id)
            ) or self._sessions.get(context.trace_id)

    def _track(
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

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with handle_internal_errors("cloudwatch sessions"):
            context = span.get_span_context()
            parent = span.parent
            parent_key = (parent.trace_id, parent.span_id) if parent else None
            with self._lock:
                self._track((context.trace_id, context.span_id), parent_key, span.attributes)

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        if attr.session_of(attributes):
            context = span.context
            with self._lock:
                self._track((context.trace_id, context.span_id), None, attributes)


# -- metrics ------------------------------------------------------------------------------------

_MAX_DATUMS_PER_CALL = 500  # under both of put_metric_data's limits (1000 datums, 1 MB)
_UNITS = {"s": "Seconds", "{token}": "Count", "{run}": "Count", "{call}": "Count"}
DIMENSIONS = {
    attr.AGENT_NAME: "Agent",
    attr.FRAMEWORK: "Framework",
    attr.TOOL_NAME: "Tool",
    attr.PROVIDER: "Provider",
    attr.REQUEST_MODEL: "Model",
    attr.RESPONSE_MODEL: "ResponseModel",
    attr.ERROR_TYPE: "ErrorType",
    attr.OPERATION: "Operation",
    "gen_ai.token.type": "TokenType",
}
"""CloudWatch dimension names for our metric attributes (short, as dashboards show them)."""


def metric_datums(data: MetricsData) -> list[dict[str, Any]]:
    """Our delta metric points as ``put_metric_data`` entries.

    Counters send their increase. Durations (unit ``s``) send their buckets as
    ``Values``/``Counts`` (each bucket's midpoint, clamped to the interval's
    min and max), so CloudWatch can answer percentiles; other histograms send
    exact ``StatisticValues`` (count, sum, min, max), so token sums stay exact.
    """
    datums: list[dict[str, Any]] = []
    for metric, point in our_points(data):
        named = ((DIMENSIONS.get(k, k), str(v)[:1024]) for k, v in (point.attributes or {}).items())
        dimensions = [{"Name": name, "Value": value} for name, value in sorted(named) if value]
        datum: dict[str, Any] = {
            "MetricName": metric.name,
            "Dimensions": dimensions,
            "Timestamp": dt.datetime.fromtimestamp(point.time_unix_nano / 1e9, tz=dt.UTC),
            "Unit": _UNITS.get(metric.unit or "", "None"),
        }
        if not isinstance(point, HistogramDataPoint):
            datum["Value"] = float(point.value)
        elif not point.count:
            continue
        elif metric.unit == "s":
            values, counts = _bucket_values(point)
            datum["Values"], datum["Counts"] = values, counts
        else:
            datum["StatisticValues"] = {
                "SampleCount": float(point.count),
                "Sum": float(point.sum),
                "Minimum": float(point.min),
                "Maximum": float(point.max),
            }
        datums.append(datum)
    return datums


def _bucket_values(point: HistogramDataPoint) -> tuple[list[float], list[float]]:
    bounds = list(point.explicit_bounds)
    low_end, high_end = float(point.min), float(point.max)
    values: list[float] = []
    counts: list[float] = []
    for index, count in enumerate(point.bucket_counts):
        if not count:
            continue
        low = max(bounds[index - 1] if index else low_end, low_end)
        high = min(bounds[index] if index < len(bounds) else high_end, high_end)
        values.append((low + high) / 2)
        counts.append(float(count))
    return values, counts


class CloudWatchMetricExporter(MetricExporter):
    """Sends the GenAI metrics with ``put_metric_data`` (delta points, so CloudWatch adds them up).

    It runs on the metric reader's thread, never on a run's; a failed call is
    counted (``failed_exports``) and logged once per minute.
    """

    def __init__(
        self, *, namespace: str, region: str | None, endpoint_url: str | None, timeout_s: float
    ) -> None:
        super().__init__(preferred_temporality=delta_temporality())
        self.namespace = namespace
        self.region = region
        self.endpoint_url = endpoint_url
        self.timeout_s = timeout_s
        self.sent_datums = 0
        self.failed_exports = 0
        self._client: Any = None
        self._client_lock = threading.Lock()
        relock_after_fork(self, _client_lock=threading.Lock)
        # Making a boto3 client takes up to seconds; made now, off the run's path, it is
        # ready before the first export, which may be a short app's one bounded flush.
        threading.Thread(
            target=self._warm_up, name="runnertrace-cloudwatch-client", daemon=True
        ).start()

    def _warm_up(self) -> None:
        with handle_internal_errors("cloudwatch client"):
            self.client()

    def client(self) -> Any:
        """The boto3 CloudWatch client (made once, off the run's path)."""
        with self._client_lock:
            if self._client is None:
                self._client = cloudwatch_client(self.region, self.endpoint_url, self.timeout_s)
            return self._client

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        data = metric_datums(metrics_data)
        try:
            for start in range(0, len(data), _MAX_DATUMS_PER_CALL):
                chunk = data[start : start + _MAX_DATUMS_PER_CALL]
                self.client().put_metric_data(Namespace=self.namespace, MetricData=chunk)
                self.sent_datums += len(chunk)
        except Exception as exc:  # noqa: BLE001 - AWS faults never reach the host
            self.failed_exports += 1
            internal_log.warning(
                "cloudwatch-metrics-failed",
                "runnertrace: sending metrics to CloudWatch failed (%d exports lost so far): %s",
                self.failed_exports,
                type(exc).__name__,
            )
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # nothing is held between exports

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


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

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.settings = config.section(self.name, CloudWatchConfig)
        self.timeout_s = self.settings.timeout_s or config.flush_timeout_s
        self.region = resolve_region(self.settings)
        self.target = traces_target(self.settings, self.region)
        self.sends_metrics = self.settings.metrics and config.metrics
        if self.target.signed or self.sends_metrics:
            require("boto3", EXTRA)
        if self.sends_metrics:
            _require_region(self.region, "sending metrics (trace.cloudwatch.metrics)")
        self.sessions = SessionTracker()
        self.metrics: CloudWatchMetricExporter | None = None  # made with the pipeline

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
        # The order does not matter for session tracking: mapping happens at export
        # time, after the run span's on_start has recorded the session.
        return [*super().processors(), self.sessions]

    def metric_exporter(self) -> MetricExporter | None:
        if not self.sends_metrics:
            return None
        self.metrics = CloudWatchMetricExporter(
            namespace=self.settings.namespace,
            region=self.region.region,
            endpoint_url=self.settings.metrics_endpoint,
            timeout_s=self.timeout_s,
        )
        return self.metrics

    def resource_attributes(self) -> Mapping[str, AttributeValue]:
        extra: dict[str, AttributeValue] = {"aws.service.type": "gen_ai_agent"}
        if self.settings.log_group_names:
            extra["aws.log.group.names"] = tuple(self.settings.log_group_names)
        return extra

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        attributes = span.attributes or {}
        extra: dict[str, AttributeValue] = {}
        if not attributes.get(attr.SESSION_ID):
            session = attr.session_of(attributes) or self.sessions.session_for(span)
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


def cloudwatch_checks(trace_config: BackendConfig, *, probe: bool = True) -> list[Check]:
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


def deploy_dashboard(name: str, trace_config: BackendConfig) -> dict[str, Any]:
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
