"""The span store: one place for the schema, its migrations, the row codec, the run summary
and every query the local exporter, the OTLP ingest, the CLI, the report and the UI make.

Two engines behind one interface (:class:`SpanStore`), chosen by the store's
location (:mod:`runnertrace.store.url`):

* SQLite, the embedded default: one file, no server, one user's machine;
* PostgreSQL (the ``postgres`` extra, psycopg 3): one database that many
  processes on many hosts write to at once, and several dashboards read.

Module map: ``schema`` (tables, indexes, versions), ``dialect`` (the phrases the
two spell differently), ``codec`` (span <-> row), ``records`` (what reads give
back), ``summary`` (a run's numbers), ``sqlite`` and ``postgres`` (the engines),
``store`` (the read and write API), ``views`` (the dashboard's queries),
``search`` (SQLite's content index), ``retention`` (pruning), ``copy`` (SQLite
to PostgreSQL) and ``exporter`` (the SDK exporter). Nothing outside this
package holds SQL. ``import runnertrace.store`` loads no database driver:
psycopg is imported when a PostgreSQL store is opened.
"""

from __future__ import annotations

from runnertrace.store.codec import span_row, stored_span
from runnertrace.store.errors import (
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    StoreVersionError,
    TraceNotFoundError,
)
from runnertrace.store.exporter import SqliteSpanExporter, StoreSpanExporter
from runnertrace.store.records import (
    AgentAccount,
    RunSummary,
    StoredMetricPoint,
    StoredSpan,
    Usage,
    agent_account,
    cost_label,
    cost_status,
    format_cost,
    run_summary,
    span_tree,
)
from runnertrace.store.schema import AGENT_COLUMNS, RUN_COLUMNS, SCHEMA_VERSION
from runnertrace.store.store import SpanStore
from runnertrace.store.summary import COST, agent_accounts
from runnertrace.store.url import StoreUrl, is_url

__all__ = [
    "AGENT_COLUMNS",
    "COST",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "AgentAccount",
    "RunSummary",
    "SpanStore",
    "SqliteSpanExporter",
    "StoreError",
    "StoreNotFoundError",
    "StoreSpanExporter",
    "StoreUnavailableError",
    "StoreUrl",
    "StoreVersionError",
    "StoredMetricPoint",
    "StoredSpan",
    "TraceNotFoundError",
    "Usage",
    "agent_account",
    "agent_accounts",
    "cost_label",
    "cost_status",
    "format_cost",
    "is_url",
    "run_summary",
    "span_row",
    "span_tree",
    "stored_span",
]
