"""Feedback through the dashboard and from Python: ``POST /api/feedback`` (JSON only, the UI
token off loopback, never an ingest key), the trace's list, the runs list's column and filter,
the CSV and the trace's JSON export, and ``runnertrace.feedback()`` to a store, to the
configured store and to a dashboard over HTTP."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import csv
import io
import time
from collections.abc import Iterator
from pathlib import Path

from starlette.testclient import TestClient

import runnertrace
from runnertrace.store import SpanStore, StoreError
from runnertrace.store.feedback import FeedbackError, FeedbackTargetError
from runnertrace.ui import create_app
from test_ui_otlp import Server
from ui_fixtures import hand_made_runs

BASE = "http://127.0.0.1"
TOKEN = "s3cret-token-for-the-tests"
INGEST_KEY = "ingest-only-key-for-tests"


@pytest.fixture
def location(store_location: Path) -> Path:
    hand_made_runs(store_location, time.time_ns(), count=2)
    return store_location


def _ids(location: Path) -> list[str]:
    store = SpanStore(location, read_only=True)
    try:
        return [r.trace_id for r in sorted(store.list_runs(), key=lambda r: r.start_ns)]
    finally:
        store.close()


def _stored(location: Path) -> int:
    store = SpanStore(location, read_only=True)
    try:
        return int(store.read("SELECT COUNT(*) FROM feedback")[0][0])
    finally:
        store.close()


@pytest.fixture
def client(location: Path) -> Iterator[TestClient]:
    with TestClient(create_app(location), base_url=BASE) as client:
        yield client


def test_feedback_from_the_dashboard_is_listed_filtered_and_exported(
    client: TestClient, location: Path
) -> None:
    first, second = _ids(location)
    span = client.get(f"/api/runs/{first}/export").json()["spans"][1]["span_id"]
    answers = [
        client.post("/api/feedback", json={"trace_id": first, "score": "up", "comment": "good"}),
        client.post("/api/feedback", json={"trace_id": first, "score": "down", "span_id": span}),
        client.post("/api/feedback", json={"trace_id": second[:8], "score": "down"}),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json()["feedback"]["source"] == "ui"
    listed = client.get(f"/api/runs/{first}/feedback").json()["feedback"]
    assert [(f["span_id"], f["score"], f["comment"]) for f in listed] == [
        (None, "up", "good"),
        (span, "down", None),
    ]
    runs = {r["trace_id"]: r["feedback"] for r in client.get("/api/runs").json()["runs"]}
    assert runs[first] == {"score": "up", "comment": "good", "up": 1, "down": 1}
    down = client.get("/api/runs", params={"feedback": "down"}).json()["runs"]
    assert {r["trace_id"] for r in down} == {first, second}
    up = client.get("/api/runs", params={"feedback": "up"}).json()["runs"]
    assert [r["trace_id"] for r in up] == [first]
    refused = client.get("/api/runs", params={"feedback": "good"})
    assert refused.status_code == 400 and "feedback='good'" in refused.json()["error"]
    rows = list(csv.DictReader(io.StringIO(client.get("/api/runs.csv").text)))
    row = next(r for r in rows if r["trace_id"] == first)
    assert (row["feedback"], row["feedback_comment"]) == ("up", "good")
    assert (row["feedback_up"], row["feedback_down"]) == ("1", "1")
    exported = client.get(f"/api/runs/{first}/export").json()
    assert [f["score"] for f in exported["feedback"]] == ["up", "down"]
    assert exported["run"]["trace_id"] == first and len(exported["spans"]) == 3


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"score": "meh"}, 400, "score 'meh' is not 'up' or 'down'"),
        ({"comment": "x" * 2001}, 400, "over the 2000-character limit"),
        ({"trace_id": "ab" * 16}, 404, "no trace id starts with"),
        ({"span_id": "0123456789abcdef"}, 404, "has no span"),
        ({"rating": 5}, 400, "unknown field 'rating'"),
    ],
)
def test_bad_feedback_is_a_one_line_4xx_and_writes_nothing(
    client: TestClient, location: Path, body: dict[str, object], status: int, says: str
) -> None:
    sent = {"trace_id": _ids(location)[0], "score": "up", **body}
    answer = client.post("/api/feedback", json=sent)
    assert answer.status_code == status
    assert says in answer.json()["error"] and "\n" not in answer.json()["error"]
    assert _stored(location) == 0


def test_feedback_is_json_only(client: TestClient, location: Path) -> None:
    """A form another site's page could post is refused: no token guards a loopback port."""
    form = client.post("/api/feedback", data={"trace_id": _ids(location)[0], "score": "up"})
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    plain = client.post(
        "/api/feedback", content=b'{"score": "up"}', headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 415
    broken = client.post(
        "/api/feedback", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 400 and "not JSON" in broken.json()["error"]
    assert _stored(location) == 0


def test_off_loopback_feedback_needs_the_token_and_no_ingest_key_will_do(
    location: Path,
) -> None:
    app = create_app(location, token=TOKEN, ingest_keys=(INGEST_KEY,))
    body = {"trace_id": _ids(location)[0], "score": "up"}
    with TestClient(app, base_url=BASE, follow_redirects=False) as client:
        for headers in ({}, {"Authorization": f"Bearer {INGEST_KEY}"}):
            refused = client.post("/api/feedback", json=body, headers=headers)
            assert refused.status_code == 401 and "needs its token" in refused.json()["error"]
            listed = client.get(f"/api/runs/{body['trace_id']}/feedback", headers=headers)
            assert listed.status_code == 401
        assert _stored(location) == 0
        taken = client.post(
            "/api/feedback", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert taken.status_code == 200
    assert _stored(location) == 1


def test_python_feedback_to_a_store_and_to_the_configured_one(
    location: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _ids(location)
    given = runnertrace.feedback(first, "up", "from the app", store=location)
    assert (given.trace_id, given.score, given.source) == (first, "up", "python")
    monkeypatch.setenv("RUNNERTRACE_TRACE__LOCAL__PATH", str(location))
    assert runnertrace.feedback("last", -1).trace_id == second  # the configured store
    assert _stored(location) == 2
    with pytest.raises(ValueError, match="score 'great' is not 'up' or 'down'"):
        runnertrace.feedback(first, "great", store=location)
    with pytest.raises(FeedbackTargetError, match="no trace id starts with"):
        runnertrace.feedback("f" * 32, "up", store=location)
    assert _stored(location) == 2


def test_python_feedback_to_a_dashboard_over_http(location: Path) -> None:
    """An app exporting OTLP to ``runnertrace ui`` gives feedback through the dashboard."""
    first = _ids(location)[0]
    with Server(location, token=TOKEN, ingest_keys=(INGEST_KEY,)) as url:
        given = runnertrace.feedback(first, "down", "too slow", url=url, token=TOKEN)
        assert (given.score, given.comment, given.source) == ("down", "too slow", "ui")
        with pytest.raises(FeedbackTargetError, match="no trace id starts with"):
            runnertrace.feedback("ab" * 16, "up", url=url, token=TOKEN)
        with pytest.raises(FeedbackError, match="over the 2000-character limit"):
            runnertrace.feedback(first, "up", "x" * 2001, url=url, token=TOKEN)
        with pytest.raises(StoreError, match="refused the feedback: this dashboard needs its"):
            runnertrace.feedback(first, "up", url=url, token=INGEST_KEY)
    with pytest.raises(StoreError, match="cannot reach the dashboard"):
        runnertrace.feedback(first, "up", url=url, token=TOKEN)  # the server is gone
    store = SpanStore(location, read_only=True)
    rows = store.read("SELECT score, comment FROM feedback")
    store.close()
    assert [tuple(r) for r in rows] == [(-1, "too slow")]
