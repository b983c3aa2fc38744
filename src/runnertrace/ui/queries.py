"""The dashboard's reads, as the app imports them: the store's views and their parameters.

Every query lives in :mod:`runnertrace.store.views` (the store package holds all
SQL); this module keeps the names the app and programs import from here.
"""

from __future__ import annotations

from runnertrace.store.views import (
    GROUPINGS,
    MAX_NS,
    MAX_PAGE,
    SORTS,
    STATUSES,
    Dashboard,
    QueryError,
    RunFilter,
    float_param,
    int_param,
    percentile,
    run_json,
    text_param,
)

__all__ = [
    "GROUPINGS",
    "MAX_NS",
    "MAX_PAGE",
    "SORTS",
    "STATUSES",
    "Dashboard",
    "QueryError",
    "RunFilter",
    "float_param",
    "int_param",
    "percentile",
    "run_json",
    "text_param",
]
