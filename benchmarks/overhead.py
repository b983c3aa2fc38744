"""How much does tracing cost? Ratios measured in one run, printed as a table.

Run it with ``python benchmarks/overhead.py`` (about 20-30 s; ``--quick`` for a
few-second smoke run). Three targeted figures, from the tracing issue, plus
untargeted "info" rows that explain them:

(a) traced / untraced time per run of the native agent (``ScriptedLlm`` plus the
    calculator: two tool steps and a final answer, 9 spans per traced run), in
    run mode and in stream mode. The runner is called directly (no
    ``Runtime``), so no runtime overhead dilutes the ratio. The traced runner
    exports through a user backend (``DiscardBackend`` below, named by dotted
    path in ``trace.type``) whose processor drops every span: exporter cost is
    excluded, the full span lifecycle (sampling, ids, attributes, the
    processors' ``on_start``/``on_end``) is included. Traced and untraced
    batches are interleaved, alternating which goes first; the ratio is the
    median of the per-round ratios, with its interquartile range.
    Info rows: run mode again with the real ``local`` SQLite backend (export
    on its background thread included), and the *floors* for (a), measured the
    same way. Each floor is the untraced run plus the least a live tracer must
    do at the events that open and close its 9 spans (the run span and 8
    children): first nothing but pairing each start with its end (no span at
    all); then a bare span per pair, with no attributes and no state machine,
    made by the OTel SDK's own ``start_span``/``end`` on the same provider. No
    tracer that records these spans live can be cheaper than its floor. In
    stream mode the floors do their work in the consumer's loop, without the
    wrapping generator a tracer needs.
(b) cost per span of ``RunTracer.handle`` fed a prebuilt event list (3 cycles of
    step / message / tool-call events, 10 spans with the run span) relative to
    a *replay* of exactly the SDK calls ``RunTracer`` made (same spans, parents,
    kinds and attribute counts, recorded once through the public
    ``start_span``): our machinery against bare SDK spans with the same
    attributes (goal: at most 1.3x). Info row: against a bare SDK
    ``start_span(name).end()`` with no attributes.
(c) cost per aggregated text delta (``text_delta`` inside an open message,
    ``trace.deltas: aggregate``), in microseconds. Info row: ``deltas: events``.

Timings are process CPU time (all threads, so the ``local`` row includes its
export thread), as medians over rounds; each round times a batch, so timer
resolution does not matter. GC is collected before every batch. Each
measurement stops adding rounds after a few seconds, so the whole benchmark
stays under a minute even on a busy machine.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from runnertrace import TracingRunner
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.core.observer import observing
from runnertrace.core.session import Session
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import get_tracing_setup
from runnertrace.tracing.backend import Backend
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.content import ContentPolicy
from runnertrace.tracing.state import RunTracer

TARGET_RATIO_A = 1.10
TARGET_RATIO_B = 1.3
TARGET_US_C = 2.0
PROMPT = "What is 1234 * 5678, plus 17?"
# CPU time of this process (all its threads), not wall time: on a shared machine
# other processes' load then barely moves the figures. Nothing here waits on I/O,
# so on an idle machine the two agree.
cpu_clock = time.process_time
BUDGET_S = 6.0  # per measurement (floors: half); the whole run stays around a minute
MODEL_LATENCY_S = 0.005  # for the info row only: still far faster than any hosted model
SPANS = 9  # per traced run of PROMPT: the run, 3 steps, 3 model messages, 2 tool calls


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
def rss_mb() -> float:
    """This process's resident set now, in MB (the peak, where /proc has no VmRSS line)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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


def _rounds(maximum: int, budget_s: float, minimum: int = 5) -> Iterator[int]:
    """Round numbers, up to ``maximum``, stopping early (after ``minimum``) at the time budget.

    Keeps the whole benchmark under a minute even on an oversubscribed machine.
    """
    deadline = time.perf_counter() + budget_s
    for i in range(maximum):
        if i >= minimum and time.perf_counter() > deadline:
            return
        yield i


def _spread(values: list[float]) -> str:
    """The interquartile range, so a noisy (shared) machine shows in the output."""
    low, _, high = statistics.quantiles(values, n=4)
    return f"IQR {low:.2f}-{high:.2f}"


async def _timed_async(fn: Callable[[], Awaitable[None]], n: int) -> float:
    """Seconds per call of ``fn`` over a batch of ``n``."""
    gc.collect()
    start = cpu_clock()
    for _ in range(n):
        await fn()
    return (cpu_clock() - start) / n


def _timed(fn: Callable[[], None], n: int) -> float:
    gc.collect()
    start = cpu_clock()
    for _ in range(n):
        fn()
    return (cpu_clock() - start) / n


async def _paired(
    base: Callable[[], Awaitable[None]],
    traced: Callable[[], Awaitable[None]],
    rounds: int,
    batch: int,
    budget_s: float = BUDGET_S,
) -> tuple[float, float, list[float]]:
    """Interleaved rounds; returns (median base s, median traced s, per-round ratios)."""
    base_times: list[float] = []
    traced_times: list[float] = []
    ratios: list[float] = []
    for _ in range(3):  # warm up both paths (imports, caches, the tracing setup)
        await base()
        await traced()
    for i in _rounds(rounds, budget_s):
        if i % 2 == 0:
            b = await _timed_async(base, batch)
            t = await _timed_async(traced, batch)
        else:
            t = await _timed_async(traced, batch)
            b = await _timed_async(base, batch)
        base_times.append(b)
        traced_times.append(t)
        ratios.append(t / b)
    return _median(base_times), _median(traced_times), ratios


# -- (a) traced vs untraced agent runs -----------------------------------------------------------
_OPENS = {
    "step_start": "step_index",
    "message_start": "message_id",
    "tool_call_start": "tool_call_id",
}
_CLOSES = {
    "step_end": "step_index",
    "message_end": "message_id",
    "tool_call_result": "tool_call_id",
}


class _Floor:
    """A floor of (a): the least a live tracer must do per event, in one of three sizes.

    Used as the run-mode observer (or called per streamed event). It pairs each
    step, message and tool-call start with its end, exactly as a tracer must;
    what it opens per pair, and around the run, is up to the subclass.
    """

    label = "nothing but paired events"

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.count = 0
        self.open: dict[tuple[str, Any], Any] = {}

    def begin(self) -> Any:
        """Open the run's span (here: nothing)."""
        return _NO_SPAN

    def child(self, name: str) -> Any:
        return _NO_SPAN

    def __call__(self, event: Any) -> None:
        kind = event.type
        field = _OPENS.get(kind)
        if field is not None:
            self.open[(field, getattr(event, field))] = self.child(kind)
            self.count += 1
            return
        field = _CLOSES.get(kind)
        if field is not None:
            self.open.pop((field, getattr(event, field))).end()


class _NoSpan:
    def end(self) -> None:
        return None


_NO_SPAN = _NoSpan()


class _BareSpans(_Floor):
    """One bare OTel ``start_span``/``end`` per span (the floor the issue names)."""

    def __init__(self, tracer: Any, label: str) -> None:
        super().__init__(tracer)
        self.label = label
        self.parent: Any = None

    def begin(self) -> Any:
        root = self.tracer.start_span("invoke_agent calc")
        self.parent = trace_api.set_span_in_context(root)
        return root

    def child(self, name: str) -> Any:
        return self.tracer.start_span(name, context=self.parent)


def _agent(runner: Any) -> CoreAgent:
    native = Agent(ScriptedLlm(), tools=[calculator], name="calc")
    return CoreAgent("calc", runner, native)


async def measure_runs(rounds: int, batch: int, figures: dict[str, float]) -> list[Row]:
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
        b, t, ratios = await _paired(base, traced, rounds, batch)
        figures[f"untraced_{mode}"] = b
        rows.append(
            Row(
                f"(a) traced/untraced, {mode} mode",
                _median(ratios),
                "x",
                f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run (+{(t - b) * 1e6:.0f} us, {SPANS} spans; "
                f"{_spread(ratios)})",
                TARGET_RATIO_A,
            )
        )
    rows.extend(await _measure_floors(plain, run_plain, stream_plain, requests, rounds, batch))
    rows.extend(await _measure_local(run_plain, requests, rounds, batch))
    rows.append(await _measure_with_latency(requests, rounds))
    return rows


async def _measure_floors(
    plain: CoreAgent,
    run_plain: Callable[[], Awaitable[None]],
    stream_plain: Callable[[], Awaitable[None]],
    requests: list[Any],
    rounds: int,
    batch: int,
) -> list[Row]:
    """Info: (a)'s floors, measured in place (see the module docstring)."""
    setup = get_tracing_setup(DISCARD)
    rows = []
    for bare in (
        _Floor(None),
        _BareSpans(setup.provider.get_tracer("floor"), "bare OTel SDK spans"),
    ):

        async def run_bare(bare: _Floor = bare) -> None:
            root = bare.begin()
            with observing(bare):
                await plain.runner.run(plain, Session("s"), requests)
            root.end()

        async def stream_bare(bare: _Floor = bare) -> None:
            root = bare.begin()
            async for event in plain.runner.stream(plain, Session("s"), requests):
                bare(event)
            root.end()

        for mode, base, floor in (
            ("run", run_plain, run_bare),
            ("stream", stream_plain, stream_bare),
        ):
            bare.count = 0
            await floor()
            if bare.count + 1 != SPANS:
                raise AssertionError(f"the floor made {bare.count + 1} spans, not {SPANS}")
            b, t, ratios = await _paired(base, floor, rounds, batch, BUDGET_S / 2)
            rows.append(
                Row(
                    f"(a) floor, {mode}: {bare.label}",
                    _median(ratios),
                    "x",
                    f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run (+{(t - b) * 1e6:.0f} us; "
                    f"{_spread(ratios)})",
                )
            )
    return rows


class _SlowScriptedLlm(ScriptedLlm):
    """``ScriptedLlm`` answering after ``MODEL_LATENCY_S``, like a (very fast) real model."""

    async def generate(self, request: Any) -> Any:
        await asyncio.sleep(MODEL_LATENCY_S)
        return await super().generate(request)


async def _measure_with_latency(requests: list[Any], rounds: int) -> Row:
    """Info: traced/untraced *wall* time when each model call takes a few milliseconds."""

    def agent(runner: Any) -> CoreAgent:
        native = Agent(_SlowScriptedLlm(), tools=[calculator], name="calc")
        return CoreAgent("calc", runner, native)

    plain, wrapped = agent(NativeRunner()), agent(TracingRunner(NativeRunner(), DISCARD))

    async def once(target: CoreAgent) -> float:
        start = time.perf_counter()
        await target.runner.run(target, Session("s"), requests)
        return time.perf_counter() - start

    ratios, base, traced = [], [], []
    for i in _rounds(max(rounds, 8), BUDGET_S / 2):
        pair = (plain, wrapped) if i % 2 == 0 else (wrapped, plain)
        first, second = await once(pair[0]), await once(pair[1])
        b, t = (first, second) if i % 2 == 0 else (second, first)
        base.append(b)
        traced.append(t)
        ratios.append(t / b)
    return Row(
        f"(a) wall time, model calls of {MODEL_LATENCY_S * 1e3:g} ms",
        _median(ratios),
        "x",
        f"{_median(base) * 1e3:.2f} -> {_median(traced) * 1e3:.2f} ms/run (3 model calls; "
        f"{_spread(ratios)})",
    )


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

        b, t, ratios = await _paired(run_plain, run_local, max(rounds // 2, 4), batch)
        setup = get_tracing_setup(config)
        setup.shutdown(10.0)
        dropped = sum(getattr(p, "dropped", 0) for p in setup.processors)
        exported = sum(getattr(p, "exported", 0) for p in setup.processors)
    return [
        Row(
            "(a) run mode, local SQLite backend",
            _median(ratios),
            "x",
            f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run (export thread included; "
            f"{exported} spans stored, {dropped} dropped by the full queue)",
        )
    ]


# -- (b) the state machine vs raw OTel spans -------------------------------------------------
def _cycle_events(step: int) -> list[Any]:
    """One think/act cycle: a step, a model message and a tool call (3 spans)."""
    mid, cid = f"m{step}", f"c{step}"
    return [
        ev.StepStart(step_name="calc", step_index=step),
        ev.MessageStart(message_id=mid, model="scripted-1", provider="runnertrace"),
        ev.ToolCallStart(tool_call_id=cid, tool_name="calculator", parent_message_id=mid),
        ev.ToolCallEnd(tool_call_id=cid),
        ev.MessageEnd(message_id=mid, finish_reason="tool_calls", input_tokens=9, output_tokens=5),
        ev.ToolCallResult(tool_call_id=cid, content="7006652"),
        ev.StepEnd(step_name="calc", step_index=step),
    ]


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


class _Recorder:
    """Stands in for the tracer once, to record exactly which SDK calls ``RunTracer`` makes.

    Replaying that call list against the real tracer gives a floor with the
    very same spans, parents, kinds and attributes, minus our state machine.
    """

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.ops: list[tuple[str, int, tuple[Any, ...]]] = []
        self.count = 0

    def start_span(self, name: str, context: Any = None, kind: Any = None, **kw: Any) -> Any:
        parent = trace_api.get_current_span(context) if context is not None else None
        index = self.count
        self.count += 1
        parent_index = getattr(parent, "index", None)
        attrs = dict(kw.get("attributes") or {})
        self.ops.append(("start", index, (name, parent_index, kind, attrs)))
        real = self.tracer.start_span(name, context=context, kind=kind, **kw)
        return _RecordingSpan(self, index, real)


class _RecordingSpan:
    def __init__(self, recorder: _Recorder, index: int, real: Any) -> None:
        self.recorder, self.index, self.real = recorder, index, real

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if name in ("set_attribute", "set_attributes", "set_status", "add_event", "end"):

            def record(*args: Any) -> Any:
                self.recorder.ops.append((name, self.index, args))
                return attr(*args)

            return record
        return attr


def _replayer(tracer: Any, ops: list[tuple[str, int, tuple[Any, ...]]]) -> Callable[[], None]:
    count = 1 + max(i for _, i, _ in ops)

    def replay() -> None:
        spans: list[Any] = [None] * count
        contexts: list[Any] = [None] * count
        for op, index, args in ops:
            if op == "start":
                name, parent, kind, attrs = args
                context = None
                if parent is not None:
                    context = contexts[parent]
                    if context is None:
                        context = contexts[parent] = trace_api.set_span_in_context(spans[parent])
                spans[index] = tracer.start_span(
                    name, context=context, kind=kind, attributes=attrs, start_time=time.time_ns()
                )
            else:
                getattr(spans[index], op)(*args)

    return replay


def measure_state_machine(rounds: int, runs: int, figures: dict[str, float]) -> list[Row]:
    tracer = get_tracing_setup(DISCARD).tracer
    events = [e for step in range(3) for e in _cycle_events(step)]

    def drive(target: Any) -> None:
        run = _tracer_for(target)
        handle = run.handle
        for event in events:
            handle(event)
        run.finish()

    recorder = _Recorder(tracer)
    drive(recorder)
    spans = recorder.count
    starts = [args for op, _, args in recorder.ops if op == "start"]
    names = [args[0] for args in starts]
    attrs_per_span = (
        sum(len(args[3]) for args in starts)
        + sum(
            len(args[0]) if op == "set_attributes" else 1
            for op, _, args in recorder.ops
            if op in ("set_attribute", "set_attributes")
        )
    ) / spans

    def ours() -> None:
        drive(tracer)

    sdk_tracer = get_tracing_setup(DISCARD).provider.get_tracer("floor")

    def sdk_floor() -> None:
        for name in names:
            sdk_tracer.start_span(name).end()

    fns = {
        "ours": ours,
        "sdk": sdk_floor,
        "replay": _replayer(tracer, recorder.ops),
    }
    samples: dict[str, list[float]] = {key: [] for key in fns}
    for fn in fns.values():
        fn()
    for i in _rounds(rounds, 2 * BUDGET_S):
        for key in list(fns) if i % 2 == 0 else list(reversed(fns)):
            samples[key].append(_timed(fns[key], runs) / spans)
    per = {key: _median(values) for key, values in samples.items()}
    figures["sdk_bare_span"] = per["sdk"]

    def ratios(key: str) -> list[float]:
        return [o / f for o, f in zip(samples["ours"], samples[key], strict=True)]

    return [
        Row(
            "(b) RunTracer per span / SDK span, same attributes",
            _median(ratios("replay")),
            "x",
            f"{per['ours'] * 1e6:.1f} vs {per['replay'] * 1e6:.1f} us/span (the same SDK calls, "
            f"{attrs_per_span:.1f} attrs/span, without the state machine; "
            f"{_spread(ratios('replay'))})",
            TARGET_RATIO_B,
        ),
        Row(
            "(b) RunTracer per span / bare OTel SDK span",
            _median(ratios("sdk")),
            "x",
            f"{per['ours'] * 1e6:.1f} vs {per['sdk'] * 1e6:.1f} us/span, no attributes "
            f"({len(events)} events + finish -> {spans} spans; {_spread(ratios('sdk'))})",
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
    closing = [ev.MessageEnd(message_id="m"), ev.StepEnd(step_name="calc", step_index=0)]
    rows = []
    for label, as_events, target in (
        ("(c) per aggregated delta (aggregate mode)", False, TARGET_US_C),
        ("(c) per delta, deltas: events mode", True, None),
    ):
        samples = []
        for _ in _rounds(rounds, BUDGET_S / 2):
            run = _tracer_for(tracer, deltas_as_events=as_events)
            for event in opening:
                run.handle(event)
            handle = run.handle
            gc.collect()
            start = cpu_clock()
            for delta in deltas:
                handle(delta)
            samples.append((cpu_clock() - start) / count)
            for event in closing:
                run.handle(event)
            run.finish()
        per = _median(samples)
        rows.append(Row(label, per * 1e6, "us", f"{count} deltas x {len(samples)} rounds", target))
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
    figures: dict[str, float] = {}
    rows = asyncio.run(
        measure_runs(rounds=4 if quick else 30, batch=10 if quick else 40, figures=figures)
    )
    rows += measure_state_machine(
        rounds=4 if quick else 20, runs=20 if quick else 150, figures=figures
    )
    rows += measure_deltas(rounds=4 if quick else 20, count=500 if quick else 5000)
    print(f"runnertrace tracing overhead (python {sys.version.split()[0]})")
    print_table(rows)
    missed = [r for r in rows if r.verdict == "MISS"]
    print(f"\n{len(missed)} target(s) missed; took {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
