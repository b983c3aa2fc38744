"""Feedback and projects in the store, on either engine: a thumb and a note on a run or a span
(one per target, the latest kept), bad input refused with nothing written, the runs list's
``feedback=`` and ``project=`` filters, the project switcher's counts, pruning with the trace,
the copy to PostgreSQL, and the upgrade of a schema 3 store (its runs' apps back-filled)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from runnertrace.cli import main
from runnertrace.store import SCHEMA_VERSION, SpanStore
from runnertrace.store.feedback import (
    MAX_COMMENT,
    FeedbackError,
    FeedbackTargetError,
    give,
    of_trace,
)
from runnertrace.store.retention import prune
from runnertrace.ui.queries import Dashboard, QueryError, RunFilter
from store_engines import Postgres
from ui_fixtures import app_runs

DAY_NS = 86_400 * 10**9


def _ids(store: SpanStore) -> list[str]:
    return [r.trace_id for r in sorted(store.list_runs(100), key=lambda r: r.start_ns)]


def _rows(store: SpanStore) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.read("SELECT * FROM feedback ORDER BY trace_id, span_id")]


def test_feedback_on_a_run_and_a_span_is_kept_one_per_target(store_location: Path) -> None:
    app_runs(store_location, "shop", 2, time.time_ns())
    store = SpanStore(store_location)
    first, second = _ids(store)
    span = next(s for s in store.get_trace(first) if s.parent_span_id is not None)
    give(store, first, "up", "  right answer  ")
    give(store, first[:10], -1, "slow tool", span_id=span.span_id)  # a prefix resolves
    give(store, second, "down")
    give(store, second, "up", "on second thought")  # replaces the run's thumb
    found = of_trace(store, first)
    assert [(f.span_id, f.score, f.comment, f.source) for f in found] == [
        (None, "up", "right answer", "python"),
        (span.span_id, "down", "slow tool", "python"),
    ]
    assert [(f.score, f.comment) for f in of_trace(store, second)] == [("up", "on second thought")]
    assert len(_rows(store)) == 3
    store.close()


def test_feedback_puts_its_run_on_the_live_feed(store_location: Path) -> None:
    app_runs(store_location, "shop", 2, time.time_ns())
    dashboard = Dashboard(store_location)
    store = SpanStore(store_location)
    try:
        first, _ = _ids(store)
        seen = dashboard.last_seq()
        give(store, first, "down", "wrong")
        seq, changed = dashboard.changes(seen)
        assert seq == seen + 1
        assert [(r["trace_id"], r["feedback"]["score"]) for r in changed] == [(first, "down")]
    finally:
        store.close()
        dashboard.close()


@pytest.mark.parametrize(
    ("change", "error", "says"),
    [
        ({"score": "meh"}, FeedbackError, "is not 'up' or 'down'"),
        ({"score": True}, FeedbackError, "is not 'up' or 'down'"),
        ({"score": 2}, FeedbackError, "is not 'up' or 'down'"),
        ({"comment": "x" * (MAX_COMMENT + 1)}, FeedbackError, "over the 2000-character limit"),
        ({"comment": 5}, FeedbackError, "comment must be text"),
        ({"comment": "a\x00b"}, FeedbackError, "holds a NUL"),
        ({"span_id": "zz"}, FeedbackError, "is not a span id"),
        ({"span_id": "0123456789abcdef"}, FeedbackTargetError, "has no span 0123456789abcdef"),
        ({"trace_id": "f" * 32}, FeedbackTargetError, "no trace id starts with"),
        ({"trace_id": ""}, FeedbackError, "is not a trace id"),
    ],
)
def test_bad_feedback_is_one_line_and_writes_nothing(
    store_location: Path, change: dict[str, object], error: type[Exception], says: str
) -> None:
    app_runs(store_location, "shop", 1, time.time_ns())
    store = SpanStore(store_location)
    given: dict[str, object] = {"trace_id": _ids(store)[0], "score": "up", **change}
    with pytest.raises(error, match=says) as raised:
        give(store, given.pop("trace_id"), given.pop("score"), **given)  # type: ignore[arg-type]
    assert isinstance(raised.value, ValueError) and "\n" not in str(raised.value)
    assert _rows(store) == []
    store.close()


def test_the_runs_list_filters_by_feedback_and_by_project(store_location: Path) -> None:
    now = time.time_ns()
    app_runs(store_location, "shop", 3, now)
    app_runs(store_location, "search", 2, now + 10**9)
    app_runs(store_location, None, 1, now + 2 * 10**9)  # the SDK's "unknown_service:..."
    store = SpanStore(store_location)
    shop = [r.trace_id for r in store.list_runs(100) if r.service_name == "shop"]
    search = [r.trace_id for r in store.list_runs(100) if r.service_name == "search"]
    assert len(shop) == 3 and len(search) == 2
    give(store, shop[0], "up")
    span = next(s for s in store.get_trace(shop[1]) if s.parent_span_id is not None)
    give(store, shop[1], "down", span_id=span.span_id)  # a span's thumb counts for its run
    give(store, search[0], "down", "wrong")
    store.close()
    dashboard = Dashboard(store_location)
    try:

        def listed(**params: str) -> set[str]:
            page = dashboard.runs(RunFilter.from_params(params), limit=50)
            return {r["trace_id"] for r in page["runs"]}

        assert listed(feedback="up") == {shop[0]}
        assert listed(feedback="down") == {shop[1], search[0]}
        assert listed(feedback="any") == {shop[0], shop[1], search[0]}
        assert len(listed(feedback="none")) == 3
        assert listed(project="shop") == set(shop)
        assert listed(project="shop", feedback="down") == {shop[1]}
        page = dashboard.runs(RunFilter(project="search"), limit=50)["runs"]
        by_id = {r["trace_id"]: r["feedback"] for r in page}
        assert by_id[search[0]] == {"score": "down", "comment": "wrong", "up": 0, "down": 1}
        assert by_id[search[1]] == {"score": None, "comment": None, "up": 0, "down": 0}
        projects = {p["name"]: p["runs"] for p in dashboard.facets()["projects"]}
        assert projects.pop("shop") == 3 and projects.pop("search") == 2
        assert list(projects.values()) == [1]  # the unnamed app's
        with pytest.raises(QueryError, match="feedback='meh' is not one of up, down, any, none"):
            RunFilter.from_params({"feedback": "meh"})
    finally:
        dashboard.close()


def test_a_run_without_an_app_is_in_the_unknown_project(store_location: Path) -> None:
    app_runs(store_location, "shop", 1, time.time_ns())
    store = SpanStore(store_location)
    (trace_id,) = _ids(store)
    with store.engine.writing() as tx:  # as a schema 3 run whose spans named no app is
        tx.execute("UPDATE runs SET service_name = NULL")
    store.close()
    dashboard = Dashboard(store_location)
    try:
        assert dashboard.facets()["projects"] == [{"name": "(unknown)", "runs": 1}]
        page = dashboard.runs(RunFilter.from_params({"project": "(unknown)"}), limit=50)
        assert [r["trace_id"] for r in page["runs"]] == [trace_id]
        assert dashboard.runs(RunFilter(project="shop"), limit=50)["runs"] == []
    finally:
        dashboard.close()


def test_feedback_is_pruned_with_its_trace(store_location: Path) -> None:
    now = time.time_ns()
    app_runs(store_location, "shop", 2, now - 40 * DAY_NS)
    app_runs(store_location, "shop", 1, now)
    store = SpanStore(store_location)
    old, older, new = _ids(store)
    for trace_id in (old, older, new):
        give(store, trace_id, "up")
    result = prune(store, 30 * 86400, vacuum=False)
    assert result.runs == 2
    assert [row[0] for row in _rows(store)] == [new]
    store.close()


def test_the_copy_to_postgresql_takes_the_feedback(postgres: Postgres, tmp_path: Path) -> None:
    source = tmp_path / "local.db"
    app_runs(source, "shop", 3, time.time_ns())
    store = SpanStore(source)
    ids = _ids(store)
    give(store, ids[0], "up", "good")
    span = next(s for s in store.get_trace(ids[2]) if s.parent_span_id is not None)
    give(store, ids[2], "down", span_id=span.span_id)
    expected = _rows(store)
    store.close()
    url = postgres.create_database()
    assert main(["copy", str(source), "--store", url, "--batch", "1"]) == 0
    target = SpanStore(url, read_only=True)
    assert _rows(target) == expected
    assert {r.service_name for r in target.list_runs()} == {"shop"}
    target.close()


def test_a_schema_3_sqlite_store_is_upgraded_and_its_apps_back_filled(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    app_runs(db, "shop", 2, time.time_ns())
    with sqlite3.connect(db) as conn:  # schema 3: no feedback table, no service_name
        conn.execute("DROP TABLE feedback")
        conn.execute("DROP INDEX runs_by_service")
        conn.execute("ALTER TABLE runs DROP COLUMN service_name")
        conn.execute("PRAGMA user_version=3")
    assert main(["migrate", "--store", str(db)]) == 0
    store = SpanStore(db, read_only=True)
    assert store.version() == SCHEMA_VERSION == 4
    assert {r.service_name for r in store.list_runs()} == {"shop"}
    assert _rows(store) == []
    store.close()


def test_a_schema_3_postgresql_store_is_upgraded_and_its_apps_back_filled(
    postgres: Postgres,
) -> None:
    url = postgres.create_database()
    app_runs(url, "shop", 2, time.time_ns())
    store = SpanStore(url)
    with store.engine.writing() as tx:  # schema 3: no feedback table, no service_name
        tx.execute("DROP TABLE feedback")
        tx.execute("ALTER TABLE runs DROP COLUMN service_name")
        tx.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    store.close()
    assert SpanStore(url).migrate() == (3, SCHEMA_VERSION)
    store = SpanStore(url, read_only=True)
    assert {r.service_name for r in store.list_runs()} == {"shop"}
    assert _rows(store) == []
    store.close()
