"""OTel GenAI metrics, recorded from the spans we finish (one pass, no second look at traces).

What is recorded, per finished span of ours (``runnertrace.span.type``):

* ``gen_ai.client.operation.duration`` (s), from run, chat and tool spans:
  operation, agent, framework, provider and models (chat), tool (tool), ``error.type``;
* ``gen_ai.client.token.usage`` ({token}), from chat spans, with ``gen_ai.token.type``;
* ``gen_ai.client.operation.time_to_first_chunk`` (s), from streamed chat spans;
* ``runnertrace.runs`` and ``runnertrace.run.errors`` ({run}): agent, framework
  (and ``error.type`` on errors);
* ``runnertrace.tool.calls`` and ``runnertrace.tool.errors`` ({call}): agent,
  framework, tool (and ``error.type``);
* ``runnertrace.cost`` (USD), from priced chat spans: agent, framework, provider, models.

The histograms carry the bucket boundaries the GenAI semantic conventions
advise. Every attribute value is capped: after ``max_values`` distinct values of
one attribute, new ones are recorded as ``_OTHER``, so a model or tool name that
varies per call cannot blow up a metrics backend.

Why from spans and not from events: the span is the one record of a model call
that every runner produces, already with its duration, tokens and error; reading
it when it ends keeps metrics independent of the event state machine. The
recording happens on a batch worker thread (:class:`MetricsSpanProcessor`), so the
traced run pays only a queue append per span. Since unsampled spans never end in
a processor, with ``trace.sample_rate`` below 1 the metrics count sampled runs only.

The meter provider is set up like the tracer provider (:class:`MetricsPipeline`):
the application's SDK ``MeterProvider`` when it has one (our backends' readers
are added to it, and our exporters send only our own instruments), otherwise a
private provider that is never set globally.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Metric,
    MetricExporter,
    MetricReader,
    MetricsData,
    ResourceMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from runnertrace._internal.errors import internal_log, report_internal_error
from runnertrace._internal.version import __version__
from runnertrace.tracing import attributes as A
from runnertrace.tracing.drops import closing, current_export, exporting, metric_export_failed

__all__ = [
    "DURATION_BUCKETS",
    "METER_NAME",
    "OTHER",
    "TOKEN_BUCKETS",
    "GenAIMetrics",
    "MetricsPipeline",
    "MetricsSpanProcessor",
    "delta_temporality",
    "only_ours",
    "our_points",
    "periodic_reader",
]

METER_NAME = "runnertrace"
OTHER = "_OTHER"
DEFAULT_MAX_VALUES = 100
"""Distinct values kept per attribute before new ones become ``_OTHER``."""

DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
"""The GenAI conventions' advice for operation duration and time to first chunk (seconds)."""
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
"""The GenAI conventions' advice for ``gen_ai.client.token.usage``."""

TOKEN_TYPE = "gen_ai.token.type"
DURATION = "gen_ai.client.operation.duration"
TOKEN_USAGE = "gen_ai.client.token.usage"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
RUNS = "runnertrace.runs"
RUN_ERRORS = "runnertrace.run.errors"
TOOL_CALLS = "runnertrace.tool.calls"
TOOL_ERRORS = "runnertrace.tool.errors"
COST = "runnertrace.cost"


class _Capped:
    """The distinct values seen for one attribute, up to a cap; the rest read as ``_OTHER``."""

    def __init__(self, key: str, limit: int) -> None:
        self.key = key
        self.limit = limit
        self.values: set[str] = set()
        self._lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        values = self.values
        if value in values:
            return value
        with self._lock:
            if value in values:
                return value
            if len(values) < self.limit:
                values.add(value)
                return value
        internal_log.warning(
            f"metric-cardinality-{self.key}",
            "runnertrace: metric attribute %s has more than %d distinct values; "
            "further values are recorded as %s",
            self.key,
            self.limit,
            OTHER,
        )
        return OTHER


def _text(attributes: Mapping[str, Any], *keys: str) -> str | None:
    """The first string value among ``keys`` (new vocabulary first, then the old key)."""
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class GenAIMetrics:
    """The instruments, and one ``record_*`` method per kind of span we finish.

    The methods take a span's attributes and times, so any producer of our
    spans (or of the same facts) can feed them; :class:`MetricsSpanProcessor`
    feeds them finished spans.
    """

    def __init__(self, meter: Meter, *, max_values: int = DEFAULT_MAX_VALUES) -> None:
        self.max_values = max_values
        self._caps: dict[str, _Capped] = {}
        # trace id -> (run span id, framework): only run spans carry the framework,
        # so the model and tool calls of a run take it from the run that started them.
        self._frameworks: dict[int, tuple[int, str]] = {}
        self._frameworks_lock = threading.Lock()
        self.duration = meter.create_histogram(
            DURATION,
            unit="s",
            description="GenAI operation duration (model calls, agent runs, tool calls).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used per model call.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from the request to the first chunk of a streamed response.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.runs = meter.create_counter(RUNS, unit="{run}", description="Agent runs.")
        self.run_errors = meter.create_counter(
            RUN_ERRORS, unit="{run}", description="Agent runs that ended in an error."
        )
        self.tool_calls = meter.create_counter(TOOL_CALLS, unit="{call}", description="Tool calls.")
        self.tool_errors = meter.create_counter(
            TOOL_ERRORS, unit="{call}", description="Tool calls that ended in an error."
        )
        self.cost = meter.create_counter(
            COST, unit="USD", description="List price of model calls (genai-prices)."
        )

    def after_fork_in_child(self) -> None:
        """New locks: the worker that records may have held one when the process forked."""
        self._frameworks_lock = threading.Lock()
        for cap in self._caps.values():
            cap.after_fork_in_child()

    # -- attributes ---------------------------------------------------------------------
    def _cap(self, key: str, value: str) -> str:
        cap = self._caps.get(key)
        if cap is None:
            cap = self._caps.setdefault(key, _Capped(key, self.max_values))
        return cap(value)

    def _attrs(
        self, attributes: Mapping[str, Any], keys: Sequence[tuple[str, ...]]
    ) -> dict[str, str]:
        """The metric attributes: for each group of keys (new first), its first value, capped."""
        out: dict[str, str] = {}
        for group in keys:
            value = _text(attributes, *group)
            if value is not None:
                out[group[0]] = self._cap(group[0], value)
        return out

    # -- recording ------------------------------------------------------------------------
    def record_run(self, attributes: Mapping[str, Any], duration_s: float, failed: bool) -> None:
        attrs = self._attrs(attributes, _RUN_KEYS)
        self.runs.add(1, attrs)
        error = self._error(attributes, failed)
        if error is not None:
            attrs[A.ERROR_TYPE] = error
            self.run_errors.add(1, attrs)
        attrs[A.OPERATION] = "invoke_agent"
        self.duration.record(duration_s, attrs)

    def record_chat(self, attributes: Mapping[str, Any], duration_s: float, failed: bool) -> None:
        attrs = self._attrs(attributes, _CHAT_KEYS)
        attrs[A.OPERATION] = "chat"
        for token_type, key in (("input", A.INPUT_TOKENS), ("output", A.OUTPUT_TOKENS)):
            count = _number(attributes.get(key))
            if count is not None:
                self.tokens.record(count, {**attrs, TOKEN_TYPE: token_type})
        first = _number(attributes.get(A.TTFC))
        if first is None:
            first = _number(attributes.get(A.TTFC_LOGFIRE))
        if first is not None:
            self.first_chunk.record(first, attrs)
        cost = _number(attributes.get(A.COST))
        if cost is not None:
            self.cost.add(cost, attrs)
        error = self._error(attributes, failed)
        if error is not None:
            attrs[A.ERROR_TYPE] = error
        self.duration.record(duration_s, attrs)

    def record_tool(self, attributes: Mapping[str, Any], duration_s: float, failed: bool) -> None:
        attrs = self._attrs(attributes, _TOOL_KEYS)
        self.tool_calls.add(1, attrs)
        error = self._error(attributes, failed)
        if error is not None:
            attrs[A.ERROR_TYPE] = error
            self.tool_errors.add(1, attrs)
        attrs[A.OPERATION] = "execute_tool"
        self.duration.record(duration_s, attrs)

    def _error(self, attributes: Mapping[str, Any], failed: bool) -> str | None:
        error = _text(attributes, A.ERROR_TYPE)
        if error is None and failed:
            error = OTHER  # the conventions' value for an error of no known type
        return None if error is None else self._cap(A.ERROR_TYPE, error)

    def run_started(self, trace_id: int, span_id: int, framework: object) -> None:
        """Remember a run's framework for its model and tool calls (the outermost run's)."""
        if not isinstance(framework, str):
            return
        with self._frameworks_lock:
            if trace_id in self._frameworks:
                return
            if len(self._frameworks) >= _MAX_OPEN_RUNS:
                del self._frameworks[next(iter(self._frameworks))]
            self._frameworks[trace_id] = (span_id, framework)

    def record_span(self, span: ReadableSpan) -> None:
        """Record one finished span of ours; other spans are ignored."""
        attributes = span.attributes or {}
        kind = attributes.get(A.SPAN_TYPE)
        record = _BY_SPAN_TYPE.get(kind)
        if record is None:
            return
        context = span.context
        run = self._frameworks.get(context.trace_id) if context is not None else None
        if run is not None and context is not None:
            if A.FRAMEWORK not in attributes:
                attributes = {**attributes, A.FRAMEWORK: run[1]}
            elif kind == "run" and run[0] == context.span_id:
                with self._frameworks_lock:
                    self._frameworks.pop(context.trace_id, None)
        start, end = span.start_time or 0, span.end_time or 0
        failed = span.status.status_code is StatusCode.ERROR
        record(self, attributes, max(0, end - start) / 1e9, failed)


_MAX_OPEN_RUNS = 4096


_RUN_KEYS = ((A.AGENT_NAME,), (A.FRAMEWORK,))
_CHAT_KEYS = (
    (A.AGENT_NAME,),
    (A.FRAMEWORK,),
    (A.PROVIDER, A.SYSTEM),
    (A.REQUEST_MODEL,),
    (A.RESPONSE_MODEL,),
)
_TOOL_KEYS = ((A.AGENT_NAME,), (A.FRAMEWORK,), (A.TOOL_NAME, A.LEGACY_TOOL_NAME))

_BY_SPAN_TYPE: dict[object, Callable[[GenAIMetrics, Mapping[str, Any], float, bool], None]] = {
    "run": GenAIMetrics.record_run,
    "message": GenAIMetrics.record_chat,
    "tool": GenAIMetrics.record_tool,
}


class _RecordingExporter(SpanExporter):
    """A span "exporter" that records metrics: it runs on the batch worker, off the run's path."""

    def __init__(self, metrics: GenAIMetrics) -> None:
        self.metrics = metrics

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            try:
                self.metrics.record_span(span)
            except Exception as exc:  # noqa: BLE001 - one bad span must not stop the batch
                report_internal_error("metrics", exc)
        return SpanExportResult.SUCCESS


class MetricsSpanProcessor(SpanProcessor):
    """Feeds finished spans to :class:`GenAIMetrics` through a bounded batch queue.

    Its ``force_flush`` first drains the queue (every span ended so far is
    recorded), then has the pipeline's readers export; its ``shutdown`` ends
    the pipeline. So the setup's one flush/shutdown covers metrics too.
    """

    def __init__(self, pipeline: MetricsPipeline, *, flush_timeout_s: float) -> None:
        from runnertrace.tracing.export import BoundedBatchSpanProcessor

        self.pipeline = pipeline
        self.flush_timeout_s = flush_timeout_s
        self._shut_down = False
        self.batch = BoundedBatchSpanProcessor(
            _RecordingExporter(pipeline.metrics),
            name="metrics",
            export_timeout_s=flush_timeout_s,
        )

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attributes = span.attributes
        if attributes and attributes.get(A.SPAN_TYPE) == "run":
            context = span.get_span_context()
            self.pipeline.metrics.run_started(
                context.trace_id, context.span_id, attributes.get(A.FRAMEWORK)
            )

    def on_end(self, span: ReadableSpan) -> None:
        self.batch.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        drained = self.batch.force_flush(timeout_millis)
        remaining = max(0.0, deadline - time.monotonic())
        return self.pipeline.force_flush(int(remaining * 1000)) and drained

    def shutdown(self) -> None:
        if self._shut_down:  # the setup and the provider's own shutdown may both call it
            return
        self._shut_down = True
        # One budget for both halves: recording what is queued, then the last export.
        deadline = time.monotonic() + self.flush_timeout_s
        self.batch.shutdown(self.flush_timeout_s / 2)
        remaining = max(0.05, deadline - time.monotonic())
        self.pipeline.shutdown(int(remaining * 1000))


def only_ours(data: MetricsData) -> MetricsData:
    """``data`` restricted to our instruments (a reader on the app's provider sees all of its)."""
    kept = []
    for resource_metrics in data.resource_metrics:
        scopes = [s for s in resource_metrics.scope_metrics if s.scope.name == METER_NAME]
        if scopes:
            kept.append(
                ResourceMetrics(resource_metrics.resource, scopes, resource_metrics.schema_url)
            )
    return MetricsData(kept)


def our_points(data: MetricsData) -> Iterator[tuple[Metric, Any]]:
    """Each (metric, data point) of our instruments in ``data``, for exporters that flatten."""
    for resource_metrics in only_ours(data).resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    yield metric, point


class MetricsPipeline:
    """A meter provider (the app's or a private one), our readers on it, and the instruments."""

    def __init__(
        self,
        provider: MeterProvider,
        readers: Sequence[MetricReader],
        *,
        owns_provider: bool,
        max_values: int = DEFAULT_MAX_VALUES,
    ) -> None:
        self.provider = provider
        self.readers = list(readers)
        self.owns_provider = owns_provider
        self.metrics = GenAIMetrics(
            provider.get_meter(METER_NAME, __version__), max_values=max_values
        )
        from runnertrace.tracing.export import reinit_after_fork

        reinit_after_fork(self.metrics)
        _quiet_sdk_metrics_logs()

    @classmethod
    def build(
        cls,
        readers: Sequence[MetricReader],
        resource: Resource,
        *,
        max_values: int = DEFAULT_MAX_VALUES,
    ) -> MetricsPipeline | None:
        """Reuse the app's SDK meter provider, else make a private one; ``None``: nothing to do.

        With no app provider and no backend that exports metrics, nothing would
        ever read the instruments, so no pipeline is made at all.
        """
        app = metrics_api.get_meter_provider()
        add = getattr(app, "add_metric_reader", None)  # SDKs from 1.40 on
        if isinstance(app, MeterProvider) and (add is not None or not readers):
            for reader in readers:
                add(reader)  # type: ignore[misc]
            return cls(app, readers, owns_provider=False, max_values=max_values)
        if not readers:
            return None
        private = MeterProvider(
            metric_readers=list(readers), resource=resource, shutdown_on_exit=False
        )
        return cls(private, readers, owns_provider=True, max_values=max_values)

    def force_flush(self, timeout_millis: int) -> bool:
        """Have our readers collect and export now (the app's own readers are its business)."""
        ok = True
        with exporting(SDK_METRICS):
            for reader in self.readers:
                ok = reader.force_flush(timeout_millis=timeout_millis) and ok
        return ok

    def shutdown(self, timeout_millis: int) -> None:
        with closing(), exporting(SDK_METRICS):
            if self.owns_provider:
                self.provider.shutdown(timeout_millis=timeout_millis)
                return
            for reader in self.readers:
                self.provider.remove_metric_reader(reader)  # also shuts the reader down


SDK_METRICS = "metrics"
"""The account (``tracing/drops.py``) for metric failures the SDK reports, not an exporter."""
_SDK_METRICS_LOGGERS = (
    "opentelemetry.sdk.metrics._internal",
    "opentelemetry.sdk.metrics._internal.export",
)


class _FoldSdkMetricsLogs(logging.Filter):
    """What the OTel SDK logs about our readers becomes a count in our loss report.

    During our flush or shutdown of the metrics pipeline (or on a reader thread
    of ours), the SDK's own lines ("Exception while exporting metrics",
    "MeterProvider.shutdown failed ...") would add lines of their own, with
    tracebacks, to the one report a failing backend gets. The exporters count
    their failures themselves (``exporters/otlp.py``); what only the SDK saw (a
    reader that did not shut down in time) is counted here.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ours = current_export() is not None or (record.threadName or "").startswith("runnertrace-")
        if not ours:
            return True
        first_line = record.getMessage().splitlines()[0] if record.getMessage() else record.name
        metric_export_failed(SDK_METRICS, first_line)
        return False


def _quiet_sdk_metrics_logs() -> None:
    for name in _SDK_METRICS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _FoldSdkMetricsLogs) for f in logger.filters):
            logger.addFilter(_FoldSdkMetricsLogs())


def delta_temporality() -> dict[type, AggregationTemporality]:
    """Delta for counters and histograms: each export holds only what happened since the last.

    What CloudWatch's ``put_metric_data`` (which adds up what it is sent), the
    local store's rows and Logfire expect.
    """
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )

    delta, cumulative = AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE
    return {
        Counter: delta,
        UpDownCounter: cumulative,
        Histogram: delta,
        ObservableCounter: delta,
        ObservableUpDownCounter: cumulative,
        ObservableGauge: cumulative,
    }


def periodic_reader(exporter: MetricExporter, *, timeout_s: float) -> MetricReader:
    """The reader a backend's metric exporter gets: the SDK's periodic one.

    Its interval is the SDK's (``OTEL_METRIC_EXPORT_INTERVAL``, 60 s by default);
    every flush of the tracing setup exports at once as well.
    """
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    return PeriodicExportingMetricReader(exporter, export_timeout_millis=timeout_s * 1000)
