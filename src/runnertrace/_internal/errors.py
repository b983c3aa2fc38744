"""The one boundary where telemetry faults are caught.

Tracing must never break the host: a fault in span handling, a mapping or an
exporter is logged (once per call site, then rate-limited) and swallowed, so the
agent run continues unchanged. Under pytest the fault is re-raised instead so
tests see bugs in our own code; a test that injects faults on purpose opts out
with :func:`tolerate_internal_errors`.
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

logger = logging.getLogger("runnertrace")

P = ParamSpec("P")
R = TypeVar("R")

_tolerate: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_tolerate_internal_errors", default=False
)
_tolerate_globally = False


class RateLimitedLog:
    """Logs each key at most once per ``interval`` seconds and counts the rest.

    Thread-safe: exporters call it from their worker threads.
    """

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self.suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

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
        if self.should_log(key):
            logger.warning(msg, *args, exc_info=exc_info)

    def reset(self) -> None:
        with self._lock:
            self._last.clear()
            self.suppressed.clear()


internal_log = RateLimitedLog()


def _under_pytest() -> bool:
    return "PYTEST_CURRENT_TEST" in os.environ


def should_raise() -> bool:
    return _under_pytest() and not _tolerate.get() and not _tolerate_globally


@contextmanager
def tolerate_internal_errors() -> Iterator[None]:
    """Within this block, internal faults are logged instead of raised, even under pytest.

    Used by tests that inject faults to prove the host keeps running. It also
    covers exporter worker threads, which do not share the caller's context.
    """
    global _tolerate_globally
    token = _tolerate.set(True)
    previous = _tolerate_globally
    _tolerate_globally = True
    try:
        yield
    finally:
        _tolerate_globally = previous
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
