"""Lost spans are never silent: one warning line, with an exact count, per backend.

Spans can be lost in several places: an export that is refused, one that hangs
or times out, a queue that is full, or spans still waiting when the process
shuts down. Each of those places calls :func:`spans_lost`, which keeps an exact
running total per backend and logs a single line (rate-limited per backend) that
says how many spans are gone, why, and what to do. Whatever the rate limit held
back is logged as a final total when the backend shuts down, so the last line a
user sees always has the true count.

Exporters explain *why* an export failed with :func:`explain`, called while the
export runs on our worker thread (see :func:`exporting`); vendor exporters that
log their own retry chatter (the OTLP exporter's "Transient error ...") are
folded into that explanation by the logging filter in ``exporters/otlp.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from runnertrace._internal.errors import internal_log

__all__ = [
    "LostSpans",
    "current_export",
    "explain",
    "exporting",
    "lost_spans",
    "report_totals",
    "spans_lost",
]

logger = logging.getLogger("runnertrace")


@dataclass
class LostSpans:
    """The running account of one backend's lost spans."""

    total: int = 0
    reported: int = 0
    cause: str = ""
    fix: str = ""


@dataclass
class _Export:
    backend: str
    cause: str = ""
    fix: str = ""


_accounts: dict[str, LostSpans] = {}
_lock = threading.Lock()
_current = threading.local()


@contextmanager
def exporting(backend: str) -> Iterator[_Export]:
    """Mark this thread as exporting for ``backend``; collects what :func:`explain` says."""
    record = _Export(backend)
    previous = getattr(_current, "export", None)
    _current.export = record
    try:
        yield record
    finally:
        _current.export = previous


def current_export() -> _Export | None:
    """The export running on this thread, if any (the log filter uses it)."""
    record: _Export | None = getattr(_current, "export", None)
    return record


def explain(cause: str, fix: str = "") -> None:
    """Say why the export running on this thread failed (no-op outside an export)."""
    record = current_export()
    if record is not None:
        record.cause = cause
        if fix:
            record.fix = fix


def spans_lost(backend: str, count: int, cause: str, fix: str = "") -> None:
    """Count ``count`` lost spans of ``backend`` and log the one rate-limited line."""
    if count <= 0:
        return
    with _lock:
        account = _accounts.setdefault(backend, LostSpans())
        account.total += count
        account.cause = cause
        account.fix = fix or account.fix
        if not internal_log.should_log(f"spans-lost:{backend}"):
            return
        account.reported = account.total
        total, fix = account.total, account.fix
    _log(backend, total, cause, fix)


def report_totals(backend: str) -> None:
    """Log the final total if the rate limit held back part of the count."""
    with _lock:
        account = _accounts.get(backend)
        if account is None or account.total == account.reported:
            return
        account.reported = account.total
        total, cause, fix = account.total, account.cause, account.fix
    _log(backend, total, cause, fix)


def lost_spans(backend: str | None = None) -> int:
    """How many spans were lost so far (for one backend, or all of them)."""
    with _lock:
        if backend is not None:
            account = _accounts.get(backend)
            return account.total if account is not None else 0
        return sum(a.total for a in _accounts.values())


def reset() -> None:
    """Forget every count (tests)."""
    with _lock:
        _accounts.clear()


def _log(backend: str, total: int, cause: str, fix: str) -> None:
    noun = "span" if total == 1 else "spans"
    message = f"runnertrace: {total} {noun} lost so far for {backend}: {cause}"
    if fix:
        message += f"; {fix}"
    logger.warning(message)
