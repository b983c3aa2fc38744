"""How much does tracing cost? Ratios measured in one run, printed as a table.

Run it with ``python benchmarks/overhead.py`` (about 15-30 s). Three figures,
each with the target from the tracing issue:

(a) traced / untraced time per run of the native agent (``ScriptedLlm`` plus the
    calculator: two tool steps and a final answer, 10 spans per traced run),
    in run mode and in stream mode. The runner is called directly (no
    ``Runtime``), so no framework-side overhead dilutes the ratio. The traced
    runner exports through a user backend whose processor discards every span,
    so exporter cost is excluded but the full SDK span lifecycle (sampling,
    ids, attributes, ``on_end``) is included. Traced and untraced batches are
    interleaved, alternating which goes first, and the ratio is the median of
    the per-round ratios. An extra, untargeted row repeats run mode with the
    real ``local`` SQLite backend when it is installed (its export runs on a
    background thread, so on a busy machine it competes for the CPU).
(b) cost per span of ``RunTracer.handle`` fed a prebuilt event list
    (step / message / tool-call events, 10 spans per run including the run
    span) relative to the floor: a bare ``tracer.start_span(name).end()`` on
    the very same provider. A second floor row starts each span with the same
    parent, kind and attribute count as ours, to show how much of the gap is
    the SDK's attribute handling rather than our state machine.
(c) cost per aggregated text delta (``text_delta`` inside an open message,
    ``trace.deltas: aggregate``), in microseconds.

Timings are medians over rounds; each round times a batch, so timer
resolution does not matter. GC is collected before every batch.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from runnertrace import TracingRunner
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.core.session import Session
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import get_tracing_setup
from runnertrace.tracing.backend import Backend
from runnertrace.tracing.content import ContentPolicy
from runnertrace.tracing.state import RunTracer

TARGET_RATIO_A = 1.10
TARGET_RATIO_B = 1.5
TARGET_US_C = 2.0
PROMPT = "What is 1234 * 5678, plus 17?"


# -- a backend that keeps nothing: exporter cost is excluded from (a) and (b) -----------------
class _DiscardProcessor(SpanProcessor):
    """Receives every ended span (the SDK builds it in full) and drops it."""

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        return None


class _NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class DiscardBackend(Backend):
    """``trace.type: <this module>.DiscardBackend``: a real backend that stores nothing."""

    name = "discard"

    def exporter(self) -> SpanExporter:
        return _NullExporter()

    def processors(self) -> list[SpanProcessor]:
        return [_DiscardProcessor()]


DISCARD = TraceConfig(type=f"{__name__}.DiscardBackend", enabled=True)


# -- measurement helpers -----------------------------------------------------------------------
@dataclass
class Row:
    label: str
    value: float
    unit: str
    detail: str
    target: float | None = None

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.value <= self.target else "MISS"


def _median(values: list[float]) -> float:
    return statistics.median(values)


async def _timed_async(fn: Callable[[], Awaitable[None]], n: int) -> float:
    """Seconds per call of ``fn`` over a batch of ``n``."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - start) / n


def _timed(fn: Callable[[], None], n: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


async def _paired(
    base: Callable[[], Awaitable[None]],
    traced: Callable[[], Awaitable[None]],
    rounds: int,
    batch: int,
) -> tuple[float, float, float]:
    """Interleaved rounds; returns (median base s, median traced s, median per-round ratio)."""
    base_times: list[float] = []
    traced_times: list[float] = []
    ratios: list[float] = []
    for _ in range(3):  # warm up both paths (imports, caches, the tracing setup)
        await base()
        await traced()
    for i in range(rounds):
        if i % 2 == 0:
            b = await _timed_async(base, batch)
            t = await _timed_async(traced, batch)
        else:
            t = await _timed_async(traced, batch)
            b = await _timed_async(base, batch)
        base_times.append(b)
        traced_times.append(t)
        ratios.append(t / b)
    return _median(base_times), _median(traced_times), _median(ratios)


# -- (a) traced vs untraced agent runs -----------------------------------------------------------
def _agent(runner: Any) -> CoreAgent:
    native = Agent(ScriptedLlm(), tools=[calculator], name="calc")
    return CoreAgent("calc", runner, native)


async def measure_runs(rounds: int, batch: int) -> list[Row]:
    requests = [AgentRequestText(prompt=PROMPT)]
    plain = _agent(NativeRunner())
    wrapped = _agent(TracingRunner(NativeRunner(), DISCARD))

    async def run_plain() -> None:
        await plain.runner.run(plain, Session("s"), requests)

    async def run_traced() -> None:
        await wrapped.runner.run(wrapped, Session("s"), requests)

    async def stream_plain() -> None:
        async for _ in plain.runner.stream(plain, Session("s"), requests):
            pass

    async def stream_traced() -> None:
        async for _ in wrapped.runner.stream(wrapped, Session("s"), requests):
            pass

    rows = []
    for mode, base, traced in (
        ("run", run_plain, run_traced),
        ("stream", stream_plain, stream_traced),
    ):
        b, t, ratio = await _paired(base, traced, rounds, batch)
        rows.append(
            Row(
                f"(a) traced/untraced, {mode} mode",
                ratio,
                "x",
                f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run (+{(t - b) * 1e6:.0f} us, 10 spans)",
                TARGET_RATIO_A,
            )
        )
    rows.extend(await _measure_local(run_plain, requests, rounds, batch))
    return rows


async def _measure_local(
    run_plain: Callable[[], Awaitable[None]], requests: list[Any], rounds: int, batch: int
) -> list[Row]:
    """Run mode again with the real ``local`` backend, if another part provides it."""
    try:
        import runnertrace.exporters.local  # noqa: F401
    except ImportError:
        return [Row("(a) run mode, local backend", float("nan"), "x", "local backend missing")]
    with tempfile.TemporaryDirectory() as tmp:
        config = TraceConfig(type="local", local={"path": str(Path(tmp) / "traces.db")})
        wrapped = _agent(TracingRunner(NativeRunner(), config))

        async def run_local() -> None:
            await wrapped.runner.run(wrapped, Session("s"), requests)

        b, t, ratio = await _paired(run_plain, run_local, max(rounds // 2, 3), batch)
        get_tracing_setup(config).shutdown(5.0)
    return [
        Row(
            "(a) run mode, local SQLite backend",
            ratio,
            "x",
            f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run (export thread included)",
        )
    ]


# -- (b) the state machine vs raw OTel spans -------------------------------------------------
def _cycle_events(prefix: str, step: int) -> list[Any]:
    """One think/act cycle: a step, a model message and a tool call (3 spans)."""
    mid, cid = f"{prefix}m{step}", f"{prefix}c{step}"
    return [
        ev.StepStart(step_name="calc", step_index=step),
        ev.MessageStart(message_id=mid, model="scripted-1", provider="runnertrace"),
        ev.ToolCallStart(tool_call_id=cid, tool_name="calculator", parent_message_id=mid),
        ev.ToolCallEnd(tool_call_id=cid),
        ev.MessageEnd(message_id=mid, finish_reason="tool_calls", input_tokens=9, output_tokens=5),
        ev.ToolCallResult(tool_call_id=cid, content="7006652"),
        ev.StepEnd(step_name="calc", step_index=step),
    ]


def _run_events(cycles: int) -> list[Any]:
    return [e for step in range(cycles) for e in _cycle_events("r", step)]


_NO_CONTENT = ContentPolicy(capture=False, max_length=4096, redactor=None)


def _tracer_for(tracer: Any, deltas_as_events: bool = False) -> RunTracer:
    return RunTracer(
        tracer,
        _NO_CONTENT,
        agent_name="calc",
        framework="native",
        session_id="s",
        user_id=None,
        mode="stream",
        deltas_as_events=deltas_as_events,
        parent=None,
    )


def measure_state_machine(rounds: int, runs: int) -> list[Row]:
    tracer = get_tracing_setup(DISCARD).tracer
    cycles = 3
    events = _run_events(cycles)
    spans_per_run = 1 + 3 * cycles

    def ours() -> None:
        run = _tracer_for(tracer)
        handle = run.handle
        for event in events:
            handle(event)
        run.finish()

    names = ["invoke_agent calc"] + ["agent_step calc", "chat scripted-1", "execute_tool x"] * 3

    def floor() -> None:
        for name in names:
            tracer.start_span(name).end()

    parent = tracer.start_span("parent")
    from opentelemetry import trace as trace_api

    parent_ctx = trace_api.set_span_in_context(parent)
    attrs = {f"attr.{i}": "value" for i in range(9)}

    def floor_attrs() -> None:
        for name in names:
            tracer.start_span(
                name, context=parent_ctx, kind=SpanKind.INTERNAL, attributes=attrs
            ).end()

    samples: dict[str, list[float]] = {"ours": [], "floor": [], "floor_attrs": []}
    fns = {"ours": ours, "floor": floor, "floor_attrs": floor_attrs}
    for fn in fns.values():
        fn()
    for i in range(rounds):
        order = list(fns) if i % 2 == 0 else list(reversed(fns))
        for key in order:
            samples[key].append(_timed(fns[key], runs) / spans_per_run)
    parent.end()
    per_ours, per_floor, per_attrs = (_median(samples[k]) for k in ("ours", "floor", "floor_attrs"))
    ratios = [o / f for o, f in zip(samples["ours"], samples["floor"], strict=True)]
    ratios_attrs = [o / f for o, f in zip(samples["ours"], samples["floor_attrs"], strict=True)]
    return [
        Row(
            "(b) RunTracer per span / bare start_span+end",
            _median(ratios),
            "x",
            f"{per_ours * 1e6:.1f} vs {per_floor * 1e6:.1f} us/span "
            f"({len(events)} events + finish -> {spans_per_run} spans)",
            TARGET_RATIO_B,
        ),
        Row(
            "(b) ... / start_span+end with parent + 9 attrs",
            _median(ratios_attrs),
            "x",
            f"{per_ours * 1e6:.1f} vs {per_attrs * 1e6:.1f} us/span",
        ),
    ]


# -- (c) aggregated deltas -------------------------------------------------------------------
def measure_deltas(rounds: int, count: int) -> list[Row]:
    tracer = get_tracing_setup(DISCARD).tracer
    deltas = [ev.TextDelta(message_id="m", delta="word ") for _ in range(count)]
    opening = [
        ev.StepStart(step_name="calc", step_index=0),
        ev.MessageStart(message_id="m", model="scripted-1"),
    ]
    rows = []
    for label, as_events, target in (
        ("(c) per aggregated delta (aggregate mode)", False, TARGET_US_C),
        ("(c) per delta, deltas: events mode", True, None),
    ):
        samples = []
        for _ in range(rounds):
            run = _tracer_for(tracer, deltas_as_events=as_events)
            for event in opening:
                run.handle(event)
            handle = run.handle
            gc.collect()
            start = time.perf_counter()
            for delta in deltas:
                handle(delta)
            samples.append((time.perf_counter() - start) / count)
            run.finish()
        per = _median(samples)
        rows.append(Row(label, per * 1e6, "us", f"{count} deltas x {rounds} rounds", target))
    return rows


# -- report ------------------------------------------------------------------------------------
def print_table(rows: list[Row]) -> None:
    width = max(len(r.label) for r in rows)
    print(f"{'measure'.ljust(width)}  {'value':>8}  {'target':>8}  verdict  detail")
    print("-" * (width + 60))
    for r in rows:
        target = "" if r.target is None else f"<= {r.target:g}"
        value = f"{r.value:.3f}{r.unit}" if r.value == r.value else "n/a"
        print(f"{r.label.ljust(width)}  {value:>8}  {target:>8}  {r.verdict:7}  {r.detail}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    quick = "--quick" in args
    started = time.perf_counter()
    rows = asyncio.run(measure_runs(rounds=6 if quick else 30, batch=20 if quick else 100))
    rows += measure_state_machine(rounds=6 if quick else 30, runs=100 if quick else 1000)
    rows += measure_deltas(rounds=6 if quick else 30, count=2000 if quick else 20000)
    print(f"runnertrace tracing overhead (python {sys.version.split()[0]})")
    print_table(rows)
    missed = [r for r in rows if r.verdict == "MISS"]
    print(f"\n{len(missed)} target(s) missed; took {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
