"""The store: one object over either engine, with the read API the CLI and the report use.

``SpanStore(location)`` opens what ``location`` names (a file path, or a
``postgresql://`` URL: :mod:`runnertrace.store.url`). Writing goes through
:meth:`SpanStore.write`, which stores a batch and recomputes the run rows of
every trace it touched in the same transaction, on either engine; reading,
through the methods below and the dashboard's queries
(:mod:`runnertrace.store.views`), all written once over the dialect.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from runnertrace.store.codec import ROW_WIDTH, span_row, stored_row
from runnertrace.store.engine import Engine, Transaction
from runnertrace.store.errors import StoreError, TraceNotFoundError
from runnertrace.store.records import (
    AgentAccount,
    RunSummary,
    StoredMetricPoint,
    StoredSpan,
    agent_account,
    run_summary,
)
from runnertrace.store.schema import AGENT_COLUMNS, METRICS_COLUMNS, RUN_COLUMNS, SPAN_COLUMNS
from runnertrace.store.summary import refresh_runs
from runnertrace.store.url import StoreUrl
from runnertrace.tracing.drops import reject

__all__ = ["SpanStore", "printable"]

_HEX_PREFIX = re.compile(r"[0-9a-f]{1,32}")
_RUN_SELECT = f"SELECT {RUN_COLUMNS} FROM runs"
_SPAN_SELECT = f"SELECT {SPAN_COLUMNS} FROM spans"


def _engine(url: StoreUrl, *, busy_timeout_s: float, read_only: bool) -> Engine:
    if url.engine == "postgresql":
        from runnertrace.store.postgres import PostgresEngine

        return PostgresEngine(url, busy_timeout_s=busy_timeout_s, read_only=read_only)
    from runnertrace.store.sqlite import SqliteEngine

    return SqliteEngine(url, busy_timeout_s=busy_timeout_s, read_only=read_only)


class SpanStore:
    """A span store (SQLite file or PostgreSQL database): thread-safe writes, the read API.

    A SQLite file and its directory are created on the first write, never on reads
    (a read of a missing store raises :class:`StoreNotFoundError`); so is the schema
    of an empty PostgreSQL database. Relative paths are resolved once, against the
    working directory at construction. ``read_only``: a viewer, which never writes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | StoreUrl,
        *,
        busy_timeout_s: float = 10.0,
        read_only: bool = False,
    ) -> None:
        self.url = StoreUrl.parse(path)
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self.engine = _engine(self.url, busy_timeout_s=busy_timeout_s, read_only=read_only)

    @property
    def path(self) -> Path:
        """The SQLite file (a PostgreSQL store has none: see :attr:`location`)."""
        if self.url.path is None:
            raise StoreError(f"{self.url.shown} is a PostgreSQL store, not a file")
        return self.url.path

    @property
    def location(self) -> str:
        """Where the store is, as messages print it (a path, or the URL without password)."""
        return self.url.shown

    @property
    def is_file(self) -> bool:
        return self.url.engine == "sqlite"

    def __repr__(self) -> str:
        return f"SpanStore({self.location!r})"

    # -- the engine ---------------------------------------------------------------------
    @property
    def dialect(self) -> Any:
        return self.engine.dialect

    def read(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Rows of one query, in SQLite's SQL with the dialect's phrases (``?`` marks)."""
        return self.engine.query(sql, params)

    def upgrade(self) -> None:
        """Create or bring the schema up to date (``runnertrace migrate``; never a viewer)."""
        self.migrate()

    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the schema: (version before, version now)."""
        return self.engine.migrate()

    def version(self) -> int | None:
        return self.engine.version()

    def close(self) -> None:
        self.engine.close()

    def exists(self) -> bool:
        return self.engine.exists()

    def size_bytes(self) -> int | None:
        return self.engine.size_bytes()

    # -- writing ------------------------------------------------------------------------
    def write(self, spans: Sequence[ReadableSpan]) -> int:
        """Store ``spans`` in one transaction; returns how many were stored.

        A re-exported span replaces its row. A span that cannot be stored (a
        string with a lone surrogate or a NUL, a number past 64 bits) costs only
        itself: the batch is stored without it, and it is reported with its cause
        (:func:`~runnertrace.tracing.drops.reject`: counted lost when this is an
        export, logged otherwise). Safe from several threads and processes: a
        store another process is writing is waited for, up to ``busy_timeout_s``.
        """
        rows: list[tuple[object, ...]] = []
        for span in spans:
            try:
                rows.append(span_row(span))
            except Exception as exc:  # noqa: BLE001 - one span's data, never the batch's
                _reject(getattr(span, "name", "?"), exc)
        return self.write_rows(rows)

    def write_rows(self, rows: Sequence[tuple[object, ...]]) -> int:
        """Store span rows (:func:`~runnertrace.store.codec.span_row`'s) and their runs."""
        if not rows:
            return 0
        keys = sorted({str(row[0]) for row in rows})
        errors = self.engine.data_errors
        with self.engine.writing(keys) as tx:
            try:
                stored = self._insert(tx, rows)
            except errors:
                tx.restart()
                stored = self._insert_one_by_one(tx, rows)
            refresh_runs(tx, (str(row[0]) for row in stored), lock_sequence=tx.lock_sequence)
        return len(stored)

    @staticmethod
    def _insert(
        tx: Transaction, rows: Sequence[tuple[object, ...]]
    ) -> Sequence[tuple[object, ...]]:
        tx.store_rows("spans", SPAN_COLUMNS, ("trace_id", "span_id"), rows)
        return rows

    def _insert_one_by_one(
        self, tx: Transaction, rows: Sequence[tuple[object, ...]]
    ) -> list[tuple[object, ...]]:
        """The slow path, for a batch the database refused: each row alone, bad ones left out."""
        head, tail = tx.dialect.upsert("spans", SPAN_COLUMNS, ("trace_id", "span_id"))
        statement = head + f"({', '.join('?' * ROW_WIDTH)})" + tail
        stored = []
        for row in rows:
            try:
                with tx.savepoint():
                    tx.execute(statement, row)
            except self.engine.data_errors as exc:
                _reject(row[4], exc)
            else:
                stored.append(row)
        return stored

    def write_metric_points(self, points: Sequence[StoredMetricPoint]) -> int:
        """Append metric data points (one export interval of delta values) in one transaction."""
        if not points:
            return 0
        rows = [point.row() for point in points]
        with self.engine.writing() as tx:
            self.engine.ensure_metrics(tx)
            tx.store_rows("metric_points", METRICS_COLUMNS, (), rows)
        return len(rows)

    def metric_points(self, name: str | None = None) -> list[StoredMetricPoint]:
        """Stored metric points, oldest first (all, or those of metric ``name``)."""
        where, params = ("WHERE name = ?", (name,)) if name else ("", ())
        order = "rowid" if self.dialect.name == "sqlite" else "id"
        try:
            rows = self.read(
                f"SELECT {METRICS_COLUMNS} FROM metric_points {where} ORDER BY time_ns, {order}",
                params,
            )
        except StoreError as exc:
            if "no such table" in str(exc):
                return []  # nothing was ever recorded in this store
            raise
        return [StoredMetricPoint.from_row(row) for row in rows]

    # -- reading ------------------------------------------------------------------------
    def count(self) -> tuple[int, int]:
        """(spans, traces) in the store."""
        row = self.read("SELECT (SELECT COUNT(*) FROM spans), (SELECT COUNT(*) FROM runs)")[0]
        return int(row[0]), int(row[1])

    def list_runs(self, limit: int = 20) -> list[RunSummary]:
        """The ``limit`` most recent traces, newest first, each summarised as one run."""
        rows = self.read(
            f"{_RUN_SELECT} ORDER BY start_ns DESC, trace_id LIMIT ?", (max(0, limit),)
        )
        return [run_summary(row) for row in rows]

    def get_run(self, trace_id: str) -> RunSummary:
        rows = self.read(f"{_RUN_SELECT} WHERE trace_id = ?", (trace_id,))
        if not rows:
            raise TraceNotFoundError(f"no trace {trace_id} in {self.location}")
        return run_summary(rows[0])

    def agents(self, trace_id: str) -> list[AgentAccount]:
        """The per-agent table of ``trace_id`` (a full id): one row per agent, first started
        first (empty for a trace without run spans)."""
        rows = self.read(
            f"SELECT {AGENT_COLUMNS.removeprefix('trace_id, ')} FROM run_agents "
            "WHERE trace_id = ? ORDER BY start_ns, agent",
            (trace_id,),
        )
        return [agent_account(row) for row in rows]

    def get_trace(self, trace_id: str) -> list[StoredSpan]:
        """Every stored span of ``trace_id`` (a full id), ordered by start time."""
        rows = self.read(
            f"{_SPAN_SELECT} WHERE trace_id = ? ORDER BY start_ns, span_id", (trace_id,)
        )
        if not rows:
            raise TraceNotFoundError(f"no trace {trace_id} in {self.location}")
        return [stored_row(row) for row in rows]

    def resolve(self, ref: str) -> str:
        """The full trace id for ``last``, a full id, or a unique hex prefix of one."""
        wanted = ref.strip().lower().removeprefix("0x")
        if wanted == "last":
            runs = self.list_runs(1)
            if not runs:
                raise TraceNotFoundError(f"the trace store {self.location} holds no traces yet")
            return runs[0].trace_id
        if not _HEX_PREFIX.fullmatch(wanted):
            raise TraceNotFoundError(
                f"{ref!r} is not a trace id: use 'last', or 1-32 hex digits of a trace id"
            )
        # A range scan on the primary key: every hex id starting with the prefix
        # sorts between the prefix and the prefix followed by 'g'.
        rows = self.read(
            "SELECT DISTINCT trace_id FROM spans WHERE trace_id >= ? AND trace_id < ? "
            "ORDER BY trace_id LIMIT 6",
            (wanted, wanted + "g"),
        )
        if not rows:
            raise TraceNotFoundError(f"no trace id starts with {wanted!r} in {self.location}")
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise TraceNotFoundError(
                f"{wanted!r} matches several traces ({shown}); give more digits"
            )
        return str(rows[0][0])


def printable(text: object) -> str:
    """``text`` safe for any log handler: a lone surrogate becomes an escape."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _reject(name: object, exc: BaseException) -> None:
    """Report one span the store cannot hold, naming it and what is wrong with it."""
    reject(
        1,
        printable(f"span {name!r} cannot be stored ({type(exc).__name__}: {exc})"),
        "the span holds a value the store cannot hold (a string that is not valid "
        "Unicode or holds a NUL, or an integer past 64 bits); fix the code that sets it",
    )
