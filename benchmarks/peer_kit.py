"""The parts ``peers.py`` and ``peer_setups.py`` share: a variant, its counters, the sink pipeline.

Kept apart from both so the per-framework peer setups can build variants
without importing the driver (which imports them), and so ``CountingBackend``
has a module path of its own for ``trace.type``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otlp_sink import SinkProcess
from overhead import DiscardBackend, _DiscardProcessor

ModeFn = Callable[[], Awaitable[None]]
MODES = ("run", "stream")


class Skip(Exception):
    """A variant that cannot run here (say why, run the rest)."""


class CountingProcessor(_DiscardProcessor):
    """Drops every span, counting spans and attributes.

    Used twice: as ``rt-noexport``'s only processor (the machinery without
    export), and as the *tally* every exporting variant's provider carries next
    to its exporter, so each batch can be checked for spans from another
    variant (a leaked patch) and against what the receiver got.
    """

    def __init__(self) -> None:
        self.spans = 0
        self.attributes = 0

    def count(self) -> int:
        """Spans ended so far (a bound method: two variants on one pipeline compare equal)."""
        return self.spans

    def on_end(self, span: ReadableSpan) -> None:
        self.spans += 1
        self.attributes += len(span.attributes or ())


class CountingBackend(DiscardBackend):
    """``trace.type: peer_kit.CountingBackend``: keeps nothing, counts everything."""

    name = "counting-discard"

    def processors(self) -> list[SpanProcessor]:
        return [CountingProcessor()]


@dataclass
class Variant:
    """One way of running the scenario: a callable per mode, its flush, counters and switches.

    ``on``/``off`` run around each of its batches, outside the timed window: a
    peer that patches something process-wide (an instrumentor) is only switched
    on for its own batches. ``tally`` counts the spans its own pipeline made
    (``None`` where the pipeline is not reachable, then the receiver's count
    stands in); ``spans`` counts what it delivered.
    """

    name: str
    what: str
    modes: dict[str, ModeFn]
    check: Callable[[], Awaitable[str]] | None = None
    flush: Callable[[], object] = lambda: None
    spans: Callable[[], int] = lambda: 0
    tally: Callable[[], int] | None = None
    exports: bool = True
    to_sink: bool = True  # what it delivers reaches the OTLP receiver
    on: Callable[[], object] = lambda: None
    off: Callable[[], object] = lambda: None
    close: Callable[[], object] = lambda: None
    times: dict[str, dict[int, float]] = field(default_factory=dict)  # mode -> round -> s/run
    counted: dict[str, list[int]] = field(default_factory=dict)  # mode -> [spans, runs]
    leaks: list[str] = field(default_factory=list)
    failure: str | None = None

    @contextmanager
    def switched_on(self) -> Iterator[None]:
        self.on()
        try:
            yield
        finally:
            self.off()


@dataclass
class Setting:
    """What a peer setup gets: the receiver, a temp dir, and the switchable global provider."""

    sink: SinkProcess
    tmp: Path
    switch: GlobalSwitch | None

    def provider(self) -> tuple[TracerProvider, CountingProcessor]:
        """An SDK provider of the peer's own: its tally, then batch OTLP to the receiver."""
        provider = TracerProvider()
        tally = CountingProcessor()
        provider.add_span_processor(tally)
        provider.add_span_processor(batch_otlp(self.sink))
        return provider, tally

    def sink_spans(self) -> Callable[[], int]:
        return lambda: self.sink.totals()[0]


def batch_otlp(sink: SinkProcess) -> BatchSpanProcessor:
    """The SDK's batch processor exporting OTLP/HTTP protobuf to the sink (peers' pipeline)."""
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=sink.traces_url))


class _SwitchTracer(trace_api.Tracer):
    """A tracer that starts its spans on the provider switched on now, or none at all."""

    def __init__(self, switch: GlobalSwitch, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._switch, self._args, self._kwargs = switch, args, kwargs
        self._noop = trace_api.NoOpTracer()
        self._real: dict[int, trace_api.Tracer] = {}  # per provider switched on

    def _target(self) -> trace_api.Tracer:
        active = self._switch.active
        if active is None:
            return self._noop
        tracer = self._real.get(id(active))
        if tracer is None:
            tracer = self._real[id(active)] = active.get_tracer(*self._args, **self._kwargs)
        return tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace_api.Span:
        return self._target().start_span(*args, **kwargs)

    def start_as_current_span(  # type: ignore[override]  # the API's is a decorated generator
        self, *args: Any, **kwargs: Any
    ) -> AbstractContextManager[trace_api.Span]:
        return self._target().start_as_current_span(*args, **kwargs)


class GlobalSwitch(trace_api.TracerProvider):
    """The process's global provider for frameworks whose own spans go to the global one.

    ADK and Agent Framework start their built-in spans on tracers from the
    global provider, and OpenTelemetry lets that be set once per process. So in
    their processes this API provider is installed first, for every variant
    alike, and forwards to the SDK provider of the built-in-OTel peer only
    during that peer's batches (a no-op tracer the rest of the time). It is
    deliberately not an SDK provider (and holds none in a ``provider``
    attribute), so runnertrace does not join it.
    """

    def __init__(self) -> None:
        self.active: TracerProvider | None = None

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
        return _SwitchTracer(self, args, kwargs)

    def switch(self, provider: TracerProvider | None) -> None:
        self.active = provider
