"""Lost spans are never silent: an exact count per backend, with every cause counted.

Spans can be lost in several places: an export that is refused, one that hangs
or times out, a queue that is full, a span that cannot be encoded, or spans
still waiting when the process ends. Each of those places calls
:func:`spans_lost`, which keeps an exact running total per backend, and per
cause within it, and logs a single line (rate-limited per backend) that says how
many spans are gone, why, and what to do. When the backend shuts down, or the
process ends in any way we can see (normal exit, a ``multiprocessing`` child's
exit, SIGTERM), :func:`report_totals` logs the final line once: the exact total
and the causes by count ("3,210 connection refused by ..., 12 the export queue
is full ...").

Exporters explain *why* an export failed with :func:`explain`, called while the
export runs on our worker thread (see :func:`exporting`); vendor exporters that
log their own retry chatter (the OTLP exporter's "Transient error ...") are
folded into that explanation by the logging filter in ``exporters/otlp.py``. An
exporter that stores or sends the rest of a batch but not some of its spans (a
span that cannot be encoded) says so with :func:`reject`: those spans, and only
those, are counted lost, with their own cause.

After ``os.fork()`` the child starts from zero: its totals are its own (a
gunicorn worker must not repeat its parent's losses), and the lock is new (a
thread of the parent may have held it at the fork).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from runnertrace._internal.errors import internal_log

__all__ = [
    "ExportAttempt",
    "LostSpans",
    "closing",
    "current_export",
    "explain",
    "exporting",
    "lost_spans",
    "metric_export_failed",
    "reject",
    "report_all",
    "report_totals",
    "spans_lost",
]

logger = logging.getLogger("runnertrace")


@dataclass
class LostSpans:
    """The running account of one backend's lost spans (and failed metric exports)."""

    total: int = 0
    reported: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    """Each cause with the spans it cost, in the order first seen."""
    fixes: dict[str, str] = field(default_factory=dict)
    metric_failures: int = 0
    metric_cause: str = ""
    metric_failures_reported: int = 0
    final_said: bool = False

    def fix(self) -> str:
        """What to do about the cause that cost the most spans."""
        if not self.causes:
            return ""
        worst = max(self.causes, key=self.causes.__getitem__)
        return self.fixes.get(worst, "")


@dataclass
class ExportAttempt:
    """What one export said about itself: why it failed, which spans it could not deliver."""

    backend: str
    cause: str = ""
    fix: str = ""
    weak: bool = False  # the cause is a generic message a specific one may replace
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_fix: str = ""

    @property
    def rejected_count(self) -> int:
        return sum(self.rejected.values())


_accounts: dict[str, LostSpans] = {}
# Re-entrant: a SIGTERM handler that reports runs on the main thread, which may be
# inside spans_lost() at that moment.
_lock = threading.RLock()
_current = threading.local()


@contextmanager
def exporting(backend: str) -> Iterator[ExportAttempt]:
    """Mark this thread as exporting for ``backend``; collects what :func:`explain` says."""
    record = ExportAttempt(backend)
    previous = getattr(_current, "export", None)
    _current.export = record
    try:
        yield record
    finally:
        _current.export = previous


def current_export() -> ExportAttempt | None:
    """The export running on this thread, if any (the log filter uses it)."""
    record: ExportAttempt | None = getattr(_current, "export", None)
    return record


def explain(cause: str, fix: str = "", *, weak: bool = False) -> None:
    """Say why the export running on this thread failed (no-op outside an export).

    A ``weak`` cause ("failed after retries") never replaces a specific one
    ("connection refused by ...") said earlier in the same export.
    """
    record = current_export()
    if record is None or (weak and record.cause and not record.weak):
        return
    record.cause, record.weak = cause, weak
    if fix:
        record.fix = fix


def reject(count: int, cause: str, fix: str = "") -> None:
    """``count`` spans of the export running on this thread were not delivered, for ``cause``.

    The rest of the batch was: only these are counted lost. Outside an export
    (a caller writing spans itself), the rejection is logged once (rate-limited).
    """
    if count <= 0:
        return
    record = current_export()
    if record is None:
        internal_log.warning("rejected", "runnertrace: %d span(s) not stored: %s", count, cause)
        return
    record.rejected[cause] = record.rejected.get(cause, 0) + count
    record.rejected_fix = fix or record.rejected_fix


def spans_lost(backend: str, count: int, cause: str, fix: str = "", *, final: bool = False) -> None:
    """Count ``count`` lost spans of ``backend`` and log the one rate-limited line.

    ``final``: the backend is shutting down, and its final line (:func:`report_totals`)
    comes next; a line of its own now would only say part of the same.
    """
    if count <= 0:
        return
    with _lock:
        account = _accounts.setdefault(backend, LostSpans())
        account.total += count
        account.causes[cause] = account.causes.get(cause, 0) + count
        if fix:
            account.fixes[cause] = fix
        if final or not internal_log.should_log(f"spans-lost:{backend}"):
            return
        account.reported = account.total
        message = _so_far(backend, account.total, cause, fix or account.fix())
    logger.warning(message)


def metric_export_failed(backend: str, cause: str, *, periodic: bool = False) -> None:
    """Count one failed metric export of ``backend``; said in its final line.

    Logged on its own only from a periodic export (``periodic``) while the
    backend has lost no spans (a metrics endpoint that fails alone): otherwise
    the span line already says the backend is down, or (at a flush or
    shutdown) the final line comes soon. The SDK's own chatter is silenced.
    """
    with _lock:
        account = _accounts.setdefault(backend, LostSpans())
        account.metric_failures += 1
        account.metric_cause = cause
        said_later = not periodic or _closing[0] or account.total
        if said_later or not internal_log.should_log(f"metrics-lost:{backend}"):
            return
        account.metric_failures_reported = account.metric_failures
        failures = account.metric_failures
    logger.warning(
        "runnertrace: %d metric export(s) failed so far for %s: %s", failures, backend, cause
    )


_closing = [0]  # pipelines shutting down now: their final lines follow


@contextmanager
def closing() -> Iterator[None]:
    """A pipeline shuts down within this block: failures wait for the final line."""
    with _lock:
        _closing[0] += 1
    try:
        yield
    finally:
        with _lock:
            _closing[0] -= 1


def report_totals(backend: str) -> None:
    """Log the final line for ``backend``: the exact total and each cause with its count.

    Once: a second call logs again only if more was lost since the first.
    """
    with _lock:
        account = _accounts.get(backend)
        if account is None:
            return
        spans_unsaid = account.total != account.reported
        metrics_unsaid = account.metric_failures != account.metric_failures_reported
        if account.final_said and not (spans_unsaid or metrics_unsaid):
            return
        account.final_said = True
        account.reported = account.total
        account.metric_failures_reported = account.metric_failures
        message = _final(backend, account)
    logger.warning(message)


def report_all() -> None:
    """:func:`report_totals` for every backend (the process is ending)."""
    with _lock:
        backends = list(_accounts)
    for backend in backends:
        report_totals(backend)


def lost_spans(backend: str | None = None) -> int:
    """How many spans were lost so far (for one backend, or all of them)."""
    with _lock:
        if backend is not None:
            account = _accounts.get(backend)
            return account.total if account is not None else 0
        return sum(a.total for a in _accounts.values())


def lost_by_cause(backend: str) -> dict[str, int]:
    """Each cause with the spans of ``backend`` it cost (a copy)."""
    with _lock:
        account = _accounts.get(backend)
        return dict(account.causes) if account is not None else {}


def reset() -> None:
    """Forget every count (tests)."""
    with _lock:
        _accounts.clear()


def _after_fork_in_child() -> None:
    """The child's own totals, from zero, under a lock no thread of the parent can hold."""
    global _lock
    _lock = threading.RLock()
    _accounts.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, where there is no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _spans(count: int) -> str:
    return f"{count:,} {'span' if count == 1 else 'spans'}"


def _so_far(backend: str, total: int, cause: str, fix: str) -> str:
    message = f"runnertrace: {_spans(total)} lost so far for {backend}: {cause}"
    return f"{message}; {fix}" if fix else message


def _final(backend: str, account: LostSpans) -> str:
    parts = []
    if account.total:
        causes = sorted(account.causes.items(), key=lambda item: -item[1])
        by_cause = ", ".join(f"{count:,} {cause}" for cause, count in causes)
        parts.append(f"{_spans(account.total)} lost so far for {backend} in all: {by_cause}")
    if account.metric_failures:
        failed = f"{account.metric_failures:,} metric export(s) failed ({account.metric_cause})"
        parts.append(failed if account.total else f"{failed} for {backend}")
    message = "runnertrace: " + "; ".join(parts)
    fix = account.fix()
    return f"{message}; {fix}" if fix else message
