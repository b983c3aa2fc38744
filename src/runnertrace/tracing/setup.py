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

import functools
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
from runnertrace.tracing.export import run_all_with_timeout
from runnertrace.tracing.spans import lean_tracer_for

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
        # A provider we built gets the lean tracer (same spans, a fraction of the
        # cost); an application's provider keeps the SDK's own tracer.
        lean = (
            lean_tracer_for(self.provider, INSTRUMENTATION_NAME, __version__)
            if self.owns_provider
            else None
        )
        self.tracer: trace_api.Tracer = lean or self.provider.get_tracer(
            INSTRUMENTATION_NAME, __version__
        )

    def flush(self, timeout_s: float | None = None) -> bool:
        """Flush our processors; returns within ``timeout_s`` even if an exporter hangs."""
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        millis = int(timeout * 1000)
        # All at once (one backend down must not use up the others' time).
        calls = [functools.partial(p.force_flush, millis) for p in self.processors]
        return run_all_with_timeout(calls, timeout, "flush")

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Shut our processors down, concurrently, bounded by ``timeout_s`` in total."""
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        return run_all_with_timeout([p.shutdown for p in self.processors], timeout, "shutdown")


def build_backends(config: TraceConfig) -> list[Backend]:
    """Instantiate the backends ``trace.type`` names (built-in or dotted path)."""
    from runnertrace._internal.imports import import_dotted
    from runnertrace.core.config import ConfigError
    from runnertrace.exporters import BUILTIN_BACKENDS

    backends: list[Backend] = []
    for name in config.types:
        target = BUILTIN_BACKENDS.get(name, name)
        try:
            cls = import_dotted(target)
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"trace.type: cannot load backend {name!r}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            raise ConfigError(
                f"trace.type: {name!r} is not a runnertrace Backend subclass "
                "(see runnertrace.tracing.backend.Backend)"
            )
        backends.append(cls(config))
    return backends


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
}


def setup_key(config: TraceConfig) -> str:
    """What identifies a pipeline: the settings that change providers or exporters."""
    return config.model_dump_json(exclude=_PIPELINE_EXCLUDES)


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
