"""Provider setup: reuse the app's SDK provider or make a private one, idempotently.

* If the application already installed an SDK ``TracerProvider`` globally, we
  add our processors to it and never replace it.
* Otherwise we build a private provider (never set globally) with a resource
  from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` / config and a
  parent-based ratio sampler from ``trace.sample_rate``.
* Setups are cached by their pipeline-relevant settings, so building 100 agents
  with one config adds processors once.
* ``OTEL_SDK_DISABLED=true`` disables tracing entirely (runs pass straight through).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from runnertrace import __version__
from runnertrace.core.config import TraceConfig
from runnertrace.tracing.backend import Backend
from runnertrace.tracing.cost import preload_prices
from runnertrace.tracing.export import flush_processors, shutdown_processors

__all__ = ["TracingSetup", "build_backends", "get_tracing_setup", "reset_tracing_setups"]

INSTRUMENTATION_NAME = "runnertrace"


def sdk_disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


@dataclass
class TracingSetup:
    """One pipeline: a provider, the tracer we use on it, and the processors we added."""

    provider: trace_api.TracerProvider
    owns_provider: bool
    backends: list[Backend] = field(default_factory=list)
    processors: list[SpanProcessor] = field(default_factory=list)
    flush_timeout_s: float = 5.0
    disabled: bool = False

    def __post_init__(self) -> None:
        self.tracer: trace_api.Tracer = self.provider.get_tracer(INSTRUMENTATION_NAME, __version__)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Flush our processors; returns within ``timeout_s`` even if an exporter hangs.

        All at once (one backend down must not use up the others' time), and
        without starting a thread for our own processors, so it also works in an
        ``atexit`` handler on Python 3.12+.
        """
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        return flush_processors(self.processors, timeout)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Shut our processors down, concurrently, bounded by ``timeout_s`` in total."""
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        return shutdown_processors(self.processors, timeout)


def build_backends(config: TraceConfig) -> list[Backend]:
    """Instantiate the backends ``trace.type`` names (registered names or dotted paths).

    Each one's section is stored on ``config`` first (its defaults, if it was not
    given), so that no exporter thread adds it later while another thread reads
    the configuration.
    """
    from runnertrace.core.backends import backend_names, load_backend

    classes = [(name, load_backend(name)) for name in config.types]
    registered = set(backend_names())  # a class named by its path has no section
    for name, cls in classes:
        if name in registered:
            config.section(name, cls.config_model)
    return [cls(config) for _, cls in classes]


def _resource(config: TraceConfig) -> Resource:
    attributes: dict[str, str] = {}
    if config.service_name:
        attributes["service.name"] = config.service_name
    elif not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = "runnertrace"
    return Resource.create(attributes)


_setups: dict[str, TracingSetup] = {}
_lock = threading.Lock()

_PIPELINE_EXCLUDES = {
    "enabled",
    "capture_content",
    "max_content_length",
    "deltas",
    "redact",
    "user_id",
    "semconv_version",
}


def setup_key(config: TraceConfig) -> str:
    """What identifies a pipeline: the settings that change providers or exporters.

    Backend sections count only where they differ from their defaults: reading
    a section stores its defaults, which must not make a second pipeline.
    """
    sections = config.model_extra or {}
    settings = config.model_dump(mode="json", exclude=_PIPELINE_EXCLUDES | set(sections))
    configured = {
        name: section.model_dump(mode="json")
        for name, section in config.configured_sections().items()
    }
    return json.dumps([settings, configured], sort_keys=True, default=str)


def get_tracing_setup(config: TraceConfig, key: str | None = None) -> TracingSetup:
    """The (cached) pipeline for ``config``; made on first use, never at import.

    Callers on a hot path pass a precomputed ``key`` (see :func:`setup_key`).
    """
    key = setup_key(config) if key is None else key
    setup = _setups.get(key)
    if setup is not None:
        return setup
    with _lock:
        setup = _setups.get(key)
        if setup is None:
            setup = _setups[key] = _build(config)
    return setup


def _build(config: TraceConfig) -> TracingSetup:
    if sdk_disabled():
        return TracingSetup(trace_api.NoOpTracerProvider(), owns_provider=False, disabled=True)
    backends = build_backends(config)
    global_provider = trace_api.get_tracer_provider()
    if isinstance(global_provider, TracerProvider):
        provider, owns = global_provider, False
    else:
        provider = TracerProvider(
            resource=_resource(config),
            sampler=ParentBased(TraceIdRatioBased(config.sample_rate)),
        )
        owns = True
    processors: list[SpanProcessor] = []
    for backend in backends:
        for processor in backend.processors():
            provider.add_span_processor(processor)
            processors.append(processor)
    if isinstance(provider, TracerProvider):
        for backend in backends:
            backend.bind(provider)
    if config.metrics:
        processors += _metrics_processors(config, backends, provider)
    preload_prices()
    return TracingSetup(
        provider,
        owns_provider=owns,
        backends=backends,
        processors=processors,
        flush_timeout_s=config.flush_timeout_s,
    )


def _metrics_processors(
    config: TraceConfig, backends: list[Backend], provider: trace_api.TracerProvider
) -> list[SpanProcessor]:
    """The metrics processor, added to the provider (none when nothing would read metrics)."""
    from runnertrace.tracing.metrics import MetricsPipeline, MetricsSpanProcessor

    if not isinstance(provider, TracerProvider):
        return []
    readers = [reader for backend in backends for reader in backend.metric_readers()]
    pipeline = MetricsPipeline.build(readers, provider.resource)
    if pipeline is None:
        return []
    processor = MetricsSpanProcessor(pipeline, flush_timeout_s=config.flush_timeout_s)
    provider.add_span_processor(processor)
    return [processor]


def reset_tracing_setups(timeout_s: float = 1.0) -> None:
    """Shut down and forget every cached setup (tests and long-lived reconfiguration)."""
    with _lock:
        setups = list(_setups.values())
        _setups.clear()
    for setup in setups:
        setup.shutdown(timeout_s)
