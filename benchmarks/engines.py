"""The two store engines side by side: ingest from 4 processes, each dashboard query's p95, size.

Run it with ``python benchmarks/engines.py [runs] [seconds] [engines]`` (defaults: 100000
runs, 10 s of ingest per measurement, ``sqlite,postgresql``). PostgreSQL is
``RUNNERTRACE_TEST_POSTGRES`` when set, else a throwaway cluster started as the tests start
theirs (tests/store_engines.py: PostgreSQL 15 on loopback, ``fsync`` off, so the figures
are the engine's, not the disk's).

For each engine:

1. Ingest via the exporter: 4 processes, each exporting finished native-run spans (9 per
   trace) in the batch processor's batches of 512 through ``StoreSpanExporter`` into one
   store, all at once (benchmarks/store_throughput.py's workload). Spans committed by all
   of them, per second of wall time.
2. Ingest via OTLP: ``runnertrace ui`` (a process of its own) on that store, and 4
   processes POSTing protobuf ``/v1/traces`` bodies of 100 runs (500 spans) back to back.
3. The dashboard's queries (benchmarks/ui.py's list) over ``runs`` runs of 5 spans, each
   through the ASGI app: p50 and p95 of repeated calls.
4. Size on disk: the SQLite file with its WAL and search side file; PostgreSQL's
   ``pg_database_size`` (tables, indexes and the trigram index).

Prints one Markdown table (the README's) at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from starlette.testclient import TestClient

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from store_throughput import BATCH, finished_runs  # noqa: E402
from ui import Runs, dashboard_cases, fill, timed  # noqa: E402

from runnertrace.store import SpanStore, StoreSpanExporter  # noqa: E402
from runnertrace.ui import create_app  # noqa: E402

PROCESSES = 4


def _export_worker(location: str, seconds: float, runs: int, start: Any, out: Any) -> None:
    spans = finished_runs(runs)
    exporter = StoreSpanExporter(location, busy_timeout_s=10.0)
    batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
    start.wait()
    stored = failed = 0
    began = time.perf_counter()
    for batch in batches:
        if time.perf_counter() - began > seconds:
            break
        if exporter.export(batch).name == "SUCCESS":
            stored += len(batch)
        else:
            failed += len(batch)
    out.put((stored, failed, time.perf_counter() - began))
    exporter.shutdown()


def _otlp_worker(url: str, seconds: float, first: int, start: Any, out: Any) -> None:
    runs = Runs(time.time_ns(), 1)
    bodies = []
    n = first
    for _ in range(int(seconds * 20)):
        spans = []
        for _ in range(100):
            spans.extend(runs.spans(n, start_ns=time.time_ns()))
            n += 1
        bodies.append((len(spans), encode_spans(spans).SerializeToString()))
    session = requests.Session()
    start.wait()
    taken = failed = 0
    began = time.perf_counter()
    for count, body in bodies:
        if time.perf_counter() - began > seconds:
            break
        response = session.post(
            url + "/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
            timeout=60,
        )
        if response.status_code == 200:
            taken += count
        else:
            failed += count
    out.put((taken, failed, time.perf_counter() - began))


def _in_parallel(target: Any, args_of: Any) -> tuple[float, int]:
    """Run ``PROCESSES`` workers at once: (spans/s over the slowest one's time, failed)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start = context.Barrier(PROCESSES)
    workers = [
        context.Process(target=target, args=(*args_of(i), start, out)) for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    done = [out.get(timeout=900) for _ in workers]
    for worker in workers:
        worker.join(60)
    return sum(d[0] for d in done) / max(d[2] for d in done), sum(d[1] for d in done)


def _serve(location: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "runnertrace.cli", "ui", "--store", location, "--port", str(port),
         "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(url + "/api/facets", timeout=2).status_code in (200, 503):
                return server, url
        except requests.ConnectionError:
            pass  # not listening yet
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError(f"runnertrace ui did not start: {server.stderr.read()}")  # type: ignore[union-attr]
        time.sleep(0.2)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _size(store: SpanStore) -> int:
    size = store.size_bytes() or 0
    if store.is_file:
        side = store.path.with_name(store.path.name + ".search")
        size += sum(p.stat().st_size for p in (side, Path(str(side) + "-wal")) if p.is_file())
    return size


def measure(engine: str, location: str, total: int, seconds: float) -> dict[str, Any]:
    print(f"\n== {engine}: {location.split('@')[-1]}", flush=True)
    results: dict[str, Any] = {}
    # 1. ingest via the exporter, 4 processes, into a store of its own
    ingest = _fresh(engine, location, "ingest")
    rate, failed = _in_parallel(
        _export_worker,
        lambda i: (
            ingest,
            seconds,
            int(seconds * 3000),
        ),
    )
    results["exporter"] = (rate, failed)
    print(f"exporter, {PROCESSES} processes: {rate:,.0f} spans/s ({failed} failed)", flush=True)
    # 2. ingest via OTLP into runnertrace ui
    otlp = _fresh(engine, location, "otlp")
    SpanStore(otlp).migrate()
    server, url = _serve(otlp)
    try:
        rate, failed = _in_parallel(_otlp_worker, lambda i: (url, seconds, 10_000_000 * (i + 1)))
    finally:
        server.terminate()
        server.wait(30)
    results["otlp"] = (rate, failed)
    print(f"OTLP/HTTP, {PROCESSES} processes: {rate:,.0f} spans/s ({failed} failed)", flush=True)
    # 3. the dashboard's queries over `total` runs
    now = time.time_ns()
    store = SpanStore(location)
    if store.count()[1] < total if store.exists() else True:
        print(f"filling with {total} runs of 5 spans ...", flush=True)
        took = fill(store, Runs(now, total), per_batch=100)
        print(f"filled in {took:.0f} s ({5 * total / took:,.0f} spans/s, one process)", flush=True)
        results["fill"] = 5 * total / took
    if not store.is_file:
        store.read("ANALYZE")  # statistics, as autovacuum would have them by now
    spans, traces = store.count()
    app = create_app(location)
    queries: list[tuple[str, float, float]] = []
    with TestClient(app, base_url="http://127.0.0.1") as client:
        index = app.state.dashboard.search
        if index is not None and not index.caught_up.wait(3600):
            raise RuntimeError("the search index did not catch up")
        for label, call, _ in dashboard_cases(client, random.Random(3), total, now):
            call()
            p50, p95 = timed(call, 20)
            queries.append((label, p50, p95))
            print(f"  {label:40} {p50:8.1f} {p95:8.1f}", flush=True)
    results["queries"] = queries
    results["size"] = _size(store)
    results["spans"], results["traces"] = spans, traces
    store.close()
    return results


def _fresh(engine: str, location: str, name: str) -> str:
    if engine == "sqlite":
        return str(Path(location).with_name(f"{name}.db"))
    from store_engines import Postgres

    return Postgres(url=location).create_database(name)


def main() -> int:
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    workdir = Path(tempfile.mkdtemp(prefix="runnertrace-engines-"))
    given = os.environ.get("RUNNERTRACE_TEST_POSTGRES", "").strip()  # as the tests read it
    cluster = None
    if given:
        admin = given
    else:
        from store_engines import _start_cluster

        cluster = _start_cluster()
        admin = cluster.url
    try:
        from store_engines import Postgres

        wanted = (sys.argv[3] if len(sys.argv) > 3 else "sqlite,postgresql").split(",")
        found = {}
        if "sqlite" in wanted:
            found["SQLite"] = measure("sqlite", str(workdir / "traces.db"), total, seconds)
        if "postgresql" in wanted:
            pg = Postgres(url=admin).create_database("bench")
            found["PostgreSQL"] = measure("postgresql", pg, total, seconds)
    finally:
        if cluster is not None:
            cluster.stop()
    if len(found) < 2:
        return 0
    sq, pq = found["SQLite"], found["PostgreSQL"]
    print(
        f"\n{total:,} runs ({sq['spans']:,} spans); ingest {seconds:g} s from {PROCESSES} processes"
    )
    print("| | SQLite | PostgreSQL |\n|---|---:|---:|")
    print(f"| ingest via the exporter, {PROCESSES} processes (spans/s) | "
          f"{sq['exporter'][0]:,.0f} | {pq['exporter'][0]:,.0f} |")  # fmt: skip
    print(f"| ingest via OTLP/HTTP, {PROCESSES} processes (spans/s) | "
          f"{sq['otlp'][0]:,.0f} | {pq['otlp'][0]:,.0f} |")  # fmt: skip
    for (label, _, p95), (_, _, p95_pg) in zip(sq["queries"], pq["queries"], strict=True):
        print(f"| p95 {label} (ms) | {p95:.1f} | {p95_pg:.1f} |")
    print(f"| size on disk (MB) | {sq['size'] / 1e6:,.0f} | {pq['size'] / 1e6:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
