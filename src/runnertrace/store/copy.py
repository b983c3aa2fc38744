"""Moving to a team store: copy a SQLite store into PostgreSQL, resumable and idempotent.

Traces are copied in trace id order, ``batch`` at a time, each batch one write
of the target (its spans upserted, its run rows recomputed there, exactly as a
writer stores them), with their feedback. After each batch the target's ``copies`` row for this
source records the last trace id copied, so a copy that is interrupted (a
killed process, a lost connection) resumes after it; a batch copied twice is
the same rows again, so the worst an interruption costs is one batch's work.
Metric points are copied last, with the mark that the copy is done, in one
transaction: they are appended rows, never copied twice.

A trace written to the SQLite store after its batch was copied is not copied
again: copy a store the app no longer writes to (point ``trace.local.path`` at
PostgreSQL first, then copy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runnertrace.store.errors import StoreError
from runnertrace.store.schema import FEEDBACK_COLUMNS, METRICS_COLUMNS, SPAN_COLUMNS
from runnertrace.store.store import SpanStore

__all__ = ["CopyResult", "copy_store"]

BATCH = 200  # traces per step


@dataclass
class CopyResult:
    traces: int = 0
    spans: int = 0
    metric_points: int = 0
    done: bool = False
    resumed_after: str | None = None
    """The last trace id an earlier, interrupted copy had copied."""


def copy_store(
    source: SpanStore,
    target: SpanStore,
    *,
    batch: int = BATCH,
    max_batches: int | None = None,
    progress: Callable[[CopyResult], None] | None = None,
) -> CopyResult:
    """Copy ``source`` (SQLite) into ``target`` (PostgreSQL), from where a previous copy of
    the same source stopped; ``max_batches`` stops early (a large store in steps)."""
    if not source.is_file or target.is_file:
        raise StoreError(
            f"copy goes from a SQLite file to a PostgreSQL database: {source.location} to "
            f"{target.location}"
        )
    key = str(source.path)
    target.migrate()  # the schema, if the database is empty (a writer would make it too)
    found = target.read("SELECT last_key, done FROM copies WHERE source = ?", (key,))
    result = CopyResult()
    after = ""
    if found:
        after, done = str(found[0][0] or ""), bool(found[0][1])
        result.resumed_after = after or None
        if done:
            result.done = True
            return result
    batches = 0
    while max_batches is None or batches < max_batches:
        ids = [
            row[0]
            for row in source.read(
                "SELECT trace_id FROM runs WHERE trace_id > ? ORDER BY trace_id LIMIT ?",
                (after, batch),
            )
        ]
        if not ids:
            _finish(source, target, key, result)
            break
        marks = ", ".join("?" * len(ids))
        rows = [
            tuple(row)
            for row in source.read(
                f"SELECT {SPAN_COLUMNS} FROM spans WHERE trace_id IN ({marks})", ids
            )
        ]
        feedback = [
            tuple(row)
            for row in source.read(
                f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE trace_id IN ({marks})", ids
            )
        ]
        target.write_rows(rows)
        after = ids[-1]
        _mark(target, key, after, len(rows), feedback)
        result.traces += len(ids)
        result.spans += len(rows)
        batches += 1
        if progress is not None:
            progress(result)
    return result


def _mark(
    target: SpanStore, key: str, last: str, spans: int, feedback: list[tuple[object, ...]]
) -> None:
    """The batch's feedback (its runs are stored now) and how far the copy got, at once."""
    head, tail = target.dialect.upsert("copies", "source, last_key, spans, done", ("source",))
    with target.engine.writing() as tx:
        tx.store_rows("feedback", FEEDBACK_COLUMNS, ("trace_id", "span_id"), feedback)
        old = tx.rows("SELECT spans FROM copies WHERE source = ?", (key,))
        total = spans + (int(old[0][0]) if old else 0)
        tx.execute(head + "(?, ?, ?, 0)" + tail, (key, last, total))


def _finish(source: SpanStore, target: SpanStore, key: str, result: CopyResult) -> None:
    """The metric points, and the mark that this source is copied, in one transaction."""
    try:
        points = [tuple(r) for r in source.read(f"SELECT {METRICS_COLUMNS} FROM metric_points")]
    except StoreError as exc:
        if "no such table" not in str(exc):
            raise
        points = []
    head, tail = target.dialect.upsert("copies", "source, last_key, spans, done", ("source",))
    with target.engine.writing() as tx:
        state = tx.rows("SELECT done, last_key, spans FROM copies WHERE source = ?", (key,))
        if state and state[0][0]:
            return
        tx.store_rows("metric_points", METRICS_COLUMNS, (), points)
        last, spans = (state[0][1], state[0][2]) if state else ("", 0)
        tx.execute(head + "(?, ?, ?, 1)" + tail, (key, last, spans))
    result.metric_points = len(points)
    result.done = True
