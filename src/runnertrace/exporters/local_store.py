"""The ``local`` backend's store, by its public path: reading (and writing) traces.

The store itself lives in :mod:`runnertrace.store` (schema, engines, queries);
this module keeps the names programs import from here. ``SpanStore(path)``
opens a SQLite file, or a PostgreSQL database when given a ``postgresql://`` URL.
"""

from __future__ import annotations

from runnertrace.store import (
    AGENT_COLUMNS,
    COST,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    AgentAccount,
    RunSummary,
    SpanStore,
    SqliteSpanExporter,
    StoredMetricPoint,
    StoredSpan,
    StoreError,
    StoreNotFoundError,
    StoreSpanExporter,
    StoreVersionError,
    TraceNotFoundError,
    Usage,
    agent_account,
    agent_accounts,
    cost_label,
    cost_status,
    format_cost,
    run_summary,
    span_row,
    span_tree,
    stored_span,
)

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

# Not in __all__, and imported from here by the viewers before the store package.
_INTERNAL = (
    AGENT_COLUMNS,
    COST,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    AgentAccount,
    StoreSpanExporter,
    Usage,
    agent_account,
    agent_accounts,
    cost_label,
    cost_status,
    format_cost,
    run_summary,
    span_row,
)
