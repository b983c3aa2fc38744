"""The embedded span store behind the ``local`` backend: one SQLite file.

Why SQLite: it needs no server, no account and no network, survives process
restarts, and lets several processes (an app and ``runnertrace traces`` in
another terminal) share one file. WAL mode lets readers look while a writer
appends; a busy timeout serialises concurrent writers instead of failing them.

Writing: :class:`SqliteSpanExporter` turns finished spans into rows (ids as
hex, attributes/events/resource as JSON). It runs on the batch processor's
worker thread, never on the agent's task.

Reading: :class:`SpanStore` lists recent runs (one per trace), returns a
trace's spans, and resolves ``last`` or an id prefix to a full trace id. The
CLI and the HTML report are built on these calls only.

Runs: the writer keeps a ``runs`` table, one summary row per trace, updated in
the same transaction as the spans it summarises. Listing and filtering runs
then reads one indexed row per run instead of grouping every span of the
store, which is what keeps ``runnertrace ui`` fast at 100k runs. Stores from
before the table (schema 1) are upgraded and back-filled once, on first open.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from runnertrace.tracing import attributes as attr
from runnertrace.tracing.drops import explain, reject

__all__ = [
    "RunSummary",
    "SpanStore",
    "SqliteSpanExporter",
    "StoreError",
    "StoreNotFoundError",
    "StoreVersionError",
    "StoredMetricPoint",
    "StoredSpan",
    "TraceNotFoundError",
    "span_tree",
    "stored_span",
]

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id           TEXT    NOT NULL,
    span_id            TEXT    NOT NULL,
    parent_span_id     TEXT,
    is_root            INTEGER NOT NULL,
    name               TEXT    NOT NULL,
    kind               TEXT    NOT NULL,
    span_type          TEXT,
    start_ns           INTEGER NOT NULL,
    end_ns             INTEGER NOT NULL,
    status_code        TEXT    NOT NULL,
    status_description TEXT,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    attributes         TEXT    NOT NULL,
    events             TEXT    NOT NULL,
    resource           TEXT    NOT NULL,
    scope              TEXT,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (start_ns);
CREATE INDEX IF NOT EXISTS spans_by_type ON spans (span_type, start_ns);
CREATE INDEX IF NOT EXISTS spans_errors ON spans (start_ns) WHERE status_code = 'ERROR';
CREATE TABLE IF NOT EXISTS runs (
    trace_id      TEXT    PRIMARY KEY,
    name          TEXT    NOT NULL,
    start_ns      INTEGER NOT NULL,
    end_ns        INTEGER NOT NULL,
    span_count    INTEGER NOT NULL,
    error_count   INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    status        TEXT    NOT NULL,
    agent         TEXT,
    framework     TEXT,
    mode          TEXT,
    session_id    TEXT,
    user_id       TEXT,
    cost          REAL,
    seq           INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_agent ON runs (agent, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_framework ON runs (framework, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (seq);
-- Covers the dashboard's per-agent charts: they read no table row at all.
CREATE INDEX IF NOT EXISTS runs_for_charts
    ON runs (start_ns, agent, name, end_ns, input_tokens, output_tokens, cost);
"""
# The cost of a chat or run span, when a price was known (never guessed).
COST = "gen_ai.usage.cost"

RUN_COLUMNS = (
    "trace_id, name, start_ns, end_ns, span_count, error_count, input_tokens, output_tokens, "
    "status, agent, framework, mode, session_id, user_id, cost"
)
_RUN_SELECT = f"SELECT {RUN_COLUMNS} FROM runs"
_RUN_UPSERT_HEAD = f"INSERT OR REPLACE INTO runs ({RUN_COLUMNS}, seq) VALUES "
_RUN_WIDTH = 16
# Per trace: the aggregates, and chat spans' cost for a run span that has none (yet).
_RUN_AGGREGATES = (
    "SELECT trace_id, MIN(start_ns), MAX(end_ns), COUNT(*), SUM(status_code = 'ERROR'), "
    "SUM(input_tokens), SUM(output_tokens), "
    f"SUM(CASE WHEN span_type = 'message' THEN json_extract(attributes, '$.\"{COST}\"') END) "
    "FROM spans WHERE trace_id IN ({}) GROUP BY trace_id"
)

_COLUMNS = (
    "trace_id, span_id, parent_span_id, is_root, name, kind, span_type, start_ns, end_ns, "
    "status_code, status_description, input_tokens, output_tokens, attributes, events, "
    "resource, scope"
)
_INSERT_HEAD = f"INSERT OR REPLACE INTO spans ({_COLUMNS}) VALUES "
_ROW_WIDTH = 17  # the columns above, one value each in span_row()
# SQLite's default bound-variable limit before 3.32 (newer ones report their own).
_OLD_VARIABLE_LIMIT = 999
_SELECT = f"SELECT {_COLUMNS} FROM spans"

_HEX_PREFIX = re.compile(r"[0-9a-f]{1,32}")


class StoreError(RuntimeError):
    """The store cannot be opened or read; the message names the file and the cause."""


class StoreNotFoundError(StoreError):
    """There is no store file yet (nothing has been traced to ``local``)."""


class StoreVersionError(StoreError):
    """The store is of another schema version than this runnertrace reads (its data is fine)."""


class TraceNotFoundError(LookupError):
    """``last`` or an id (prefix) matches no trace, or a prefix matches several."""


# -- records -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredSpan:
    """One span as read back from the store (plain data, JSON-ready)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status_code: str
    status_description: str | None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    is_root: bool = False

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def span_type(self) -> str | None:
        value = self.attributes.get(attr.SPAN_TYPE)
        return value if isinstance(value, str) else None

    @property
    def is_error(self) -> bool:
        return self.status_code == "ERROR"

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "kind": self.kind,
            "type": self.span_type,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "status_code": self.status_code,
            "status_description": self.status_description,
            "attributes": self.attributes,
            "events": self.events,
            "resource": self.resource,
            "scope": self.scope,
        }


@dataclass(frozen=True)
class RunSummary:
    """One row of ``runnertrace traces``: a trace, described by its top span and run span."""

    trace_id: str
    name: str
    start_ns: int
    end_ns: int
    span_count: int
    error_count: int
    input_tokens: int
    output_tokens: int
    status: str
    """``ok``, ``error``, ``cancelled``, or ``incomplete`` (the top span was never stored)."""
    agent: str | None = None
    framework: str | None = None
    mode: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    cost: float | None = None
    """USD, from ``gen_ai.usage.cost`` (the run span's, else the sum of its chat spans')."""

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


_METRICS_SCHEMA = """
CREATE TABLE IF NOT EXISTS metric_points (
    time_ns       INTEGER NOT NULL,
    start_ns      INTEGER NOT NULL,
    name          TEXT    NOT NULL,
    unit          TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    attributes    TEXT    NOT NULL,
    value         REAL    NOT NULL,
    count         INTEGER,
    min           REAL,
    max           REAL,
    bounds        TEXT,
    bucket_counts TEXT
);
CREATE INDEX IF NOT EXISTS metric_points_by_name ON metric_points (name, time_ns);
"""
_METRICS_COLUMNS = (
    "time_ns, start_ns, name, unit, kind, attributes, value, count, min, max, bounds, bucket_counts"
)
_METRICS_INSERT = f"INSERT INTO metric_points ({_METRICS_COLUMNS}) VALUES ({', '.join('?' * 12)})"
_METRICS_SELECT = f"SELECT {_METRICS_COLUMNS} FROM metric_points"


@dataclass(frozen=True)
class StoredMetricPoint:
    """One metric data point over one export interval (delta): a sum, or a histogram.

    ``value`` is a counter's increase, or a histogram's sum; histograms also
    have ``count``, ``min``, ``max`` and their buckets (``bounds`` are the upper
    bounds; ``bucket_counts`` has one more entry, for values above the last).
    """

    time_ns: int
    start_ns: int
    name: str
    unit: str
    kind: str
    attributes: dict[str, Any]
    value: float
    count: int | None = None
    min: float | None = None
    max: float | None = None
    bounds: list[float] | None = None
    bucket_counts: list[int] | None = None

    def row(self) -> tuple[object, ...]:
        return (
            self.time_ns,
            self.start_ns,
            self.name,
            self.unit,
            self.kind,
            _dumps(self.attributes),
            self.value,
            self.count,
            self.min,
            self.max,
            None if self.bounds is None else _dumps(self.bounds),
            None if self.bucket_counts is None else _dumps(self.bucket_counts),
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredMetricPoint:
        return cls(
            time_ns=row[0],
            start_ns=row[1],
            name=row[2],
            unit=row[3],
            kind=row[4],
            attributes=json.loads(row[5]),
            value=row[6],
            count=row[7],
            min=row[8],
            max=row[9],
            bounds=None if row[10] is None else json.loads(row[10]),
            bucket_counts=None if row[11] is None else json.loads(row[11]),
        )


def _json_default(value: object) -> object:
    # Bytes never go into the store: a size note is all a viewer needs.
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    return str(value)


_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, separators=(",", ":"))
_dumps = _ENCODER.encode

# Every span of a process shares one Resource: encode it once, not per span.
_resource_json: dict[int, tuple[Resource, str]] = {}


def _resource(resource: Resource) -> str:
    cached = _resource_json.get(id(resource))
    if cached is not None and cached[0] is resource:
        return cached[1]
    text = _dumps(dict(resource.attributes))
    if len(_resource_json) >= 32:
        _resource_json.clear()
    _resource_json[id(resource)] = (resource, text)
    return text


def _tokens(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# Enum members' names, looked up per span (an enum's .name is a descriptor call).
_KIND_NAMES = {kind: kind.name for kind in SpanKind}
_STATUS_NAMES = {code: code.name for code in StatusCode}


def span_row(span: ReadableSpan) -> tuple[object, ...]:
    """The database row for one finished span."""
    context = span.context
    if context is None:
        raise ValueError(f"span {span.name!r} has no context")
    parent = span.parent
    attributes = dict(span.attributes or {})
    span_events = span.events
    events = (
        _dumps(
            [
                {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
                for e in span_events
            ]
        )
        if span_events
        else "[]"
    )
    start = span.start_time or 0
    span_type = attributes.get(attr.SPAN_TYPE)
    status = span.status
    return (
        format(context.trace_id, "032x"),
        format(context.span_id, "016x"),
        format(parent.span_id, "016x") if parent is not None else None,
        1 if parent is None or parent.is_remote else 0,
        span.name,
        _KIND_NAMES[span.kind],
        span_type if isinstance(span_type, str) else None,
        start,
        span.end_time or start,
        _STATUS_NAMES[status.status_code],
        status.description,
        _tokens(attributes.get(attr.INPUT_TOKENS)),
        _tokens(attributes.get(attr.OUTPUT_TOKENS)),
        _dumps(attributes),
        events,
        _resource(span.resource),
        span.instrumentation_scope.name if span.instrumentation_scope else None,
    )


def _insert_statements(
    conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]]
) -> Iterator[tuple[str, list[object]]]:
    """Multi-row INSERTs of span ``rows``: as few statements as the variable limit allows."""
    return _multi_row(conn, _INSERT_HEAD, _ROW_WIDTH, rows)


def _multi_row(
    conn: sqlite3.Connection, head: str, width: int, rows: Sequence[tuple[object, ...]]
) -> Iterator[tuple[str, list[object]]]:
    """``head`` + ``VALUES`` for ``rows`` of ``width`` values, in as few statements as fit.

    Why not ``executemany``: the sqlite3 module releases the GIL around every
    row's step, and while the host keeps the CPU busy, each release can cost
    the export thread a whole GIL switch interval (5 ms) to get the GIL back.
    One statement per row means a wait per row; this way a batch waits a few
    times. The same holds for every statement a batch runs, which is why a
    batch's run summaries are computed in two queries, not two per trace.
    """
    getlimit = getattr(conn, "getlimit", None)  # Python 3.11+
    limit = getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if getlimit else _OLD_VARIABLE_LIMIT
    per_statement = max(1, limit // width)
    params_sql = f"({', '.join('?' * width)})"
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        params = [value for row in chunk for value in row]
        yield head + ", ".join([params_sql] * len(chunk)), params


def _stored(row: Sequence[Any]) -> StoredSpan:
    return StoredSpan(
        trace_id=row[0],
        span_id=row[1],
        parent_span_id=row[2],
        is_root=bool(row[3]),
        name=row[4],
        kind=row[5],
        start_ns=row[7],
        end_ns=row[8],
        status_code=row[9],
        status_description=row[10],
        attributes=json.loads(row[13]),
        events=json.loads(row[14]),
        resource=json.loads(row[15]),
        scope=row[16],
    )


def stored_span(span: ReadableSpan) -> StoredSpan:
    """A finished span as the viewers see it (what reading its stored row back gives)."""
    return _stored(span_row(span))


def span_tree(spans: Iterable[StoredSpan]) -> list[tuple[StoredSpan, int]]:
    """Spans in depth-first order with their depth; children sorted by start time.

    A span whose parent is not in the list (a remote parent, or a parent that
    was dropped) is shown at the top level rather than hidden.
    """
    spans = sorted(spans, key=lambda s: (s.start_ns, s.name, s.span_id))
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[StoredSpan]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children.setdefault(parent, []).append(span)
    ordered: list[tuple[StoredSpan, int]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:  # a malformed store with a parent cycle
            continue
        seen.add(span.span_id)
        ordered.append((span, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(span.span_id, [])))
    # Spans caught in a parent cycle are unreachable from the top; show them flat.
    ordered.extend((s, 0) for s in spans if s.span_id not in seen)
    return ordered


def run_summary(row: Sequence[Any]) -> RunSummary:
    """A :class:`RunSummary` from a ``runs`` row (the columns of ``RUN_COLUMNS``)."""
    return RunSummary(*row)


# The top span (a root, else the earliest) and the first run span of each trace, in one
# query for a whole batch: the window ranks only keys, then the two rows are read.
_SUMMARY_SPANS = (
    "SELECT s.trace_id, r.top_rank = 1, s.span_type = 'run' AND r.run_rank = 1, "
    "s.is_root, s.name, s.start_ns, s.end_ns, s.status_code, s.attributes "
    "FROM (SELECT trace_id, span_id, span_type, "
    "ROW_NUMBER() OVER (PARTITION BY trace_id ORDER BY is_root DESC, start_ns, span_id) "
    "AS top_rank, "
    "ROW_NUMBER() OVER (PARTITION BY trace_id, span_type = 'run' ORDER BY start_ns, span_id) "
    "AS run_rank "
    "FROM spans WHERE trace_id IN ({})) AS r "
    "JOIN spans AS s ON s.trace_id = r.trace_id AND s.span_id = r.span_id "
    "WHERE r.top_rank = 1 OR (r.span_type = 'run' AND r.run_rank = 1)"
)
# is_root, name, start_ns, end_ns, status_code, attributes
_SummarySpan = tuple[int, str, int, int, str, str]


def _summarise(
    aggregates: Sequence[Any], top: _SummarySpan, run: _SummarySpan | None
) -> tuple[object, ...]:
    """The ``runs`` row of one trace, from its aggregates and its top and run spans.

    Only the columns a summary needs are read (no events or resource JSON to parse):
    this runs for every trace of every batch the writer stores.
    """
    trace_id, first, last, count, errors, tokens_in, tokens_out, chat_cost = aggregates
    run = run or top
    is_root, name, top_start, top_end, top_status = top[:5]
    run_attributes: dict[str, Any] = json.loads(run[5])
    if not is_root:
        status = "incomplete"
    elif top_status == "ERROR" or run[4] == "ERROR":
        status = "error"
    elif run_attributes.get(attr.CANCELLED) or json.loads(top[5]).get(attr.CANCELLED):
        status = "cancelled"
    else:
        status = "ok"

    def text(*keys: str) -> str | None:
        # The first key is today's; later ones are read from stores written before it.
        for key in keys:
            value = run_attributes.get(key)
            if isinstance(value, str):
                return value
        return None

    cost = run_attributes.get(COST)
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        cost = chat_cost
    return (
        trace_id,
        name,
        top_start if is_root else first,
        top_end if is_root else last,
        count,
        errors,
        tokens_in,
        tokens_out,
        status,
        text(attr.AGENT_NAME),
        text(attr.FRAMEWORK),
        text(attr.MODE),
        text(attr.CONVERSATION_ID, attr.SESSION_ID),
        text(attr.USER_ID),
        float(cost) if cost is not None else None,
    )


def _upgrade(conn: sqlite3.Connection) -> None:
    """Create or upgrade the schema, back-filling ``runs`` from the spans once.

    One transaction: two processes opening an old file at once serialise on
    BEGIN IMMEDIATE, and the loser sees the new version and does nothing.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            trace_ids = [row[0] for row in conn.execute("SELECT DISTINCT trace_id FROM spans")]
            _refresh_runs(conn, trace_ids)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _refresh_runs(conn: sqlite3.Connection, trace_ids: Iterable[str]) -> None:
    """Recompute the ``runs`` rows of ``trace_ids`` (inside the caller's transaction).

    Each row gets a new ``seq``, higher than any before, so a viewer polling
    for ``seq > last seen`` finds every run that changed. A few statements per
    500 traces, whatever their number (see :func:`_multi_row` for why that matters).
    """
    wanted = sorted(set(trace_ids))
    seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM runs").fetchone()[0])
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        tops: dict[str, _SummarySpan] = {}
        runs: dict[str, _SummarySpan] = {}
        for trace_id, is_top, is_run, *summary_span in conn.execute(
            _SUMMARY_SPANS.format(marks), chunk
        ).fetchall():
            if is_top:
                tops[trace_id] = tuple(summary_span)
            if is_run:
                runs[trace_id] = tuple(summary_span)
        rows = []
        for aggregates in conn.execute(_RUN_AGGREGATES.format(marks), chunk).fetchall():
            seq += 1
            trace_id = aggregates[0]
            rows.append((*_summarise(aggregates, tops[trace_id], runs.get(trace_id)), seq))
        for sql, params in _multi_row(conn, _RUN_UPSERT_HEAD, _RUN_WIDTH, rows):
            conn.execute(sql, params)


# -- the store ----------------------------------------------------------------------------
_write_locks: dict[Path, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _write_lock_for(path: Path) -> threading.Lock:
    with _write_locks_guard:
        lock = _write_locks.get(path)
        if lock is None:
            lock = _write_locks[path] = threading.Lock()
        return lock


class _ForkGuard:
    """No SQLite connection of ours is open when the process forks; the child gets new locks.

    Why close rather than reopen in the child: SQLite keeps per-process state for
    each open file (its locks, the shared-memory index of the WAL). A child that
    inherits it from a connection that was writing would see that connection's
    write lock as held by itself, for good, and never store a span; a child that
    closes an inherited connection could take the parent's WAL away. So before a
    fork every store's connection is closed, after any write in progress has
    committed (the fork waits for it: one transaction, bounded by the busy
    timeout), and every store reopens on its next use, in the parent and the
    child alike.
    """

    def __init__(self) -> None:
        self.stores: weakref.WeakSet[SpanStore] = weakref.WeakSet()
        self._held: list[threading.Lock] = []

    def before(self) -> None:
        stores = list(self.stores)
        # The store's own locks, taken in its order (write lock first); SpanStore's protocol.
        write_locks = sorted({id(s._write_lock): s._write_lock for s in stores}.items())  # noqa: SLF001
        for _, lock in write_locks:
            lock.acquire()
            self._held.append(lock)
        for store in stores:
            store._lock.acquire()  # noqa: SLF001
            self._held.append(store._lock)  # noqa: SLF001
            store._close_connection()  # noqa: SLF001

    def after_in_parent(self) -> None:
        while self._held:
            self._held.pop().release()

    def after_in_child(self) -> None:
        global _write_locks_guard
        self._held.clear()  # the parent's; the child makes its own
        _write_locks_guard = threading.Lock()
        _write_locks.clear()
        for store in list(self.stores):
            store._after_fork_in_child()  # noqa: SLF001


_fork_guard = _ForkGuard()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_fork_guard.before,
        after_in_parent=_fork_guard.after_in_parent,
        after_in_child=_fork_guard.after_in_child,
    )

# Connections a forked child found open anyway (the guard could not close one):
# never used again, and never closed (see _ForkGuard), so kept referenced here.
_inherited_connections: list[sqlite3.Connection] = []

_DATA_ERRORS: tuple[type[Exception], ...] = (
    UnicodeError,
    OverflowError,
    sqlite3.InterfaceError,
    sqlite3.DataError,
)
"""What SQLite raises for a value it cannot store (a lone surrogate, an int past 64 bits)."""

# How long SQLite itself sleeps for a lock before we try again. Short: its busy
# handler backs off to 100 ms polls, and a writer polling that slowly loses every
# race to writers in tight loops; our loop keeps trying until the write's deadline.
_LOCK_POLL_MS = 20


class SpanStore:
    """A SQLite span file: thread-safe writes and the read API of the CLI and report.

    The file and its directory are created on the first write, never on reads
    (a read of a missing store raises :class:`StoreNotFoundError`). Relative
    paths are resolved once, against the working directory at construction.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 10.0,
        read_only: bool = False,
    ) -> None:
        self.path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        self.busy_timeout_s = busy_timeout_s
        # Read-only: a viewer's connection (``mode=ro``) that can never take the
        # write lock, so it never delays the traced app's writer (WAL readers don't).
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        # Writers of one file in this process (the span and the metric exporter) take
        # turns here rather than in SQLite: the busy timeout is then only ever spent
        # waiting for another process, and a store "found locked" means just that.
        self._write_lock = _write_lock_for(self.path)
        _fork_guard.stores.add(self)

    def __repr__(self) -> str:
        return f"SpanStore({str(self.path)!r})"

    # -- connection -------------------------------------------------------------------
    def _connection(self, *, create: bool) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_file():
            raise StoreNotFoundError(
                f"no trace store at {self.path}; run `runnertrace demo`, or enable tracing "
                "(trace.enabled: true, trace.type: local) and run an agent"
            )
        try:
            conn = sqlite3.connect(
                f"{self.path.as_uri()}?mode=ro" if self.read_only else self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,  # autocommit; transactions are explicit
                check_same_thread=False,  # guarded by self._lock
                uri=self.read_only,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open trace store {self.path}: {exc}") from exc
        if self.read_only:
            return self._check_read_only(conn)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"trace store {self.path} has schema version {version}, newer than this "
                    f"runnertrace understands ({SCHEMA_VERSION}); upgrade runnertrace"
                )
            if version < SCHEMA_VERSION:
                _upgrade(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot use trace store {self.path}: {exc}") from exc
        except StoreError:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _check_read_only(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """Refuse, with the cause, a file a viewer cannot read as a store of this schema.

        Nothing is written: an empty file or another program's database stays as it
        is (a writer would turn it into a store), and so does an older store.
        """
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot read trace store {self.path}: {exc}") from exc
        if version == 0 and "spans" not in tables:
            conn.close()
            what = "an empty file" if not tables else "a SQLite file without a spans table"
            raise StoreError(f"{self.path} is not a runnertrace trace store ({what})")
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreVersionError(
                f"trace store {self.path} has schema version {version}, this runnertrace reads "
                f"{SCHEMA_VERSION}; "
                + (
                    "upgrade runnertrace"
                    if version > SCHEMA_VERSION
                    else "the next traced run into it upgrades it (or SpanStore(path).upgrade())"
                )
            )
        self._conn = conn
        return conn

    def upgrade(self) -> None:
        """Bring an existing store's schema up to date (a read-only viewer calls this first)."""
        with self._lock:
            self._connection(create=False)

    def read(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Rows of one query: the hook for viewers with queries of their own (the UI)."""
        return self._query(sql, params)

    def close(self) -> None:
        with self._lock:
            self._close_connection()

    def _close_connection(self) -> None:
        """Close the connection (the caller holds ``self._lock``); the next use reopens."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._write_ready = False

    def _after_fork_in_child(self) -> None:
        """New locks (a thread of the parent may have held the old ones), no connection."""
        if self._conn is not None:
            _inherited_connections.append(self._conn)
            self._conn = None
            self._write_ready = False
        self._lock = threading.Lock()
        self._write_lock = _write_lock_for(self.path)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._lock:
            conn = self._connection(create=False)
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read trace store {self.path}: {exc}") from exc

    # -- writing ----------------------------------------------------------------------
    _write_ready = False  # the connection polls for the lock (see _LOCK_POLL_MS)
    _metrics_ready = False  # the metrics table exists (made on first use)

    def write(self, spans: Sequence[ReadableSpan]) -> int:
        """Store ``spans`` in one transaction; returns how many were stored.

        A re-exported span replaces its row. A span that cannot be stored (a
        string with a lone surrogate, a number past 64 bits) costs only itself:
        the batch is stored without it, and it is reported with its cause
        (:func:`~runnertrace.tracing.drops.reject`: counted lost when this is an
        export, logged otherwise). Safe from several threads and processes: a
        store another process is writing is waited for, up to ``busy_timeout_s``.
        """
        rows: list[tuple[object, ...]] = []
        for span in spans:
            try:
                rows.append(span_row(span))
            except Exception as exc:  # noqa: BLE001 - one span's data, never the batch's
                _reject_span(span, exc)
        if not rows:
            return 0
        with self._write_lock, self._lock:
            conn = self._writing_connection()
            self._begin(conn)
            try:
                try:
                    stored = self._insert_spans(conn, rows)
                except _DATA_ERRORS:
                    conn.execute("ROLLBACK")
                    self._begin(conn)
                    stored = self._insert_spans_one_by_one(conn, rows)
                _refresh_runs(conn, (str(row[0]) for row in stored))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return len(stored)

    @staticmethod
    def _insert_spans(
        conn: sqlite3.Connection, rows: list[tuple[object, ...]]
    ) -> list[tuple[object, ...]]:
        for sql, params in _insert_statements(conn, rows):
            conn.execute(sql, params)
        return rows

    @staticmethod
    def _insert_spans_one_by_one(
        conn: sqlite3.Connection, rows: list[tuple[object, ...]]
    ) -> list[tuple[object, ...]]:
        """The slow path, for a batch SQLite refused: each row alone, the bad ones left out."""
        stored = []
        for row in rows:
            conn.execute("SAVEPOINT one_span")
            try:
                conn.execute(_INSERT_HEAD + f"({', '.join('?' * _ROW_WIDTH)})", row)
            except _DATA_ERRORS as exc:
                conn.execute("ROLLBACK TO one_span")
                _reject(row[4], exc)
            else:
                stored.append(row)
            conn.execute("RELEASE one_span")
        return stored

    def _writing_connection(self) -> sqlite3.Connection:
        conn = self._connection(create=True)
        if not self._write_ready:
            conn.execute(f"PRAGMA busy_timeout={_LOCK_POLL_MS}")
            self._write_ready = True
        return conn

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, trying again while another process writes, up to the deadline.

        Another writer holds the lock for one transaction at a time, so a live
        writer lets us in within milliseconds; only a store held locked for good
        (another program's open transaction) makes the write fail, after
        ``busy_timeout_s``.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() >= deadline:
                    raise

    def write_metric_points(self, points: Sequence[StoredMetricPoint]) -> int:
        """Append metric data points (one export interval of delta values) in one transaction."""
        if not points:
            return 0
        rows = [point.row() for point in points]
        with self._write_lock, self._lock:
            conn = self._writing_connection()
            if not self._metrics_ready:
                conn.executescript(_METRICS_SCHEMA)
                self._metrics_ready = True
            self._begin(conn)
            try:
                conn.executemany(_METRICS_INSERT, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return len(rows)

    def metric_points(self, name: str | None = None) -> list[StoredMetricPoint]:
        """Stored metric points, oldest first (all, or those of metric ``name``)."""
        where, params = ("WHERE name = ?", (name,)) if name else ("", ())
        try:
            rows = self._query(f"{_METRICS_SELECT} {where} ORDER BY time_ns, rowid", params)
        except StoreError as exc:
            if "no such table" in str(exc):
                return []  # nothing was ever recorded in this store
            raise
        return [StoredMetricPoint.from_row(row) for row in rows]

    # -- reading ----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_file()

    def count(self) -> tuple[int, int]:
        """(spans, traces) in the store."""
        row = self._query("SELECT (SELECT COUNT(*) FROM spans), (SELECT COUNT(*) FROM runs)")[0]
        return int(row[0]), int(row[1])

    def list_runs(self, limit: int = 20) -> list[RunSummary]:
        """The ``limit`` most recent traces, newest first, each summarised as one run."""
        rows = self._query(
            f"{_RUN_SELECT} ORDER BY start_ns DESC, trace_id LIMIT ?", (max(0, limit),)
        )
        return [run_summary(row) for row in rows]

    def get_run(self, trace_id: str) -> RunSummary:
        rows = self._query(f"{_RUN_SELECT} WHERE trace_id = ?", (trace_id,))
        if not rows:
            raise TraceNotFoundError(f"no trace {trace_id} in {self.path}")
        return run_summary(rows[0])

    def get_trace(self, trace_id: str) -> list[StoredSpan]:
        """Every stored span of ``trace_id`` (a full id), ordered by start time."""
        rows = self._query(f"{_SELECT} WHERE trace_id = ? ORDER BY start_ns, span_id", (trace_id,))
        if not rows:
            raise TraceNotFoundError(f"no trace {trace_id} in {self.path}")
        return [_stored(row) for row in rows]

    def resolve(self, ref: str) -> str:
        """The full trace id for ``last``, a full id, or a unique hex prefix of one."""
        wanted = ref.strip().lower().removeprefix("0x")
        if wanted == "last":
            runs = self.list_runs(1)
            if not runs:
                raise TraceNotFoundError(f"the trace store {self.path} holds no traces yet")
            return runs[0].trace_id
        if not _HEX_PREFIX.fullmatch(wanted):
            raise TraceNotFoundError(
                f"{ref!r} is not a trace id: use 'last', or 1-32 hex digits of a trace id"
            )
        # A range scan on the primary key: every hex id starting with the prefix
        # sorts between the prefix and the prefix followed by 'g'.
        rows = self._query(
            "SELECT DISTINCT trace_id FROM spans WHERE trace_id >= ? AND trace_id < ? "
            "ORDER BY trace_id LIMIT 6",
            (wanted, wanted + "g"),
        )
        if not rows:
            raise TraceNotFoundError(f"no trace id starts with {wanted!r} in {self.path}")
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise TraceNotFoundError(
                f"{wanted!r} matches several traces ({shown}); give more digits"
            )
        return str(rows[0][0])


def _is_locked(exc: BaseException) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _printable(text: object) -> str:
    """``text`` safe for any log handler: a lone surrogate becomes an escape."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _reject_span(span: ReadableSpan, exc: Exception) -> None:
    _reject(getattr(span, "name", "?"), exc)


def _reject(name: object, exc: Exception) -> None:
    """Report one span the store cannot hold, naming it and what is wrong with it."""
    reject(
        1,
        _printable(f"span {name!r} cannot be stored ({type(exc).__name__}: {exc})"),
        "the span holds a value SQLite cannot store (a string that is not valid "
        "Unicode, or an integer past 64 bits); fix the code that sets it",
    )


# -- the exporter -----------------------------------------------------------------------------
class SqliteSpanExporter(SpanExporter):
    """Writes finished spans to a :class:`SpanStore`; failures are counted, never raised.

    A store another process is writing is waited for, batch after batch, up to
    ``busy_timeout_s`` each (the backend passes half of ``trace.flush_timeout_s``,
    so a flush still sees the outcome); only a store held locked for longer
    fails the batch, explained. A span the store cannot hold is that span's loss
    alone (see :meth:`SpanStore.write`).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 10.0) -> None:
        self.store = SpanStore(path, busy_timeout_s=busy_timeout_s)
        self.busy_timeout_s = busy_timeout_s
        self._shutdown = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            self.store.write(spans)
        except (sqlite3.Error, StoreError, OSError) as exc:
            # A full disk, a read-only directory or a lock must not break the host;
            # the batch processor counts the lost spans and logs them once.
            explain(
                _printable(f"cannot write to {self.store.path}: {exc}"),
                "another program holds the store locked: close it, or set trace.local.path "
                "to another file"
                if _is_locked(exc)
                else "check the path and its permissions (runnertrace doctor), or set "
                "trace.local.path",
            )
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._shutdown = True
        self.store.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export commits before it returns
