"""The ``local`` backend: real SDK spans through our batch processor into SQLite, read back."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from runnertrace._internal.errors import internal_log
from runnertrace.exporters.local import LocalBackend, LocalConfig
from runnertrace.exporters.local_store import (
    RunSummary,
    SpanStore,
    SqliteSpanExporter,
    StoredSpan,
    StoreError,
    StoreNotFoundError,
    TraceNotFoundError,
    span_tree,
)
from runnertrace.store import StoreUrl
from runnertrace.tracing.config import TraceConfig, load_settings
from runnertrace.tracing.export import BoundedBatchSpanProcessor
from store_engines import ENGINES, new_location

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


class FixedTraceIds(IdGenerator):
    """Trace ids from a list (span ids random), so prefix lookups are deterministic."""

    def __init__(self, *trace_ids: int) -> None:
        self._trace_ids = list(trace_ids)
        self._spans = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._spans.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._trace_ids.pop(0)


def local_pipeline(
    path: Path, *trace_ids: int, max_queue_size: int = 2048
) -> tuple[TracerProvider, LocalBackend]:
    config = TraceConfig(local=LocalConfig(path=str(path), max_queue_size=max_queue_size))
    backend = LocalBackend(config)
    provider = TracerProvider(
        resource=Resource.create({"service.name": "store-test"}),
        id_generator=FixedTraceIds(*trace_ids) if trace_ids else None,
    )
    for processor in backend.processors():
        provider.add_span_processor(processor)
    return provider, backend


def record_run(
    tracer: trace_api.Tracer,
    start: int,
    *,
    agent: str = "calc",
    tokens: tuple[tuple[int, int], ...] = ((10, 5), (7, 3)),
    tool_error: bool = False,
    run_error: bool = False,
) -> None:
    """One run shaped like TracingRunner's: run > step > (chat, tool) per token pair."""
    root = tracer.start_span(
        f"invoke_agent {agent}",
        start_time=start,
        attributes={
            "runnertrace.span.type": "run",
            "gen_ai.agent.name": agent,
            "runnertrace.framework": "native",
            "runnertrace.mode": "run",
            "session.id": "s-1",
        },
    )
    root_ctx = trace_api.set_span_in_context(root)
    t = start
    for index, (tokens_in, tokens_out) in enumerate(tokens):
        step = tracer.start_span(
            f"agent_step {agent}",
            context=root_ctx,
            start_time=t + 1 * MS,
            attributes={"runnertrace.span.type": "step", "runnertrace.step.index": index},
        )
        step_ctx = trace_api.set_span_in_context(step)
        chat = tracer.start_span(
            "chat scripted-1",
            context=step_ctx,
            kind=SpanKind.CLIENT,
            start_time=t + 2 * MS,
            attributes={
                "runnertrace.span.type": "message",
                "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": tokens_out,
                "gen_ai.response.finish_reasons": ["tool_calls"],
            },
        )
        chat.add_event("gen_ai.content.delta", {"delta.chars": 4}, timestamp=t + 3 * MS)
        chat.end(end_time=t + 4 * MS)
        tool = tracer.start_span(
            "execute_tool calculator",
            context=step_ctx,
            start_time=t + 5 * MS,
            attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": "calculator"},
        )
        if tool_error:
            tool.set_status(Status(StatusCode.ERROR, "tool returned an error"))
        tool.end(end_time=t + 6 * MS)
        step.end(end_time=t + 7 * MS)
        t += 10 * MS
    if run_error:
        root.set_status(Status(StatusCode.ERROR, "RuntimeError: boom"))
    root.end(end_time=t)


@pytest.fixture(params=ENGINES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A new store, once per engine: every test on it runs on SQLite and PostgreSQL."""
    return new_location(request.param, request, tmp_path / "nested" / "dir")  # type: ignore[return-value]


def other_store(db: Path | str, name: str) -> Path | str:
    """Another new store of ``db``'s engine: a file beside it, or a database beside it."""
    if isinstance(db, Path):
        return db.with_name(f"{name}.db")
    return db.rsplit("/", 1)[0] + "/" + new_database(db)


def new_database(url: str) -> str:
    import psycopg

    name = f"other_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    """A SQLite file, for what only that engine has (its file, WAL, statement limits)."""
    return tmp_path / "nested" / "dir" / "traces.db"


@pytest.fixture
def pipeline(db: Path) -> Iterator[tuple[TracerProvider, LocalBackend]]:
    provider, backend = local_pipeline(db)
    yield provider, backend
    provider.shutdown()


def test_spans_round_trip_with_ids_status_attributes_events_and_resource(
    db: Path, pipeline: tuple[TracerProvider, LocalBackend]
) -> None:
    provider, _ = pipeline
    record_run(provider.get_tracer("t"), T0, tool_error=True)
    assert provider.force_flush()

    store = SpanStore(db)
    [run] = store.list_runs()
    spans = store.get_trace(run.trace_id)
    assert len(spans) == 7
    by_name: dict[str, list[StoredSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
        assert len(span.trace_id) == 32 and len(span.span_id) == 16
        int(span.trace_id, 16), int(span.span_id, 16)
    [root] = by_name["invoke_agent calc"]
    assert root.parent_span_id is None and root.is_root
    steps = by_name["agent_step calc"]
    assert {s.parent_span_id for s in steps} == {root.span_id}
    chat = by_name["chat scripted-1"][0]
    assert chat.parent_span_id == steps[0].span_id
    assert chat.kind == "CLIENT" and root.kind == "INTERNAL"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat.events == [
        {"name": "gen_ai.content.delta", "time_ns": T0 + 3 * MS, "attributes": {"delta.chars": 4}}
    ]
    assert chat.start_ns == T0 + 2 * MS and chat.duration_ns == 2 * MS
    tool = by_name["execute_tool calculator"][0]
    assert tool.status_code == "ERROR"
    assert tool.status_description == "tool returned an error"
    assert root.status_code == "UNSET"
    assert root.resource["service.name"] == "store-test"
    assert root.scope == "t"
    # depth-first order with depths, children by start time
    assert [(s.name, d) for s, d in span_tree(spans)] == [
        ("invoke_agent calc", 0),
        ("agent_step calc", 1),
        ("chat scripted-1", 2),
        ("execute_tool calculator", 2),
        ("agent_step calc", 1),
        ("chat scripted-1", 2),
        ("execute_tool calculator", 2),
    ]


def test_runs_are_summarised_newest_first_with_tokens_status_and_duration(
    db: Path, pipeline: tuple[TracerProvider, LocalBackend]
) -> None:
    provider, _ = pipeline
    tracer = provider.get_tracer("t")
    record_run(tracer, T0, agent="first", tool_error=True)
    record_run(tracer, T0 + 1000 * MS, agent="second", tokens=((100, 1),), run_error=True)
    assert provider.force_flush()

    second, first = SpanStore(db).list_runs()
    assert (first.agent, second.agent) == ("first", "second")
    assert first.framework == "native" and first.mode == "run" and first.session_id == "s-1"
    assert first.span_count == 7 and second.span_count == 4
    assert (first.input_tokens, first.output_tokens, first.tokens) == (17, 8, 25)
    assert (second.input_tokens, second.output_tokens) == (100, 1)
    assert first.status == "ok" and first.error_count == 2
    assert second.status == "error"
    assert first.duration_ns == 20 * MS and first.start_ns == T0
    assert first.name == "invoke_agent first"
    assert [r.agent for r in SpanStore(db).list_runs(1)] == ["second"]


def test_last_full_ids_and_prefixes_resolve(db: Path) -> None:
    a = 0xABC1_0000_0000_0000_0000_0000_0000_0001
    b = 0xABC2_0000_0000_0000_0000_0000_0000_0002
    c = 0xDEF0_0000_0000_0000_0000_0000_0000_0003
    provider, _ = local_pipeline(db, a, b, c)
    tracer = provider.get_tracer("t")
    record_run(tracer, T0 + 2000 * MS)  # a: the newest run
    record_run(tracer, T0)  # b
    record_run(tracer, T0 + 1000 * MS)  # c
    assert provider.force_flush()
    provider.shutdown()

    store = SpanStore(db)
    hex_a, hex_b, hex_c = (format(x, "032x") for x in (a, b, c))
    assert store.resolve("last") == hex_a
    assert store.resolve(" LAST ") == hex_a
    assert store.resolve(hex_b) == hex_b
    assert store.resolve("abc2") == hex_b
    assert store.resolve("ABC1") == hex_a
    assert store.resolve("0xdef") == hex_c
    with pytest.raises(TraceNotFoundError, match="several traces"):
        store.resolve("abc")
    with pytest.raises(TraceNotFoundError, match="no trace id starts with '123'"):
        store.resolve("123")
    with pytest.raises(TraceNotFoundError, match="not a trace id"):
        store.resolve("abc%")
    with pytest.raises(TraceNotFoundError):
        store.get_trace("f" * 32)


def test_store_is_created_on_first_export_in_wal_mode(sqlite_db: Path) -> None:
    db = sqlite_db
    provider, backend = local_pipeline(db)
    [check] = backend.check()
    assert check.status == "ok" and "will be created" in check.detail
    assert not db.exists() and not db.parent.exists()  # building the pipeline wrote nothing
    with pytest.raises(StoreNotFoundError, match="no trace store at"):
        SpanStore(db).list_runs()
    assert not db.exists()  # reading never creates

    record_run(provider.get_tracer("t"), T0)
    assert provider.force_flush()
    provider.shutdown()
    assert db.is_file()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    path_check, store_check = backend.check()
    assert path_check.status == "ok" and str(db) in path_check.detail
    assert store_check.status == "ok" and "1 traces, 7 spans" in store_check.detail


def test_queue_size_comes_from_config(db: Path) -> None:
    config = TraceConfig(local=LocalConfig(path=str(db), max_queue_size=7))
    [processor] = LocalBackend(config).processors()
    assert isinstance(processor, BoundedBatchSpanProcessor)
    assert processor.max_queue_size == 7
    assert isinstance(processor.exporter, SqliteSpanExporter)
    assert processor.exporter.store.url == StoreUrl.parse(db)
    processor.shutdown(0.5)


def test_default_path_is_one_per_user_store_in_the_data_directory() -> None:
    # conftest points XDG_DATA_HOME at a temporary directory for each test.
    backend = LocalBackend(load_settings().trace)
    assert backend.path == Path(os.environ["XDG_DATA_HOME"]) / "runnertrace" / "traces.db"
    assert Path.cwd() not in backend.path.parents


def _span(trace_id: int, span_id: int, parent: SpanContext | None = None) -> ReadableSpan:
    flags = TraceFlags(TraceFlags.SAMPLED)
    return ReadableSpan(
        name=f"span {span_id}",
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        attributes={"gen_ai.usage.input_tokens": 1, "blob": b"\x00" * 10},
        start_time=T0 + span_id,
        end_time=T0 + span_id + 5,
    )


def test_concurrent_writers_lose_nothing(db: Path) -> None:
    """Four exporters (own connections) and four threads sharing one exporter, at once."""
    shared = SqliteSpanExporter(db)
    exporters = [SqliteSpanExporter(db) for _ in range(4)] + [shared] * 4
    batches, per_batch = 25, 4
    start = threading.Barrier(len(exporters))
    failures: list[SpanExportResult] = []

    def write(worker: int, exporter: SqliteSpanExporter) -> None:
        start.wait()
        for batch in range(batches):
            spans = [_span(worker * 1000 + batch + 1, i + 1) for i in range(per_batch)]
            result = exporter.export(spans)
            if result is not SpanExportResult.SUCCESS:
                failures.append(result)

    threads = [threading.Thread(target=write, args=(i, e)) for i, e in enumerate(exporters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for exporter in exporters:
        exporter.shutdown()

    assert failures == []
    store = SpanStore(db)
    assert store.count() == (len(exporters) * batches * per_batch, len(exporters) * batches)
    # bytes never reach the store, only their size
    span = store.get_trace(format(1001, "032x"))[0]
    assert span.attributes["blob"] == "<10 bytes>"


def test_a_batch_is_stored_with_a_few_statements_not_one_per_span(sqlite_db: Path) -> None:
    """One statement per span would hand the GIL back and forth once per span."""
    db = sqlite_db
    store = SpanStore(db)
    store.write([_span(1, 1)])  # creates the file and schema
    statements: list[str] = []
    conn = store.engine._connection(create=False)  # type: ignore[attr-defined]  # noqa: SLF001 - to watch the statements sent
    conn.set_trace_callback(statements.append)
    spans = [_span(2, i + 1) for i in range(1200)]
    assert store.write(spans) == 1200
    inserts = [sql for sql in statements if sql.startswith("INSERT OR REPLACE INTO spans")]
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    assert len(inserts) == -(-1200 // (limit // 17))
    assert store.count() == (1201, 2)
    # A re-exported span still replaces its row, within one statement too.
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 40)  # two rows per statement
    statements.clear()
    store.write([_span(3, 1), _span(3, 2), _span(3, 3), _span(3, 1), _span(3, 2)])
    assert len([sql for sql in statements if sql.startswith("INSERT OR REPLACE INTO spans")]) == 3
    assert store.count() == (1204, 3)
    assert sorted(s.span_id for s in store.get_trace(format(3, "032x"))) == [
        format(i, "016x") for i in (1, 2, 3)
    ]


def test_trace_without_its_root_is_listed_as_incomplete(db: Path) -> None:
    exporter = SqliteSpanExporter(db)
    parent = SpanContext(7, 99, is_remote=False)
    assert exporter.export([_span(7, 1, parent), _span(7, 2, parent)]) is SpanExportResult.SUCCESS
    [run] = SpanStore(db).list_runs()
    assert run.status == "incomplete" and run.span_count == 2
    # Neither is a model call (no runnertrace.span.type): their tokens count for no run.
    assert run.input_tokens == 0 and run.model_calls == 0 and run.derived


def test_a_span_under_a_remote_parent_is_a_root(db: Path) -> None:
    exporter = SqliteSpanExporter(db)
    remote = SpanContext(8, 99, is_remote=True)
    exporter.export([_span(8, 1, remote)])
    [run] = SpanStore(db).list_runs()
    assert run.status == "ok" and run.name == "span 1"
    [span] = SpanStore(db).get_trace(run.trace_id)
    assert span.is_root and span.parent_span_id == format(99, "016x")


def test_unwritable_location_fails_the_check_and_the_export_without_raising(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    db = blocker / "traces.db"
    backend = LocalBackend(TraceConfig(local=LocalConfig(path=str(db))))
    [check] = backend.check()
    assert check.status == "fail" and "not a directory" in check.detail and check.fix

    caplog.set_level(logging.WARNING, logger="runnertrace")
    internal_log.reset()
    exporter = SqliteSpanExporter(db)
    processor = BoundedBatchSpanProcessor(exporter, name="local")
    for span_id in (1, 2):
        processor.on_end(_span(1, span_id))
        assert processor.force_flush(5000)
    processor.shutdown()
    messages = [r.getMessage() for r in caplog.records if "lost so far" in r.getMessage()]
    # One line, then the exact total at shutdown; each names the file and the fix.
    assert len(messages) == 2, messages
    assert messages[0].startswith("runnertrace: 1 span lost so far for local: cannot write to")
    assert messages[1].startswith("runnertrace: 2 spans lost so far for local")
    assert all(str(db) in m and "trace.local.path" in m for m in messages)


def test_a_store_from_a_newer_version_is_refused(sqlite_db: Path) -> None:
    db = sqlite_db
    SqliteSpanExporter(db).export([_span(1, 1)])
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(StoreError, match="newer than this runnertrace"):
        SpanStore(db).list_runs()


def test_a_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "traces.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=str(bogus)):
        SpanStore(bogus).list_runs()
    [path_check, store_check] = LocalBackend(
        TraceConfig(local=LocalConfig(path=str(bogus)))
    ).check()
    assert path_check.status == "ok" and store_check.status == "fail"


async def test_a_traced_native_run_lands_in_the_store(tmp_path: Path) -> None:
    from runnertrace.core import Runtime, Session
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
    from runnertrace.tracing import get_tracing_setup

    db = tmp_path / "e2e.db"
    settings = load_settings()
    settings.trace.enabled = True
    settings.trace.local.path = str(db)
    runtime = Runtime(settings=settings)
    native = Agent(ScriptedLlm(), tools=[calculator], name="calc")
    agent = NativeModule([native], runtime=runtime).get(native)
    reply = await runtime.run(agent, Session("e2e"), [AgentRequestText(prompt="What is 6 * 7?")])
    assert str(reply) == "The answer is 42."
    assert get_tracing_setup(settings.trace).flush()

    store = SpanStore(db)
    [run] = store.list_runs()
    assert (run.agent, run.framework, run.mode, run.status) == ("calc", "native", "run", "ok")
    assert run.session_id == "e2e"
    spans = store.get_trace(store.resolve("last"))
    chats = [s for s in spans if s.span_type == "message"]
    assert run.input_tokens == sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats) > 0
    assert [(s.name, d) for s, d in span_tree(spans)] == [
        ("invoke_agent calc", 0),
        ("agent_step calc", 1),
        ("chat scripted-1", 2),
        ("execute_tool calculator", 2),
        ("agent_step calc", 1),
        ("chat scripted-1", 2),
    ]


# -- a run's numbers are its root span's (issue 28) ------------------------------------------
def _team_spans() -> list[ReadableSpan]:
    """The spans of real traced runs with agents nested in tools (``ui_fixtures.team_runs``),
    in the order they ended, through the tracing layer into memory."""
    import asyncio

    from runnertrace.testing import capture_spans
    from ui_fixtures import team_runs

    with capture_spans() as captured:
        asyncio.run(team_runs())
    return captured.spans


def _attrs(span: ReadableSpan | StoredSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def _runs_by_agent(store: SpanStore) -> dict[str, RunSummary]:
    return {run.agent or run.name: run for run in store.list_runs()}


def _root(spans: list[ReadableSpan], trace_id: str) -> dict[str, object]:
    (root,) = [
        s for s in spans if format(s.context.trace_id, "032x") == trace_id and s.parent is None
    ]
    return _attrs(root)


@pytest.mark.parametrize("batches", ["one batch", "span by span"])
def test_the_run_row_is_the_root_spans_totals_for_nested_runs(db: Path, batches: str) -> None:
    from composition_checks import check_totals
    from runnertrace.tracing import attributes as A

    spans = _team_spans()
    levels = check_totals(spans, model_calls=7)  # the spans themselves add up
    assert [(lv.agent, lv.depth, lv.model_calls, lv.own_model_calls) for lv in levels] == [
        ("planner", 0, 4, 2),
        ("researcher", 1, 2, 2),
        ("recursive", 0, 3, 2),
        ("recursive", 1, 1, 1),
    ]
    store = SpanStore(db)
    if batches == "one batch":
        store.write(spans)
    else:  # as the spans end: each nested run is stored (and summarised) before its parent
        for span in spans:
            store.write([span])
    runs = _runs_by_agent(store)
    assert set(runs) == {"planner", "recursive"}
    for run in runs.values():
        root = _root(spans, run.trace_id)
        assert not run.derived and run.status == "ok"
        assert (run.input_tokens, run.output_tokens) == (
            root[A.AGG_INPUT_TOKENS],
            root[A.AGG_OUTPUT_TOKENS],
        )
        assert (run.model_calls, run.tool_calls, run.errors) == (
            root[A.AGG_MODEL_CALLS],
            root[A.AGG_TOOL_CALLS],
            root[A.AGG_ERRORS],
        )
        assert run.cost == root.get(A.AGG_COST)
        assert run.unpriced_calls == root.get(A.UNPRICED_CALLS, 0)
        assert run.unpriced_models == tuple(root.get(A.UNPRICED_MODELS, ()))  # type: ignore[arg-type]
        assert run.nested_runs == root.get(A.NESTED_RUNS, 0) == 1
    planner = runs["planner"]
    # 2 priced gpt-4o calls of its own, the researcher's 2 scripted calls unpriced: partial
    assert (planner.input_tokens, planner.model_calls, planner.unpriced_calls) == (2900, 4, 2)
    assert planner.cost == pytest.approx((2200 * 2.5 + 50 * 10) / 1e6)
    assert planner.cost_label == "$0.006 (partial: 2 calls unpriced)"
    assert planner.unpriced_models == ("runnertrace/scripted-1",)
    recursive = runs["recursive"]
    assert (recursive.cost, recursive.cost_label, recursive.cost_status) == (
        None,
        "unpriced",
        "unpriced",
    )


def test_the_per_agent_rows_agree_with_the_spans(db: Path) -> None:
    from runnertrace.exporters.local_store import agent_accounts
    from ui_fixtures import agent_figures, check_store_rows

    spans = _team_spans()
    check_store_rows(spans, other_store(db, "checked"))  # the check composition tests apply
    store = SpanStore(db)
    store.write(spans)
    expected = agent_figures(spans)
    seen: dict[str, tuple[int, ...]] = {}
    for run in store.list_runs():
        accounts = store.agents(run.trace_id)
        # the report draws its table from the spans, by the same rules
        assert agent_accounts(store.get_trace(run.trace_id)) == accounts
        for account in accounts:
            own, total = account.own, account.total
            assert (own.model_calls, own.input_tokens, own.tool_calls) == expected[account.agent][
                "own"
            ]
            assert (total.model_calls, total.input_tokens, total.tool_calls) == expected[
                account.agent
            ]["total"]
            seen[account.agent] = (account.runs, account.depth)
    # the recursive agent ran twice, one run nested in the other: counted once in its total
    assert seen == {"planner": (1, 0), "researcher": (1, 1), "recursive": (2, 0)}
    planner_trace = _runs_by_agent(store)["planner"].trace_id
    planner, researcher = store.agents(planner_trace)
    assert researcher.started_by == ("planner",) and researcher.own == researcher.total
    assert planner.own.cost == planner.total.cost and planner.own.unpriced_calls == 0
    assert planner.total.unpriced_calls == 2 and planner.total.cost_label.endswith("unpriced)")
    # time: the planner's own is its run's less the researcher's run
    assert planner.own.duration_ns + researcher.total.duration_ns == planner.total.duration_ns


def _strip_totals(span: ReadableSpan) -> ReadableSpan:
    """``span`` as a trace of another app, or from before the totals, has it: no run totals
    of ours; and a run's token sum under the per-call keys, as some instrumentations
    write it on their agent spans (a sum of those would count each call twice)."""
    from opentelemetry.sdk.trace import ReadableSpan as Span

    attributes = _attrs(span)
    keep = {
        k: v
        for k, v in attributes.items()
        if not k.startswith(
            ("gen_ai.aggregated_usage.", "runnertrace.aggregated.", "runnertrace.own.")
        )
        and k not in ("runnertrace.usage.unpriced_calls", "runnertrace.usage.unpriced_models")
        and k != "runnertrace.nested_runs"
    }
    if "gen_ai.aggregated_usage.input_tokens" in attributes:
        keep["gen_ai.usage.input_tokens"] = attributes["gen_ai.aggregated_usage.input_tokens"]
    return Span(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=keep,
        events=span.events,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def test_a_trace_without_run_totals_is_summed_from_its_calls_and_marked_derived(db: Path) -> None:
    spans = _team_spans()
    store = SpanStore(db)
    store.write(spans)
    ours = {name: (r, store.agents(r.trace_id)) for name, r in _runs_by_agent(store).items()}
    foreign = SpanStore(other_store(db, "foreign"))
    foreign.write([_strip_totals(s) for s in spans])
    for name, run in _runs_by_agent(foreign).items():
        mine, accounts = ours[name]
        assert run.derived and not mine.derived
        # the same numbers, found by summing the model-call and tool spans
        for field_name in ("input_tokens", "output_tokens", "model_calls", "tool_calls", "errors"):
            assert getattr(run, field_name) == getattr(mine, field_name), field_name
        assert run.unpriced_calls == mine.unpriced_calls
        assert run.cost == pytest.approx(mine.cost) if mine.cost else run.cost is None
        assert run.unpriced_models == mine.unpriced_models
        # and the per-agent table by attributing each call to its nearest run
        derived = foreign.agents(run.trace_id)
        assert [(a.agent, a.runs, a.own.model_calls, a.total.model_calls) for a in derived] == [
            (a.agent, a.runs, a.own.model_calls, a.total.model_calls) for a in accounts
        ]


INDEXES_OF_RUNS = (
    "SELECT name FROM sqlite_master "
    "WHERE type = 'index' AND tbl_name = 'runs_3' AND sql IS NOT NULL"
)
# The runs table and its indexes as runnertrace wrote them before the totals (schema 2).
SCHEMA_2_RUNS = """
CREATE TABLE runs (
    trace_id TEXT PRIMARY KEY, name TEXT NOT NULL, start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL, span_count INTEGER NOT NULL, error_count INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, status TEXT NOT NULL,
    agent TEXT, framework TEXT, mode TEXT, session_id TEXT, user_id TEXT, cost REAL,
    seq INTEGER NOT NULL
);
CREATE INDEX runs_by_start ON runs (start_ns, trace_id);
CREATE INDEX runs_by_agent ON runs (agent, start_ns, trace_id);
CREATE INDEX runs_by_framework ON runs (framework, start_ns, trace_id);
CREATE INDEX runs_by_status ON runs (status, start_ns, trace_id);
CREATE INDEX runs_by_session ON runs (session_id, start_ns, trace_id);
CREATE INDEX runs_by_seq ON runs (seq);
CREATE INDEX runs_for_charts
    ON runs (start_ns, agent, name, end_ns, input_tokens, output_tokens, cost);
"""
SCHEMA_2_COLUMNS = (
    "trace_id, name, start_ns, end_ns, span_count, error_count, input_tokens, output_tokens, "
    "status, agent, framework, mode, session_id, user_id, cost, seq"
)


def test_a_schema_2_store_is_upgraded_and_back_filled(sqlite_db: Path) -> None:
    """A store from before the totals: the new columns and table are added and filled."""
    db = sqlite_db
    from runnertrace.exporters.local_store import SCHEMA_VERSION

    spans = _team_spans()
    store = SpanStore(db)
    store.write(spans)
    before = {r.trace_id: r for r in store.list_runs()}
    agents_before = {t: store.agents(t) for t in before}
    store.close()
    with sqlite3.connect(db) as conn:  # schema 2: the runs table as it was, no run_agents
        conn.execute("DROP TABLE run_agents")
        conn.execute("ALTER TABLE runs RENAME TO runs_3")
        for index in [r[0] for r in conn.execute(INDEXES_OF_RUNS)]:
            conn.execute(f"DROP INDEX {index}")
        conn.executescript(SCHEMA_2_RUNS)
        conn.execute(f"INSERT INTO runs SELECT {SCHEMA_2_COLUMNS} FROM runs_3")
        conn.execute("DROP TABLE runs_3")
        conn.execute("UPDATE runs SET input_tokens = -1")  # recomputed, not kept
        conn.execute("PRAGMA user_version=2")
    with pytest.raises(StoreError, match="schema version 2"):
        SpanStore(db, read_only=True).list_runs()
    upgraded = SpanStore(db)
    upgraded.upgrade()
    reader = SpanStore(db, read_only=True)
    assert {r.trace_id: r for r in reader.list_runs()} == before
    assert {t: reader.agents(t) for t in before} == agents_before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"run_agents_by_agent", "run_agents_by_start", "runs_for_charts"} <= indexes


def test_a_cancelled_run_or_nested_run_is_listed_as_cancelled(db: Path) -> None:
    """Cancelled ends in error (its CancelledError), but the lists say cancelled, not error."""
    import asyncio

    from nesting_helpers import Outer, drive, inner_opened
    from runnertrace.testing import capture_spans
    from runnertrace.tracing.runner import traced
    from tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

    async def failed_then_cancelled() -> None:
        await inner_opened(fail=True)()
        await inner_opened(cancel=True)()

    async def runs() -> None:
        await drive(traced(Outer(failed_then_cancelled)), "run")
        with pytest.raises(asyncio.CancelledError):
            await traced(ForeignRunner(fail_at=3, error=asyncio.CancelledError())).run(
                ForeignAgent("stopped"), ForeignSession(), []
            )

    with capture_spans() as captured:
        asyncio.run(runs())
    store = SpanStore(db)
    store.write(captured.spans)
    listed = _runs_by_agent(store)
    assert (listed["outer"].status, listed["stopped"].status) == ("ok", "cancelled")
    accounts = {a.agent: a for a in store.agents(listed["outer"].trace_id)}
    inner = accounts["inner"]
    assert (inner.runs, inner.cancelled, inner.failed) == (2, 1, 1)
    assert (accounts["outer"].cancelled, accounts["outer"].failed) == (0, 0)
