"""How many spans per second does the local store's exporter write? One process, then four.

Run it with ``python benchmarks/store_throughput.py [seconds] [processes]``
(defaults: 5 s, 4 processes; about 15 s in all).

The exporter (``SqliteSpanExporter``) is fed finished SDK spans shaped like a
native run (a run span, three steps, three model calls, two tool calls: 9 spans
per trace, with the attributes and events our runners set), in batches of the
batch processor's size (512), for ``seconds``. What is printed is the sustained
rate: spans committed divided by the wall time, measured over the whole run.

Then ``processes`` processes write one store at the same time, each as fast as
it can, the way several traced workers share the default store: the figure is
the spans all of them committed per second, and each must have lost nothing
(every export succeeded and the store holds every span).

Last, one process makes traced native runs back to back for ``seconds`` into
the local store at default settings: how fast it makes spans, and how many
were dropped (the target is none).

Target (issue 21): at least 20,000 spans/s from one process. On a shared
machine the wall-clock rate depends on what else runs; the rate per CPU second
of the writing process is printed beside it.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

from runnertrace.exporters.local_store import SpanStore, SqliteSpanExporter

TARGET = 20_000
BATCH = 512
SPANS_PER_RUN = 9


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def finished_runs(runs: int) -> list[ReadableSpan]:
    """``runs`` native-shaped traces of finished spans (made before the clock starts)."""
    collect = _Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("runnertrace")
    for index in range(runs):
        root = tracer.start_span(
            "invoke_agent math",
            attributes={
                "runnertrace.span.type": "run",
                "gen_ai.agent.name": "math",
                "runnertrace.framework": "native",
                "runnertrace.mode": "run",
                "session.id": f"s{index}",
                "gen_ai.usage.input_tokens": 30,
                "gen_ai.usage.output_tokens": 12,
            },
        )
        root_ctx = trace_api.set_span_in_context(root)
        for step_index in range(3):
            step = tracer.start_span(
                "agent_step math",
                context=root_ctx,
                attributes={"runnertrace.span.type": "step", "runnertrace.step.index": step_index},
            )
            step_ctx = trace_api.set_span_in_context(step)
            chat = tracer.start_span(
                "chat scripted-1",
                context=step_ctx,
                kind=SpanKind.CLIENT,
                attributes={
                    "runnertrace.span.type": "message",
                    "gen_ai.request.model": "scripted-1",
                    "gen_ai.usage.input_tokens": 10,
                    "gen_ai.usage.output_tokens": 4,
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                },
            )
            chat.add_event("gen_ai.content.delta", {"delta.chars": 12})
            chat.end()
            if step_index < 2:
                tool = tracer.start_span(
                    "execute_tool calculator",
                    context=step_ctx,
                    attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": "calculator"},
                )
                tool.end()
            step.end()
        root.end()
    return collect.spans


def write_for(
    path: Path, seconds: float, spans: list[ReadableSpan]
) -> tuple[int, float, int, float]:
    """Export ``spans`` batch by batch for ``seconds``: (stored, elapsed, failed, cpu seconds)."""
    exporter = SqliteSpanExporter(path, busy_timeout_s=10.0)
    batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
    stored = failed = 0
    cpu_started = time.process_time()
    started = time.perf_counter()
    index = 0
    while time.perf_counter() - started < seconds and index < len(batches):
        batch = batches[index]
        index += 1
        if exporter.export(batch) is SpanExportResult.SUCCESS:
            stored += len(batch)
        else:
            failed += len(batch)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    exporter.shutdown()
    return stored, elapsed, failed, cpu


def _worker(
    path: str,
    seconds: float,
    runs: int,
    start: Any,
    results: multiprocessing.Queue[tuple[int, float, int, float]],
) -> None:
    spans = finished_runs(runs)
    start.wait()  # every process has made its spans: all write at once from here
    results.put(write_for(Path(path), seconds, spans))


def main(seconds: float = 5.0, processes: int = 4) -> int:
    # Enough distinct traces that nothing is rewritten (a re-export replaces its row).
    runs = int(seconds * 6_000 / SPANS_PER_RUN * 10)
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.db"
        spans = finished_runs(runs)
        stored, elapsed, failed, cpu = write_for(one, seconds, spans)
        in_store = SpanStore(one).count()[0]
        rate = stored / elapsed
        print(
            f"1 process : {rate:>9,.0f} spans/s sustained ({stored:,} spans in {elapsed:.1f} s, "
            f"{failed} failed, {in_store:,} in the store; {stored / cpu:,.0f} per CPU second)"
            f"  target >= {TARGET:,}: {'ok' if rate >= TARGET else 'MISSED'}"
        )

        shared = Path(tmp) / "shared.db"
        context = multiprocessing.get_context("spawn")
        results: multiprocessing.Queue[tuple[int, float, int, float]] = context.Queue()
        start = context.Barrier(processes)
        per_process = max(1, runs // processes)
        workers = [
            context.Process(
                target=_worker, args=(str(shared), seconds, per_process, start, results)
            )
            for _ in range(processes)
        ]
        for worker in workers:
            worker.start()
        done = [results.get(timeout=300) for _ in range(processes)]
        for worker in workers:
            worker.join(60)
        total = sum(d[0] for d in done)
        lost = sum(d[2] for d in done)
        wall = max(d[1] for d in done)
        in_store = SpanStore(shared).count()[0]
        print(
            f"{processes} processes: {total / wall:>9,.0f} spans/s sustained in all "
            f"({total:,} spans in {wall:.1f} s, {lost} failed, {in_store:,} in the store)"
        )
        produced, dropped, loop_s = traced_tight_loop(Path(tmp) / "traced.db", seconds)
        print(
            f"traced tight loop, default settings: {produced / loop_s:,.0f} spans/s made, "
            f"{dropped} dropped ({produced:,} spans in {loop_s:.1f} s)"
        )
        ok = rate >= TARGET and lost == 0 and in_store == total and dropped == 0
        return 0 if ok else 1


def traced_tight_loop(path: Path, seconds: float) -> tuple[int, int, float]:
    """Native runs back to back into the local store: (spans made, spans dropped, seconds)."""
    import asyncio

    from runnertrace.core.agent import Agent as CoreAgent
    from runnertrace.core.models import AgentRequestText
    from runnertrace.core.session import Session
    from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
    from runnertrace.tracing import TracingRunner, drops
    from runnertrace.tracing.config import TraceConfig

    runner = TracingRunner(NativeRunner(), settings=TraceConfig(local={"path": str(path)}))
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    prompt = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]

    async def loop() -> int:
        runs = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            await runner.run(agent, Session(f"s{runs}"), prompt)
            runs += 1
        return runs

    started = time.perf_counter()
    runs = asyncio.run(loop())
    elapsed = time.perf_counter() - started
    runner.setup.shutdown()
    return runs * SPANS_PER_RUN, drops.lost_spans(), elapsed


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:3]]
    sys.exit(main(args[0] if args else 5.0, int(args[1]) if len(args) > 1 else 4))
