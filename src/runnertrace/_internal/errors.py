"""The one boundary where telemetry faults are caught.

Tracing must never break the host: a fault in span handling, a mapping or an
exporter is logged (once per call site, then rate-limited) and swallowed, so the
agent run continues unchanged. Under pytest the fault is re-raised instead so
tests see bugs in our own code; a test that injects faults on purpose opts out
with :func:`tolerate_internal_errors`, for its own context only.

Logging a fault must not feed back into us: an application may route the
``runnertrace`` logger into OpenTelemetry (Logfire's logging handler, an OTel
``LoggingHandler``), whose spans and logs can reach our own pipeline again. So
our warnings are emitted with instrumentation suppressed, and a fault reported
while one is being logged is counted instead of logged.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

from opentelemetry import context as otel_context

logger = logging.getLogger("runnertrace")

P = ParamSpec("P")
R = TypeVar("R")

_tolerate: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_tolerate_internal_errors", default=False
)
_logging_fault: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_logging_internal_error", default=False
)

# The key OTel instrumentations check before producing telemetry. opentelemetry-api
# exposes it only under a private name (its value is a random per-process string, so it
# cannot be rebuilt), and the public helper ``suppress_instrumentation`` lives in
# opentelemetry-instrumentation, which is not one of our dependencies. The SDK's own
# batch processors and logfire read this same attribute. The plain string is the key
# older instrumentations check; opentelemetry-instrumentation sets both, and so do we.
_SUPPRESS_KEYS = (otel_context._SUPPRESS_INSTRUMENTATION_KEY, "suppress_instrumentation")  # noqa: SLF001


def suppressing_context() -> otel_context.Context:
    """The current OTel context with instrumentation suppressed (for a thread that
    attaches it for good, such as a framework's worker thread in a traced run)."""
    ctx = otel_context.get_current()
    for key in _SUPPRESS_KEYS:
        ctx = otel_context.set_value(key, True, ctx)
    return ctx


@contextmanager
def suppressed_instrumentation() -> Iterator[None]:
    """Within this block, OTel instrumentations (and logging integrations) stay silent.

    Used around our own logging and on our export threads, so that what we do to
    report or ship telemetry never becomes telemetry that comes back to us.
    """
    token = otel_context.attach(suppressing_context())
    try:
        yield
    finally:
        otel_context.detach(token)


class RateLimitedLog:
    """Logs each key at most once per ``interval`` seconds and counts the rest.

    Thread-safe: exporters call it from their worker threads.
    """

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self.suppressed: dict[str, int] = {}
        # Re-entrant: a signal handler that logs may interrupt the main thread in here.
        self._lock = threading.RLock()

    def should_log(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self.suppressed[key] = self.suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            return True

    def warning(self, key: str, msg: str, *args: object, exc_info: bool = False) -> None:
        """Log ``msg`` unless ``key`` was logged recently, with instrumentation suppressed.

        A warning raised by a logging handler while this one is being emitted (a
        handler that turned our record into telemetry that failed in our pipeline)
        is counted under ``key`` and not logged: it cannot recurse.
        """
        if _logging_fault.get():
            with self._lock:
                self.suppressed[key] = self.suppressed.get(key, 0) + 1
            return
        if not self.should_log(key):
            return
        token = _logging_fault.set(True)
        try:
            with suppressed_instrumentation():
                logger.warning(msg, *args, exc_info=exc_info)
        finally:
            _logging_fault.reset(token)

    def reset(self) -> None:
        with self._lock:
            self._last.clear()
            self.suppressed.clear()

    def after_fork_in_child(self) -> None:
        """A new lock: another thread may have held the old one when the process forked."""
        self._lock = threading.RLock()


internal_log = RateLimitedLog()
if hasattr(os, "register_at_fork"):  # not on Windows, where there is no fork
    os.register_at_fork(after_in_child=internal_log.after_fork_in_child)


def _under_pytest() -> bool:
    return "PYTEST_CURRENT_TEST" in os.environ


def should_raise() -> bool:
    """Whether a fault reported in the current context is raised (under pytest) or logged."""
    return _under_pytest() and not _tolerate.get()


@contextmanager
def tolerate_internal_errors() -> Iterator[None]:
    """Within this block, internal faults are logged instead of raised, even under pytest.

    Used by tests that inject faults to prove the host keeps running. The switch
    is a context variable: it covers this thread or task and the tasks it
    creates, never code running concurrently elsewhere. Export worker threads
    tolerate on their own (see ``BoundedBatchSpanProcessor``): a fault there can
    never reach a caller, so raising would only lose more spans.
    """
    token = _tolerate.set(True)
    try:
        yield
    finally:
        _tolerate.reset(token)


def report_internal_error(where: str, exc: BaseException) -> None:
    """Log a telemetry fault once (rate-limited); re-raise it under pytest."""
    if should_raise():
        raise exc
    internal_log.warning(
        where,
        "runnertrace: internal error in %s (telemetry only; the run continues): %r",
        where,
        exc,
        exc_info=True,
    )


@contextmanager
def handle_internal_errors(where: str) -> Iterator[None]:
    """Swallow and log any ``Exception`` raised by telemetry code in the block."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - this is the one deliberate boundary
        report_internal_error(where, exc)


def guarded(where: str) -> Callable[[Callable[P, R | None]], Callable[P, R | None]]:
    """Decorator form of :func:`handle_internal_errors`; returns ``None`` on a fault."""

    def decorate(fn: Callable[P, R | None]) -> Callable[P, R | None]:
        @wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - telemetry boundary
                report_internal_error(where, exc)
                return None

        return wrapper

    return decorate
