"""The dashboard's server: its JSON APIs over a real store, and the store's runs table."""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("starlette", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import csv
import io
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from starlette.testclient import TestClient

from runnertrace.cli import main
from runnertrace.exporters.local_store import SCHEMA_VERSION, SpanStore, StoreError
from runnertrace.ui import create_app, is_loopback
from store_engines import ENGINES, new_location
from ui_fixtures import MS, PRICEY_SESSION, build_store, hand_made_runs

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module", params=ENGINES)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test store, once per engine: every test on it runs on SQLite and PostgreSQL."""
    return build_store(new_location(request.param, request, tmp_path_factory.mktemp("ui")))


@pytest.fixture(scope="module")
def client(db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(db), base_url=BASE) as client:
        yield client


def get(client: TestClient, path: str, **params: object) -> dict:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_runs_are_listed_newest_first_with_the_run_facts(client: TestClient) -> None:
    runs = get(client, "/api/runs")["runs"]
    assert len(runs) == 7
    starts = [r["start_ns"] for r in runs]
    assert starts == sorted(starts, reverse=True)
    assert {r["agent"] for r in runs} == {"calc", "helper", "pricey"}
    pricey = [r for r in runs if r["agent"] == "pricey"]
    assert sorted(round(r["cost"], 4) for r in pricey) == [0.0125, 0.025, 0.0375]
    assert {r["user_id"] for r in pricey} == {"ada"}
    assert all(r["cost"] is None for r in runs if r["agent"] != "pricey")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"agent": "calc"}, 3),
        ({"agent": "helper"}, 1),
        ({"framework": "langgraph"}, 3),
        ({"status": "error"}, 1),
        ({"session": PRICEY_SESSION}, 3),
        ({"session": "calc-session", "agent": "helper"}, 0),
        ({"q": "zebras"}, 3),  # content (captured input) of the hand-made runs
        # content captured by the native agent: the run that asked, and the session's next
        # run, whose chat spans show the history its model was sent
        ({"q": "divided by 0"}, 2),
        ({"q": "execute_tool lookup"}, 3),  # a span name
        ({"q": "100%"}, 0),  # LIKE wildcards are literal
    ],
)
def test_filters_and_search(client: TestClient, params: dict, expected: int) -> None:
    runs = get(client, "/api/runs", **params)["runs"]
    assert len(runs) == expected
    for key, column in (("agent", "agent"), ("framework", "framework"), ("status", "status")):
        if key in params:
            assert {r[column] for r in runs} <= {params[key]}


def test_time_range_filter(client: TestClient) -> None:
    all_runs = get(client, "/api/runs")["runs"]
    recent = get(client, "/api/runs", since=time.time_ns() - 600 * 1000 * MS)["runs"]
    assert {r["agent"] for r in recent} == {"calc", "helper"}  # pricey ran an hour ago
    old = get(client, "/api/runs", until=time.time_ns() - 600 * 1000 * MS)["runs"]
    assert len(recent) + len(old) == len(all_runs)


def test_keyset_paging_walks_every_run_once(client: TestClient) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = get(client, "/api/runs", limit=2, **({"cursor": cursor} if cursor else {}))
        seen.extend(r["trace_id"] for r in page["runs"])
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert pages == 4 and len(seen) == len(set(seen)) == 7
    assert seen == [r["trace_id"] for r in get(client, "/api/runs")["runs"]]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "bad"}, "status='bad' is not one of ok, error, cancelled, incomplete"),
        ({"limit": "0"}, "limit=0 is out of range: 1 to 200"),
        ({"cursor": "x"}, "cursor='x' is not of the form <start_ns>:<trace_id>"),
        ({"since": "yesterday"}, "since='yesterday' is not an integer"),
        ({"attr": 'a"b = 1'}, "attr='a\"b = 1' is not 'key = value' or 'key exists'"),
        ({"attr": "two words"}, "attr='two words' is not 'key = value' or 'key exists'"),
        ({"errors": "some"}, "errors='some' is not 'any' (runs with any span in error) or"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(
    client: TestClient, params: dict, message: str
) -> None:
    response = client.get("/api/runs", params=params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_facets(client: TestClient) -> None:
    facets = get(client, "/api/facets")
    assert facets["agents"] == ["calc", "helper", "pricey"]
    assert facets["frameworks"] == ["langgraph", "native"]


def test_trace_page_is_the_report_with_its_own_policy(client: TestClient) -> None:
    run = get(client, "/api/runs", status="error")["runs"][0]
    response = client.get(f"/trace/{run['trace_id'][:10]}")
    assert response.status_code == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert run["trace_id"] in response.text and "RateLimitError" in response.text
    assert client.get("/trace/ffffffffffff").status_code == 404
    detail = get(client, f"/api/runs/{run['trace_id']}")
    assert detail["status"] == "error" and round(detail["cost"], 4) == 0.0375


def test_sessions_and_a_conversation_turn_by_turn(client: TestClient) -> None:
    sessions = {s["session_id"]: s for s in get(client, "/api/sessions")["sessions"]}
    assert set(sessions) == {"calc-session", "helper-session", PRICEY_SESSION}
    assert sessions["calc-session"]["runs"] == 3
    assert round(sessions[PRICEY_SESSION]["cost"], 4) == 0.075
    turns = get(client, "/api/sessions/calc-session")["turns"]
    assert [t["input"] for t in turns] == [
        "What is 1234 * 5678, plus 17?",
        "What is 100 divided by 0?",
        "Hello! What can you do?",
    ]
    assert turns[0]["output"] == "The answer is 7006669."
    pricey = get(client, f"/api/sessions/{PRICEY_SESSION}")["turns"]
    assert pricey[0]["input"] == "question 0 about <b>zebras</b>"
    assert pricey[0]["output"] == "answer 0"


def test_errors_grouped_by_type_with_drill_down(client: TestClient) -> None:
    groups = {e["error_type"]: e for e in get(client, "/api/errors")["errors"]}
    assert groups["RateLimitError"]["spans"] == 2  # the chat span and its run
    assert groups["RateLimitError"]["traces"] == 1
    # the native calculator's failure, under its exception's class
    assert groups["ZeroDivisionError"]["span_types"] == ["tool"]
    runs = get(client, "/api/errors/runs", type="ZeroDivisionError")["runs"]
    assert len(runs) == 1 and runs[0]["agent"] == "calc"
    assert "division by zero" in runs[0]["error_message"]
    assert runs[0]["error_span"] == "execute_tool calculator"
    assert client.get("/api/errors/runs").status_code == 400


def test_metrics_per_agent_model_and_tool(client: TestClient) -> None:
    agents = get(client, "/api/metrics", by="agent", buckets=4)
    series = {s["name"]: s["points"] for s in agents["series"]}
    assert set(series) == {"calc", "helper", "pricey"}
    assert sum(p["count"] for p in series["calc"]) == 3
    pricey = [p for p in series["pricey"]]
    assert round(sum(p["cost"] for p in pricey), 4) == 0.075
    assert all(p["p95_ms"] >= p["p50_ms"] > 0 for p in pricey)
    models = {s["name"]: s for s in get(client, "/api/metrics", by="model")["series"]}
    assert {"gpt-test-mini", "gpt-test-large", "scripted-1"} <= set(models)
    large = models["gpt-test-large"]["points"]
    assert (
        sum(p["tokens"] for p in large) == 220 and round(sum(p["cost"] for p in large), 4) == 0.025
    )
    tools = {s["name"]: s for s in get(client, "/api/metrics", by="tool")["series"]}
    assert set(tools) == {"calculator", "lookup"}
    assert sum(p["count"] for p in tools["lookup"]["points"]) == 3
    assert client.get("/api/metrics", params={"by": "planet"}).status_code == 400


def test_live_feed_streams_runs_as_they_arrive(store_location: Path) -> None:
    db = store_location
    hand_made_runs(db, time.time_ns(), count=1)
    app = create_app(db)
    with TestClient(app, base_url=BASE) as client:
        seq = app.state.dashboard.last_seq()
        writer = threading.Timer(
            0.3, hand_made_runs, args=(db, time.time_ns()), kwargs={"count": 2}
        )
        writer.start()
        arrived: dict[str, dict] = {}
        with client.stream("GET", "/api/live", params={"after": seq}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data:") and '"runs"' in line:
                    event = json.loads(line.removeprefix("data:"))
                    assert event["seq"] > seq
                    arrived.update((run["trace_id"], run) for run in event["runs"])
                    if len(arrived) >= 2:
                        break
        writer.join()
    assert len(arrived) == 2 and {r["agent"] for r in arrived.values()} == {"pricey"}


def test_host_header_must_be_loopback(db: Path) -> None:
    with TestClient(create_app(db), base_url="http://attacker.example") as client:
        assert client.get("/api/runs").status_code == 400
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


def test_a_missing_store_shows_an_empty_dashboard(store_location: Path) -> None:
    with TestClient(create_app(store_location), base_url=BASE) as client:
        assert get(client, "/api/runs") == {"runs": [], "next": None, "store": False}
        assert get(client, "/api/sessions") == {"sessions": []}
    # reading never creates the store (a file, or the schema in an empty database)
    assert not SpanStore(store_location).exists()


def test_static_assets_and_the_page_policy(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/app.css").status_code == 200


# -- the store's runs table ---------------------------------------------------------------------
def test_a_schema_1_store_is_upgraded_and_back_filled_once_by_migrate(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    hand_made_runs(db, time.time_ns(), count=2)
    with sqlite3.connect(db) as conn:  # make it look like a store from before the runs table
        conn.execute("DROP TABLE runs")
        conn.execute("PRAGMA user_version=1")
    with pytest.raises(StoreError, match="schema version 1"):
        SpanStore(db, read_only=True).list_runs()
    with TestClient(create_app(db), base_url=BASE) as client:  # a viewer never upgrades it
        refused = client.get("/api/runs")
        assert refused.status_code == 503 and "runnertrace migrate" in refused.json()["error"]
    assert main(["migrate", "--store", str(db)]) == 0
    with TestClient(create_app(db), base_url=BASE) as client:
        runs = get(client, "/api/runs")["runs"]
    assert len(runs) == 2 and {r["agent"] for r in runs} == {"pricey"}
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_read_only_store_cannot_write(db: Path) -> None:
    store = SpanStore(db, read_only=True)
    assert len(store.list_runs(100)) == 7
    with pytest.raises(StoreError, match=r"readonly|read-only"):
        store.read("DELETE FROM runs")
    store.close()


def test_the_ui_command_reports_a_bad_or_busy_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "t.db")
    assert main(["ui", "--db", db, "--port", "70000", "--no-open"]) == 1
    assert "--port 70000 is out of range: 0 to 65535" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["ui", "--db", db, "--port", str(port), "--no-open"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines  # one line, naming the flag that chooses another port
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert lines[0].endswith("choose another port with --port N (0: any free one)")


def test_the_ui_port_is_fixed_by_default() -> None:
    """A bookmark and an app's OTLP endpoint survive a restart: the default is no free port."""
    from runnertrace.cli import DEFAULT_UI_PORT, build_parser

    args = build_parser().parse_args(["ui"])
    assert args.port == DEFAULT_UI_PORT != 0
    assert DEFAULT_UI_PORT not in (6006, 4317, 4318, 16686, 9411, 3000, 5000)


def test_without_the_ui_extra_the_command_names_it(tmp_path: Path) -> None:
    """starlette and uvicorn made unimportable in a fresh interpreter, as without the extra."""
    code = (
        "import sys; sys.modules['uvicorn'] = sys.modules['starlette'] = None\n"
        "from runnertrace.cli import main\n"
        f"sys.exit(main(['ui', '--db', {str(tmp_path / 't.db')!r}, '--no-open']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "pip install 'runnertrace[ui]'" in result.stderr


def test_a_host_that_is_not_loopback_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0.0.0.0 with a port that is taken: the warning comes first, then the bind fails
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(
            [
                "ui",
                "--db",
                str(tmp_path / "t.db"),
                "--host",
                "0.0.0.0",
                "--port",
                str(port),
                "--no-open",
            ]
        )
    captured = capsys.readouterr()
    assert code == 1
    assert "warning: --host 0.0.0.0 is not a loopback address" in captured.out


HUGE = "9" * 30
HUGER = "1" * 5000


@pytest.mark.parametrize(
    ("path", "params", "headers", "message"),
    [
        ("/api/runs", {"since": HUGE}, {}, "since=" + HUGE[:20] + "... is out of range"),
        ("/api/runs", {"until": HUGER}, {}, "until="),
        ("/api/runs", {"since": "-5"}, {}, "since=-5 is out of range"),
        ("/api/runs", {"since": "1e9"}, {}, "since='1e9' is not an integer"),
        ("/api/runs", {"limit": HUGE}, {}, "limit="),
        ("/api/runs", {"limit": "201"}, {}, "limit=201 is out of range: 1 to 200"),
        ("/api/runs", {"cursor": HUGE + ":" + "a" * 32}, {}, "cursor="),
        ("/api/runs", {"cursor": "5:" + HUGER}, {}, "cursor is 5002 characters long"),
        ("/api/runs", {"cursor": "5:" + "z" * 32}, {}, "cursor='5:zzz"),
        ("/api/runs", {"q": "x" * 5000}, {}, "q is 5000 characters long"),
        ("/api/errors", {"since": HUGER}, {}, "since="),
        ("/api/metrics", {"until": HUGE}, {}, "until="),
        ("/api/metrics", {"buckets": HUGE}, {}, "buckets="),
        ("/api/sessions", {"limit": "-1"}, {}, "limit=-1 is out of range"),
        ("/api/live", {}, {"Last-Event-ID": HUGE}, "Last-Event-ID="),
        ("/api/live", {}, {"Last-Event-ID": "12abc"}, "Last-Event-ID='12abc'"),
        ("/api/live", {"after": HUGER}, {}, "after="),
    ],
)
def test_huge_and_malformed_parameters_are_a_one_line_400(
    client: TestClient,
    caplog: pytest.LogCaptureFixture,
    path: str,
    params: dict,
    headers: dict,
    message: str,
) -> None:
    """No 500, no traceback: a 400 whose one-line message names the parameter."""
    with caplog.at_level("DEBUG"):
        response = client.get(path, params=params, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error and "\n" not in error and len(error) < 200
    assert len([r for r in caplog.records if r.levelno >= 30]) <= 1


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"model": "gpt-test-large"}, 1),
        ({"model": "gpt-test-mini"}, 2),
        ({"model": "scripted-1"}, 4),  # the native agent's model
        ({"provider": "nobody"}, 0),
        ({"user": "ada"}, 3),
        ({"errors": "any"}, 2),  # the failed run and the native run whose tool failed
        ({"status": "error"}, 1),
        ({"min_cost": "0.02"}, 2),
        ({"min_cost": "0.02", "max_cost": "0.03"}, 1),
        ({"min_ms": "250"}, 3),  # the pricey runs last 300 ms; native ones a few ms
        ({"max_ms": "250"}, 4),
        ({"session": "calc-"}, 3),  # a prefix
        ({"session": "chat-42"}, 3),
        ({"session": "zzz"}, 0),
    ],
)
def test_the_new_filters(client: TestClient, params: dict, expected: int) -> None:
    runs = get(client, "/api/runs", **params)["runs"]
    assert len(runs) == expected, [r["agent"] for r in runs]
    if "user" in params:
        assert {r["user_id"] for r in runs} == {"ada"}
    if "errors" in params:
        assert all(r["status"] == "error" or r["error_count"] > 0 for r in runs)


def test_sorting_and_paging_a_sorted_list(client: TestClient) -> None:
    by_cost = get(client, "/api/runs", sort="cost", dir="desc")["runs"]
    costs = [r["cost"] for r in by_cost if r["cost"] is not None]
    assert costs == sorted(costs, reverse=True) and len(costs) == 3
    by_duration = get(client, "/api/runs", sort="duration", dir="asc")["runs"]
    durations = [r["duration_ns"] for r in by_duration]
    assert durations == sorted(durations)
    seen: list[str] = []
    cursor = None
    while True:
        page = get(
            client, "/api/runs", sort="tokens", limit=3, **({"cursor": cursor} if cursor else {})
        )
        seen.extend(r["trace_id"] for r in page["runs"])
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 7
    assert client.get("/api/runs", params={"sort": "planet"}).status_code == 400
    assert client.get("/api/runs", params={"dir": "up"}).status_code == 400
    assert client.get("/api/runs", params={"min_cost": "-1"}).status_code == 400
    assert client.get("/api/runs", params={"min_cost": "nan"}).status_code == 400


def test_input_and_output_previews(client: TestClient) -> None:
    runs = get(client, "/api/runs", session="calc-session", sort="start", dir="asc")["runs"]
    assert [r["input_preview"] for r in runs] == [
        "What is 1234 * 5678, plus 17?",
        "What is 100 divided by 0?",
        "Hello! What can you do?",
    ]
    assert runs[0]["output_preview"] == "The answer is 7006669."


def test_a_tag_filter_reads_the_run_spans_tags(store_location: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from runnertrace.exporters.local_store import SqliteSpanExporter

    db = store_location
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("tags")
    for name, tags in (("a", ("beta", "eu")), ("b", ("eu",)), ("c", ())):
        tracer.start_span(name, attributes={"tag.tags": tags} if tags else {}).end()
    provider.shutdown()
    with TestClient(create_app(db), base_url=BASE) as tagged:
        assert sorted(r["name"] for r in get(tagged, "/api/runs", tag="eu")["runs"]) == ["a", "b"]
        assert [r["name"] for r in get(tagged, "/api/runs", tag="beta")["runs"]] == ["a"]
        assert get(tagged, "/api/runs", tag="none")["runs"] == []


def test_sessions_count_span_errors_and_show_previews_and_failed_turns(
    client: TestClient,
) -> None:
    sessions = {s["session_id"]: s for s in get(client, "/api/sessions")["sessions"]}
    calc = sessions["calc-session"]
    assert calc["errors"] == 0  # the run whose tool failed went on: not a failed run...
    assert calc["recovered"] == 1  # ...but a recovered one, counted apart
    assert calc["first_input"] == "What is 1234 * 5678, plus 17?"
    reply = 'I am a scripted offline model. You said: "Hello! What can you do?"'
    assert calc["last_output"] == reply
    assert sessions[PRICEY_SESSION]["errors"] == 1
    assert sessions[PRICEY_SESSION]["recovered"] == 0
    turns = get(client, f"/api/sessions/{PRICEY_SESSION}")["turns"]
    failed = [t for t in turns if t["status"] == "error"]
    assert len(failed) == 1 and failed[0]["error"]["message"] == "429 slow down"
    assert failed[0]["error"]["type"] == "RateLimitError"
    assert all(t["error"] is None for t in turns if t["status"] == "ok")


def test_session_totals_are_the_sums_of_the_runs_lists_numbers(
    client: TestClient, team: TestClient
) -> None:
    """Runs, tokens, cost, unpriced calls, failed, recovered and cancelled runs per session:
    the runs list's own numbers (each run's totals, nested agents' work included), summed."""
    checked = 0
    for dashboard in (client, team):
        for session in get(dashboard, "/api/sessions")["sessions"]:
            listed = get(dashboard, "/api/runs", session=session["session_id"], limit=200)
            runs = [r for r in listed["runs"] if r["session_id"] == session["session_id"]]
            costs = [r["cost"] for r in runs if r["cost"] is not None]
            expected = {
                "runs": len(runs),
                "tokens": sum(r["tokens"] for r in runs),
                "unpriced_calls": sum(r["unpriced_calls"] for r in runs),
                "model_calls": sum(r["model_calls"] for r in runs),
                "errors": sum(r["status"] == "error" for r in runs),
                "recovered": sum(r["status"] == "ok" and r["error_count"] > 0 for r in runs),
                "cancelled": sum(r["status"] == "cancelled" for r in runs),
            }
            assert {k: session[k] for k in expected} == expected, session["session_id"]
            if costs:
                assert session["cost"] == pytest.approx(sum(costs))
            else:
                assert session["cost"] is None
            checked += 1
    assert checked >= 4


def test_chart_summary_tiles_and_error_rate_over_time(client: TestClient) -> None:
    agents = get(client, "/api/metrics", by="agent", buckets=1)
    summary = agents["summary"]
    # the error rate is of failed runs (pricey's last); the run whose tool failed and went
    # on is recovered, counted apart
    assert summary["count"] == 7 and summary["errors"] == 1 and summary["recovered"] == 1
    assert summary["error_rate"] == pytest.approx(1 / 7)
    assert summary["p95_ms"] >= summary["p50_ms"] > 0
    assert summary["cost"] == pytest.approx(0.075)
    series = {s["name"]: s["points"] for s in agents["series"]}
    assert series["pricey"][0]["error_rate"] == pytest.approx(1 / 3)
    assert series["helper"][0]["error_rate"] == 0
    assert series["calc"][0]["error_rate"] == 0 and series["calc"][0]["recovered"] == 1
    tools = {s["name"]: s["points"] for s in get(client, "/api/metrics", by="tool")["series"]}
    # per tool: failed calls (a call recovers from nothing)
    assert sum(p["errors"] for p in tools["calculator"]) == 1
    assert sum(p["errors"] for p in tools["lookup"]) == 0


def _nested_outcomes(db: str | Path) -> dict[str, str]:
    """Three runs of one session, each a planner whose tool runs a researcher: the
    researcher fails (the planner goes on), is cancelled (the planner goes on), or fails
    and so does the planner. Returns each case's trace id."""
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    from runnertrace.exporters.local_store import SqliteSpanExporter
    from runnertrace.tracing import attributes as A

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("nested-outcomes")
    failed = Status(StatusCode.ERROR, "ResearchFailed: no sources")
    traces = {}
    for case in ("nested failed", "nested cancelled", "all failed"):
        top = tracer.start_span("invoke_agent planner", attributes={A.SPAN_TYPE: "run",
            A.AGENT_NAME: "planner", A.CONVERSATION_ID: "outcomes"})  # fmt: skip
        ask = tracer.start_span("execute_tool ask", trace_api.set_span_in_context(top),
            attributes={A.SPAN_TYPE: "tool", A.TOOL_NAME: "ask"})  # fmt: skip
        inner = tracer.start_span("invoke_agent researcher", trace_api.set_span_in_context(ask),
            attributes={A.SPAN_TYPE: "run", A.AGENT_NAME: "researcher"})  # fmt: skip
        if case == "nested cancelled":
            inner.set_attribute(A.CANCELLED, True)
            inner.set_status(Status(StatusCode.ERROR, "CancelledError"))
        else:
            inner.set_status(failed)
        if case == "all failed":
            inner.set_attribute("research.depth", 2)
        inner.end()
        ask.end()
        if case == "all failed":
            top.set_status(failed)
        top.end()
        traces[case] = format(top.get_span_context().trace_id, "032x")
    provider.shutdown()
    return traces


def test_a_nested_agents_failure_under_an_ok_run_is_recovered_not_failed(
    store_location: str | Path,
) -> None:
    """One meaning everywhere: the runs list's status, the charts' error rate (failed runs),
    the recovered runs counted apart, the sessions' totals and the errors filter agree."""
    traces = _nested_outcomes(store_location)
    with TestClient(create_app(store_location), base_url=BASE) as c:
        runs = {r["trace_id"]: r for r in get(c, "/api/runs")["runs"]}
        status = {case: runs[t]["status"] for case, t in traces.items()}
        assert status == {"nested failed": "ok", "nested cancelled": "ok", "all failed": "error"}
        assert all(runs[t]["error_count"] > 0 for t in traces.values())
        summary = get(c, "/api/metrics", by="agent", buckets=1)["summary"]
        assert (summary["count"], summary["errors"], summary["recovered"]) == (3, 1, 2)
        assert summary["error_rate"] == pytest.approx(1 / 3)
        recovered = {r["trace_id"] for r in get(c, "/api/runs", errors="recovered")["runs"]}
        assert recovered == {traces["nested failed"], traces["nested cancelled"]}
        assert len(get(c, "/api/runs", errors="any")["runs"]) == 3
        assert [r["trace_id"] for r in get(c, "/api/runs", status="error")["runs"]] == [
            traces["all failed"]
        ]
        (session,) = get(c, "/api/sessions")["sessions"]
        assert (session["runs"], session["errors"], session["recovered"]) == (3, 1, 2)


def test_a_filter_on_any_span_attribute_by_value_or_presence(store_location: str | Path) -> None:
    """``attr=key = value`` and ``attr=key exists`` over every span of a run (a nested
    run's too), a value compared as text: a string, a number, a boolean alike on both
    engines; the CSV export takes the same filter."""
    traces = _nested_outcomes(store_location)
    with TestClient(create_app(store_location), base_url=BASE) as c:

        def found(text: str) -> set[str]:
            return {r["trace_id"] for r in get(c, "/api/runs", attr=text)["runs"]}

        every = set(traces.values())
        assert found("gen_ai.tool.name = ask") == found("gen_ai.tool.name=ask") == every
        assert found("gen_ai.tool.name = nope") == set()
        assert found("gen_ai.tool.name exists") == found("gen_ai.tool.name") == every
        assert found("runnertrace.cancelled exists") == {traces["nested cancelled"]}
        assert found("runnertrace.cancelled = true") == {traces["nested cancelled"]}
        assert found("runnertrace.cancelled = false") == set()
        assert found("research.depth = 2") == {traces["all failed"]}
        assert found("research.depth = 3") == set()
        assert found("no.such.key exists") == set()
        assert found("gen_ai.tool.name = ask") & found("research.depth exists") == {
            traces["all failed"]
        }
        exported = c.get("/api/runs.csv", params={"attr": "research.depth = 2"})
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert [r["trace_id"] for r in rows] == [traces["all failed"]]


def test_content_search_through_the_index_finds_what_the_scan_finds(
    store_location: Path, engine: str
) -> None:
    """SQLite: the FTS5 side file and the scan of what it has not reached; PostgreSQL: the
    trigram index in the database. The same answers."""
    from runnertrace.ui.queries import Dashboard, RunFilter

    db = build_store(store_location)  # this test adds a run: not to the module's store
    dashboard = Dashboard(db)
    dashboard.prepare()
    dashboard.start()
    try:
        if engine == "postgresql":
            assert dashboard.search is None
            for text, expected in (("zebras", 3), ("divided by 0", 2), ("DIVIDED BY", 2)):
                assert len(dashboard.runs(RunFilter(search=text))["runs"]) == expected, text
            assert len(dashboard.runs(RunFilter(search="100%"))["runs"]) == 0
            hand_made_runs(db, time.time_ns(), count=1)
            assert len(dashboard.runs(RunFilter(search="zebras"))["runs"]) == 4
            return
        assert dashboard.search is not None and dashboard.search.caught_up.wait(30)
        assert Path(str(db) + ".search").is_file()
        for text, expected in (
            ("zebras", 3),
            ("divided by 0", 2),
            ("execute_tool lookup", 3),
            ("DIVIDED BY", 2),  # any case, as LIKE
            ("100%", 0),
            ("zz", 0),  # too short for trigrams: the scan answers
        ):
            found = dashboard.search.matches(text)
            if len(text) >= 3:
                assert found is not None and len(found[0]) == expected, text
            runs = dashboard.runs(RunFilter(search=text))["runs"]
            assert len(runs) == expected, text
        # a run stored after the index caught up is found by the scan of the unindexed rest
        covered = dashboard.search.indexed_seq
        dashboard.search.stop()
        hand_made_runs(db, time.time_ns(), count=1)
        assert dashboard.last_seq() > covered
        assert len(dashboard.runs(RunFilter(search="zebras"))["runs"]) == 4
    finally:
        dashboard.close()


# -- one definition of a run's numbers; honest cost; accounting per agent (issue 28) ----------
@pytest.fixture(scope="module", params=ENGINES)
def team_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ui_fixtures import build_team_store

    return build_team_store(new_location(request.param, request, tmp_path_factory.mktemp("team")))


@pytest.fixture(scope="module")
def team(team_db: Path) -> Iterator[TestClient]:
    with TestClient(create_app(team_db), base_url=BASE) as client:
        yield client


def _by_agent(runs: list[dict]) -> dict[str, dict]:
    return {r["agent"]: r for r in runs}


def _report_data(page: str) -> dict:
    """The JSON a report page carries (what its script draws from)."""
    start = page.index('<script id="runnertrace-data" type="application/json">')
    body = page[page.index(">", start) + 1 : page.index("</script>", start)]
    return json.loads(body)


def test_the_runs_list_shows_the_root_spans_totals_and_says_when_cost_is_partial(
    team: TestClient, team_db: Path
) -> None:
    runs = _by_agent(get(team, "/api/runs")["runs"])
    store = SpanStore(team_db, read_only=True)
    for run in runs.values():
        (root,) = [s for s in store.get_trace(run["trace_id"]) if s.is_root]
        a = root.attributes
        assert (run["input_tokens"], run["output_tokens"], run["model_calls"]) == (
            a["gen_ai.aggregated_usage.input_tokens"],
            a["gen_ai.aggregated_usage.output_tokens"],
            a["runnertrace.aggregated.model_calls"],
        )
        assert run["unpriced_calls"] == a["runnertrace.usage.unpriced_calls"]
        assert run["unpriced_models"] == a["runnertrace.usage.unpriced_models"]
        assert run["derived"] is False and run["nested_runs"] == 1
    store.close()
    planner, recursive = runs["planner"], runs["recursive"]
    assert planner["cost_status"] == "partial" and planner["unpriced_calls"] == 2
    assert planner["cost"] == pytest.approx(0.006)
    assert planner["unpriced_models"] == ["runnertrace/scripted-1"]
    assert (recursive["cost"], recursive["cost_status"]) == (None, "unpriced")
    # the trace header reads the same row
    detail = get(team, f"/api/runs/{planner['trace_id']}")
    assert (detail["cost_status"], detail["unpriced_calls"], detail["tokens"]) == (
        "partial",
        2,
        planner["tokens"],
    )


def test_the_trace_page_carries_the_run_row_and_the_per_agent_table(team: TestClient) -> None:
    planner = _by_agent(get(team, "/api/runs")["runs"])["planner"]
    data = _report_data(team.get(f"/trace/{planner['trace_id']}").text)
    summary = data["summary"]
    assert (summary["cost_status"], summary["unpriced_calls"], summary["model_calls"]) == (
        "partial",
        2,
        4,
    )
    assert summary["input_tokens"] == planner["input_tokens"] == 2900
    agents = {a["agent"]: a for a in data["agents"]}
    assert list(agents) == ["planner", "researcher"]
    # the page's table is the store's
    api_agents = get(team, f"/api/runs/{planner['trace_id']}/agents")["agents"]
    assert api_agents == data["agents"]
    assert agents["planner"]["own"]["model_calls"] == 2
    assert agents["planner"]["total"]["model_calls"] == 4
    assert agents["planner"]["own"]["cost_status"] == "priced"
    assert agents["planner"]["total"]["cost_status"] == "partial"
    assert agents["researcher"]["own"] == agents["researcher"]["total"]
    assert agents["researcher"]["started_by"] == ["planner"] and agents["researcher"]["depth"] == 1


def test_a_session_sums_its_runs_partial_cost_and_its_agents(team: TestClient) -> None:
    from ui_fixtures import TEAM_SESSION

    (session,) = get(team, "/api/sessions")["sessions"]
    assert session["session_id"] == TEAM_SESSION and session["runs"] == 2
    # a sum over runs of which one is partial and one unpriced: partial, 5 calls unpriced
    assert (session["cost_status"], session["unpriced_calls"]) == ("partial", 5)
    assert session["cost"] == pytest.approx(0.006) and session["model_calls"] == 7
    body = get(team, f"/api/sessions/{TEAM_SESSION}")
    agents = {a["agent"]: a for a in body["agents"]}
    assert set(agents) == {"planner", "researcher", "recursive"}
    recursive = agents["recursive"]
    # it ran twice, once inside itself: its own calls summed, its total counted once
    assert recursive["runs"] == 2
    assert (recursive["own"]["model_calls"], recursive["total"]["model_calls"]) == (3, 3)
    assert (recursive["own"]["input_tokens"], recursive["total"]["input_tokens"]) == (140, 140)
    assert agents["planner"]["total"]["input_tokens"] == 2900
    assert agents["researcher"]["own"]["input_tokens"] == 700
    assert [t["cost_status"] for t in body["turns"]] == ["partial", "unpriced"]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"any_agent": "researcher"}, ["planner"]),  # nested only: found through its tree
        ({"agent": "researcher"}, []),  # never a top run
        ({"any_agent": "planner"}, ["planner"]),
        ({"any_agent": "recursive"}, ["recursive"]),
        ({"any_agent": "recursive", "agent": "planner"}, []),
        ({"any_agent": "nobody"}, []),
    ],
)
def test_the_agent_anywhere_filter(team: TestClient, params: dict, expected: list[str]) -> None:
    assert [r["agent"] for r in get(team, "/api/runs", **params)["runs"]] == expected
    sorted_runs = get(team, "/api/runs", sort="cost", **params)["runs"]
    assert sorted(r["agent"] for r in sorted_runs) == sorted(expected)


def test_the_filters_offer_every_agent_of_every_tree(team: TestClient) -> None:
    facets = get(team, "/api/facets")
    assert facets["agents"] == ["planner", "recursive"]
    assert facets["agents_anywhere"] == ["planner", "recursive", "researcher"]


def test_the_cost_by_agent_chart_gives_each_agent_its_own_cost(team: TestClient) -> None:
    metrics = get(team, "/api/metrics", by="agent", buckets=1)
    own = {s["name"]: s["points"] for s in metrics["agent_cost"]}
    assert set(own) == {"planner", "researcher", "recursive"}
    (planner,) = own["planner"]
    assert planner["cost"] == pytest.approx(0.006) and planner["cost_status"] == "priced"
    (researcher,) = own["researcher"]
    assert (researcher["cost"], researcher["unpriced_calls"]) == (None, 2)
    assert researcher["cost_status"] == "unpriced"
    # the runs' series (by top agent) carry their partial cost; so do the tiles
    series = {s["name"]: s["points"] for s in metrics["series"]}
    assert series["planner"][0]["cost_status"] == "partial"
    assert series["planner"][0]["unpriced_calls"] == 2
    summary = metrics["summary"]
    assert (summary["cost_status"], summary["unpriced_calls"]) == ("partial", 5)


def test_compare_shows_each_cost_as_partial_or_unpriced(team: TestClient) -> None:
    runs = _by_agent(get(team, "/api/runs")["runs"])
    compared = get(
        team, "/api/compare", a=runs["planner"]["trace_id"], b=runs["recursive"]["trace_id"]
    )
    facts = {d["field"]: (d["a"], d["b"]) for d in compared["differences"]}
    assert facts["cost"] == ("$0.006 (partial: 2 calls unpriced)", "unpriced")
    assert facts["model calls"] == (4, 3)
    assert facts["unpriced models"] == ("runnertrace/scripted-1", "runnertrace/scripted-1")


def test_the_csv_says_whether_each_cost_is_partial(team: TestClient) -> None:
    import csv
    import io

    response = team.get("/api/runs.csv")
    assert response.status_code == 200
    rows = {r["agent"]: r for r in csv.DictReader(io.StringIO(response.text))}
    planner, recursive = rows["planner"], rows["recursive"]
    assert (planner["cost_status"], planner["unpriced_calls"]) == ("partial", "2")
    assert float(planner["cost"]) == pytest.approx(0.006)
    assert planner["unpriced_models"] == "runnertrace/scripted-1"
    assert (planner["model_calls"], planner["nested_runs"], planner["derived"]) == ("4", "1", "0")
    assert (recursive["cost"], recursive["cost_status"]) == ("", "unpriced")
