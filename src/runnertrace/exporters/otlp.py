"""``otlp``: spans to any OTLP/HTTP endpoint, plus the OTLP plumbing every vendor backend shares.

Langfuse, Logfire and Traceloop all accept OTLP/HTTP protobuf; what differs is
the URL, the auth header and the attribute mapping. So each vendor backend is a
:class:`OtlpHttpBackend` that says where and with which headers, and this module
builds the one kind of exporter they all use (:func:`otlp_http_exporter`) and
the one reachability probe ``runnertrace doctor`` runs (:func:`probe_endpoint`).

Two OTel defaults are wrong for a vendor and are switched off there: the
OTLP exporter adds ``OTEL_EXPORTER_OTLP_HEADERS`` and the ``OTEL_EXPORTER_OTLP_*``
TLS files to every request. Those are meant for the user's collector; sent to a
vendor they would leak the collector's credentials or break TLS. The ``otlp``
backend keeps them, as any OTel exporter would.

Endpoint for ``otlp``: ``trace.otlp.endpoint``, else
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
``/v1/traces``, else ``http://localhost:4318/v1/traces``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.re import parse_env_headers
from opentelemetry.util.types import AttributeValue
from pydantic import SecretStr
from requests.adapters import HTTPAdapter

from runnertrace._internal.errors import internal_log
from runnertrace._internal.forksafe import import_before_threads, relock_after_fork
from runnertrace.exporters.vendor_config import OtlpConfig
from runnertrace.tracing import attributes as A
from runnertrace.tracing.backend import Backend, Check
from runnertrace.tracing.config import ConfigError
from runnertrace.tracing.drops import current_export, explain, exporting, metric_export_failed

__all__ = [
    "DEFAULT_OTLP_ENDPOINT",
    "OtlpBackend",
    "OtlpHttpBackend",
    "ReportingSession",
    "ScopedSession",
    "Setting",
    "describe_failure",
    "lookup",
    "otlp_http_exporter",
    "otlp_metric_exporter",
    "probe_endpoint",
    "safe_url",
    "validate_url",
]

DEFAULT_OTLP_ENDPOINT = "http://localhost:4318/v1/traces"
PROBE_TIMEOUT_S = 3.0

_COMPRESSION = {"gzip": Compression.Gzip, "none": Compression.NoCompression}
# Headers the OTLP client itself sets; everything else must be ours.
_PROTOCOL_HEADERS = frozenset({"content-type", "content-encoding", "user-agent"})
# What a fresh requests.Session sends on its own (Accept, Accept-Encoding, Connection, ...).
_REQUESTS_DEFAULT_HEADERS = frozenset(k.lower() for k in requests.utils.default_headers())


# -- settings: config value, else the vendor's env var, else a default ----------------------
@dataclass(frozen=True)
class Setting:
    """One resolved setting and where it came from (for error messages and ``doctor``)."""

    key: str
    env: tuple[str, ...]
    value: str | None
    source: str | None

    def required(self) -> str:
        """The value, or a :class:`ConfigError` naming the key and both ways to set it."""
        if self.value is None:
            raise ConfigError(
                f"{self.key} is not set; set it in runnertrace.yaml or {' / '.join(self.env)}"
            )
        return self.value


def lookup(
    key: str, configured: str | SecretStr | None, *env: str, default: str | None = None
) -> Setting:
    """Resolve ``key``: the config value, else the first non-empty env var, else ``default``."""
    if isinstance(configured, SecretStr):
        configured = configured.get_secret_value()
    if configured:
        return Setting(key, env, configured, "runnertrace.yaml")
    for name in env:
        value = os.environ.get(name, "").strip()
        if value:
            return Setting(key, env, value, name)
    return Setting(key, env, default, "default" if default is not None else None)


def safe_url(url: str) -> str:
    """``url`` without userinfo or query, so that it can be printed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else url.split("?")[0]


def validate_url(setting: Setting, example: str) -> str:
    """The setting as an ``http(s)://host[:port][/path]`` URL without a trailing slash.

    An endpoint becomes a connection target, so it is checked before anything
    is sent; the error names the key, where the bad value came from, and a
    well-formed example.
    """
    url = setting.required().strip()
    problem = None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        problem = str(exc)
    else:
        if parts.scheme not in ("http", "https"):
            problem = "the scheme must be http or https"
        elif not parts.hostname:
            problem = "it has no host"
        elif any(c.isspace() for c in url):
            problem = "it contains whitespace"
    if problem:
        raise ConfigError(
            f"{setting.key} is not a valid URL ({problem}): {safe_url(url)!r} "
            f"(from {setting.source}); expected something like {example}"
        )
    return url.rstrip("/")


# -- the exporter ---------------------------------------------------------------------------
# Loggers the OTLP exporter reports failed exports on (once per batch, at ERROR).
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.common.http",
)
# The encoder, which leaves out an attribute it cannot encode and logs a traceback.
_ENCODER_LOGGER = "opentelemetry.exporter.otlp.proto.common._internal"
_log_filter_lock = threading.Lock()
relock_after_fork(sys.modules[__name__], _log_filter_lock=threading.Lock)
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
_HOST = re.compile(r"host='([^']+)', port=(\d+)")
# What the exporter says when it gives up: true, but less than what it said before.
_GENERIC_FAILURES = ("due to timeout, max retries or shutdown",)


def describe_failure(reason: object) -> str:
    """A requests error or an HTTP reason as a short cause: "Connection refused (host:port)"."""
    if not isinstance(reason, BaseException):
        return f"the receiver answered {reason}"
    text = str(reason)
    errno = _ERRNO.search(text)
    if errno:
        detail = errno.group(1).strip().rstrip(".")
    elif "timed out" in text.lower():
        detail = "timed out"
    else:
        detail = type(reason).__name__
    where = _HOST.search(text)
    return f"{detail} ({where.group(1)}:{where.group(2)})" if where else detail


def _cause(record: logging.LogRecord) -> tuple[str, bool]:
    """The cause a record of the OTLP exporter gives, and whether it is only generic."""
    message = str(record.msg)
    args = record.args if isinstance(record.args, tuple) else ()
    if message.startswith("Transient error") and args:
        return describe_failure(args[0]), False
    if message.startswith("Failed to export") and "code: %s" in message and len(args) >= 2:
        return f"HTTP {args[0]} {args[1]}", False
    text = record.getMessage()
    return text, any(generic in text for generic in _GENERIC_FAILURES)


class _OncePerMessageFromOurThreads(logging.Filter):
    """Rate-limits what the OTel exporter logs from our export threads.

    A backend that is down would otherwise log an error for every batch, for as
    long as it stays down. During one of our exports, what the exporter logs
    becomes the cause in our lost-spans line; elsewhere on our threads (named
    ``runnertrace-...``) a record passes once per distinct message per minute;
    other exporters in the application log exactly as before.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == _ENCODER_LOGGER:
            return self._encoder(record)
        if current_export() is not None:
            # Retry chatter ("Transient error ... retrying") and the final failure
            # become the cause in our one lost-spans warning (tracing/drops.py).
            cause, weak = _cause(record)
            explain(cause, weak=weak)
            return False
        if not (record.threadName or "").startswith("runnertrace-"):
            return True
        return internal_log.should_log(f"otel-exporter {record.name} {record.msg}")

    @staticmethod
    def _encoder(record: logging.LogRecord) -> bool:
        """One line without a traceback, once per attribute key, for our exports."""
        export = current_export()
        if export is None:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = args[0] if args else "?"
        internal_log.warning(
            f"otlp-encode:{export.backend}:{key}",
            "runnertrace: %s: attribute %s of a span cannot be encoded and was left out "
            "(a string that is not valid Unicode)",
            export.backend,
            _printable(key),
        )
        return False


def _printable(text: object) -> str:
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _install_log_filter() -> None:
    with _log_filter_lock:
        for name in (*_EXPORTER_LOGGERS, _ENCODER_LOGGER):
            logger = logging.getLogger(name)
            if not any(isinstance(f, _OncePerMessageFromOurThreads) for f in logger.filters):
                logger.addFilter(_OncePerMessageFromOurThreads())


class ReportingSession(requests.Session):
    """A requests session that tells the export running on this thread why a request failed.

    The OTLP exporter does not always log the reason (a refused connection with
    no time left to retry is only "Failed to export span batch due to timeout,
    max retries or shutdown"), so the cause is taken where it happens: the
    connection error, or the HTTP status the receiver answered.
    """

    def request(  # type: ignore[override]
        self, method: str, url: str, *args: Any, **kwargs: Any
    ) -> requests.Response:
        try:
            response = super().request(method, url, *args, **kwargs)
        except requests.RequestException as exc:
            explain(describe_failure(exc))
            raise
        if not response.ok:
            explain(f"{safe_url(url)} answered HTTP {response.status_code} {response.reason}")
        return response


class ScopedSession(ReportingSession):
    """A requests session that sends only the headers it was built for.

    ``OTLPSpanExporter`` merges ``OTEL_EXPORTER_OTLP_HEADERS`` and the OTLP TLS
    env vars into every request; a vendor backend must not forward those, so
    this session drops any header it was not told about and verifies TLS with
    the default trust store (``REQUESTS_CA_BUNDLE`` still applies). Subclass it
    to add request signing (override ``send``).
    """

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__()
        self.allowed_headers = frozenset(k.lower() for k in headers) | _PROTOCOL_HEADERS

    def request(  # type: ignore[override]
        self, method: str, url: str, *args: Any, **kwargs: Any
    ) -> requests.Response:
        headers = kwargs.get("headers") or {}
        sent: dict[str, str | None] = {
            k: v for k, v in headers.items() if k.lower() in self.allowed_headers
        }
        # Exporters before 1.44 put OTEL_EXPORTER_OTLP_HEADERS on the session itself rather
        # than on each request; a None value is how requests drops a session-level header.
        for name in self.headers:
            if name.lower() not in self.allowed_headers | _REQUESTS_DEFAULT_HEADERS:
                sent[name] = None
        kwargs["headers"] = sent
        kwargs["verify"] = True
        self.cert = None
        return super().request(method, url, *args, **kwargs)


class _FreshConnectionsAfterFork:
    """Gives a session new connection pools in a forked child.

    A pooled keep-alive connection is a socket the parent shares with the child;
    both writing requests to it would mix their bytes, and a connection the
    parent was using at the fork is mid-request. The child's pools start empty,
    and the parent's sockets are left to the parent (not closed from here).
    """

    def __init__(self, session: requests.Session) -> None:
        self.session = session

    def after_fork_in_child(self) -> None:
        for prefix in ("https://", "http://"):
            self.session.mount(prefix, HTTPAdapter())


def _fork_safe(session: requests.Session) -> requests.Session:
    from runnertrace.tracing.export import reinit_after_fork

    guard = _FreshConnectionsAfterFork(session)
    session.runnertrace_fork_guard = guard  # type: ignore[attr-defined] # lives as the session does
    reinit_after_fork(guard)
    return session


def otlp_http_exporter(
    endpoint: str,
    headers: Mapping[str, str],
    *,
    timeout_s: float | None,
    compression: Literal["gzip", "none"] | None = "gzip",
    scoped: bool = True,
    session: requests.Session | None = None,
) -> OTLPSpanExporter:
    """The OTLP/HTTP protobuf exporter every network backend uses.

    ``scoped`` (for vendors) sends exactly ``headers`` through a
    :class:`ScopedSession` (or the given ``session``, which should be one);
    unscoped behaves like a stock OTel exporter and honours the ``OTEL_*`` env
    vars. ``compression=None`` and ``timeout_s=None`` defer to those env vars.
    """
    if session is None:
        session = ScopedSession(headers) if scoped else ReportingSession()
    _fork_safe(session)
    _install_log_filter()
    return OTLPSpanExporter(
        endpoint=endpoint,
        headers=dict(headers),
        timeout=timeout_s,
        compression=_COMPRESSION[compression] if compression else None,
        session=session,
    )


# requests imports netrc on a session's first request, which happens on our export
# thread: a fork in the middle of that import would leave the child's export hung.
import_before_threads("netrc")

_SDK_READER_THREAD = "OtelPeriodicExportingMetricReader"
_OUR_READER_THREAD = "runnertrace-metrics-reader"


class _OurMetricsExporter(OTLPMetricExporter):
    """Sends our instruments only: on an application's meter provider, a reader sees all of its.

    A failed export is counted for ``backend`` and said in its loss report
    (``tracing/drops.py``); what the OTel exporter logs about it (retries, the
    final failure) is folded into that, on whichever thread the export runs.
    """

    def __init__(self, *args: Any, backend: str = "otlp", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backend = backend

    def export(
        self, metrics_data: MetricsData, timeout_millis: float | None = None, **kwargs: Any
    ) -> MetricExportResult:
        from runnertrace.tracing.metrics import only_ours

        ours = only_ours(metrics_data)
        if not ours.resource_metrics:
            return MetricExportResult.SUCCESS
        thread = threading.current_thread()
        if thread.name == _SDK_READER_THREAD:
            # The SDK's reader made this thread for our reader alone; naming it ours puts
            # what the exporter logs on it under the same rate limit as our other threads.
            thread.name = _OUR_READER_THREAD
        with exporting(self.backend) as attempt:
            try:
                result = super().export(ours, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:  # noqa: BLE001 - exporter faults never reach the host
                attempt.cause = attempt.cause or _printable(f"the export raised {exc!r}")
                result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            metric_export_failed(
                self.backend,
                attempt.cause or "the export failed",
                periodic=thread.name == _OUR_READER_THREAD,
            )
        return result


def otlp_metric_exporter(
    endpoint: str,
    headers: Mapping[str, str],
    *,
    timeout_s: float | None,
    compression: Literal["gzip", "none"] | None = "gzip",
    scoped: bool = True,
    temporality: dict[type, AggregationTemporality] | None = None,
    backend: str = "otlp",
) -> MetricExporter:
    """The OTLP/HTTP protobuf metric exporter: :func:`otlp_http_exporter`'s rules, for metrics.

    ``temporality=None`` keeps the SDK's default (cumulative, or
    ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``).
    """
    _install_log_filter()
    return _OurMetricsExporter(
        endpoint=endpoint,
        headers=dict(headers),
        timeout=timeout_s,
        compression=_COMPRESSION[compression] if compression else None,
        session=_fork_safe(ScopedSession(headers) if scoped else ReportingSession()),
        preferred_temporality=temporality,
        backend=backend,
    )


# -- doctor -----------------------------------------------------------------------------------
def probe_endpoint(
    backend: str,
    endpoint: str,
    headers: Mapping[str, str],
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
    session: requests.Session | None = None,
) -> Check:
    """POST an empty OTLP export (no spans) to ``endpoint`` and classify the answer.

    An empty ``ExportTraceServiceRequest`` is valid OTLP, so this exercises the
    exact URL, auth and protocol the exporter uses without sending data. The
    request is bounded by ``timeout_s``; neither headers nor credentials appear
    in the finding.
    """
    where = safe_url(endpoint)
    send = session or requests.Session()
    try:
        response = send.post(
            endpoint,
            data=b"",
            headers={**headers, "Content-Type": "application/x-protobuf"},
            timeout=timeout_s,
            allow_redirects=False,
        )
    except requests.Timeout:
        return Check(
            backend,
            "reachable",
            "fail",
            f"{where} did not answer within {timeout_s:.0f}s",
            fix="check that the endpoint is up and reachable from this machine",
        )
    except requests.RequestException as exc:
        return Check(
            backend,
            "reachable",
            "fail",
            f"cannot connect to {where} ({type(exc).__name__})",
            fix="check the host name and port, and any proxy settings",
        )
    finally:
        if session is None:
            send.close()
    status = response.status_code
    if 200 <= status < 300:
        return Check(
            backend, "reachable", "ok", f"{where} accepted an empty export (HTTP {status})"
        )
    if status in (401, 403):
        return Check(
            backend,
            "reachable",
            "fail",
            f"{where} rejected the credentials (HTTP {status})",
            fix="check the keys for this project and region",
        )
    if status == 404:
        return Check(
            backend,
            "reachable",
            "fail",
            f"{where} has no OTLP traces endpoint (HTTP 404)",
            fix="check the host/base URL setting",
        )
    return Check(backend, "reachable", "warn", f"{where} is reachable but answered HTTP {status}")


# -- the backends -----------------------------------------------------------------------------
class OtlpHttpBackend(Backend):
    """A backend that ships OTLP/HTTP protobuf: it only says where and with which headers.

    Resolving the settings is lazy (construction never fails or touches the
    network); :meth:`exporter` raises :class:`ConfigError` for a missing key or
    a malformed URL, and :meth:`check` reports the same problems as findings.
    """

    scoped: ClassVar[bool] = True
    sends_metrics: ClassVar[bool] = False
    """Whether the receiver takes OTLP metrics at ``/v1/metrics`` beside ``/v1/traces``."""

    @abstractmethod
    def credentials(self) -> list[Setting]:
        """The settings that hold credentials (checked for presence by ``doctor``)."""

    @abstractmethod
    def traces_endpoint(self) -> str:
        """The full traces URL; raises :class:`ConfigError` when unset or malformed."""

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """The headers to send (auth included); raises :class:`ConfigError` on a missing key."""

    def compression(self) -> Literal["gzip", "none"] | None:
        """Vendors get gzip (what their own SDKs send); ``None`` defers to the OTel env vars."""
        return "gzip"

    def timeout_s(self) -> float | None:
        section = getattr(self.trace_config, self.name, None)
        configured = getattr(section, "timeout_s", None)
        return configured if configured is not None else self.trace_config.flush_timeout_s

    def validate(self) -> None:
        # Every missing credential at once (as doctor lists them), then the URL.
        problems: list[str] = []
        for setting in self.credentials():
            try:
                setting.required()
            except ConfigError as exc:
                problems.append(str(exc))
        try:
            self.traces_endpoint()
        except ConfigError as exc:
            problems.append(str(exc))
        if problems:
            raise ConfigError("\n  ".join(problems))

    def exporter(self) -> SpanExporter:
        return otlp_http_exporter(
            self.traces_endpoint(),
            self.probe_headers(),
            timeout_s=self.timeout_s(),
            compression=self.compression(),
            scoped=self.scoped,
        )

    def metrics_endpoint(self) -> str | None:
        """The metrics URL: the traces URL with ``/v1/metrics`` for ``/v1/traces``.

        ``None`` (no metrics) when the traces URL does not end in ``/v1/traces``:
        a receiver at some other path may take no metrics at all.
        """
        traces = self.traces_endpoint()
        if not traces.endswith("/v1/traces"):
            return None
        return traces.removesuffix("/v1/traces") + "/v1/metrics"

    def metric_temporality(self) -> dict[type, AggregationTemporality] | None:
        return None

    def metric_exporter(self) -> MetricExporter | None:
        if not self.sends_metrics:
            return None
        url = self.metrics_endpoint()
        if url is None:
            return None
        # Metrics are exported at each flush, beside the spans: at most half of the flush's
        # time, so that retries against a down metrics endpoint never make a flush miss it.
        half_flush = self.trace_config.flush_timeout_s / 2
        timeout = self.timeout_s()
        return otlp_metric_exporter(
            url,
            self.headers(),
            timeout_s=half_flush if timeout is None else min(timeout, half_flush),
            compression=self.compression(),
            scoped=self.scoped,
            temporality=self.metric_temporality(),
            backend=self.name,
        )

    def probe_headers(self) -> dict[str, str]:
        """The headers the exporter will really send (``otlp`` adds the env ones)."""
        return self.headers()

    def check(self) -> list[Check]:
        checks: list[Check] = []
        missing = [s for s in self.credentials() if s.value is None]
        if missing:
            for setting in missing:
                checks.append(
                    Check(
                        self.name,
                        "credentials",
                        "fail",
                        f"{setting.key} is not set",
                        fix=f"set {setting.key} in runnertrace.yaml or {' / '.join(setting.env)}",
                    )
                )
        elif self.credentials():
            sources = ", ".join(f"{s.key} from {s.source}" for s in self.credentials())
            checks.append(Check(self.name, "credentials", "ok", f"found {sources}"))
        try:
            endpoint = self.traces_endpoint()
        except ConfigError as exc:
            checks.append(
                Check(self.name, "endpoint", "fail", str(exc), fix="fix the URL as described")
            )
            return checks
        checks.append(Check(self.name, "endpoint", "ok", safe_url(endpoint)))
        if missing:
            return checks
        try:
            headers = self.probe_headers()
        except ConfigError as exc:
            checks.append(Check(self.name, "credentials", "fail", str(exc)))
            return checks
        timeout = min(PROBE_TIMEOUT_S, self.trace_config.flush_timeout_s)
        checks.append(probe_endpoint(self.name, endpoint, headers, timeout_s=timeout))
        return checks


class OtlpBackend(OtlpHttpBackend):
    """Any OTLP/HTTP receiver (a collector, Phoenix, Jaeger, ...).

    Spans keep their GenAI semconv keys; by default (``trace.otlp.vendor_keys``)
    the exported copy also gets the spellings that OpenInference readers such as
    Phoenix need (``openinference.span.kind`` for chain spans,
    ``input.value``/``output.value``, ``session.id``), and no other vendor's or
    deprecated key unless ``vendor_keys: all`` asks for them.
    """

    name = "otlp"
    config_model = OtlpConfig

    @property
    def settings(self) -> OtlpConfig:
        """``trace.otlp``, typed."""
        return self.trace_config.section(self.name, OtlpConfig)

    scoped = False
    sends_metrics = True

    def metrics_endpoint(self) -> str | None:
        """``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, else derived from the traces URL."""
        setting = lookup(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", None, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
        )
        if setting.value is not None:
            return validate_url(setting, "http://collector:4318/v1/metrics")
        return super().metrics_endpoint()

    def compression(self) -> Literal["gzip", "none"] | None:
        return self.settings.compression

    def credentials(self) -> list[Setting]:
        return []

    def timeout_s(self) -> float | None:
        """Config, else ``OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT`` (read by the exporter), else
        ``trace.flush_timeout_s``, so that one hung export never outlasts a flush."""
        configured = self.settings.timeout_s
        if configured is not None:
            return configured
        if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TIMEOUT"
        ):
            return None
        return self.trace_config.flush_timeout_s

    def traces_endpoint(self) -> str:
        config = self.settings
        setting = lookup(
            "trace.otlp.endpoint", config.endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
        if setting.value is None:
            base = lookup("trace.otlp.endpoint", None, "OTEL_EXPORTER_OTLP_ENDPOINT")
            if base.value is not None:
                return validate_url(base, "http://collector:4318") + "/v1/traces"
            setting = Setting(setting.key, setting.env, DEFAULT_OTLP_ENDPOINT, "default")
        return validate_url(setting, "http://collector:4318/v1/traces")

    def headers(self) -> dict[str, str]:
        return dict(self.settings.headers)

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        keys = self.settings.vendor_keys
        if keys == "none":
            return None
        attrs = span.attributes or {}
        return A.vendor_mirrors(attrs, attrs.get(A.SPAN_TYPE), legacy=keys == "all") or None

    def probe_headers(self) -> dict[str, str]:
        raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get(
            "OTEL_EXPORTER_OTLP_HEADERS", ""
        )
        merged = {k.lower(): v for k, v in parse_env_headers(raw, liberal=True).items()}
        merged.update({k.lower(): v for k, v in self.headers().items()})
        return merged

    def check(self) -> list[Check]:
        names = sorted(self.probe_headers())
        detail = f"headers: {', '.join(names)}" if names else "no headers (none needed)"
        return [Check(self.name, "headers", "ok", detail), *super().check()]
