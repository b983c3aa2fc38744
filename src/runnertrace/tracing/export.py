"""Export plumbing: a bounded, dropping batch processor and a mapping exporter.

Why our own batch processor and not the SDK's ``BatchSpanProcessor``: the SDK's
``force_flush`` exports on the calling thread and ignores its timeout, and its
``shutdown`` calls the exporter's ``shutdown`` unbounded, so one hung backend
can hold a flush (or the process exit) for as long as it hangs; its queue drops
the oldest span and reports drops only as a metric. Ours keeps every exporter
call on its worker thread, so flush and shutdown are waits with a deadline, on
any thread, at any time, including at interpreter exit, where Python 3.12+
refuses to start threads. What the SDK does get right, re-creating the worker in
a forked child, we do the same way (``os.register_at_fork``).
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from runnertrace._internal.errors import (
    handle_internal_errors,
    internal_log,
    report_internal_error,
    suppressed_instrumentation,
    tolerate_internal_errors,
)
from runnertrace.tracing.cost import settle_prices
from runnertrace.tracing.drops import (
    ExportAttempt,
    exporting,
    reject,
    report_all,
    report_totals,
    spans_lost,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from opentelemetry.util.types import AttributeValue

__all__ = [
    "BoundedBatchSpanProcessor",
    "ForkAware",
    "MappedSpanExporter",
    "flush_processors",
    "reinit_after_fork",
    "run_all_with_timeout",
    "run_with_timeout",
    "shutdown_processors",
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
    down, a flush still delivers everything to the healthy ones. When no thread
    can be started (at interpreter exit on Python 3.12+), the calls run in turn
    on the calling thread, bounded only by their own timeouts: that is the only
    way left to run them.
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

        thread = threading.Thread(target=target, name=f"runnertrace-{what}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            target()
        runs.append((done, outcome))
    finished = [done.wait(max(0.0, deadline - time.monotonic())) for done, _ in runs]
    if not all(finished):
        internal_log.warning(
            f"{what}-timeout", "runnertrace: %s did not finish within %.1fs", what, timeout_s
        )
        return False
    return all(bool(outcome) and outcome[0] for _, outcome in runs)


class SpanMapping(Protocol):
    """What :class:`MappedSpanExporter` applies: a backend's mapping of each span
    (:class:`~runnertrace.tracing.backend.Backend` is one; this module sits below it)."""

    @property
    def name(self) -> str: ...

    @property
    def dropped_attributes(self) -> frozenset[str]: ...

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None: ...

    def resource_attributes(self) -> Mapping[str, AttributeValue]: ...


class MappedSpanExporter(SpanExporter):
    """Applies a backend's attribute mapping to a copy of each span, then exports."""

    def __init__(self, inner: SpanExporter, backend: SpanMapping) -> None:
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
    * Every exporter call (``export`` and ``shutdown``) happens on the worker
      thread, with instrumentation suppressed. ``force_flush`` and ``shutdown``
      only signal the worker and wait with a deadline, so they return within
      their timeout even when the exporter hangs, and start no thread (at
      interpreter exit, Python 3.12+ forbids it).
    * After ``os.fork()`` the child gets a new worker, lock and an empty queue:
      the spans queued at the fork are the parent's, which still exports them.
    * Faults on the worker thread are always logged, never raised (even under
      pytest): nothing there could reach a caller.
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
        self._shutdown = False  # no new spans; the worker drains, shuts the exporter, ends
        self._abandon = False  # a shutdown gave up waiting: drop what is still queued
        self._closed = False  # the exporter is shut down and the worker has ended
        self._in_flight = 0  # spans of the batch being exported now
        self._abandoned = False  # shutdown counted what was queued or in flight as lost
        self._worker = self._start_worker()
        reinit_after_fork(self)
        _arm_in_a_multiprocessing_child()

    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._work, name=f"runnertrace-export-{self.name}")
        worker.daemon = True  # never holds the process open; exit flushes via shutdown()
        worker.start()
        return worker

    def after_fork_in_child(self) -> None:
        """Make this processor work in a forked child (called by ``os.register_at_fork``).

        Only the forking thread survives a fork: the worker is gone and the lock
        may have been held by it. The child starts from a clean state with its
        own worker; its counters count its own spans.
        """
        self._cond = threading.Condition()
        self._queue.clear()
        self._flush_requests = self._flushed = 0
        self.dropped = self.exported = self._in_flight = 0
        self._abandoned = False
        if self._shutdown:
            self._closed = True  # the parent shuts its exporter down; nothing to do here
            return
        self._abandon = False
        self._worker = self._start_worker()

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
        return self.wait_flushed(self.request_flush(), time.monotonic() + timeout_millis / 1000)

    def shutdown(self, timeout_s: float | None = None) -> None:
        timeout = self.export_timeout_s if timeout_s is None else timeout_s
        self.request_shutdown()
        self.wait_closed(time.monotonic() + timeout)

    # -- flush and shutdown in two halves (several processors under one deadline) -------
    def request_flush(self) -> int:
        """Ask the worker to export everything queued now; returns a ticket to wait on."""
        with self._cond:
            self._flush_requests += 1
            self._cond.notify()
            return self._flush_requests

    def wait_flushed(self, ticket: int, deadline: float) -> bool:
        """Wait (until ``deadline``, a ``time.monotonic()`` value) for flush ``ticket``."""
        with self._cond:
            while self._flushed < ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._cond.wait(remaining)
        return True

    def request_shutdown(self) -> None:
        """Stop taking spans; the worker exports what is queued, then shuts the exporter."""
        with self._cond:
            self._shutdown = True
            self._cond.notify()

    def wait_closed(self, deadline: float) -> bool:
        """Wait until the exporter is shut down; on timeout, what is still queued is dropped."""
        lost = 0
        with self._cond:
            while not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    # What is still queued or in flight now will never be delivered:
                    # counted here, once, so the total said at exit is exact.
                    self._abandon = self._abandoned = True
                    lost = len(self._queue) + self._in_flight
                    self._queue.clear()
                    self.dropped += lost
                    break
                self._cond.wait(remaining)
        if lost:
            spans_lost(
                self.name,
                lost,
                "not exported within trace.flush_timeout_s at shutdown",
                "check that the backend answers, or raise trace.flush_timeout_s",
                final=True,
            )
        report_totals(self.name)
        return self._closed

    # -- worker -----------------------------------------------------------------------
    def _take_batch(self) -> list[ReadableSpan]:
        batch: list[ReadableSpan] = []
        while self._queue and len(batch) < self.max_batch_size:
            batch.append(self._queue.popleft())
        return batch

    def _work(self) -> None:
        with suppressed_instrumentation(), tolerate_internal_errors():
            while self._work_once():
                pass
            self._close_exporter()

    def _work_once(self) -> bool:
        """Export one batch (after waiting for work); ``False`` once it is time to close."""
        with self._cond:
            if not self._queue and self._flushed == self._flush_requests and not self._shutdown:
                self._cond.wait(self.schedule_delay_s)
            if self._abandon and self._queue:
                self._drop_queued()
            if self._shutdown and not self._queue:
                return False
            batch = self._take_batch()
            target = self._flush_requests
        if batch:
            self._export(batch)
        with self._cond:
            if not self._queue:
                self._flushed = max(self._flushed, target)
                self._cond.notify_all()
        return True

    def _drop_queued(self) -> None:
        """Drop the queue after a shutdown timed out (caller holds the lock)."""
        count = len(self._queue)
        self._queue.clear()
        self.dropped += count
        spans_lost(
            self.name,
            count,
            "not exported within trace.flush_timeout_s at shutdown",
            "check that the backend answers, or raise trace.flush_timeout_s",
            final=True,
        )

    def _close_exporter(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception as exc:  # noqa: BLE001 - exporter faults never reach the host
            internal_log.warning(
                f"shutdown-error-{self.name}", "runnertrace: %s shutdown raised %r", self.name, exc
            )
        finally:
            with self._cond:
                self._closed = True
                self._flushed = self._flush_requests
                self._cond.notify_all()

    def _export(self, batch: list[ReadableSpan]) -> None:
        self._in_flight = len(batch)
        try:
            with exporting(self.name) as attempt:
                failed = self._export_isolating(batch, attempt)
        finally:
            self._in_flight = 0
        rejected = attempt.rejected_count
        final = self._shutdown  # the final line follows: no line of its own now
        for cause, count in attempt.rejected.items():
            spans_lost(self.name, count, cause, attempt.rejected_fix, final=final)
        with self._cond:
            self.exported += len(batch) - len(failed) - rejected
            if not failed or self._abandoned:  # already counted when shutdown gave up on it
                return
            self.dropped += len(failed)
        spans_lost(
            self.name,
            len(failed),
            attempt.cause or "the export failed",
            attempt.fix or "check that the backend is reachable and answers (runnertrace doctor)",
            final=final,
        )

    def _export_isolating(
        self, batch: list[ReadableSpan], attempt: ExportAttempt
    ) -> list[ReadableSpan]:
        """Export ``batch``; the spans that failed (all of them, unless it was their data).

        An exporter that raises ``UnicodeError`` could not encode some span (a
        lone surrogate in a name or attribute, from a file name or broken JSON):
        that is the span's problem, not the batch's. The batch is halved until
        the spans it cannot encode are alone; they are counted lost with that
        cause, and every other span is exported. Encoding happens before
        anything is sent, so nothing is sent twice.
        """
        try:
            result = self.exporter.export(batch)
        except UnicodeError as exc:
            if len(batch) > 1:
                middle = len(batch) // 2
                return self._export_isolating(batch[:middle], attempt) + self._export_isolating(
                    batch[middle:], attempt
                )
            reject(
                1,
                _printable(f"span {batch[0].name!r} cannot be encoded ({exc})"),
                "a string in the span is not valid Unicode (a lone surrogate); "
                "fix the code that sets it",
            )
            return []
        except Exception as exc:  # noqa: BLE001 - exporter faults never reach the host
            attempt.cause = attempt.cause or _printable(f"the export raised {exc!r}")
            return batch
        return [] if result is SpanExportResult.SUCCESS else batch


def _printable(text: str) -> str:
    """``text`` safe for any log handler: a lone surrogate becomes an escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ForkAware(Protocol):
    """Something with threads or locks that must be re-made in a forked child."""

    def after_fork_in_child(self) -> None: ...


# Everything the fork hook re-makes; weak, so a processor nobody uses is collected.
_forkable: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def reinit_after_fork(obj: ForkAware) -> None:
    """Have ``obj.after_fork_in_child()`` called in each child this process forks.

    One ``os.register_at_fork`` hook serves every object (hooks cannot be
    removed, so one per object would pile up); ``obj`` is held weakly.
    """
    _forkable.add(obj)


def _ours(objects: Iterable[object]) -> list[BoundedBatchSpanProcessor]:
    return [obj for obj in objects if isinstance(obj, BoundedBatchSpanProcessor)]


def _after_fork_in_child() -> None:
    objects = list(_forkable)
    for obj in objects:
        with handle_internal_errors("re-making export state in a forked child"):
            obj.after_fork_in_child()
    processors = _ours(objects)
    if processors and "multiprocessing.util" in sys.modules:
        # multiprocessing imports it before it forks; any other fork leaves it alone.
        sys.modules["multiprocessing.util"].register_after_fork(_exit_flush, _ExitFlush.arm)


if hasattr(os, "register_at_fork"):  # not on Windows, where there is no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _ExitFlush:
    """Shuts our processors down, and reports every loss, when a forked worker process ends.

    A ``multiprocessing`` child made by fork ends with ``os._exit`` (after its
    target returns, calls ``sys.exit``, or a ``Pool`` is closed and joined):
    ``atexit`` handlers (the provider's shutdown among them) never run there, so
    the spans of its last second would be lost, and the loss totals never said.
    What does run is multiprocessing's exit function, with its finalizers. The
    finalizer registry is cleared in the child after our fork hook has run, so
    the finalizer is registered from an after-fork callback of multiprocessing's
    own, which runs after that reset.

    ``Pool.terminate()`` (also what ``with Pool() as pool:`` does on leaving)
    ends its workers with SIGTERM, whose default action skips even that. So a
    worker whose app installed no SIGTERM handler gets ours: it exports what is
    queued (within the export timeout), reports, and then ends the process by
    SIGTERM's default action, as if we had not been there.
    """

    armed_in: int | None = None

    def arm(self) -> None:
        if self.armed_in == os.getpid():
            return
        self.armed_in = os.getpid()
        sys.modules["multiprocessing.util"].Finalize(None, self.finish, exitpriority=0)
        self._catch_sigterm()

    def finish(self) -> None:
        """End the spans that wait for the price table (unpriced if it is not loaded within
        ``LOAD_WAIT_S``), export what is queued (bounded by the export timeout), then
        report every loss."""
        with handle_internal_errors("ending the spans that wait for prices, at exit"):
            settle_prices()
        processors = _ours(_forkable)
        if processors:
            shutdown_processors(processors, max(p.export_timeout_s for p in processors))
        report_all()

    def _catch_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may install a handler
        previous = signal.getsignal(signal.SIGTERM)
        if previous not in (signal.SIG_DFL, None):
            return  # the app's handler (or its SIG_IGN) decides what SIGTERM means
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        with handle_internal_errors("reporting lost spans at SIGTERM"):
            self.finish()
        # Then what SIGTERM did before us: the default action, ending the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


_exit_flush = _ExitFlush()


def _arm_in_a_multiprocessing_child() -> None:
    """A pipeline made in a ``multiprocessing`` child (not inherited from its parent:
    a setup made on first use, or any spawn child) is shut down at its end as well."""
    process = sys.modules.get("multiprocessing.process")
    ready = process is not None and "multiprocessing.util" in sys.modules
    if ready and process.parent_process() is not None:  # type: ignore[union-attr]
        _exit_flush.arm()


# The last word at an ordinary exit: every backend's total, once (setups shut down first).
atexit.register(report_all)


def flush_processors(processors: Sequence[SpanProcessor], timeout_s: float) -> bool:
    """Flush ``processors`` at once, all within ``timeout_s``; ``False`` if any did not finish.

    Ours are only signalled and waited for, on this thread; any other processor
    (a backend's own) is called on a thread of its own, bounded by the same deadline.
    """
    deadline = time.monotonic() + timeout_s
    millis = int(timeout_s * 1000)
    ours = _ours(processors)
    tickets = [(p, p.request_flush()) for p in ours]
    others = [
        functools.partial(p.force_flush, millis)
        for p in processors
        if not isinstance(p, BoundedBatchSpanProcessor)
    ]
    others_done = run_all_with_timeout(others, timeout_s, "flush") if others else True
    ours_done = all([processor.wait_flushed(ticket, deadline) for processor, ticket in tickets])
    if not ours_done:
        _warn_timeout("flush", timeout_s)
    return others_done and ours_done


def shutdown_processors(processors: Sequence[SpanProcessor], timeout_s: float) -> bool:
    """Shut ``processors`` down at once, all within ``timeout_s`` (see :func:`flush_processors`)."""
    deadline = time.monotonic() + timeout_s
    ours = _ours(processors)
    for processor in ours:
        processor.request_shutdown()
    others = [p.shutdown for p in processors if not isinstance(p, BoundedBatchSpanProcessor)]
    others_done = run_all_with_timeout(others, timeout_s, "shutdown") if others else True
    ours_done = all([processor.wait_closed(deadline) for processor in ours])
    # Ours count and report what they could not export in time; the others cannot.
    if not others_done:
        _warn_timeout("shutdown", timeout_s)
    return others_done and ours_done


def _warn_timeout(what: str, timeout_s: float) -> None:
    internal_log.warning(
        f"{what}-timeout", "runnertrace: %s did not finish within %.1fs", what, timeout_s
    )
