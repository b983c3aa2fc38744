"""Traced worker processes that end in every way a process ends, for the loss tests.

``python tests/lossy_process.py MODE STORE [ARGS...]`` traces native runs
(9 spans each) to the local store at ``STORE``; what it prints on stdout is
one JSON object for the test to check, and runnertrace's warnings go to stderr
as a user sees them.

* ``pool WORKERS RUNS QUEUE``: a ``multiprocessing`` fork ``Pool`` of
  ``WORKERS``, closed and joined; each worker makes ``RUNS`` runs in a tight
  loop with a local queue of ``QUEUE`` spans (small: spans are dropped).
* ``pool-terminate WORKERS RUNS``: the same in ``with Pool() as pool:``, which
  terminates the workers (SIGTERM) on leaving.
* ``sys-exit WORKERS RUNS QUEUE``: fork ``multiprocessing.Process`` workers that
  call ``sys.exit`` after their runs.
* ``contend RUNS``: one of several processes writing one store in a tight loop.
* ``fork-store``: fork while the exporter holds the store's locks and an open
  write transaction.
* ``fork-drop``: fork while another thread is counting a dropped span.
* ``fork-otlp ENDPOINT``: fork while an OTLP export is in flight (the receiver
  holds each request for a while).
* ``fork-prices``: fork while the price table is loading; the child prices a call.
* ``worker-imports ENDPOINT``: two traced runs to the store and OTLP; which
  modules our own threads imported (none, so that a fork never lands in one).

In the fork modes the child traces a run, flushes, and reports what it sees.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import TracingRunner, drops
from runnertrace.tracing.config import TraceConfig

SPANS_PER_RUN = 9
PROMPT = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]


def make_runner(store: str, *, queue: int = 2048, endpoint: str | None = None) -> TracingRunner:
    types = ["local", "otlp"] if endpoint else ["local"]
    config = TraceConfig(
        type=types,
        local={"path": store, "max_queue_size": queue},
        otlp={"endpoint": endpoint} if endpoint else {},
        metrics=False,
    )
    return TracingRunner(NativeRunner(), settings=config)


def run_many(runner: TracingRunner, name: str, runs: int) -> None:
    agent = CoreAgent(name, runner, Agent(ScriptedLlm(), tools=[calculator], name=name))

    async def loop() -> None:
        for index in range(runs):
            await runner.run(agent, Session(f"{name}-{index}"), PROMPT)

    asyncio.run(loop())


# -- pools -------------------------------------------------------------------------------------
_runner: TracingRunner | None = None


def _work(args: tuple[int, int]) -> int:
    index, runs = args
    assert _runner is not None
    run_many(_runner, f"worker-{index}", runs)
    return os.getpid()


def pool(store: str, workers: int, runs: int, queue: int, *, terminate: bool) -> None:
    global _runner
    _runner = make_runner(store, queue=queue)
    run_many(_runner, "parent", 1)  # the pipeline is up and in use when the pool forks
    assert _runner.setup.flush()
    context = multiprocessing.get_context("fork")
    if terminate:
        with context.Pool(workers) as workers_pool:
            pids = workers_pool.map(_work, [(i, runs) for i in range(workers)], chunksize=1)
    else:
        workers_pool = context.Pool(workers)
        pids = workers_pool.map(_work, [(i, runs) for i in range(workers)], chunksize=1)
        workers_pool.close()
        workers_pool.join()
    print(json.dumps({"workers": len(set(pids))}))


def _work_then_exit(index: int, runs: int) -> None:
    _work((index, runs))
    sys.exit(3)  # as a worker that gives up does: multiprocessing then ends it with os._exit


def processes_that_exit(store: str, workers: int, runs: int, queue: int) -> None:
    global _runner
    _runner = make_runner(store, queue=queue)
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_work_then_exit, args=(i, runs)) for i in range(workers)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    print(json.dumps({"exit_codes": [child.exitcode for child in children]}))


def contend(store: str, runs: int) -> None:
    runner = make_runner(store)
    run_many(runner, f"writer-{os.getpid()}", runs)
    assert runner.setup.shutdown()
    print(json.dumps({"lost": drops.lost_spans()}))


# -- fork races --------------------------------------------------------------------------------
def _child_report(runner: TracingRunner, store: str, name: str) -> dict[str, object]:
    lost_at_start = drops.lost_spans()
    run_many(runner, name, 1)
    flushed = runner.setup.flush(10.0)
    stored = {run.name: run.span_count for run in SpanStore(store).list_runs(50)}
    return {
        "lost_at_start": lost_at_start,
        "flushed": flushed,
        # For a failed flush: where each of our threads is stuck.
        "threads": {} if flushed else _our_threads(),
        "stored": stored.get(f"invoke_agent {name}", 0),
        # For a failure's message: what each backend did in the child.
        "backends": {
            getattr(p, "name", "?"): [getattr(p, "exported", None), getattr(p, "dropped", None)]
            for p in runner.setup.processors
        },
        "causes": {b: drops.lost_by_cause(b) for b in ("local", "otlp")},
    }


def _our_threads() -> dict[str, str]:
    frames = sys._current_frames()  # noqa: SLF001 - a diagnostic of our own threads
    return {
        thread.name: "".join(traceback.format_stack(frames[thread.ident])[-6:])
        for thread in threading.enumerate()
        if thread.name.startswith("runnertrace") and thread.ident in frames
    }


def in_a_child(report: Callable[[], dict[str, object]]) -> dict[str, object]:
    """Fork; the child runs ``report``, sends its result on a pipe and leaves with
    ``os._exit``; returns the child's exit status and that result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            os.write(write_end, json.dumps(report()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return {"child_status": status, **(json.loads(text) if text else {})}


def fork_and_report(runner: TracingRunner, store: str) -> dict[str, object]:
    """Fork; the child traces a run and reports what it sees."""
    return in_a_child(lambda: _child_report(runner, store, "child"))


def fork_store(store: str) -> None:
    runner = make_runner(store)
    run_many(runner, "parent", 1)
    assert runner.setup.flush()
    exporter_store: SpanStore = runner.setup.processors[0].exporter.store  # type: ignore[attr-defined]
    holding = threading.Event()

    def hold_like_the_exporter() -> None:
        # What the exporter's worker holds in the middle of a write.
        engine = exporter_store.engine
        with engine._write_lock, engine._lock:  # type: ignore[attr-defined]  # noqa: SLF001
            conn = engine._connection(create=True)  # type: ignore[attr-defined]  # noqa: SLF001
            conn.execute("BEGIN IMMEDIATE")
            holding.set()
            time.sleep(0.5)
            conn.execute("COMMIT")

    thread = threading.Thread(target=hold_like_the_exporter)
    thread.start()
    holding.wait()
    result = fork_and_report(runner, store)
    thread.join()
    print(json.dumps(result))


def fork_drop(store: str) -> None:
    runner = make_runner(store)
    run_many(runner, "parent", 1)
    drops.spans_lost("local", 3, "a loss of the parent's")
    counting = threading.Event()
    release = threading.Event()

    def count_a_drop() -> None:
        # What spans_lost holds while it counts.
        with drops._lock:  # noqa: SLF001
            counting.set()
            release.wait(2.0)

    thread = threading.Thread(target=count_a_drop)
    thread.start()
    counting.wait()
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        result = fork_and_report_with_a_drop(runner, store)
    finally:
        release.set()
        thread.join()
    print(json.dumps(result))


def fork_and_report_with_a_drop(runner: TracingRunner, store: str) -> dict[str, object]:
    def report() -> dict[str, object]:
        found = _child_report(runner, store, "child")
        drops.spans_lost("local", 1, "a loss of the child's")  # takes the drop lock
        found["lost_at_end"] = drops.lost_spans()
        return found

    return in_a_child(report)


def fork_otlp(store: str, endpoint: str) -> None:
    runner = make_runner(store, endpoint=endpoint)
    run_many(runner, "parent", 1)
    # The flush asks the workers to export now; the receiver holds the request a while.
    [otlp] = [p for p in runner.setup.processors if getattr(p, "name", "") == "otlp"]
    ticket = otlp.request_flush()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not otlp._in_flight and time.monotonic() < deadline:  # type: ignore[attr-defined]  # noqa: SLF001
        time.sleep(0.001)
    in_flight = bool(otlp._in_flight)  # type: ignore[attr-defined]  # noqa: SLF001
    result = fork_and_report(runner, store)
    otlp.wait_flushed(ticket, time.monotonic() + 10)  # type: ignore[attr-defined]
    print(json.dumps({"in_flight_at_fork": in_flight, **result}))


def fork_prices(store: str) -> None:
    from runnertrace.tracing import cost

    cost.preload_prices()  # the loader thread now imports genai-prices for a while
    # Before the fix the child's own load hung on the import lock the parent's loader
    # held at the fork, and every priced call gave up after LOAD_WAIT_S.
    result = in_a_child(lambda: {"child_price": cost.usage_cost("gpt-4o", "openai", 1_000_000, 0)})
    parent_price = cost.usage_cost("gpt-4o", "openai", 1_000_000, 0)
    print(json.dumps({"parent_price": parent_price, **result}))


def worker_imports(store: str, endpoint: str) -> None:
    imported: list[tuple[str, str]] = []

    def on_audit(event: str, args: tuple[object, ...]) -> None:
        name = threading.current_thread().name
        if event == "import" and name.startswith("runnertrace-export"):
            imported.append((name, str(args[0])))

    runner = make_runner(store, endpoint=endpoint)
    sys.addaudithook(on_audit)  # from here on: what the runs and their exports import
    for name in ("first", "second"):
        run_many(runner, name, 1)
        assert runner.setup.flush(10.0)
    print(json.dumps({"imported": sorted(set(imported)), "threads": _thread_names()}))


def _thread_names() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("runnertrace-export"))


def main(mode: str, store: str, *args: str) -> None:
    if mode in ("pool", "pool-terminate"):
        workers, runs = int(args[0]), int(args[1])
        queue = int(args[2]) if len(args) > 2 else 2048
        pool(store, workers, runs, queue, terminate=mode == "pool-terminate")
    elif mode == "sys-exit":
        processes_that_exit(store, int(args[0]), int(args[1]), int(args[2]))
    elif mode == "contend":
        contend(store, int(args[0]))
    elif mode == "fork-store":
        fork_store(store)
    elif mode == "fork-drop":
        fork_drop(store)
    elif mode == "fork-otlp":
        fork_otlp(store, args[0])
    elif mode == "fork-prices":
        fork_prices(store)
    elif mode == "worker-imports":
        worker_imports(store, args[0])
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
