"""Retention: runs older than a cutoff leave the store, in bounded steps, on either engine.

Why bounded: a prune that deletes a month of a team's spans in one transaction
holds its locks (and, on PostgreSQL, its dead rows) for as long as that takes,
and the writers wait. Here each step deletes at most ``batch`` runs (their
spans, per-agent rows, feedback and run row) in a transaction of its own; on PostgreSQL
it takes the same per-trace locks a writer does, so a batch still arriving
for one of those traces waits for the step, and only one pruner runs at a
time (a second finds the prune lock taken and leaves the work to the first).

The search index is kept in step: PostgreSQL's trigram index is an index of
the spans table, so deleting a span removes it; SQLite's FTS5 side file has
the pruned runs' documents deleted in the same step (:func:`forget_documents`).

Continuous pruning (``trace.local.retention: 30d``) is the exporter's: after
a write it runs one step now and then (:class:`Retention`), so no process of
its own is needed and a store written by many processes is pruned by
whichever of them gets there first.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from runnertrace.store.store import SpanStore

__all__ = ["PruneResult", "Retention", "forget_documents", "parse_age", "prune", "prune_step"]

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
BATCH = 1000
# How often a writer with a retention setting prunes (a full step: again at once).
PRUNE_EVERY_S = 60.0


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``3600s`` or ``2w`` as seconds; ValueError saying the form."""
    match = _AGE.fullmatch(text or "")
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not an age: a number and a unit, s m h d or w (e.g. 30d, 12h)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass
class PruneResult:
    """What a prune removed."""

    runs: int = 0
    spans: int = 0
    metric_points: int = 0
    busy: bool = False
    """Another pruner held the prune lock: nothing was done (PostgreSQL)."""


def prune_step(store: SpanStore, before_ns: int, *, batch: int = BATCH) -> PruneResult:
    """Delete up to ``batch`` of the oldest runs that started before ``before_ns``."""
    candidates = [
        row[0]
        for row in store.read(
            "SELECT trace_id FROM runs WHERE start_ns < ? ORDER BY start_ns LIMIT ?",
            (before_ns, batch),
        )
    ]
    result = PruneResult()
    with store.engine.writing(candidates) as tx:
        if not tx.try_lock_prune():
            return PruneResult(busy=True)
        if candidates:
            marks = ", ".join("?" * len(candidates))
            # Read again under the locks: a run that a writer just updated may be newer now.
            ids = [
                row[0]
                for row in tx.rows(
                    f"SELECT trace_id FROM runs WHERE trace_id IN ({marks}) AND start_ns < ?",
                    [*candidates, before_ns],
                )
            ]
            if ids:
                marks = ", ".join("?" * len(ids))
                result.spans = int(
                    tx.rows(f"SELECT COUNT(*) FROM spans WHERE trace_id IN ({marks})", ids)[0][0]
                )
                for table in ("spans", "run_agents", "feedback", "runs"):
                    tx.execute(f"DELETE FROM {table} WHERE trace_id IN ({marks})", ids)
                result.runs = len(ids)
                if store.is_file:
                    forget_documents(store.path, ids)
        if tx.has_table("metric_points"):
            result.metric_points = int(
                tx.rows("SELECT COUNT(*) FROM metric_points WHERE time_ns < ?", (before_ns,))[0][0]
            )
            tx.execute("DELETE FROM metric_points WHERE time_ns < ?", (before_ns,))
    return result


def prune(
    store: SpanStore,
    older_than_s: float,
    *,
    batch: int = BATCH,
    vacuum: bool = True,
    now_ns: int | None = None,
) -> PruneResult:
    """Remove every run that started more than ``older_than_s`` ago, ``batch`` at a time;
    then let the database reuse the room (``VACUUM``, which on PostgreSQL blocks no writer
    and skips a table another session holds locked)."""
    before = (now_ns if now_ns is not None else time.time_ns()) - int(older_than_s * 1e9)
    total = PruneResult()
    while True:
        step = prune_step(store, before, batch=batch)
        if step.busy:
            total.busy = True
            break
        total.runs += step.runs
        total.spans += step.spans
        total.metric_points += step.metric_points
        if step.runs < batch:
            break
    if vacuum and total.runs:
        store.engine.vacuum()
    return total


def forget_documents(store_path: Path, trace_ids: list[str]) -> None:
    """Delete the pruned runs' documents from SQLite's search side file, if there is one."""
    side = store_path.with_name(store_path.name + ".search")
    if not side.is_file():
        return
    conn = sqlite3.connect(side, timeout=10.0, isolation_level=None)
    try:
        marks = ", ".join("?" * len(trace_ids))
        conn.execute("BEGIN IMMEDIATE")
        try:
            docs = [
                r[0]
                for r in conn.execute(
                    f"SELECT doc FROM documents WHERE trace_id IN ({marks})", trace_ids
                )
            ]
            if docs:
                doc_marks = ", ".join("?" * len(docs))
                conn.execute(f"DELETE FROM search WHERE rowid IN ({doc_marks})", docs)
                conn.execute(f"DELETE FROM documents WHERE doc IN ({doc_marks})", docs)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


class Retention:
    """A writer's continuous pruning: one bounded step after a write, at most every minute
    (at once again while there is more to prune)."""

    def __init__(self, store: SpanStore, older_than_s: float) -> None:
        self.store = store
        self.older_than_s = older_than_s
        self._next = 0.0
        self._lock = threading.Lock()

    def after_write(self) -> PruneResult | None:
        now = time.monotonic()
        if now < self._next or not self._lock.acquire(blocking=False):
            return None
        try:
            before = time.time_ns() - int(self.older_than_s * 1e9)
            step = prune_step(self.store, before)
            full = step.runs >= BATCH
            self._next = now if full else now + PRUNE_EVERY_S
            return step
        finally:
            self._lock.release()
