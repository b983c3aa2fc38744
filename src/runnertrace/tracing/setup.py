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

import atexit
import functools
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

from runnertrace._internal.errors import handle_internal_errors
from runnertrace._internal.forksafe import relock_after_fork
from runnertrace._internal.version import __version__
from runnertrace.tracing.backend import Backend
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.cost import preload_prices, settle_prices, when_deferring
from runnertrace.tracing.export import flush_processors, shutdown_processors

__all__ = ["TracingSetup", "build_backends", "get_tracing_setup", "reset_tracing_setups"]

INSTRUMENTATION_NAME = "runnertrace"
logger = logging.getLogger("runnertrace")


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
        ``atexit`` handler on Python 3.12+. Spans still waiting for the price table
        are ended first (within the same ``timeout_s``), so the flush carries them.
        """
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        return flush_processors(self.processors, _after_settling(timeout))

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Shut our processors down, concurrently, bounded by ``timeout_s`` in total
        (spans still waiting for the price table are ended first, as for a flush)."""
        timeout = self.flush_timeout_s if timeout_s is None else timeout_s
        return shutdown_processors(self.processors, _after_settling(timeout))


def _after_settling(timeout_s: float) -> float:
    """End the spans that wait for the price table, within ``timeout_s``; the time left."""
    start = time.monotonic()
    with handle_internal_errors("ending the spans that wait for prices"):
        settle_prices(timeout_s)
    return max(0.0, timeout_s - (time.monotonic() - start))


def build_backends(config: TraceConfig, *, validate: bool = True) -> list[Backend]:
    """Instantiate the backends ``trace.type`` names (registered names or dotted paths).

    Each one's section is stored on ``config`` first (its defaults, if it was not
    given), so that no exporter thread adds it later while another thread reads
    the configuration. With ``validate``, each backend's configuration is checked
    now (every missing key in one :class:`ConfigError`); ``doctor`` skips it to
    list them as findings instead.
    """
    from runnertrace.tracing.backend_registry import backend_names, load_backend

    classes = [(name, load_backend(name)) for name in config.types]
    registered = set(backend_names())  # a class named by its path has no section
    for name, cls in classes:
        if name in registered:
            config.section(name, cls.config_model)
    backends = [cls(config) for _, cls in classes]
    if validate:
        for backend in backends:
            backend.validate()
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
relock_after_fork(sys.modules[__name__], _lock=threading.Lock)

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
            setup = _setups[key] = _build_or_report(config)
    return setup


def _build_or_report(config: TraceConfig) -> TracingSetup:
    """Build the pipeline; a configuration problem is one log line, and runs go untraced.

    A missing key, a bad setting or an extra that is not installed is the user's
    to fix, not a fault of ours: it is reported once per process (the disabled
    setup is cached), without a traceback, naming everything that is missing or
    the ``pip install`` line to run.
    """
    from runnertrace._internal.imports import MissingExtraError
    from runnertrace.tracing.config import ConfigError

    try:
        return _build(config)
    except ConfigError as exc:
        logger.error("runnertrace: tracing is off for this configuration: %s", exc)
    except MissingExtraError as exc:
        logger.warning("runnertrace: tracing is off for this configuration: %s", exc)
    return TracingSetup(trace_api.NoOpTracerProvider(), owns_provider=False, disabled=True)


def _build(config: TraceConfig) -> TracingSetup:
    from runnertrace.tracing.config import ConfigError

    if sdk_disabled():
        return TracingSetup(trace_api.NoOpTracerProvider(), owns_provider=False, disabled=True)
    backends = build_backends(config)
    app_provider = _app_provider()
    provider: trace_api.TracerProvider
    if "app" in config.types:
        # As it stands, whatever it is: even the API's proxy, which forwards to a
        # provider the app installs later.
        provider, owns = trace_api.get_tracer_provider(), False
        backends = [b for b in backends if not _app_already_exports(b)]
        if app_provider is None and any(b.name != "app" for b in backends):
            raise ConfigError(
                f"trace.type: {config.types!r}: 'app' can be combined with other backends "
                "only when the app installed an OpenTelemetry SDK TracerProvider"
            )
    elif app_provider is not None:
        provider, owns = app_provider, False
        backends = [b for b in backends if not _app_already_exports(b)]
    else:
        provider = TracerProvider(
            resource=_resource(config),
            sampler=_sampler(config.sample_rate),
            # At exit our setup shuts every processor down at once, under one
            # deadline (below); the provider's own hook would do it one by one.
            shutdown_on_exit=False,
        )
        owns = True
    target = provider if isinstance(provider, TracerProvider) else app_provider
    processors: list[SpanProcessor] = []
    for backend in backends:
        for processor in backend.processors():
            if target is not None:
                target.add_span_processor(processor)
            processors.append(processor)
    if target is not None:
        settle_prices_first(target)
        for backend in backends:
            backend.bind(target)
    if target is None and "app" in config.types:
        # We joined the API's proxy: the SDK provider the app installs later is made to
        # settle too, when a call first waits for the table (a process's first calls).
        when_deferring(_settle_the_app_provider_first)
    if config.metrics and target is not None:
        processors += _metrics_processors(config, backends, target)
    preload_prices()
    setup = TracingSetup(
        provider,
        owns_provider=owns,
        backends=backends,
        processors=processors,
        flush_timeout_s=config.flush_timeout_s,
    )
    if owns:
        atexit.register(_shutdown_at_exit, weakref.ref(setup))
    return setup


_settling_providers: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
_settling_lock = threading.Lock()
relock_after_fork(sys.modules[__name__], _settling_lock=threading.Lock)


def settle_prices_first(provider: TracerProvider) -> None:
    """Make ``provider``'s own ``force_flush`` and ``shutdown`` end the spans that wait
    for the price table first (:func:`~runnertrace.tracing.cost.settle_prices`), so
    that whoever flushes or shuts down the provider, the app or its exit, gets them.

    Why not a span processor of ours: the SDK flushes and shuts its processors down in
    the order they were added (or all at once, with its concurrent processor), and
    ours come after the app's own; by the time our processor's ``shutdown`` ran, the
    app's exporters would be shut and would drop the spans it ended. So the provider's
    two public methods are wrapped, on this instance only, once: each settles (bounded
    by the flush's own timeout) and then calls the method it replaced. And an ``atexit``
    settle is registered now, after the provider was made, so it runs before the
    provider's own exit hook (``atexit`` runs the newest first).
    """
    with _settling_lock:
        if provider in _settling_providers:
            return
        _settling_providers.add(provider)
    flush, shutdown = provider.force_flush, provider.shutdown

    def force_flush(timeout_millis: int = 30000) -> bool:
        left = _after_settling(timeout_millis / 1000)
        return flush(int(left * 1000))

    def shutdown_settled() -> None:
        with handle_internal_errors("ending the spans that wait for prices, at shutdown"):
            settle_prices()
        shutdown()

    functools.update_wrapper(force_flush, flush)
    functools.update_wrapper(shutdown_settled, shutdown)
    provider.force_flush = force_flush  # type: ignore[method-assign]
    provider.shutdown = shutdown_settled  # type: ignore[method-assign]
    atexit.register(settle_prices)


def _settle_the_app_provider_first() -> None:
    """:func:`settle_prices_first` on the app's SDK provider, once it has installed one."""
    provider = _app_provider()
    if provider is not None:
        settle_prices_first(provider)


def _sampler(sample_rate: float) -> Sampler:
    """Parent-based, with a root ratio of ``sample_rate``. At 1 the ratio sampler keeps
    every trace id (each is below its bound of 2**64), so ``ALWAYS_ON`` makes the same
    decisions, with the same attributes and trace state, without the arithmetic per span."""
    return ParentBased(ALWAYS_ON if sample_rate >= 1.0 else TraceIdRatioBased(sample_rate))


def _app_provider() -> TracerProvider | None:
    """The application's SDK provider, if it installed one, seen through known proxies.

    ``logfire.configure()`` installs Logfire's proxy as the global provider; the
    proxy holds the SDK provider its processors (scrubbing, console, sinks) are
    on in its public ``provider`` attribute. Joining that provider means our
    spans go through the app's processors like its own spans do.
    """
    provider: object = trace_api.get_tracer_provider()
    inner = getattr(provider, "provider", None)
    if not isinstance(provider, TracerProvider) and isinstance(inner, TracerProvider):
        provider = inner
    return provider if isinstance(provider, TracerProvider) else None


def _app_already_exports(backend: Backend) -> bool:
    """Does the app's own pipeline already ship to this backend's vendor?

    Then our exporter would deliver every span a second time, so it is left
    out (the ``app`` pipeline delivers them once).
    """
    detect = _APP_VENDOR_DETECTORS.get(backend.name)
    return detect is not None and detect()


def _logfire_configured() -> bool:
    """Is the app's Logfire shipping to Logfire itself (not only to its own processors)?"""
    provider = trace_api.get_tracer_provider()
    if not type(provider).__module__.startswith("logfire."):
        return False
    config = getattr(provider, "config", None)  # logfire's LogfireConfig
    return bool(getattr(config, "send_to_logfire", False) and getattr(config, "token", None))


def _langfuse_client_active() -> bool:
    module = sys.modules.get("langfuse._client.resource_manager")
    if module is None:  # the app never imported Langfuse (we never import it ourselves)
        return False
    # Langfuse has no public "is a client running" call (get_client() would create
    # one); its registry of live clients is the only tell. Each entry knows the
    # provider its span processor is on.
    live = getattr(module.LangfuseResourceManager, "_instances", {})
    app = _app_provider()
    return any(getattr(m, "tracer_provider", None) is app for m in list(live.values()))


def _traceloop_active() -> bool:
    """Has the app called ``Traceloop.init()`` with an endpoint to ship to?

    Traceloop keeps its one tracer wrapper as a class attribute (``instance``) and
    the endpoint it exports to on the class; with both set, its own processor on
    the global SDK provider already ships every span there.
    """
    module = sys.modules.get("traceloop.sdk.tracing.tracing")
    if module is None:  # the app never imported Traceloop (we never import it ourselves)
        return False
    wrapper = getattr(module, "TracerWrapper", None)
    return getattr(wrapper, "instance", None) is not None and bool(
        getattr(wrapper, "endpoint", None)
    )


_APP_VENDOR_DETECTORS: dict[str, Callable[[], bool]] = {
    "logfire": _logfire_configured,
    "langfuse": _langfuse_client_active,
    "openllmetry": _traceloop_active,
}


def _shutdown_at_exit(ref: weakref.ref[TracingSetup]) -> None:
    """Shut a setup's processors down at exit: all at once, within ``flush_timeout_s``."""
    setup = ref()
    if setup is not None:
        setup.shutdown()


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
