"""The SDK exporter in front of the store: finished spans in, failures counted, never raised.

It runs on the batch processor's worker thread, never on the agent's task, so
the bounded export queue and its loss counting (the same as every backend's)
stand between the app and the database: a store that is locked, down or slow
fails a batch, which the processor counts lost and explains once; the next
batch tries again, so writing resumes by itself.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from runnertrace.store.errors import StoreError, StoreUnavailableError
from runnertrace.store.retention import Retention
from runnertrace.store.sqlite import is_locked
from runnertrace.store.store import SpanStore, printable
from runnertrace.store.url import StoreUrl
from runnertrace.tracing.drops import explain

__all__ = ["SqliteSpanExporter", "StoreSpanExporter", "write_fix"]

logger = logging.getLogger("runnertrace")


def write_fix(store: SpanStore, exc: BaseException) -> str:
    """What to do about a failed write, by engine and cause."""
    if not store.is_file:
        if isinstance(exc, StoreUnavailableError):
            return (
                "the spans of this batch are lost; writing resumes when the database answers "
                "(runnertrace doctor checks it)"
            )
        return "runnertrace doctor checks the store; see the message"
    if is_locked(exc):
        return (
            "another program holds the store locked: close it, or set trace.local.path "
            "to another file"
        )
    return "check the path and its permissions (runnertrace doctor), or set trace.local.path"


class StoreSpanExporter(SpanExporter):
    """Writes finished spans to a :class:`SpanStore` (either engine).

    A store another writer holds is waited for, batch after batch, up to
    ``busy_timeout_s`` each (the backend passes half of ``trace.flush_timeout_s``,
    so a flush still sees the outcome); only a store held for longer, or a
    database that does not answer in that time, fails the batch, explained. A span
    the store cannot hold is that span's loss alone (see :meth:`SpanStore.write`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | StoreUrl,
        *,
        busy_timeout_s: float = 10.0,
        retention_s: float | None = None,
    ) -> None:
        self.store = SpanStore(path, busy_timeout_s=busy_timeout_s)
        self.busy_timeout_s = busy_timeout_s
        self._shutdown = False
        # trace.local.retention: a bounded prune step now and then, after a write.
        self.retention = Retention(self.store, retention_s) if retention_s else None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            self.store.write(spans)
        except (sqlite3.Error, StoreError, OSError) as exc:
            # A full disk, a read-only directory, a lock or a database that is down must
            # not break the host; the batch processor counts the lost spans, logs them once.
            text = str(exc)
            explain(
                printable(
                    text
                    if self.store.location in text
                    else f"cannot write to {self.store.location}: {text}"
                ),
                write_fix(self.store, exc),
            )
            return SpanExportResult.FAILURE
        if self.retention is not None:
            try:
                self.retention.after_write()
            except (sqlite3.Error, StoreError, OSError) as exc:
                # The spans are stored; only the prune failed: said once, tried again later.
                logger.warning(
                    "runnertrace: pruning %s failed: %s", self.store.location, printable(exc)
                )
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._shutdown = True
        self.store.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export commits before it returns


SqliteSpanExporter = StoreSpanExporter
"""The exporter's name from when SQLite was the only engine (kept: it is public)."""
