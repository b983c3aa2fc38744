"""Nothing lost (issue 21): odd strings, forked workers, busy stores, every loss counted.

* A span that cannot be encoded costs only itself, in the local store and on
  the OTLP wire, and is counted with its real cause.
* A fork at a bad moment (the exporter holds the store, a drop is being
  counted, an OTLP export is in flight) leaves the child a working pipeline.
* Pool workers, however they end, report the exact count of what they lost.
* Four processes writing one store in tight loops lose nothing.

Processes run as a user runs them (``tests/lossy_process.py``), bounded by timeouts.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from tests.otlp_receiver import OtlpReceiver, refused_port

from runnertrace.exporters.local import LocalBackend, LocalConfig
from runnertrace.exporters.local_store import SpanStore
from runnertrace.exporters.otlp import OtlpBackend
from runnertrace.tracing import drops
from runnertrace.tracing.backend import Backend
from runnertrace.tracing.config import TraceConfig

SCRIPT = Path(__file__).resolve().parent.parent / "lossy_process.py"
SPANS_PER_RUN = 9
BAD_TOOL = b"calc-\xff".decode("utf-8", "surrogateescape")  # as os.fsdecode gives it
SPANS_PER_GOOD_RUN = 3  # run > tool, chat


def run_script(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def last_json(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout + result.stderr
    report: dict[str, object] = json.loads(lines[-1])
    return report


# -- 1. a span that cannot be encoded costs only itself -----------------------------------
def provider_for(backend: Backend) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "odd-strings"}))
    for processor in backend.processors():
        provider.add_span_processor(processor)
    return provider


def good_run(tracer: trace_api.Tracer, index: int) -> None:
    with tracer.start_as_current_span(
        f"invoke_agent run-{index}", attributes={"runnertrace.span.type": "run"}
    ):
        with tracer.start_as_current_span(
            "execute_tool calculator",
            attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": "calculator"},
        ):
            pass
        with tracer.start_as_current_span("chat scripted-1"):
            pass


def bad_run(tracer: trace_api.Tracer) -> None:
    """A run whose tool name came from a file name that is not UTF-8 (built on the SDK)."""
    with (
        tracer.start_as_current_span(
            "invoke_agent odd", attributes={"runnertrace.span.type": "run"}
        ),
        tracer.start_as_current_span(
            f"execute_tool {BAD_TOOL}",
            attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": BAD_TOOL},
        ),
    ):
        pass


def hundred_good_runs_and_one_bad(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("odd")
    for index in range(50):
        good_run(tracer, index)
    bad_run(tracer)  # in the middle of one batch
    for index in range(50, 100):
        good_run(tracer, index)
    assert provider.force_flush()


def assert_one_span_lost_for_its_encoding(backend: str, caplog: pytest.LogCaptureFixture) -> None:
    causes = drops.lost_by_cause(backend)
    assert sum(causes.values()) == 1, causes
    [cause] = causes
    assert "calc-\\udcff" in cause and "reachable" not in cause, cause
    lines = [r.getMessage() for r in caplog.records if "lost so far" in r.getMessage()]
    assert lines and "1 span lost so far" in lines[0] and "calc-\\udcff" in lines[0], lines
    assert all("reachable" not in line for line in lines), lines
    for line in lines:
        line.encode("utf-8")  # printable by any handler


def test_a_span_the_store_cannot_encode_costs_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    db = tmp_path / "traces.db"
    backend = LocalBackend(TraceConfig(local=LocalConfig(path=str(db))))
    provider = provider_for(backend)
    hundred_good_runs_and_one_bad(provider)
    provider.shutdown()

    runs = {run.name: run.span_count for run in SpanStore(db).list_runs(200)}
    good = {name: count for name, count in runs.items() if "run-" in name}
    assert len(good) == 100 and set(good.values()) == {SPANS_PER_GOOD_RUN}
    assert runs["invoke_agent odd"] == 1  # the odd run's own top span is fine
    assert SpanStore(db).count() == (100 * SPANS_PER_GOOD_RUN + 1, 101)
    assert_one_span_lost_for_its_encoding("local", caplog)


def test_span_store_write_returns_only_what_it_stored(tmp_path: Path) -> None:
    """The public write (the UI's OTLP ingest uses it): good spans stored, the count exact."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    hundred_good_runs_and_one_bad(provider)
    spans = memory.get_finished_spans()
    assert SpanStore(tmp_path / "t.db").write(spans) == len(spans) - 1


def test_a_span_otlp_cannot_encode_costs_only_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with OtlpReceiver() as receiver:
        backend = OtlpBackend(
            TraceConfig(type="otlp", otlp={"endpoint": receiver.traces_url, "vendor_keys": False})
        )
        provider = provider_for(backend)
        hundred_good_runs_and_one_bad(provider)
        provider.shutdown()
        received = receiver.spans
    roots = [s for s in received if s.name.startswith("invoke_agent run-")]
    assert len(roots) == 100
    assert len(received) == 100 * SPANS_PER_GOOD_RUN + 1
    assert len({s.span_id for s in received}) == len(received)  # none sent twice
    assert_one_span_lost_for_its_encoding("otlp", caplog)


# -- 2. forks at bad moments ------------------------------------------------------------------
needs_fork = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no os.fork")


@needs_fork
def test_fork_while_the_exporter_holds_the_store(tmp_path: Path) -> None:
    report = last_json(run_script("fork-store", tmp_path / "traces.db", timeout=60))
    assert report["child_status"] == 0, report
    assert report["flushed"] is True
    assert report["stored"] == SPANS_PER_RUN


@needs_fork
def test_fork_while_a_drop_is_counted(tmp_path: Path) -> None:
    report = last_json(run_script("fork-drop", tmp_path / "traces.db", timeout=60))
    assert report["child_status"] == 0, report
    assert report["stored"] == SPANS_PER_RUN
    # The child's totals are its own: the parent's 3 are not repeated there.
    assert report["lost_at_start"] == 0 and report["lost_at_end"] == 1


@needs_fork
def test_fork_while_an_otlp_export_is_in_flight(tmp_path: Path) -> None:
    with OtlpReceiver("hang", hang_s=0.5) as receiver:  # answers each request after 0.5 s
        report = last_json(
            run_script("fork-otlp", tmp_path / "traces.db", receiver.traces_url, timeout=60)
        )
        spans = receiver.spans
    assert report["in_flight_at_fork"] is True
    assert report["child_status"] == 0 and report["flushed"] is True, report
    assert report["stored"] == SPANS_PER_RUN
    child = [s for s in spans if s.attributes.get("gen_ai.agent.name") == "child"]
    parent = [s for s in spans if s.attributes.get("gen_ai.agent.name") == "parent"]
    assert len(child) >= 1 and len(parent) >= 1
    assert len({s.span_id for s in spans}) == len(spans)  # nothing sent twice


@needs_fork
def test_fork_while_the_price_table_loads_leaves_the_child_its_prices(tmp_path: Path) -> None:
    report = last_json(run_script("fork-prices", tmp_path / "traces.db", timeout=60))
    assert report["child_status"] == 0, report
    assert report["parent_price"] == pytest.approx(2.5)  # gpt-4o: $2.50 per million input
    assert report["child_price"] == report["parent_price"], report


def test_our_export_threads_import_nothing(tmp_path: Path) -> None:
    # A module a thread is importing at a fork stays locked in the child, and the
    # child's export hangs on it (seen: requests' lazy ``import netrc``).
    with OtlpReceiver() as receiver:
        report = last_json(
            run_script("worker-imports", tmp_path / "traces.db", receiver.traces_url)
        )
        assert len(receiver.spans) == 2 * SPANS_PER_RUN
    assert report["threads"] == ["runnertrace-export-local", "runnertrace-export-otlp"], report
    assert report["imported"] == [], report


# -- 3. every loss reported, however the process ends -------------------------------------
FINAL = re.compile(r"runnertrace: ([\d,]+) spans? lost so far for local in all: (.*)")


def reported_losses(stderr: str) -> list[int]:
    return [int(m.group(1).replace(",", "")) for m in FINAL.finditer(stderr)]


@needs_fork
def test_fork_pool_workers_report_exactly_what_the_store_is_missing(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    workers, runs = 3, 60
    # A queue of 8 spans in a tight loop: most spans are dropped, and must all be told.
    result = run_script("pool", db, workers, runs, 8)
    assert last_json(result)["workers"] == workers
    made = (workers * runs + 1) * SPANS_PER_RUN  # and one run of the parent's
    missing = made - SpanStore(db).count()[0]
    losses = reported_losses(result.stderr)
    # One final line per process that lost spans (each worker, and the parent too).
    assert missing > 0 and len(losses) >= workers, result.stderr
    assert sum(losses) == missing, result.stderr
    assert "queue is full" in result.stderr


@needs_fork
def test_workers_ending_with_sys_exit_report_exactly_what_the_store_is_missing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "traces.db"
    workers, runs = 2, 40
    result = run_script("sys-exit", db, workers, runs, 8)
    assert last_json(result)["exit_codes"] == [3] * workers
    missing = workers * runs * SPANS_PER_RUN - SpanStore(db).count()[0]
    losses = reported_losses(result.stderr)
    assert missing > 0 and len(losses) == workers, result.stderr
    assert sum(losses) == missing, result.stderr


@needs_fork
def test_with_pool_terminate_loses_nothing_silently(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    workers, runs = 2, 20
    result = run_script("pool-terminate", db, workers, runs)
    assert last_json(result)["workers"] == workers
    stored = SpanStore(db).count()[0] - SPANS_PER_RUN
    # The workers' last second is exported on SIGTERM; anything not was counted.
    assert stored + sum(reported_losses(result.stderr)) == workers * runs * SPANS_PER_RUN
    assert stored == workers * runs * SPANS_PER_RUN, result.stderr


# -- 4. the local store keeps up ---------------------------------------------------------------
def test_four_processes_writing_one_store_in_tight_loops_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    runs = 60
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "contend", str(db), str(runs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["lost"] == 0, err
        assert "lost so far" not in err, err
    assert SpanStore(db).count() == (4 * runs * SPANS_PER_RUN, 4 * runs)


@needs_fork
def test_every_module_lock_of_ours_is_new_in_a_forked_child() -> None:
    """Locks held by another thread at the fork: the child takes each one at once."""
    import os
    import threading

    from runnertrace._internal import errors
    from runnertrace.exporters import otlp
    from runnertrace.tracing import cost, setup

    def locks() -> dict[str, threading.Lock]:
        return {
            "setup": setup._lock,  # noqa: SLF001
            "prices": cost._load_lock,  # noqa: SLF001
            "rates": cost._rates_lock,  # noqa: SLF001
            "otlp log filter": otlp._log_filter_lock,  # noqa: SLF001
            "drops": drops._lock,  # type: ignore[dict-item]  # noqa: SLF001
            "rate limit": errors.internal_log._lock,  # type: ignore[dict-item]  # noqa: SLF001
        }

    held, release = threading.Event(), threading.Event()

    def hold_them_all() -> None:
        for lock in locks().values():
            lock.acquire()
        held.set()
        release.wait(10)
        for lock in locks().values():
            lock.release()

    thread = threading.Thread(target=hold_them_all)
    thread.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:
            stuck = [name for name, lock in locks().items() if not lock.acquire(timeout=2)]
            os._exit(len(stuck))
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        release.set()
        thread.join()
    assert status == 0, f"{status} lock(s) still held in the child"


def test_a_refused_collector_is_one_line_naming_the_refusal(tmp_path: Path) -> None:
    """Spans and metrics to a port nothing listens on: one line, the real cause, the counts."""
    import textwrap

    port = refused_port()
    (tmp_path / "runnertrace.yaml").write_text(
        textwrap.dedent(
            f"""
            trace:
              enabled: true
              type: otlp
              otlp:
                endpoint: http://127.0.0.1:{port}/v1/traces
            """
        )
    )
    app = textwrap.dedent(
        """
        import asyncio
        from runnertrace.core import Runtime
        from runnertrace.core.models import AgentRequestText
        from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator

        async def main() -> None:
            runtime = Runtime()
            NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
            agent = runtime.agents().get("math")
            for number in range(2):
                session = runtime.sessions().new(f"s{number}")
                prompt = "What is 1234 * 5678, plus 17?"
                await runtime.run(agent, session, [AgentRequestText(prompt=prompt)])

        asyncio.run(main())
        """
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    result = subprocess.run(
        [sys.executable, "-c", app],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"runnertrace: {2 * SPANS_PER_RUN} spans lost so far for otlp in all:"
    )
    assert f"{2 * SPANS_PER_RUN} Connection refused (127.0.0.1:{port})" in lines[0], lines[0]
    assert "metric export(s) failed (Connection refused" in lines[0], lines[0]


def test_a_writer_waits_for_another_process_writing_even_after_a_failed_batch(
    tmp_path: Path,
) -> None:
    """A store held for good fails a batch; one held for a transaction never does."""
    import sqlite3
    import threading
    import time

    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runnertrace.exporters.local_store import SqliteSpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for index in range(2):
        good_run(tracer, index)
    first, second = memory.get_finished_spans()[:3], memory.get_finished_spans()[3:]

    db = tmp_path / "traces.db"
    exporter = SqliteSpanExporter(db, busy_timeout_s=0.5)
    assert exporter.export(first[:1]) is SpanExportResult.SUCCESS  # the store exists
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)

    def hold_the_lock(seconds: float) -> threading.Thread:
        other.execute("BEGIN IMMEDIATE")

        def release() -> None:
            time.sleep(seconds)
            other.execute("COMMIT")

        thread = threading.Thread(target=release)
        thread.start()
        return thread

    held = hold_the_lock(1.0)  # longer than the writer waits: that batch fails
    assert exporter.export(first) is SpanExportResult.FAILURE
    held.join()
    held = hold_the_lock(0.3)  # another writer's transaction: waited for
    assert exporter.export(second) is SpanExportResult.SUCCESS
    held.join()
    other.close()
    exporter.shutdown()
    assert SpanStore(db).count()[0] == 1 + len(second)
