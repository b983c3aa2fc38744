"""How fast is ``runnertrace ui`` over a big store, and does it slow the traced app's writes?

Run it with ``python benchmarks/ui.py [runs] [store.db]`` (defaults: 100000 runs in a
temporary file; about two minutes on a busy 2-core machine, most of it filling the store).

1. Fill: ``runs`` synthetic runs of 5 spans each (run > chat, tool, chat, tool), spread
   over 7 days, 20 agents, 3 frameworks, 4 models, 6 tools, 5% failed, a session per 4
   runs, ``gen_ai.usage.cost`` on chat and run spans, captured content on the run span.
   They go through the store's own write path (``SpanStore.write``, the one the exporter
   uses, which also keeps the ``runs`` table) as SDK ``ReadableSpan`` objects.
2. Read: each dashboard request, through the real ASGI app (Starlette's TestClient, so
   JSON encoding counts) on the store's read-only connections; p50 and p95 over repeated
   calls. Target: the runs list, its filters and the trace page under 200 ms at p95.
3. Write while reading: the write rate (spans/s) of this process adding runs (as a traced
   app's exporter does), alone and then while the dashboard, in another process as
   ``runnertrace ui`` is, loops over list, filter and trace-page requests; printed as a ratio.
4. OTLP in: spans/s taken by ``POST /v1/traces`` (protobuf batches of 100 runs, decoded,
   mapped and stored), alone and while the dashboard process reads.

Content search reads the dashboard's trigram index (``<store>.search``), which the app
builds in the background from the runs table; the time to build it is printed first.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from starlette.testclient import TestClient

from runnertrace.exporters.local_store import SpanStore
from runnertrace.ui import create_app

TARGET_MS = 200.0
MS = 1_000_000
DAY_NS = 86_400 * 1_000_000_000
AGENTS = [f"agent-{i:02d}" for i in range(20)]
FRAMEWORKS = ["native", "langgraph", "openai-agents"]
MODELS = ["gpt-4o-mini", "gpt-4o", "claude-sonnet", "llama-3"]
TOOLS = ["search", "calculator", "fetch", "sql", "shell", "weather"]
RESOURCE = Resource.create({"service.name": "ui-benchmark"})
SCOPE = InstrumentationScope("runnertrace")
RARE_WORD = "xylophonequartz"


class Runs:
    """Synthetic runs, numbered; run ``n`` always has the same content."""

    def __init__(self, now_ns: int, total: int) -> None:
        self.now_ns = now_ns
        self.total = total
        self.rng = random.Random(7)

    def spans(self, n: int, start_ns: int | None = None) -> list[ReadableSpan]:
        rng = self.rng
        trace_id = (n + 1) * 0x9E3779B97F4A7C15 % (1 << 128) or 1
        start = (
            start_ns
            if start_ns is not None
            else self.now_ns - 7 * DAY_NS * (self.total - n) // max(1, self.total)
        )
        agent = AGENTS[n % len(AGENTS)]
        failed = n % 20 == 7
        root = SpanContext(trace_id, (n << 8 | 1) % (1 << 64) or 1, False, TraceFlags(1))
        spans: list[ReadableSpan] = []
        t = start
        cost = 0.0
        for step in range(2):
            model = MODELS[(n + step) % len(MODELS)]
            tokens_in, tokens_out = rng.randint(50, 900), rng.randint(5, 200)
            chat_cost = tokens_in * 1.5e-7 + tokens_out * 6e-7
            cost += chat_cost
            duration = rng.randint(80, 1500) * MS
            spans.append(
                self._span(
                    f"chat {model}",
                    trace_id,
                    n,
                    2 + 2 * step,
                    root,
                    t,
                    t + duration,
                    {
                        "runnertrace.span.type": "message",
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": model,
                        "gen_ai.usage.input_tokens": tokens_in,
                        "gen_ai.usage.output_tokens": tokens_out,
                        "gen_ai.usage.cost": chat_cost,
                    },
                    SpanKind.CLIENT,
                )
            )
            t += duration
            tool = TOOLS[(n * 3 + step) % len(TOOLS)]
            tool_failed = failed and step == 1
            duration = rng.randint(1, 400) * MS
            attributes: dict[str, object] = {
                "runnertrace.span.type": "tool",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
            }
            if tool_failed:
                attributes["error.type"] = "TimeoutError" if n % 40 == 7 else "tool_error"
            spans.append(
                self._span(
                    f"execute_tool {tool}",
                    trace_id,
                    n,
                    3 + 2 * step,
                    root,
                    t,
                    t + duration,
                    attributes,
                    error="tool failed" if tool_failed else None,
                )
            )
            t += duration
        word = RARE_WORD if n == self.total // 3 else "weather"
        run_attributes: dict[str, object] = {
            "runnertrace.span.type": "run",
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "runnertrace.framework": FRAMEWORKS[n % len(FRAMEWORKS)],
            "runnertrace.mode": "run",
            "gen_ai.conversation.id": f"session-{n // 4}",
            "gen_ai.usage.cost": cost,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": f"what about {word}?"}]}]
            ),
        }
        if failed:
            run_attributes["error.type"] = "tool_error"
        spans.insert(
            0,
            self._span(
                f"invoke_agent {agent}",
                trace_id,
                n,
                1,
                None,
                start,
                t + MS,
                run_attributes,
                error="run failed" if failed else None,
            ),
        )
        return spans

    @staticmethod
    def _span(
        name: str,
        trace_id: int,
        n: int,
        index: int,
        parent: SpanContext | None,
        start: int,
        end: int,
        attributes: dict[str, object],
        kind: SpanKind = SpanKind.INTERNAL,
        error: str | None = None,
    ) -> ReadableSpan:
        span_id = (n << 8 | index) % (1 << 64) or 1
        return ReadableSpan(
            name=name,
            context=SpanContext(trace_id, span_id, False, TraceFlags(1)),
            parent=parent,
            resource=RESOURCE,
            attributes=attributes,  # type: ignore[arg-type]
            kind=kind,
            status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=SCOPE,
        )


def fill(store: SpanStore, runs: Runs, per_batch: int = 100) -> float:
    started = time.perf_counter()
    for first in range(0, runs.total, per_batch):
        batch = [s for n in range(first, min(runs.total, first + per_batch)) for s in runs.spans(n)]
        store.write(batch)
        if first and first % 20_000 == 0:
            rate = first / (time.perf_counter() - started)
            print(f"  {first} runs stored ({rate:.0f} runs/s)", flush=True)
    return time.perf_counter() - started


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(0.95 * len(samples)))]
    return statistics.median(samples), p95


def read_loop(db: str, stop: Any, reads: Any, pause_s: float) -> None:
    """The dashboard in its own process (as ``runnertrace ui`` runs): list, filter, trace page."""
    rng = random.Random(5)
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        trace_ids = [r["trace_id"] for r in client.get("/api/runs").json()["runs"]]
        calls: list[tuple[str, dict[str, object]]] = [
            ("/api/runs", {}),
            ("/api/runs", {"agent": "agent-03"}),
            ("/api/runs", {"status": "error"}),
            ("/api/runs", {"framework": "native", "since": time.time_ns() - DAY_NS}),
            ("/api/facets", {}),
        ]
        while not stop.is_set():
            if rng.random() < 0.3:
                client.get(f"/trace/{rng.choice(trace_ids)}")
            else:
                path, params = rng.choice(calls)
                client.get(path, params=params)
            with reads.get_lock():
                reads.value += 1
            if pause_s:
                time.sleep(pause_s)


def dashboard_cases(
    client: TestClient, rng: random.Random, total: int, now: int
) -> list[tuple[str, Callable[[], object], bool]]:
    """Each dashboard request of the benchmark: (label, call, under the p95 goal)."""

    def get(path: str, **params: object) -> Callable[[], object]:
        def call() -> object:
            response = client.get(path, params=params)
            assert response.status_code == 200, response.text
            return response.json()

        return call

    deep = client.get("/api/runs", params={"limit": 200}).json()
    cursor = deep["next"]
    for _ in range(49):  # 10,000 runs in: page 201 of 50-run pages
        deep = client.get("/api/runs", params={"limit": 200, "cursor": cursor}).json()
        cursor = deep["next"]
    trace_ids = [
        r["trace_id"] for r in client.get("/api/runs", params={"limit": 200}).json()["runs"]
    ]
    day_ago = now - DAY_NS

    def trace_page() -> object:
        response = client.get(f"/trace/{rng.choice(trace_ids)}")
        assert response.status_code == 200
        return response.text

    cases: list[tuple[str, Callable[[], object], bool]] = [
        ("runs list, first page", get("/api/runs"), True),
        ("runs list, 10,000 runs deep (keyset)", get("/api/runs", cursor=cursor), True),
        ("filter agent", get("/api/runs", agent="agent-07"), True),
        ("filter framework", get("/api/runs", framework="langgraph"), True),
        ("filter status=error", get("/api/runs", status="error"), True),
        ("filter session", get("/api/runs", session=f"session-{total // 8}"), True),
        ("filter last 24 h", get("/api/runs", since=day_ago), True),
        (
            "filter agent + error + 24 h",
            get("/api/runs", agent="agent-07", status="error", since=day_ago),
            True,
        ),
        ("filter values (facets)", get("/api/facets"), True),
        ("filter model", get("/api/runs", model="claude-sonnet"), True),
        ("filter any span in error", get("/api/runs", errors="any"), True),
        ("filter latency >= 2 s", get("/api/runs", min_ms=2000), True),
        ("filter cost $0.0005-$0.0006", get("/api/runs", min_cost=5e-4, max_cost=6e-4), True),
        ("filter session prefix", get("/api/runs", session=f"session-{total // 8}"[:-1]), True),
        ("sort by cost", get("/api/runs", sort="cost"), True),
        ("sort by duration, ascending", get("/api/runs", sort="duration", dir="asc"), True),
        ("trace page (waterfall)", trace_page, True),
        ("compare two runs", get("/api/compare", a=trace_ids[0], b=trace_ids[1]), True),
        ("search, common word", get("/api/runs", q="weather"), True),
        ("search, one run in 100k", get("/api/runs", q=RARE_WORD), True),
        ("search + agent filter", get("/api/runs", q=RARE_WORD, agent="agent-01"), True),
        ("sessions list", get("/api/sessions"), False),
        ("errors by error.type", get("/api/errors"), False),
        ("charts per agent, 24 h", get("/api/metrics", by="agent", since=day_ago), False),
        ("charts per model, 24 h", get("/api/metrics", by="model", since=day_ago), False),
        ("charts per tool, 24 h", get("/api/metrics", by="tool", since=day_ago), False),
        ("charts per agent, 7 days", get("/api/metrics", by="agent"), False),
    ]
    return cases


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    workdir = Path(tempfile.mkdtemp(prefix="runnertrace-ui-bench-"))
    db = Path(sys.argv[2]) if len(sys.argv) > 2 else workdir / "traces.db"
    now = time.time_ns()
    runs = Runs(now, total)
    store = SpanStore(db)
    if not db.exists() or store.count()[1] < total:
        print(f"filling {db} with {total} runs of 5 spans ...", flush=True)
        seconds = fill(store, runs)
        print(
            f"filled in {seconds:.1f} s: {total / seconds:.0f} runs/s, "
            f"{5 * total / seconds:.0f} spans/s (runs table kept on every write)"
        )
    spans, traces = store.count()
    print(f"store: {traces} runs, {spans} spans, {db.stat().st_size / 1e6:.0f} MB\n")

    rng = random.Random(3)
    app = create_app(db)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        index = app.state.dashboard.search
        t0 = time.perf_counter()
        if not index.caught_up.wait(1800):
            raise RuntimeError("the search index did not catch up in 30 min")
        print(
            f"search index caught up in {time.perf_counter() - t0:.1f} s "
            f"({Path(str(db) + '.search').stat().st_size / 1e6:.0f} MB)\n"
        )

        cases = dashboard_cases(client, rng, total, now)
        print(f"{'request':40} {'p50 ms':>8} {'p95 ms':>8}  goal")
        failed = False
        for label, call, goal in cases:
            call()  # warm the connection and page cache
            repeat = 40 if goal else 8
            p50, p95 = timed(call, repeat)
            verdict = ""
            if goal:
                ok = p95 < TARGET_MS
                failed |= not ok
                verdict = "ok" if ok else f"OVER {TARGET_MS:.0f} ms"
            print(f"{label:40} {p50:8.1f} {p95:8.1f}  {verdict}")

        # -- the writer's rate, alone and while the dashboard reads --------------------------
        print()
        next_run = [total]

        def write_for(seconds: float) -> tuple[float, float]:
            """Spans/s and the slowest single write (ms), batches of 20 runs made beforehand."""
            batches = []
            for _ in range(int(seconds * 200)):
                batch = []
                for _ in range(20):
                    batch.extend(runs.spans(next_run[0], start_ns=time.time_ns()))
                    next_run[0] += 1
                batches.append(batch)
            written, slowest = 0, 0.0
            end = time.perf_counter() + seconds
            t0 = time.perf_counter()
            for batch in batches:
                if time.perf_counter() > end:
                    break
                w0 = time.perf_counter()
                written += store.write(batch)
                slowest = max(slowest, time.perf_counter() - w0)
            return written / (time.perf_counter() - t0), slowest * 1000

        def with_reader(pause_s: float) -> tuple[float, float, float]:
            stop = multiprocessing.Event()
            reads = multiprocessing.Value("i", 0)
            reader = multiprocessing.Process(target=read_loop, args=(str(db), stop, reads, pause_s))
            reader.start()
            while reads.value == 0:  # the reader is up and reading
                if not reader.is_alive():
                    raise RuntimeError("the reader process died; see its traceback above")
                time.sleep(0.05)
            t0 = time.perf_counter()
            first_reads = reads.value
            rate, slowest = write_for(6)
            read_rate = (reads.value - first_reads) / (time.perf_counter() - t0)
            stop.set()
            reader.join()
            return rate, slowest, read_rate

        def ingest_for(seconds: float) -> float:
            """Spans/s through POST /v1/traces: protobuf bodies made beforehand."""
            bodies = []
            for _ in range(int(seconds * 20)):
                spans = []
                for _ in range(100):
                    spans.extend(runs.spans(next_run[0], start_ns=time.time_ns()))
                    next_run[0] += 1
                bodies.append((len(spans), encode_spans(spans).SerializeToString()))
            taken = 0
            end = time.perf_counter() + seconds
            t0 = time.perf_counter()
            for count, body in bodies:
                if time.perf_counter() > end:
                    break
                response = client.post(
                    "/v1/traces",
                    content=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                assert response.status_code == 200, response.text
                taken += count
            return taken / (time.perf_counter() - t0)

        def ingest_with_reader() -> tuple[float, float]:
            stop = multiprocessing.Event()
            reads = multiprocessing.Value("i", 0)
            reader = multiprocessing.Process(target=read_loop, args=(str(db), stop, reads, 0.0))
            reader.start()
            while reads.value == 0:
                if not reader.is_alive():
                    raise RuntimeError("the reader process died; see its traceback above")
                time.sleep(0.05)
            t0 = time.perf_counter()
            first_reads = reads.value
            rate = ingest_for(6)
            read_rate = (reads.value - first_reads) / (time.perf_counter() - t0)
            stop.set()
            reader.join()
            return rate, read_rate

        ingest_alone = ingest_for(6)
        ingest_read, ingest_reads = ingest_with_reader()
        print(f"OTLP in (POST /v1/traces) alone:      {ingest_alone:7.0f} spans/s")
        print(
            f"OTLP in while the UI reads flat out:  {ingest_read:7.0f} spans/s "
            f"(UI process: {ingest_reads:.0f} requests/s)"
        )
        alone, slowest_alone = write_for(6)
        print(
            f"store writes alone:                   {alone:7.0f} spans/s, "
            f"slowest write {slowest_alone:6.1f} ms"
        )
        for label, pause in (("a person's pace", 0.2), ("flat out", 0.0)):
            rate, slowest, read_rate = with_reader(pause)
            print(
                f"while the UI reads ({label:15}): {rate:7.0f} spans/s, "
                f"slowest write {slowest:6.1f} ms (ratio {rate / alone:.2f}; "
                f"UI process: {read_rate:.0f} requests/s)"
            )
    store.close()
    print(
        f"\n{'all' if not failed else 'NOT all'} list/filter/trace requests under "
        f"{TARGET_MS:.0f} ms at p95"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
