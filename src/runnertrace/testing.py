"""Test helpers: capture finished spans in memory, with deterministic ids.

``capture_spans()`` makes every :class:`~runnertrace.TracingRunner` in the block
export to an in-memory list through a private provider (the global one is not
touched). With ``deterministic=True`` (the default) trace and span ids count up
from 1, so assertions and snapshots are stable.

Also registered as a pytest plugin (``pytest11`` entry point) providing the
``captured_spans`` fixture. ``tolerate_internal_errors()`` is here too: under
pytest our own faults raise, and a test that injects one on purpose opts out.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.tracing.cost import settle_prices

__all__ = ["CapturedSpans", "SequentialIdGenerator", "capture_spans", "tolerate_internal_errors"]


class SequentialIdGenerator(IdGenerator):
    """Ids 1, 2, 3, ... (thread-safe), for reproducible test output."""

    def __init__(self) -> None:
        self._trace = itertools.count(1)
        self._span = itertools.count(1)
        self._lock = threading.Lock()

    def generate_span_id(self) -> int:
        with self._lock:
            return next(self._span)

    def generate_trace_id(self) -> int:
        with self._lock:
            return next(self._trace)


class CapturedSpans:
    """The spans finished so far, with helpers for assertions."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter = exporter
        self.provider = provider

    @property
    def spans(self) -> list[ReadableSpan]:
        """Every span ended so far, those still waiting for the price table included
        (they are ended first: see :func:`runnertrace.tracing.cost.settle_prices`)."""
        settle_prices()
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        return [s.name for s in self.spans]

    def clear(self) -> None:
        self.exporter.clear()

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return sorted(
            (s for s in self.spans if s.parent is not None and s.parent.span_id == pid),
            key=lambda s: s.start_time or 0,
        )

    def roots(self) -> list[ReadableSpan]:
        ids = {s.context.span_id for s in self.spans}
        return [s for s in self.spans if s.parent is None or s.parent.span_id not in ids]

    def tree(self, root: ReadableSpan | None = None) -> Any:
        """``(name, [children...])`` nested tuples, children in start order."""
        if root is None:
            return [self.tree(r) for r in sorted(self.roots(), key=lambda s: s.start_time or 0)]
        return (root.name, [self.tree(c) for c in self.children(root)])


@contextmanager
def capture_spans(deterministic: bool = True) -> Iterator[CapturedSpans]:
    """Route every TracingRunner in the block to an in-memory exporter."""
    from runnertrace.tracing.runner import _setup_override
    from runnertrace.tracing.setup import TracingSetup

    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SequentialIdGenerator() if deterministic else None)
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    setup = TracingSetup(provider, owns_provider=True, processors=[processor])
    token = _setup_override.set(setup)
    try:
        yield CapturedSpans(exporter, provider)
    finally:
        _setup_override.reset(token)
        settle_prices()  # a call that waits for the price table ends here, not after shutdown
        provider.shutdown()


try:  # the pytest plugin part; pytest is only present in test environments
    import pytest
except ImportError:  # pragma: no cover - runtime without pytest
    pass
else:

    @pytest.fixture
    def captured_spans() -> Iterator[CapturedSpans]:
        """Finished spans of every TracingRunner used in the test."""
        with capture_spans() as captured:
            yield captured
