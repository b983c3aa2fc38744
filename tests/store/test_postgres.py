"""What only the PostgreSQL engine must do: many writers at once, a database that goes away,
one-line connection errors, read-only viewers, and the trigram index behind search.

The suites that run once per engine (tests/test_local_store.py, tests/test_ui.py,
tests/test_ui_otlp.py, tests/store/test_store_cli.py) hold what both engines share.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from lossy_process import SPANS_PER_RUN, make_runner, run_many
from runnertrace.cli import main
from runnertrace.store import SCHEMA_VERSION, SpanStore, StoreError, StoreUnavailableError
from runnertrace.tracing import drops
from store_engines import Postgres, free_port
from test_ui_otlp import Server

LOSSY = Path(__file__).resolve().parent.parent / "lossy_process.py"


def _count(url: str) -> tuple[int, int]:
    store = SpanStore(url, read_only=True)
    try:
        return store.count()
    finally:
        store.close()


def test_four_writer_processes_and_otlp_ingest_store_every_span_once(postgres: Postgres) -> None:
    """Four traced processes in tight loops and OTLP through two dashboards, into one database:
    every span is stored once, and nothing is lost (or a loss would be counted and said)."""
    url = postgres.create_database()
    runs = 40
    writers = [
        subprocess.Popen(
            [sys.executable, str(LOSSY), "contend", url, str(runs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    traces, per_trace = 60, 5
    # OTLP/HTTP ingest into the same database meanwhile, through two dashboards at once
    # (several UI processes may serve one database): half the traces to each.
    with Server(url) as first, Server(url) as second:
        for part, ui in enumerate((first, second)):
            provider = TracerProvider(resource=Resource.create({"service.name": "otlp-app"}))
            exporter = OTLPSpanExporter(endpoint=ui + "/v1/traces")
            provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64))
            tracer = provider.get_tracer("otlp-app")
            for index in range(part * traces // 2, (part + 1) * traces // 2):
                with tracer.start_as_current_span(f"request {index}"):
                    for step in range(per_trace - 1):
                        tracer.start_span(f"step {step}").end()
            assert provider.force_flush(60_000)
            provider.shutdown()
        outputs = [w.communicate(timeout=300) for w in writers]
        listed = requests.get(first + "/api/runs", params={"limit": 200}, timeout=30).json()
        again = requests.get(second + "/api/runs", params={"limit": 200}, timeout=30).json()
    assert listed == again  # every dashboard of the database shows the same runs
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["lost"] == 0, err
    spans, stored_traces = _count(url)
    assert (spans, stored_traces) == (
        4 * runs * SPANS_PER_RUN + traces * per_trace,
        4 * runs + traces,
    )
    store = SpanStore(url, read_only=True)
    try:
        # Each run row is its root span's numbers, whichever process wrote which span.
        rows = store.read("SELECT COUNT(*), COUNT(DISTINCT seq), MIN(span_count) FROM runs")
        assert rows[0][0] == rows[0][1] == 4 * runs + traces  # one seq per run, none shared
        assert {r.status for r in store.list_runs(500)} == {"ok"}
        assert sum(r.span_count for r in store.list_runs(500)) == spans
    finally:
        store.close()
    assert len(listed["runs"]) == 200 and listed["next"] is not None


def test_a_database_that_stops_mid_run_costs_counted_spans_and_writing_resumes(
    postgres: Postgres,
) -> None:
    """The runs go on while the database is down; what could not be written is counted
    lost (and said once); once it is back, the next runs are stored again."""
    if postgres.data_dir is None:
        pytest.skip("stops the server: only with the tests' own cluster")
    url = postgres.create_database()
    runner = make_runner(url)
    lost_before = drops.lost_spans("local")
    run_many(runner, "before", 3)
    assert runner.setup.flush()
    assert _count(url) == (3 * SPANS_PER_RUN, 3)
    postgres.stop()
    try:
        run_many(runner, "during", 2)  # the agent's runs complete: telemetry never breaks them
        runner.setup.flush()
        lost = drops.lost_spans("local") - lost_before
        assert lost == 2 * SPANS_PER_RUN
    finally:
        postgres.start()
    run_many(runner, "after", 2)
    assert runner.setup.flush()
    assert drops.lost_spans("local") - lost_before == 2 * SPANS_PER_RUN  # no more losses
    assert _count(url) == (5 * SPANS_PER_RUN, 5)
    store = SpanStore(url, read_only=True)
    agents = sorted({r.agent or "" for r in store.list_runs(20)})
    store.close()
    assert agents == ["after", "before"]
    assert runner.setup.shutdown()


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_a_wrong_url_refused_login_missing_database_or_down_server_is_one_line(
    postgres: Postgres, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres.create_database()
    err = _one_line_error(capsys, "traces", "--store", "mysql://me@host/db")
    assert "'mysql' is not one runnertrace serves" in err and "postgresql://" in err
    err = _one_line_error(capsys, "traces", "--store", "postgresql://me@127.0.0.1:5432")
    assert "names no database" in err
    if postgres.data_dir is not None:  # our cluster checks passwords over TCP
        wrong = url.replace(":runnertrace-test@", ":wrong-password@")
        err = _one_line_error(capsys, "traces", "--store", wrong)
        assert "refused the login of user 'postgres'" in err and "PGPASSWORD" in err
        assert "wrong-password" not in err  # a password is never shown
    missing = url.rsplit("/", 1)[0] + "/no_such_db"
    err = _one_line_error(capsys, "show", "--store", missing)
    assert "database 'no_such_db' does not exist" in err and "createdb" in err
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/traces"
    err = _one_line_error(capsys, "ui", "--store", down, "--no-open")
    assert "cannot reach PostgreSQL at 127.0.0.1" in err and "is the server running" in err
    # An empty database is "no store yet", as a missing file is; a viewer creates nothing.
    err = _one_line_error(capsys, "traces", "--store", url)
    assert "no trace store in" in err and "runnertrace migrate" in err
    assert "runnertrace-test" not in err
    assert not SpanStore(url).exists()


def test_a_viewer_cannot_write_and_a_writer_makes_the_schema_once(postgres: Postgres) -> None:
    url = postgres.create_database()
    writers = [SpanStore(url) for _ in range(4)]
    done = []

    def make(store: SpanStore) -> None:  # four writers meet an empty database at once
        done.append(store.migrate())

    threads = [threading.Thread(target=make, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(done) == 4 and SpanStore(url).version() == SCHEMA_VERSION
    viewer = SpanStore(url, read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        viewer.read("DELETE FROM runs")
    viewer.close()
    for writer in writers:
        writer.close()


def test_a_store_that_is_down_is_unavailable_not_missing(postgres: Postgres) -> None:
    store = SpanStore(f"postgresql://postgres@127.0.0.1:{free_port()}/x", busy_timeout_s=2)
    with pytest.raises(StoreUnavailableError, match="cannot reach"):
        store.list_runs()


def test_content_search_reads_the_trigram_index(postgres: Postgres) -> None:
    """A substring search asks the index which spans hold the text: no walk over spans."""
    from ui_fixtures import hand_made_runs

    url = postgres.create_database()
    hand_made_runs(url, time.time_ns(), count=3)
    store = SpanStore(url, read_only=True)
    try:
        store.read("SET enable_seqscan = off")  # the tables are tiny: make the choice visible
        plan = "\n".join(
            row[0]
            for row in store.read(
                "EXPLAIN SELECT trace_id FROM spans s WHERE "
                "(s.name || ' ' || s.attributes) ILIKE ? ESCAPE '\\'",
                ("%zebras%",),
            )
        )
    finally:
        store.close()
    assert "spans_text" in plan, plan
