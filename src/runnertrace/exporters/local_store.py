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

A run's numbers (tokens, cost, model and tool calls, errors, unpriced calls) are
its root span's: every ``invoke_agent`` span carries its whole subtree's totals
(SEMCONV.md, "Totals and nesting"), and the store copies them, computing nothing
of its own. Only a trace whose top run spans carry none of those keys (another
app's, sent over OTLP, or one written before them) gets sums of its model-call
spans instead, marked ``derived``. Beside each run, ``run_agents`` holds one row
per agent of the trace (its own work and what it started, summed over its runs):
the per-agent tables, the cost-by-agent chart and the "agent anywhere" filter
read it. Schema 3 added both; older stores are upgraded and back-filled once.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
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

SCHEMA_VERSION = 3

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
    seq           INTEGER NOT NULL,
    model_calls     INTEGER NOT NULL DEFAULT 0,
    tool_calls      INTEGER NOT NULL DEFAULT 0,
    errors          INTEGER NOT NULL DEFAULT 0,
    unpriced_calls  INTEGER NOT NULL DEFAULT 0,
    unpriced_models TEXT,
    nested_runs     INTEGER NOT NULL DEFAULT 0,
    derived         INTEGER NOT NULL DEFAULT 0
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
-- One row per agent of a trace: what it did itself ("own") and with what it started.
CREATE TABLE IF NOT EXISTS run_agents (
    trace_id            TEXT    NOT NULL,
    agent               TEXT    NOT NULL,
    start_ns            INTEGER NOT NULL,
    runs                INTEGER NOT NULL,
    cancelled           INTEGER NOT NULL,
    failed              INTEGER NOT NULL,
    depth               INTEGER NOT NULL,
    started_by          TEXT,
    own_input_tokens    INTEGER NOT NULL,
    own_output_tokens   INTEGER NOT NULL,
    own_cost            REAL,
    own_unpriced_calls  INTEGER NOT NULL,
    own_model_calls     INTEGER NOT NULL,
    own_tool_calls      INTEGER NOT NULL,
    own_errors          INTEGER NOT NULL,
    own_ns              INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cost                REAL,
    unpriced_calls      INTEGER NOT NULL,
    model_calls         INTEGER NOT NULL,
    tool_calls          INTEGER NOT NULL,
    errors              INTEGER NOT NULL,
    total_ns            INTEGER NOT NULL,
    unpriced_models     TEXT,
    PRIMARY KEY (trace_id, agent)
) WITHOUT ROWID;
-- "This agent anywhere in the tree": the traces of one agent, newest first.
CREATE INDEX IF NOT EXISTS run_agents_by_agent ON run_agents (agent, trace_id);
-- Covers the cost-by-agent chart.
CREATE INDEX IF NOT EXISTS run_agents_by_start
    ON run_agents (start_ns, agent, own_cost, own_unpriced_calls);
"""
# Columns schema 3 added to a schema 2 ``runs`` table (name, declaration).
_RUNS_ADDED = (
    ("model_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("tool_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("errors", "INTEGER NOT NULL DEFAULT 0"),
    ("unpriced_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("unpriced_models", "TEXT"),
    ("nested_runs", "INTEGER NOT NULL DEFAULT 0"),
    ("derived", "INTEGER NOT NULL DEFAULT 0"),
)
# Indexes whose columns changed since schema 2: dropped, then made anew.
_REBUILT_INDEXES: tuple[str, ...] = ()
# The cost of a chat span, when a price was known (never guessed).
COST = "gen_ai.usage.cost"

RUN_COLUMNS = (
    "trace_id, name, start_ns, end_ns, span_count, error_count, input_tokens, output_tokens, "
    "status, agent, framework, mode, session_id, user_id, cost, model_calls, tool_calls, "
    "errors, unpriced_calls, unpriced_models, nested_runs, derived"
)
_RUN_SELECT = f"SELECT {RUN_COLUMNS} FROM runs"
_RUN_UPSERT_HEAD = f"INSERT OR REPLACE INTO runs ({RUN_COLUMNS}, seq) VALUES "
_RUN_WIDTH = 23


def _key(name: str) -> str:
    return f"'$.\"{name}\"'"


# Per trace: its span count, error spans and time span.
_RUN_AGGREGATES = (
    "SELECT trace_id, MIN(start_ns), MAX(end_ns), COUNT(*), SUM(status_code = 'ERROR') "
    "FROM spans WHERE trace_id IN ({}) GROUP BY trace_id"
)
# The sums of a trace's model-call and tool spans: a run's numbers only when its top run
# spans carry none (a foreign trace: derived). Read for those traces alone. A model call
# with tokens and no price is unpriced; its [provider, model, request model] name it.
_UNPRICED_CHAT = (
    "span_type = 'message' AND input_tokens + output_tokens > 0 "
    f"AND json_extract(attributes, {_key(COST)}) IS NULL"
)
_CALL_SUMS = (
    "SELECT trace_id, "
    "SUM(CASE WHEN span_type = 'message' THEN input_tokens ELSE 0 END), "
    "SUM(CASE WHEN span_type = 'message' THEN output_tokens ELSE 0 END), "
    f"SUM(CASE WHEN span_type = 'message' THEN json_extract(attributes, {_key(COST)}) END), "
    "SUM(span_type = 'message'), SUM(span_type = 'tool'), "
    "SUM(span_type IN ('message', 'tool') AND status_code = 'ERROR'), "
    f"SUM({_UNPRICED_CHAT}), "
    f"json_group_array(DISTINCT CASE WHEN {_UNPRICED_CHAT} THEN json_extract(attributes, "
    f"{_key(attr.PROVIDER)}, {_key(attr.RESPONSE_MODEL)}, {_key(attr.REQUEST_MODEL)}) END) "
    "FROM spans WHERE trace_id IN ({}) GROUP BY trace_id"
)
# Every run span of the traces, with its nearest run span above it (NULL: a top run),
# found by walking up the parent links through the primary key (at most 64 spans up).
_RUN_TREE = (
    "WITH RECURSIVE up(trace_id, run_id, at, hops, parent_run) AS ("
    "SELECT trace_id, span_id, parent_span_id, 0, NULL FROM spans "
    "WHERE trace_id IN ({}) AND +span_type = 'run' "
    "UNION ALL SELECT up.trace_id, up.run_id, s.parent_span_id, up.hops + 1, "
    "CASE WHEN s.span_type = 'run' THEN s.span_id END "
    "FROM up JOIN spans AS s ON s.trace_id = up.trace_id AND s.span_id = up.at "
    "WHERE up.parent_run IS NULL AND up.hops < 64) "
    "SELECT r.trace_id, r.span_id, p.parent_run, r.is_root, r.name, r.start_ns, r.end_ns, "
    "r.status_code, r.attributes "
    "FROM (SELECT trace_id, run_id, MAX(parent_run) AS parent_run FROM up "
    "GROUP BY trace_id, run_id) AS p "
    "JOIN spans AS r ON r.trace_id = p.trace_id AND r.span_id = p.run_id"
)
# The tree of a derived trace with several runs: each model or tool call is its nearest
# run's own work. (A trace of ours never needs this: its run spans say it.)
_CALL_SPANS = (
    "SELECT trace_id, span_id, parent_span_id, span_type, status_code, input_tokens, "
    f"output_tokens, CASE WHEN span_type = 'message' THEN json_extract(attributes, "
    f"{_key(COST)}) END, CASE WHEN {_UNPRICED_CHAT} THEN json_extract(attributes, "
    f"{_key(attr.PROVIDER)}, {_key(attr.RESPONSE_MODEL)}, {_key(attr.REQUEST_MODEL)}) END "
    "FROM spans WHERE trace_id IN ({})"
)
AGENT_COLUMNS = (
    "trace_id, agent, start_ns, runs, cancelled, failed, depth, started_by, "
    "own_input_tokens, own_output_tokens, own_cost, own_unpriced_calls, own_model_calls, "
    "own_tool_calls, own_errors, own_ns, input_tokens, output_tokens, cost, unpriced_calls, "
    "model_calls, tool_calls, errors, total_ns, unpriced_models"
)
_AGENT_INSERT_HEAD = f"INSERT OR REPLACE INTO run_agents ({AGENT_COLUMNS}) VALUES "
_AGENT_WIDTH = 25

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
    """One row of ``runnertrace traces``: a trace, described by its top span and run span.

    The numbers (tokens, cost, calls, errors) are the top run span's totals, which
    cover its whole subtree, nested agent runs included; ``derived`` says they were
    summed from the trace's model-call and tool spans instead, because its run spans
    carry no totals (another app's trace).
    """

    trace_id: str
    name: str
    start_ns: int
    end_ns: int
    span_count: int
    error_count: int
    """Spans in error, of any kind (``errors`` counts failed model and tool calls)."""
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
    """USD: the sum of the priced model calls (``None``: none was priced). Partial when
    ``unpriced_calls`` > 0."""
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    """Model and tool calls that ended in error."""
    unpriced_calls: int = 0
    """Model calls that reported tokens but got no price: the cost leaves them out."""
    unpriced_models: tuple[str, ...] = ()
    """The models no price was found for."""
    nested_runs: int = 0
    derived: bool = False
    """The numbers are sums of the trace's model-call spans (its run spans carry none)."""

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_status(self) -> str | None:
        """``priced``, ``partial`` (some calls unpriced), ``unpriced`` (no call priced),
        or ``None`` (no model call reported tokens)."""
        return cost_status(self.cost, self.unpriced_calls)

    @property
    def cost_label(self) -> str:
        """The cost as every viewer prints it, e.g. ``$0.0002206 (partial: 2 calls unpriced)``."""
        return cost_label(self.cost, self.unpriced_calls)


def format_cost(cost: float) -> str:
    """USD to four significant digits, as the pages' ``RT.cost`` prints it."""
    if cost == 0:
        return "$0"
    if cost >= 1:
        return f"${cost:.2f}"
    digits = min(10, max(2, 3 - math.floor(math.log10(cost))))
    return "$" + f"{cost:.{digits}f}".rstrip("0").rstrip(".")


def cost_status(cost: float | None, unpriced_calls: int) -> str | None:
    """Whether a cost covers every call: ``priced``, ``partial``, ``unpriced`` or ``None``."""
    if unpriced_calls > 0:
        return "unpriced" if cost is None else "partial"
    return None if cost is None else "priced"


def cost_label(cost: float | None, unpriced_calls: int) -> str:
    """A cost that says when it misses calls: ``$0.003``, ``$0.0002 (partial: 2 calls
    unpriced)``, ``unpriced`` (calls, none priced), or ``-`` (no model call had tokens)."""
    if unpriced_calls > 0:
        if cost is None:
            return "unpriced"
        calls = f"{unpriced_calls} call{'s' if unpriced_calls != 1 else ''}"
        return f"{format_cost(cost)} (partial: {calls} unpriced)"
    return "-" if cost is None else format_cost(cost)


@dataclass(slots=True)
class Usage:
    """What a share of a trace's work added up to: tokens, cost, calls, errors and time."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    unpriced_calls: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    duration_ns: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add_cost(self.cost, other.cost),
            self.unpriced_calls + other.unpriced_calls,
            self.model_calls + other.model_calls,
            self.tool_calls + other.tool_calls,
            self.errors + other.errors,
            self.duration_ns + other.duration_ns,
        )

    @property
    def cost_label(self) -> str:
        return cost_label(self.cost, self.unpriced_calls)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_status"] = cost_status(self.cost, self.unpriced_calls)
        return data


_NO_USAGE = Usage()


def _add_cost(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


@dataclass(frozen=True, slots=True)
class AgentAccount:
    """One agent of a trace (or a session): its own work, and with what it started.

    ``own`` counts the model and tool calls of the agent's runs, without the runs
    nested in them; ``total`` adds everything those nested runs did. An agent that
    ran several times sums its runs; one nested in itself is counted once in
    ``total`` (its outermost runs only). Times: ``total`` is the wall time of those
    outermost runs, ``own`` that of its runs minus the time its nested runs took.
    """

    agent: str
    start_ns: int
    runs: int
    cancelled: int
    failed: int
    """Runs that ended in error (not counting the cancelled ones)."""
    depth: int
    """How many runs it sits under at the least (0: a top run)."""
    started_by: tuple[str, ...]
    own: Usage
    total: Usage
    unpriced_models: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "start_ns": self.start_ns,
            "runs": self.runs,
            "cancelled": self.cancelled,
            "failed": self.failed,
            "depth": self.depth,
            "started_by": list(self.started_by),
            "own": self.own.to_json(),
            "total": self.total.to_json(),
            "unpriced_models": list(self.unpriced_models),
        }

    def row(self, trace_id: str) -> tuple[object, ...]:
        own, total = self.own, self.total
        return (
            trace_id,
            self.agent,
            self.start_ns,
            self.runs,
            self.cancelled,
            self.failed,
            self.depth,
            _dumps(list(self.started_by)) if self.started_by else None,
            own.input_tokens,
            own.output_tokens,
            own.cost,
            own.unpriced_calls,
            own.model_calls,
            own.tool_calls,
            own.errors,
            own.duration_ns,
            total.input_tokens,
            total.output_tokens,
            total.cost,
            total.unpriced_calls,
            total.model_calls,
            total.tool_calls,
            total.errors,
            total.duration_ns,
            _dumps(list(self.unpriced_models)) if self.unpriced_models else None,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> AgentAccount:
        """From the columns of ``AGENT_COLUMNS`` but the trace id (a sum of rows works too)."""
        return cls(
            agent=row[0],
            start_ns=int(row[1]),
            runs=int(row[2]),
            cancelled=int(row[3]),
            failed=int(row[4]),
            depth=int(row[5]),
            started_by=_names(row[6]),
            own=_usage(row[7:15]),
            total=_usage(row[15:23]),
            unpriced_models=_names(row[23]),
        )


def _usage(values: Sequence[Any]) -> Usage:
    """A :class:`Usage` from its 8 columns, in field order (a cost may be NULL)."""
    cost = values[2]
    return Usage(
        int(values[0] or 0),
        int(values[1] or 0),
        float(cost) if cost is not None else None,
        *(int(v or 0) for v in values[3:8]),
    )


def _names(value: object) -> tuple[str, ...]:
    """The names in a column's JSON list (or in several, comma-joined by a GROUP_CONCAT)."""
    if not isinstance(value, str) or not value:
        return ()
    try:
        found = json.loads(f"[{value}]")
    except ValueError:
        return ()
    names: list[str] = []
    for item in found:
        for name in item if isinstance(item, list) else [item]:
            if isinstance(name, str) and name not in names:
                names.append(name)
    return tuple(names)


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
    return RunSummary(
        **dict(zip(_RUN_FIELDS, row[:19], strict=True)),
        unpriced_models=_names(row[19]),
        nested_runs=int(row[20] or 0),
        derived=bool(row[21]),
    )


_RUN_FIELDS = tuple(name.strip() for name in RUN_COLUMNS.split(","))[:19]


def agent_account(row: Sequence[Any]) -> AgentAccount:
    """An :class:`AgentAccount` from a ``run_agents`` row (``AGENT_COLUMNS`` but the trace id)."""
    return AgentAccount.from_row(row)


# -- a run's numbers ------------------------------------------------------------------------
# The totals contract (SEMCONV.md "Totals and nesting"): a run's own work is on its span
# only when it had nested runs.
# A run span's totals, in Usage's field order: its subtree's, and its own work's.
_TOTAL_KEYS = (
    attr.AGG_INPUT_TOKENS,
    attr.AGG_OUTPUT_TOKENS,
    attr.AGG_COST,
    attr.UNPRICED_CALLS,
    attr.AGG_MODEL_CALLS,
    attr.AGG_TOOL_CALLS,
    attr.AGG_ERRORS,
)
_OWN_KEYS = (
    attr.OWN_INPUT_TOKENS,
    attr.OWN_OUTPUT_TOKENS,
    attr.OWN_COST,
    attr.OWN_UNPRICED_CALLS,
    attr.OWN_MODEL_CALLS,
    attr.OWN_TOOL_CALLS,
    attr.OWN_ERRORS,
)


def _run_usage(attrs: dict[str, Any], keys: tuple[str, ...]) -> Usage:
    """A run span's ``keys`` (:data:`_TOTAL_KEYS` or :data:`_OWN_KEYS`) as a Usage."""
    tokens_in, tokens_out, cost, unpriced, calls, tools, errors = (attrs.get(k) for k in keys)
    return Usage(
        _count(tokens_in),
        _count(tokens_out),
        _money(cost),
        _count(unpriced),
        _count(calls),
        _count(tools),
        _count(errors),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _money(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _model_label(found: object) -> str:
    """``provider/model`` from ``[provider, response model, request model]`` (SQL's answer)."""
    provider, *models = found if isinstance(found, list) else [None, found]
    model = next((m for m in models if isinstance(m, str) and m), None)
    if isinstance(provider, str) and provider and model:
        return f"{provider}/{model}"
    return model or (provider if isinstance(provider, str) and provider else "unknown")


@dataclass
class _Run:
    """One ``invoke_agent`` span of a trace, with its totals and its own work."""

    span_id: str
    parent: str | None  # the nearest run span above it
    agent: str
    start_ns: int
    end_ns: int
    failed: bool  # its span is in error (a cancelled one's is too)
    cancelled: bool
    ours: bool  # it carries the totals keys
    total: Usage
    own: Usage
    unpriced_models: tuple[str, ...]
    nested_runs: int


def _run(
    span_id: str,
    parent: str | None,
    name: str,
    start_ns: int,
    end_ns: int,
    status: str,
    attrs: dict[str, Any],
) -> _Run:
    """A run from its span: the totals its span carries, and its own work (the
    ``runnertrace.own.*`` keys, present when it had nested runs; else its totals)."""
    ours = attr.AGG_MODEL_CALLS in attrs
    agent = attrs.get(attr.AGENT_NAME)
    if not ours:  # another app's run, or one from before the totals: its calls say
        return _Run(
            span_id,
            parent,
            agent if isinstance(agent, str) and agent else name,
            start_ns,
            end_ns,
            status == "ERROR",
            bool(attrs.get(attr.CANCELLED)),
            False,
            _NO_USAGE,
            _NO_USAGE,
            (),
            0,
        )
    total = _run_usage(attrs, _TOTAL_KEYS)
    if attr.NESTED_RUNS in attrs or any(key in attrs for key in _OWN_KEYS):
        own = _run_usage(attrs, _OWN_KEYS)
    else:
        own = total
    models = attrs.get(attr.UNPRICED_MODELS)
    return _Run(
        span_id=span_id,
        parent=parent,
        agent=agent if isinstance(agent, str) and agent else name,
        start_ns=start_ns,
        end_ns=end_ns,
        failed=status == "ERROR",
        cancelled=bool(attrs.get(attr.CANCELLED)),
        ours=True,
        total=total,
        own=own,
        unpriced_models=tuple(m for m in models if isinstance(m, str))
        if isinstance(models, list | tuple)
        else (),
        nested_runs=_count(attrs.get(attr.NESTED_RUNS)),
    )


def _is_ours(runs: Sequence[_Run]) -> bool:
    """Do the trace's top runs carry the totals? Then they are its numbers."""
    tops = [r for r in runs if r.parent is None]
    return bool(tops) and all(r.ours for r in tops)


# (span_id, parent_span_id, span_type, status_code, tokens in, out, cost, unpriced model)
_CallSpan = tuple[str, str | None, str | None, str, int, int, object, object]


def _attributed(runs: Sequence[_Run], spans: Sequence[_CallSpan]) -> list[_Run]:
    """``runs`` with totals summed from the model and tool spans under them: a call is
    the own work of its nearest run, a run's total its own plus its nested runs'.
    (For a trace whose spans carry no totals; ours never need it.)"""
    parents = {s[0]: s[1] for s in spans}
    by_id = {r.span_id: r for r in runs}
    own: dict[str, Usage] = {r.span_id: Usage() for r in runs}
    models: dict[str, list[str]] = {r.span_id: [] for r in runs}
    for _, parent, span_type, status, tokens_in, tokens_out, cost, model in spans:
        if span_type not in ("message", "tool"):
            continue
        at, hops = parent, 0
        while at is not None and at not in by_id and hops < 64:
            at, hops = parents.get(at), hops + 1
        if at not in by_id:
            continue
        assert at is not None
        failed = int(status == "ERROR")
        if span_type == "message":
            unpriced = int(tokens_in + tokens_out > 0 and cost is None)
            call = Usage(tokens_in, tokens_out, _money(cost), unpriced, 1, 0, failed)
            if unpriced and (label := _model_label(model)) not in models[at]:
                models[at].append(label)
        else:
            call = Usage(tool_calls=1, errors=failed)
        own[at] += call
    children: dict[str, list[str]] = {}
    for run in runs:
        if run.parent in by_id:
            children.setdefault(run.parent, []).append(run.span_id)
    totals: dict[str, tuple[Usage, list[str]]] = {}

    def total(run_id: str, seen: frozenset[str]) -> tuple[Usage, list[str]]:
        if run_id not in totals:
            usage, found = own[run_id], list(models[run_id])
            for child in children.get(run_id, ()):
                if child not in seen:  # a malformed store's parent cycle
                    more, their = total(child, seen | {child})
                    usage += more
                    found += [m for m in their if m not in found]
            totals[run_id] = (usage, found)
        return totals[run_id]

    out = []
    for run in runs:
        usage, found = total(run.span_id, frozenset({run.span_id}))
        out.append(_replace(run, total=usage, own=own[run.span_id], models=tuple(found)))
    return out


def _replace(run: _Run, *, total: Usage, own: Usage, models: tuple[str, ...]) -> _Run:
    return _Run(
        run.span_id,
        run.parent,
        run.agent,
        run.start_ns,
        run.end_ns,
        run.failed,
        run.cancelled,
        run.ours,
        total,
        own,
        models,
        0,
    )


def _covered(intervals: Sequence[tuple[int, int]], start: int, end: int) -> int:
    """Nanoseconds of ``start..end`` that ``intervals`` cover (overlaps counted once)."""
    covered, reach = 0, start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in intervals):
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered


def _accounts(runs: Sequence[_Run]) -> list[AgentAccount]:
    """One :class:`AgentAccount` per agent of the trace, first started first."""
    if len(runs) == 1:  # the common case: one agent, once
        [run] = runs
        duration = max(0, run.end_ns - run.start_ns)
        return [
            AgentAccount(
                agent=run.agent,
                start_ns=run.start_ns,
                runs=1,
                cancelled=int(run.cancelled),
                failed=int(run.failed and not run.cancelled),
                depth=0,
                started_by=(),
                own=_with_time(run.own, duration),
                total=_with_time(run.total, duration),
                unpriced_models=run.unpriced_models,
            )
        ]
    by_id = {r.span_id: r for r in runs}
    children: dict[str, list[_Run]] = {}
    for run in runs:
        if run.parent in by_id:
            children.setdefault(run.parent, []).append(run)
    found: dict[str, dict[str, Any]] = {}
    for run in runs:
        chain: list[str] = []  # the agents of the runs above it, nearest first
        at, seen = run.parent, {run.span_id}
        while at is not None and at in by_id and at not in seen:
            seen.add(at)
            chain.append(by_id[at].agent)
            at = by_id[at].parent
        duration = max(0, run.end_ns - run.start_ns)
        nested = [(c.start_ns, c.end_ns) for c in children.get(run.span_id, ())]
        own_ns = max(0, duration - _covered(nested, run.start_ns, run.end_ns))
        entry = found.get(run.agent)
        if entry is None:
            entry = found[run.agent] = {
                "start_ns": run.start_ns,
                "runs": 0,
                "cancelled": 0,
                "failed": 0,
                "depth": len(chain),
                "started_by": [],
                "own": Usage(),
                "total": Usage(),
                "models": [],
            }
        entry["start_ns"] = min(entry["start_ns"], run.start_ns)
        entry["runs"] += 1
        entry["cancelled"] += int(run.cancelled)
        entry["failed"] += int(run.failed and not run.cancelled)
        entry["depth"] = min(entry["depth"], len(chain))
        if chain and chain[0] not in entry["started_by"]:
            entry["started_by"].append(chain[0])
        entry["own"] += _with_time(run.own, own_ns)
        if run.agent not in chain:  # nested in itself: its outermost run counted it already
            entry["total"] += _with_time(run.total, duration)
            entry["models"] += [m for m in run.unpriced_models if m not in entry["models"]]
    accounts = [
        AgentAccount(
            agent=agent,
            start_ns=e["start_ns"],
            runs=e["runs"],
            cancelled=e["cancelled"],
            failed=e["failed"],
            depth=e["depth"],
            started_by=tuple(e["started_by"]),
            own=e["own"],
            total=e["total"],
            unpriced_models=tuple(e["models"]),
        )
        for agent, e in found.items()
    ]
    return sorted(accounts, key=lambda a: (a.start_ns, a.agent))


def _with_time(usage: Usage, duration_ns: int) -> Usage:
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cost,
        usage.unpriced_calls,
        usage.model_calls,
        usage.tool_calls,
        usage.errors,
        duration_ns,
    )


def _trace_runs(
    stored: Sequence[_Run],
    calls: Sequence[_CallSpan] | None,
    derived: tuple[Usage, tuple[str, ...]],
    top_is_run: bool,
) -> list[_Run]:
    """The trace's runs with the totals the accounts read: as their spans say (ours), or
    summed from the calls under them (a derived trace)."""
    if _is_ours(stored) or not stored:
        return list(stored)
    if len(stored) == 1 and top_is_run:  # one run, the root: every call is its own
        [run] = stored
        usage, models = derived
        return [_replace(run, total=usage, own=usage, models=models)]
    return _attributed(stored, calls or ())


def agent_accounts(spans: Sequence[StoredSpan]) -> list[AgentAccount]:
    """The per-agent table of one trace, from its spans: what the store keeps in
    ``run_agents``, by the same rules (the report draws it from this)."""
    by_id = {s.span_id: s for s in spans}
    stored: list[_Run] = []
    for span in spans:
        if span.span_type != "run":
            continue
        at, hops = span.parent_span_id, 0
        while at is not None and at in by_id and by_id[at].span_type != "run" and hops < 64:
            at, hops = by_id[at].parent_span_id, hops + 1
        parent = at if at is not None and at in by_id and by_id[at].span_type == "run" else None
        stored.append(
            _run(
                span.span_id,
                parent,
                span.name,
                span.start_ns,
                span.end_ns,
                span.status_code,
                span.attributes,
            )
        )
    calls: list[_CallSpan] = []
    derived = Usage()
    models: list[str] = []
    for span in spans:
        a = span.attributes
        tokens_in, tokens_out = (
            _tokens(a.get(attr.INPUT_TOKENS)),
            _tokens(a.get(attr.OUTPUT_TOKENS)),
        )
        cost = a.get(COST) if span.span_type == "message" else None
        model = [a.get(attr.PROVIDER), a.get(attr.RESPONSE_MODEL), a.get(attr.REQUEST_MODEL)]
        calls.append(
            (span.span_id, span.parent_span_id, span.span_type, span.status_code,
             tokens_in, tokens_out, cost, model)
        )  # fmt: skip
        if span.span_type == "message":
            unpriced = int(tokens_in + tokens_out > 0 and cost is None)
            failed = int(span.is_error)
            derived += Usage(tokens_in, tokens_out, _money(cost), unpriced, 1, 0, failed)
            if unpriced and (label := _model_label(model)) not in models:
                models.append(label)
        elif span.span_type == "tool":
            derived += Usage(tool_calls=1, errors=int(span.is_error))
    ordered = sorted(spans, key=lambda s: (not s.is_root, s.start_ns, s.span_id))
    top_is_run = bool(ordered) and ordered[0].span_type == "run"
    return _accounts(_trace_runs(stored, calls, (derived, tuple(models)), top_is_run))


# The top span of each trace: its root (the earliest, if several), else its earliest span.
# Roots are found by scanning each trace's primary-key range; the attributes of a run span
# are not sent again (the run tree has them).
_TOP_COLUMNS = (
    "trace_id, span_id, is_root, name, start_ns, end_ns, status_code, "
    "CASE WHEN span_type = 'run' THEN NULL ELSE attributes END"
)
_ROOT_SPANS = f"SELECT {_TOP_COLUMNS} FROM spans WHERE trace_id IN ({{}}) AND is_root = 1"
# A trace whose root is not stored (yet): its earliest span (SQLite's bare columns come
# from the row MIN() picked).
_EARLIEST_SPANS = (
    f"SELECT {_TOP_COLUMNS}, MIN(start_ns) FROM spans WHERE trace_id IN ({{}}) GROUP BY trace_id"
)
# span_id, is_root, name, start_ns, end_ns, status_code, attributes (None: a run span's)
_SummarySpan = tuple[str, int, str, int, int, str, str | None]


@dataclass
class _Trace:
    """What one batch's queries found about one trace."""

    top: _SummarySpan | None = None
    runs: list[_Run] = field(default_factory=list)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # run spans', by id

    def top_attributes(self) -> dict[str, Any]:
        assert self.top is not None
        text = self.top[6]
        return self.attributes.get(self.top[0], {}) if text is None else json.loads(text)

    def top_is_run(self) -> bool:
        return self.top is not None and self.top[6] is None


_NO_CALLS: tuple[Usage, tuple[str, ...]] = (Usage(), ())


def _derived_usage(sums: Sequence[Any]) -> tuple[Usage, tuple[str, ...]]:
    """A trace's numbers summed from its model-call and tool spans (a ``_CALL_SUMS`` row)."""
    (tokens_in, tokens_out, cost, chats, tools, failed, unpriced, models) = sums[1:9]
    labels: list[str] = []
    for found in json.loads(models) if models and models != "[null]" else ():
        if found is not None and (label := _model_label(found)) not in labels:
            labels.append(label)
    usage = Usage(
        int(tokens_in or 0),
        int(tokens_out or 0),
        _money(cost),
        int(unpriced or 0),
        int(chats or 0),
        int(tools or 0),
        int(failed or 0),
    )
    return usage, tuple(labels)


def _summarise(
    aggregates: Sequence[Any],
    trace: _Trace,
    runs: Sequence[_Run],
    derived: tuple[Usage, tuple[str, ...]],
) -> tuple[object, ...]:
    """The ``runs`` row of one trace: its top run spans' totals (or, for a trace whose
    spans carry none, the sums of its calls), with the facts of its top and run span.

    Only the columns a summary needs are read (no events or resource JSON to parse):
    this runs for every trace of every batch the writer stores.
    """
    trace_id, first, last, count, error_spans = aggregates[:5]
    top = trace.top
    assert top is not None
    top_id, is_root, name, top_start, top_end, top_status = top[:6]
    earliest = min(trace.runs, key=lambda r: (r.start_ns, r.span_id)) if trace.runs else None
    if earliest is not None:
        run_id, run_failed = earliest.span_id, earliest.failed
        run_attributes = trace.attributes[run_id]
    else:
        run_id, run_failed = top_id, top_status == "ERROR"
        run_attributes = trace.top_attributes()
    # A cancelled run ends in error too (its CancelledError): it says cancelled, not error.
    if not is_root:
        status = "incomplete"
    elif run_attributes.get(attr.CANCELLED) or (
        run_id != top_id and trace.top_attributes().get(attr.CANCELLED)
    ):
        status = "cancelled"
    elif top_status == "ERROR" or run_failed:
        status = "error"
    else:
        status = "ok"

    def text(*keys: str) -> str | None:
        # The first key is today's; later ones are read from stores written before it.
        for key in keys:
            value = run_attributes.get(key)
            if isinstance(value, str):
                return value
        return None

    tops = [r for r in runs if r.parent is None]
    ours = _is_ours(runs)
    if ours:
        usage = sum((r.total for r in tops), Usage())
        models: list[str] = []
        for r in tops:
            models += [m for m in r.unpriced_models if m not in models]
        unpriced_models: tuple[str, ...] = tuple(models)
        nested = sum(r.nested_runs for r in tops)
    else:
        usage, unpriced_models = derived
        nested = sum(1 for r in runs if r.parent is not None)
    return (
        trace_id,
        name,
        top_start if is_root else first,
        top_end if is_root else last,
        count,
        error_spans,
        usage.input_tokens,
        usage.output_tokens,
        status,
        text(attr.AGENT_NAME),
        text(attr.FRAMEWORK),
        text(attr.MODE),
        text(attr.CONVERSATION_ID, attr.SESSION_ID),
        text(attr.USER_ID),
        usage.cost,
        usage.model_calls,
        usage.tool_calls,
        usage.errors,
        usage.unpriced_calls,
        _dumps(list(unpriced_models)) if unpriced_models else None,
        nested,
        0 if ours else 1,
    )


def _upgrade(conn: sqlite3.Connection) -> None:
    """Create or upgrade the schema, back-filling ``runs`` and ``run_agents`` from the spans once.

    One transaction: two processes opening an old file at once serialise on
    BEGIN IMMEDIATE, and the loser sees the new version and does nothing.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
            if have:  # a schema 2 runs table: the columns schema 3 added
                for column, declaration in _RUNS_ADDED:
                    if column not in have:
                        conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {declaration}")
            for index in _REBUILT_INDEXES:
                conn.execute(f"DROP INDEX IF EXISTS {index}")
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
    """Recompute the ``runs`` and ``run_agents`` rows of ``trace_ids`` (inside the
    caller's transaction).

    Each row gets a new ``seq``, higher than any before, so a viewer polling
    for ``seq > last seen`` finds every run that changed. A few statements per
    500 traces, whatever their number (see :func:`_multi_row` for why that matters).
    """
    wanted = sorted(set(trace_ids))
    seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM runs").fetchone()[0])
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        traces: dict[str, _Trace] = {trace_id: _Trace() for trace_id in chunk}
        for trace_id, *top in conn.execute(_ROOT_SPANS.format(marks), chunk).fetchall():
            trace = traces[trace_id]
            if trace.top is None or (top[3], top[0]) < (trace.top[3], trace.top[0]):
                trace.top = tuple(top)
        rootless = [trace_id for trace_id, trace in traces.items() if trace.top is None]
        if rootless:
            for trace_id, *top, _ in conn.execute(
                _EARLIEST_SPANS.format(", ".join("?" * len(rootless))), rootless
            ).fetchall():
                traces[trace_id].top = tuple(top)
        for trace_id, span_id, parent, _, name, begin, end, status, text in conn.execute(
            _RUN_TREE.format(marks), chunk
        ).fetchall():
            trace = traces[trace_id]
            attributes = trace.attributes[span_id] = json.loads(text)
            trace.runs.append(_run(span_id, parent, name, begin, end, status, attributes))
        # Derived traces with several runs (or one under a foreign root): their calls.
        attributed = [
            trace_id
            for trace_id, trace in traces.items()
            if trace.runs
            and not _is_ours(trace.runs)
            and not (len(trace.runs) == 1 and trace.top_is_run())
        ]
        derived: dict[str, tuple[Usage, tuple[str, ...]]] = {}
        fallback = [trace_id for trace_id, trace in traces.items() if not _is_ours(trace.runs)]
        if fallback:
            for sums in conn.execute(
                _CALL_SUMS.format(", ".join("?" * len(fallback))), fallback
            ).fetchall():
                derived[sums[0]] = _derived_usage(sums)
        calls: dict[str, list[_CallSpan]] = {}
        if attributed:
            for trace_id, *call in conn.execute(
                _CALL_SPANS.format(", ".join("?" * len(attributed))), attributed
            ).fetchall():
                model = call[7]
                call[7] = json.loads(model) if isinstance(model, str) else model
                calls.setdefault(trace_id, []).append(tuple(call))
        rows = []
        agent_rows = []
        for aggregates in conn.execute(_RUN_AGGREGATES.format(marks), chunk).fetchall():
            seq += 1
            trace_id = aggregates[0]
            trace = traces[trace_id]
            sums = derived.get(trace_id, _NO_CALLS)
            runs = _trace_runs(trace.runs, calls.get(trace_id), sums, trace.top_is_run())
            rows.append((*_summarise(aggregates, trace, runs, sums), seq))
            agent_rows += [account.row(trace_id) for account in _accounts(runs)]
        for sql, params in _multi_row(conn, _RUN_UPSERT_HEAD, _RUN_WIDTH, rows):
            conn.execute(sql, params)
        conn.execute(f"DELETE FROM run_agents WHERE trace_id IN ({marks})", chunk)
        for sql, params in _multi_row(conn, _AGENT_INSERT_HEAD, _AGENT_WIDTH, agent_rows):
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

    def agents(self, trace_id: str) -> list[AgentAccount]:
        """The per-agent table of ``trace_id`` (a full id): one row per agent, first started
        first (empty for a trace without run spans)."""
        rows = self._query(
            f"SELECT {AGENT_COLUMNS.removeprefix('trace_id, ')} FROM run_agents "
            "WHERE trace_id = ? ORDER BY start_ns, agent",
            (trace_id,),
        )
        return [agent_account(row) for row in rows]

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
