"""Export plumbing: a bounded, dropping batch processor and a mapping exporter."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from runnertrace._internal.errors import internal_log, report_internal_error
from runnertrace.tracing.drops import exporting, report_totals, spans_lost

if TYPE_CHECKING:
    from runnertrace.tracing.backend import Backend

__all__ = [
    "BoundedBatchSpanProcessor",
    "MappedSpanExporter",
    "run_all_with_timeout",
    "run_with_timeout",
]


def run_with_timeout(fn: Callable[[], object], timeout_s: float, what: str) -> bool:
    """Call ``fn()`` in a daemon thread; give up after ``timeout_s``.

    Vendor exporters do not all honour their own timeouts (Logfire's flush was
    seen taking 10 s with a 3 s timeout), so every flush and shutdown we do is
    bounded here, independently of the exporter. Returns ``False`` on timeout,
    on a fault, or when ``fn`` itself returns ``False``.
    """
    return run_all_with_timeout([fn], timeout_s, what)


def run_all_with_timeout(fns: Sequence[Callable[[], object]], timeout_s: float, what: str) -> bool:
    """:func:`run_with_timeout` for several calls at once, under one deadline.

    Each call gets its own daemon thread and they all start together, so one
    hanging exporter cannot spend the time the others need: with one backend
    down, a flush still delivers everything to the healthy ones.
    """
    deadline = time.monotonic() + timeout_s
    runs: list[tuple[threading.Event, list[bool]]] = []
    for fn in fns:
        done = threading.Event()
        outcome: list[bool] = []

        def target(
            fn: Callable[[], object] = fn,
            done: threading.Event = done,
            outcome: list[bool] = outcome,
        ) -> None:
            try:
                outcome.append(fn() is not False)
            except Exception as exc:  # noqa: BLE001 - exporter fault, reported here
                internal_log.warning(what, "runnertrace: %s failed: %r", what, exc)
            finally:
                done.set()

        threading.Thread(target=target, name=f"runnertrace-{what}", daemon=True).start()
        runs.append((done, outcome))
    finished = [done.wait(max(0.0, deadline - time.monotonic())) for done, _ in runs]
    if not all(finished):
        internal_log.warning(
            f"{what}-timeout", "runnertrace: %s did not finish within %.1fs", what, timeout_s
        )
        return False
    return all(bool(outcome) and outcome[0] for _, outcome in runs)


class MappedSpanExporter(SpanExporter):
    """Applies a backend's attribute mapping to a copy of each span, then exports."""

    def __init__(self, inner: SpanExporter, backend: Backend) -> None:
        self.inner = inner
        self.backend = backend
        self._resources: dict[int, Resource] = {}

    def _resource(self, resource: Resource) -> Resource:
        extra = self.backend.resource_attributes()
        if not extra:
            return resource
        cached = self._resources.get(id(resource))
        if cached is None:
            cached = self._resources[id(resource)] = resource.merge(Resource(dict(extra)))
        return cached

    def map_span(self, span: ReadableSpan) -> ReadableSpan:
        extra = self.backend.map_attributes(span)
        resource = self._resource(span.resource)
        dropped = self.backend.dropped_attributes
        original = span.attributes or {}
        if not extra and resource is span.resource and dropped.isdisjoint(original):
            return span
        attributes = dict(original)
        if extra:
            attributes.update(extra)
        for key in dropped:
            attributes.pop(key, None)
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=resource,
            attributes=attributes,
            events=span.events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        mapped: list[ReadableSpan] = []
        for span in spans:
            try:
                mapped.append(self.map_span(span))
            except Exception as exc:  # noqa: BLE001 - a mapping fault drops one span only
                report_internal_error(f"{self.backend.name} mapping", exc)
        return self.inner.export(mapped)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class BoundedBatchSpanProcessor(SpanProcessor):
    """Batches finished spans to an exporter on a daemon thread.

    * ``on_end`` never blocks: when the queue is full the span is dropped and
      counted (``dropped``), and the drop is logged once (rate-limited).
    * An export that fails or raises counts its spans as dropped.
    * ``force_flush`` and ``shutdown`` return within their timeout even when the
      exporter hangs; the worker is a daemon, so it cannot hold the process open.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        name: str = "exporter",
        max_queue_size: int = 2048,
        max_batch_size: int = 512,
        schedule_delay_s: float = 1.0,
        export_timeout_s: float = 5.0,
    ) -> None:
        self.exporter = exporter
        self.name = name
        self.max_queue_size = max_queue_size
        self.max_batch_size = max_batch_size
        self.schedule_delay_s = schedule_delay_s
        self.export_timeout_s = export_timeout_s
        self.dropped = 0
        self.exported = 0
        self._queue: deque[ReadableSpan] = deque()
        self._cond = threading.Condition()
        self._flush_requests = 0
        self._flushed = 0
        self._shutdown = False
        self._exporting = False
        self._in_flight = 0
        self._abandoned = False
        self._worker = threading.Thread(
            target=self._work, name=f"runnertrace-export-{name}", daemon=True
        )
        self._worker.start()

    # -- SpanProcessor ------------------------------------------------------------------
    def on_start(self, span: object, parent_context: object = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        # The hot path takes no lock: deque appends are atomic, and the worker is
        # only woken when a batch fills (otherwise it wakes on its own schedule).
        # Concurrent producers may overshoot the bound by one span each.
        if self._shutdown or not span.context.trace_flags.sampled:
            return
        queue = self._queue
        if len(queue) >= self.max_queue_size:
            with self._cond:
                self.dropped += 1
            spans_lost(
                self.name,
                1,
                f"the export queue is full ({self.max_queue_size} spans waiting)",
                "the backend is slower than the spans arrive; check it, or raise its "
                "max_queue_size",
            )
            return
        queue.append(span)
        if len(queue) == self.max_batch_size:
            with self._cond:
                self._cond.notify()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            self._flush_requests += 1
            ticket = self._flush_requests
            self._cond.notify()
            while self._flushed < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.wait(remaining)
        return True

    def shutdown(self, timeout_s: float | None = None) -> None:
        timeout = self.export_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        if self._shutdown:
            return
        flushed = self.force_flush(int(timeout * 1000))
        with self._cond:
            self._shutdown = True
            # What is still queued or in flight now will never be delivered.
            abandoned = 0 if flushed else len(self._queue) + self._in_flight
            self._abandoned = not flushed
            self.dropped += abandoned
            self._cond.notify()
        spans_lost(
            self.name,
            abandoned,
            f"not exported within trace.flush_timeout_s ({timeout:g}s) at shutdown",
            "check that the backend answers, or raise trace.flush_timeout_s",
        )
        remaining = max(0.0, deadline - time.monotonic())
        run_with_timeout(self.exporter.shutdown, max(remaining, 0.1), f"{self.name} shutdown")
        report_totals(self.name)

    # -- worker -----------------------------------------------------------------------
    def _take_batch(self) -> list[ReadableSpan]:
        batch: list[ReadableSpan] = []
        while self._queue and len(batch) < self.max_batch_size:
            batch.append(self._queue.popleft())
        return batch

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._queue and self._flushed == self._flush_requests and not self._shutdown:
                    self._cond.wait(self.schedule_delay_s)
                if self._shutdown and not self._queue:
                    self._flushed = self._flush_requests
                    self._cond.notify_all()
                    return
                batch = self._take_batch()
                target = self._flush_requests
            if batch:
                self._in_flight = len(batch)
                self._export(batch)
                self._in_flight = 0
            with self._cond:
                if not self._queue:
                    self._flushed = max(self._flushed, target)
                    self._cond.notify_all()

    def _export(self, batch: list[ReadableSpan]) -> None:
        with exporting(self.name) as attempt:
            try:
                result = self.exporter.export(batch)
            except Exception as exc:  # noqa: BLE001 - exporter faults never reach the host
                result = SpanExportResult.FAILURE
                attempt.cause = attempt.cause or f"the export raised {exc!r}"
        if result is SpanExportResult.SUCCESS:
            self.exported += len(batch)
            return
        with self._cond:
            if self._abandoned:  # already counted when shutdown gave up on it
                return
            self.dropped += len(batch)
        spans_lost(
            self.name,
            len(batch),
            attempt.cause or "the export failed",
            attempt.fix or "check that the backend is reachable and answers (runnertrace doctor)",
        )
