"""The store's schema, one definition for both engines, and its version.

SQLite's text is the source; PostgreSQL's is derived from it (64-bit integers,
double precision, no ``WITHOUT ROWID``) plus what only it has: the trigram
index content search reads, and a ``meta`` row holding the schema version
(SQLite keeps it in ``PRAGMA user_version``).
"""

from __future__ import annotations

import re

__all__ = [
    "AGENT_COLUMNS",
    "FEEDBACK_COLUMNS",
    "METRICS_COLUMNS",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "SPAN_COLUMNS",
    "column_types",
    "postgres_schema",
    "sqlite_schema",
]

SCHEMA_VERSION = 4
"""4: ``runs.service_name`` (the app a run came from: its projects) and the ``feedback`` table.
3: the runs' totals and ``run_agents``. 2: the ``runs`` table."""

_SQLITE_SCHEMA = """
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
    derived         INTEGER NOT NULL DEFAULT 0,
    service_name    TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_agent ON runs (agent, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_framework ON runs (framework, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, start_ns, trace_id);
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (seq);
-- The project switcher: one app's runs, newest first.
CREATE INDEX IF NOT EXISTS runs_by_service ON runs (service_name, start_ns, trace_id);
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
-- Thumbs up or down and a note, on a run (span_id '') or on one of its spans: one per
-- target, the latest kept. Its trace's prune and copy take it along.
CREATE TABLE IF NOT EXISTS feedback (
    trace_id   TEXT    NOT NULL,
    span_id    TEXT    NOT NULL,
    score      INTEGER NOT NULL,
    comment    TEXT,
    source     TEXT    NOT NULL,
    created_ns INTEGER NOT NULL,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
"""
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
# What only PostgreSQL has. Content search: a trigram index over each span's name and
# attributes answers ``ILIKE '%word%'`` (the SQLite store keeps an FTS5 side file instead,
# see store/search.py). Copy progress: the SQLite stores copied in, and how far.
_POSTGRES_EXTRA = """
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX IF NOT EXISTS spans_text ON spans USING gin ((name || ' ' || attributes) gin_trgm_ops);
-- The model and provider filters: a key of a model call's JSON attributes, found through an
-- index instead of parsing every model call's attributes (SQLite walks the runs newest
-- first, probing each run's spans; PostgreSQL's planner joins on these).
CREATE INDEX IF NOT EXISTS spans_request_model
    ON spans ((attributes::jsonb ->> 'gen_ai.request.model')) WHERE span_type = 'message';
CREATE INDEX IF NOT EXISTS spans_response_model
    ON spans ((attributes::jsonb ->> 'gen_ai.response.model')) WHERE span_type = 'message';
CREATE INDEX IF NOT EXISTS spans_provider
    ON spans ((attributes::jsonb ->> 'gen_ai.provider.name')) WHERE span_type = 'message';
CREATE INDEX IF NOT EXISTS spans_system
    ON spans ((attributes::jsonb ->> 'gen_ai.system')) WHERE span_type = 'message';
CREATE SEQUENCE IF NOT EXISTS metric_points_order;
ALTER TABLE metric_points
    ADD COLUMN IF NOT EXISTS id BIGINT NOT NULL DEFAULT nextval('metric_points_order');
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS copies (
    source   TEXT   PRIMARY KEY,
    last_key TEXT,
    spans    BIGINT NOT NULL DEFAULT 0,
    done     INTEGER NOT NULL DEFAULT 0
);
"""

RUN_COLUMNS = (
    "trace_id, name, start_ns, end_ns, span_count, error_count, input_tokens, output_tokens, "
    "status, agent, framework, mode, session_id, user_id, cost, model_calls, tool_calls, "
    "errors, unpriced_calls, unpriced_models, nested_runs, derived, service_name"
)
AGENT_COLUMNS = (
    "trace_id, agent, start_ns, runs, cancelled, failed, depth, started_by, "
    "own_input_tokens, own_output_tokens, own_cost, own_unpriced_calls, own_model_calls, "
    "own_tool_calls, own_errors, own_ns, input_tokens, output_tokens, cost, unpriced_calls, "
    "model_calls, tool_calls, errors, total_ns, unpriced_models"
)
SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, is_root, name, kind, span_type, start_ns, end_ns, "
    "status_code, status_description, input_tokens, output_tokens, attributes, events, "
    "resource, scope"
)
FEEDBACK_COLUMNS = "trace_id, span_id, score, comment, source, created_ns"
METRICS_COLUMNS = (
    "time_ns, start_ns, name, unit, kind, attributes, value, count, min, max, bounds, bucket_counts"
)


def column_types(table: str) -> dict[str, str]:
    """Each column of ``table`` and its PostgreSQL type (``text``, ``bigint``, ``float8``),
    read from the schema itself (PostgreSQL's bulk insert names them)."""
    found = _TYPES.get(table)
    if found is None:
        script = _SQLITE_SCHEMA + _METRICS_SCHEMA
        match = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\)", script, re.S)
        if match is None:
            raise KeyError(table)
        found = {}
        for line in match.group(1).splitlines():
            parts = line.replace(",", " ").split()
            if len(parts) >= 2 and parts[1] in _PG_TYPES:
                found[parts[0]] = _PG_TYPES[parts[1]]
        _TYPES[table] = found
    return found


_PG_TYPES = {"TEXT": "text", "INTEGER": "bigint", "REAL": "float8"}
_TYPES: dict[str, dict[str, str]] = {}


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def sqlite_schema(*, metrics: bool = False) -> list[str]:
    """The SQLite statements, one by one (``metrics``: the metric points table's)."""
    return _statements(_METRICS_SCHEMA if metrics else _SQLITE_SCHEMA)


def _to_postgres(statement: str) -> str:
    statement = statement.replace(") WITHOUT ROWID", ")")
    # Byte order, as SQLite's BINARY collation: id prefixes and session prefixes are
    # ranges on the primary key and the session index, whatever the database's locale.
    statement = re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', statement)
    statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)


def postgres_schema() -> list[str]:
    """The PostgreSQL statements: the same tables and indexes, and search and copy's."""
    return [
        *(_to_postgres(s) for s in _statements(_SQLITE_SCHEMA + _METRICS_SCHEMA)),
        *_statements(_POSTGRES_EXTRA),
    ]


# Columns schema 3 added to a schema 2 ``runs`` table (name, declaration).
RUNS_ADDED = (
    ("model_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("tool_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("errors", "INTEGER NOT NULL DEFAULT 0"),
    ("unpriced_calls", "INTEGER NOT NULL DEFAULT 0"),
    ("unpriced_models", "TEXT"),
    ("nested_runs", "INTEGER NOT NULL DEFAULT 0"),
    ("derived", "INTEGER NOT NULL DEFAULT 0"),
)
# Columns schema 4 added to a schema 3 ``runs`` table.
RUNS_ADDED_4 = (("service_name", "TEXT"),)


def postgres_upgrade() -> list[str]:
    """What a schema 3 PostgreSQL store needs before the schema's statements run (its
    ``runs`` table lacks the columns the new indexes are on); nothing on an empty one."""
    return [
        f"ALTER TABLE IF EXISTS runs ADD COLUMN IF NOT EXISTS {name} {_to_postgres(declaration)}"
        for name, declaration in RUNS_ADDED_4
    ]


# A schema 3 PostgreSQL store's runs get their app from their top span's resource (the
# root, else the earliest span), as a writer would have stored it.
POSTGRES_BACKFILL = (
    "UPDATE runs SET service_name = (SELECT s.resource::jsonb ->> 'service.name' FROM spans s "
    "WHERE s.trace_id = runs.trace_id ORDER BY s.is_root DESC, s.start_ns, s.span_id LIMIT 1) "
    "WHERE service_name IS NULL"
)
