"""runnertrace next to its peers on one Pydantic AI run: ratios, costs and span counts.

    python benchmarks/peers.py             # about 2 minutes on a busy 2-core machine
    python benchmarks/peers.py --quick     # a smoke run, under a minute
    python benchmarks/peers.py --rounds 60

**The scenario** is the two-step calculator run of ``frameworks.py`` (its
``_pydantic_ai_agent``: the example's ``FunctionModel`` asks for ``multiply``,
the tool runs, the model answers), in run mode (``agent.run`` / ``runner.run``)
and stream mode (``agent.run_stream_events`` / ``runner.stream``).

**The variants**, each on its own ``pydantic_ai.Agent``:

1. ``plain``: Pydantic AI alone, untraced -- the baseline of every ratio;
2. ``runner``: ``PydanticAIRunner`` with tracing off (issue 11 item 7's
   "untraced runner" cost);
3. ``rt-otlp``: ``traced(PydanticAIRunner(), type="otlp")``, batch export to a
   loopback OTLP receiver (``rt-otlp+content``: the same with
   ``capture_content``, since every peer records content by default);
4. ``rt-local``: ``traced(..., type="local")``, a SQLite store in a temp dir;
5. ``pai-otel``: Pydantic AI's own instrumentation
   (``InstrumentationSettings(tracer_provider=...)``, SDK ``BatchSpanProcessor``
   + ``OTLPSpanExporter`` to the same receiver);
6. ``logfire``: ``instrument_pydantic_ai`` on a Logfire instance configured with
   ``send_to_logfire=False``, ``console=False`` and the same batch OTLP
   processor as an additional span processor (no token: nothing leaves the
   machine);
7. ``openinference``: Pydantic AI's instrumentation plus OpenInference's
   ``OpenInferenceSpanProcessor`` (that is how its Pydantic AI instrumentor
   works) before the batch OTLP processor -- only if
   ``openinference-instrumentation-pydantic-ai`` is installed (it is not a
   project dependency);
8. ``rt-noexport``: the traced runner on a backend whose processor only counts
   spans (``overhead.DiscardBackend``'s, counting): the machinery without
   export, for the per-span goal.

**No setup leaks into another variant, in one process.** None of the peers
patches anything global here: Pydantic AI's instrumentation is set per agent
(``agent.instrument``), Logfire is configured with ``local=True`` (its own
providers, nothing set globally) and instruments only its agent
(``instrument_pydantic_ai(agent)`` sets that agent's ``instrument``, not
``Agent.instrument_all``), and OpenInference's Pydantic AI support is a span
processor on a provider of its own. So no instrument/uninstrument toggling is
needed: every variant keeps its own agent and provider for the whole run, and
the benchmark checks that the global tracer provider is still not an SDK one
(runnertrace would join an SDK provider installed globally).

**Timing.** Rounds are interleaved: each round runs a batch of every variant
once per mode, in an order that rotates from round to round. A batch is timed
in process CPU time (all threads, so batch export and SQLite threads count,
see ``overhead.cpu_clock``) and ends with a flush of the variant's processors
inside the timed window, so each variant pays for its own export and nothing
spills into the next batch. The receiver runs in a child process
(``otlp_sink.py``), as a collector would, so its decoding is not charged here.
Each ratio is taken against the ``plain`` batch of the same round and mode; the
table gives the median over rounds with the interquartile range. Spans per run
are counted for every variant: what the receiver decoded, the rows the local
store gained, or what the counting processor saw, per batch, divided by runs.

**Goals** (issues 10 and 11; reported, not gated): the traced runner within
1.10x of plain and below every peer; the untraced runner within 1.03x; per
span, our machinery within 1.3x of a bare SDK span with as many attributes; at
most 2 us per aggregated delta (``overhead.measure_deltas``); ``import
runnertrace`` within 20 ms (CPU time, a fresh interpreter per sample, with
info rows for ``typing``, which is most of it, and for ``traced``).

Our machinery per span is ``rt-noexport`` minus ``runner``, divided by the
spans it made: the same runner traced into a processor that only counts, so
the runner's traced-only work, ``TracingRunner`` and the span state machine are
in, export is out. That difference is a tenth of a run, too small to survive
the table's rounds (seven batches apart), so after them the two alternate batch
by batch (``overhead._paired``). The floor is ``start_span`` (with the same
number of attributes, under an open parent) plus ``end`` on an SDK provider
with the same counting processor.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frameworks import PROMPT, REQUESTS, _modes, _pydantic_ai_agent
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otlp_sink import SinkProcess
from overhead import (
    DiscardBackend,
    Row,
    _DiscardProcessor,
    _paired,
    _spread,
    cpu_clock,
    print_table,
)
from overhead import measure_deltas as overhead_deltas
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.instrumented import InstrumentationSettings

from runnertrace import traced
from runnertrace.core.session import Session
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.pydantic_ai import PydanticAIRunner
from runnertrace.tracing.config import TraceConfig

MODES = ("run", "stream")
BASELINE = "plain"
GOAL_TRACED = 1.10  # issue 10 and issue 11 item 7: traced to OTLP, all-in
GOAL_UNTRACED_RUNNER = 1.03  # issue 11 item 7
GOAL_PER_SPAN = 1.3  # issue 10
GOAL_IMPORT_MS = 20.0  # issue 10
IMPORT_SAMPLES = 5
DEFAULT_ROUNDS = 15
BARE_SPANS = 2000  # per sample of the bare-span floor
BARE_SAMPLES = 7
RUNS_PER_BATCH = 8
OURS = ("rt-otlp", "rt-otlp+content")  # compared with every peer
PEERS = ("pai-otel", "logfire", "openinference")

ModeFn = Callable[[], Awaitable[None]]


class _CountingProcessor(_DiscardProcessor):
    """Drops every span, counting spans and attributes, so ``rt-noexport``'s counts are measured."""

    def __init__(self) -> None:
        self.spans = 0
        self.attributes = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.spans += 1
        self.attributes += len(span.attributes or ())


class CountingBackend(DiscardBackend):
    """``trace.type: <this module>.CountingBackend``: keeps nothing, counts everything."""

    name = "counting-discard"

    def processors(self) -> list[SpanProcessor]:
        return [_CountingProcessor()]


@dataclass
class Variant:
    """One way of running the scenario: a callable per mode, its flush and its span counter."""

    name: str
    what: str
    modes: dict[str, ModeFn]
    check: Callable[[], Awaitable[str]]
    flush: Callable[[], object] = lambda: None
    spans: Callable[[], int] = lambda: 0
    exports: bool = True
    close: Callable[[], object] = lambda: None
    times: dict[str, dict[int, float]] = field(default_factory=dict)  # mode -> round -> s/run
    counted: dict[str, list[int]] = field(default_factory=dict)  # mode -> [spans, runs]
    failure: str | None = None


# -- the scenario on a bare Pydantic AI agent ---------------------------------------------------
def _native_agent() -> PydanticAgent[dict[str, Any], str]:
    """A fresh agent of the scenario (the runner given here is never used)."""
    return _pydantic_ai_agent(PydanticAIRunner()).native  # type: ignore[no-any-return]


def _native_modes(native: PydanticAgent[dict[str, Any], str]) -> dict[str, ModeFn]:
    async def run() -> None:
        await native.run(PROMPT, deps={})

    async def stream() -> None:
        async with native.run_stream_events(PROMPT, deps={}) as events:
            async for _ in events:
                pass

    return {"run": run, "stream": stream}


def _native_variant(
    name: str, what: str, native: PydanticAgent[dict[str, Any], str], **kw: Any
) -> Variant:
    async def check() -> str:
        return str((await native.run(PROMPT, deps={})).output)

    return Variant(name, what, _native_modes(native), check, **kw)


def _batch_otlp(sink: SinkProcess) -> BatchSpanProcessor:
    """The SDK's batch processor exporting OTLP/HTTP protobuf to the sink (peers' pipeline)."""
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=sink.traces_url))


def _sink_spans(sink: SinkProcess) -> Callable[[], int]:
    return lambda: sink.totals()[0]


# -- the variants --------------------------------------------------------------------------------
def plain(sink: SinkProcess, tmp: Path) -> Variant:
    return _native_variant(BASELINE, "Pydantic AI, untraced", _native_agent(), exports=False)


def runner(sink: SinkProcess, tmp: Path) -> Variant:
    return _runner_variant(
        "runner", "PydanticAIRunner, tracing off", PydanticAIRunner(), exports=False
    )


def _runner_variant(name: str, what: str, base: Any, **kw: Any) -> Variant:
    core = _pydantic_ai_agent(base)

    async def check() -> str:
        return str(await core.runner.run(core, _fresh_session(), REQUESTS))

    return Variant(name, what, _modes(core), check, **kw)


def _fresh_session() -> Session:
    return Session(f"check-{time.perf_counter_ns()}")


def _traced_variant(name: str, what: str, config: TraceConfig, spans: Callable[[], int]) -> Variant:
    wrapped = traced(PydanticAIRunner(), config)
    processors = wrapped.setup.processors

    def flush() -> None:
        # The processors themselves, as the peers' provider.force_flush() does; the
        # setup's flush() runs each on a thread of its own, a cost no peer pays here.
        for processor in processors:
            processor.force_flush()

    return _runner_variant(name, what, wrapped, flush=flush, spans=spans)


def rt_otlp(sink: SinkProcess, tmp: Path) -> Variant:
    config = TraceConfig(type="otlp", otlp={"endpoint": sink.traces_url})
    return _traced_variant("rt-otlp", "runnertrace, OTLP batch", config, _sink_spans(sink))


def rt_otlp_content(sink: SinkProcess, tmp: Path) -> Variant:
    config = TraceConfig(type="otlp", otlp={"endpoint": sink.traces_url}, capture_content=True)
    return _traced_variant(
        "rt-otlp+content", "runnertrace, OTLP batch, content", config, _sink_spans(sink)
    )


def rt_local(sink: SinkProcess, tmp: Path) -> Variant:
    path = tmp / "traces.db"
    config = TraceConfig(type="local", local={"path": str(path)})

    def stored() -> int:
        return SpanStore(path).count()[0] if path.exists() else 0

    return _traced_variant("rt-local", "runnertrace, local SQLite", config, stored)


def rt_noexport(sink: SinkProcess, tmp: Path) -> Variant:
    config = TraceConfig(type=f"{__name__}.CountingBackend")
    counter = _counting_processor(config)  # builds the pipeline the traced runner will use
    return _traced_variant(
        "rt-noexport", "runnertrace, counting no-op", config, lambda: counter.spans
    )


def _counting_processor(config: TraceConfig) -> _CountingProcessor:
    from runnertrace.tracing import get_tracing_setup

    (processor,) = get_tracing_setup(config).processors
    if not isinstance(processor, _CountingProcessor):
        raise TypeError(f"expected the counting processor, got {processor!r}")
    return processor


def pai_otel(sink: SinkProcess, tmp: Path) -> Variant:
    provider = TracerProvider()
    provider.add_span_processor(_batch_otlp(sink))
    native = _native_agent()
    native.instrument = InstrumentationSettings(tracer_provider=provider)
    return _native_variant(
        "pai-otel",
        "Pydantic AI instrumentation, OTLP batch",
        native,
        flush=provider.force_flush,
        spans=_sink_spans(sink),
        close=provider.shutdown,
    )


def logfire_peer(sink: SinkProcess, tmp: Path) -> Variant:
    import logfire

    instance = logfire.configure(
        local=True,  # its own providers: nothing global, no leak into other variants
        send_to_logfire=False,
        console=False,
        inspect_arguments=False,
        service_name="peers-logfire",
        additional_span_processors=[_batch_otlp(sink)],
    )
    native = _native_agent()
    instance.instrument_pydantic_ai(native)  # type: ignore[arg-type]  # typed Agent[object, ...]
    return _native_variant(
        "logfire",
        "logfire.instrument_pydantic_ai, OTLP batch",
        native,
        flush=instance.force_flush,
        spans=_sink_spans(sink),
        close=instance.shutdown,
    )


def openinference(sink: SinkProcess, tmp: Path) -> Variant:
    try:
        from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
    except ImportError as exc:
        raise _Skip(f"not installed ({exc})") from None
    provider = TracerProvider()
    provider.add_span_processor(OpenInferenceSpanProcessor())  # rewrites attributes first
    provider.add_span_processor(_batch_otlp(sink))
    native = _native_agent()
    native.instrument = InstrumentationSettings(tracer_provider=provider)
    return _native_variant(
        "openinference",
        "OpenInference Pydantic AI processor, OTLP batch",
        native,
        flush=provider.force_flush,
        spans=_sink_spans(sink),
        close=provider.shutdown,
    )


class _Skip(Exception):
    """A variant that cannot run here (say why, run the rest)."""


VARIANTS: list[Callable[[SinkProcess, Path], Variant]] = [
    plain,
    runner,
    rt_otlp,
    rt_otlp_content,
    rt_local,
    pai_otel,
    logfire_peer,
    openinference,
    rt_noexport,
]


# -- measuring ---------------------------------------------------------------------------------
async def _batch(variant: Variant, mode: str, runs: int) -> tuple[float, int]:
    """CPU seconds per run over a batch (flush included) and the spans the batch exported."""
    fn = variant.modes[mode]
    before = variant.spans()
    gc.collect()
    start = cpu_clock()
    for _ in range(runs):
        await fn()
    variant.flush()
    elapsed = cpu_clock() - start
    return elapsed / runs, variant.spans() - before


async def _prepare(variant: Variant, warmup: int) -> None:
    """Refuse a variant that does not run the scenario (a broken run is fast) or exports nothing."""
    reply = await variant.check()
    if "42" not in reply:
        raise _Skip(f"unexpected reply {reply!r}")
    for mode in MODES:
        _, spans = await _batch(variant, mode, warmup)
        if variant.exports and spans <= 0:
            raise _Skip(f"exported no spans in {mode} mode")
        variant.times[mode] = {}
        variant.counted[mode] = [0, 0]


class BareSpans:
    """The per-span floor: a bare SDK span with a given attribute count, on a counting provider.

    Each span is a child of one open root, started with its attributes and ended
    at once: what any tracer must do per span, with nothing of ours around it.
    """

    def __init__(self, attributes: int) -> None:
        provider = TracerProvider()
        provider.add_span_processor(_CountingProcessor())
        self.tracer = provider.get_tracer("bare")
        self.attributes: dict[str, int] = {f"attr.{i}": i for i in range(attributes)}
        self.parent = trace_api.set_span_in_context(self.tracer.start_span("root"))

    def per_span(self, count: int) -> float:
        """CPU seconds per span over ``count`` spans."""
        start_span, parent, attributes = self.tracer.start_span, self.parent, self.attributes
        gc.collect()
        start = cpu_clock()
        for _ in range(count):
            start_span("span", context=parent, attributes=attributes).end()
        return (cpu_clock() - start) / count


async def measure(
    rounds: int, runs: int, warmup: int, per_span_budget_s: float
) -> tuple[list[Variant], list[Row]]:
    """Interleaved rounds over every variant that set up, then the per-span comparison."""
    with ExitStack() as stack:
        sink = SinkProcess()
        stack.callback(sink.stop)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        variants: list[Variant] = []
        for build in VARIANTS:
            variant = await _set_up(build, sink, tmp, warmup)
            if variant is not None:
                stack.callback(variant.close)
                variants.append(variant)
        if not any(v.name == BASELINE for v in variants):
            raise SystemExit("the baseline did not run; nothing to compare with")
        if isinstance(trace_api.get_tracer_provider(), TracerProvider):
            raise SystemExit("a variant installed a global SDK tracer provider: isolation broken")
        # Everything alive now (frameworks, SDKs, agents) lives to the end: frozen, it is
        # not re-scanned by the collection before each batch or by collections inside one.
        gc.collect()
        gc.freeze()
        started = time.perf_counter()
        for index in range(rounds):
            for mode in MODES if index % 2 == 0 else MODES[::-1]:
                await _round(variants, mode, index, runs)
            if index == 0:
                estimate = (time.perf_counter() - started) * rounds
                print(f"measuring {rounds} rounds of {runs} runs per batch, about {estimate:.0f}s")
        return variants, await measure_per_span(variants, runs, per_span_budget_s)


async def _set_up(
    build: Callable[[SinkProcess, Path], Variant], sink: SinkProcess, tmp: Path, warmup: int
) -> Variant | None:
    """Build and check one variant; a variant that cannot run says why and is left out."""
    name = build.__name__.replace("_", "-")
    try:
        variant = build(sink, tmp)
    except _Skip as exc:
        print(f"{name}: skipped: {exc}")
        return None
    except Exception as exc:
        print(f"{name}: skipped: setup failed: {exc!r}")
        return None
    try:
        await _prepare(variant, warmup)
    except Exception as exc:
        reason = str(exc) if isinstance(exc, _Skip) else f"failed: {exc!r}"
        print(f"{variant.name}: skipped: {reason}")
        variant.close()
        return None
    return variant


async def _round(variants: list[Variant], mode: str, index: int, runs: int) -> None:
    """One batch of every live variant in ``mode``, starting one further along each round."""
    live = [v for v in variants if v.failure is None]
    shift = index % len(live)
    for variant in live[shift:] + live[:shift]:
        try:
            seconds, spans = await _batch(variant, mode, runs)
        except Exception as exc:
            variant.failure = f"failed in round {index}, {mode} mode: {exc!r}"
            print(f"{variant.name}: dropped: {variant.failure}")
            continue
        variant.times[mode][index] = seconds
        variant.counted[mode][0] += spans
        variant.counted[mode][1] += runs


def _by_name(variants: list[Variant]) -> dict[str, Variant]:
    return {v.name: v for v in variants if v.failure is None}


async def measure_per_span(variants: list[Variant], batch: int, budget_s: float) -> list[Row]:
    """Our machinery per span against a bare SDK span with as many attributes.

    Ours is ``rt-noexport`` minus ``runner`` (the same runner, traced into a
    processor that only counts), per span it made. That difference is a tenth of
    a run, so the table's rounds, which put seven other batches between the two,
    leave it in the noise. Here the two alternate batch by batch
    (``overhead._paired``) and the difference is taken from the median ratio.
    """
    named = _by_name(variants)
    traced_v, untraced_v = named.get("rt-noexport"), named.get("runner")
    if traced_v is None or untraced_v is None:
        return [Row("per span: ours / bare SDK span", float("nan"), "x", "needs rt-noexport")]
    counter = _counting_processor(TraceConfig(type=f"{__name__}.CountingBackend"))
    attributes = round(counter.attributes / max(counter.spans, 1))
    bare = BareSpans(attributes)
    rows = []
    for mode in MODES:
        spans, runs = traced_v.counted[mode]
        per_run = spans / runs
        base, _, paired = await _paired(
            untraced_v.modes[mode], traced_v.modes[mode], 400, batch, budget_s
        )
        # Each paired batch's ratio, as microseconds per span over the median base run.
        ours = [(ratio - 1) * base / per_run * 1e6 for ratio in paired]
        floor = statistics.median(bare.per_span(BARE_SPANS) for _ in range(BARE_SAMPLES)) * 1e6
        low, middle, high = statistics.quantiles(ours, n=4)
        # A quarter of the pairs or more with the traced run no dearer: the machine's noise
        # is larger than the difference, and no verdict can be drawn from this run.
        resolved = low > 0
        rows.append(
            Row(
                f"per span: ours / bare SDK span, {mode}",
                middle / floor,
                "x",
                ("" if resolved else "TOO NOISY, no verdict: ")
                + f"{middle:.1f} (IQR {low:.0f}-{high:.0f}) vs {floor:.1f} us/span;"
                f" ours = (rt-noexport - runner) / {per_run:g} spans over {len(paired)} paired"
                f" batches; bare span with {attributes} attributes",
                GOAL_PER_SPAN if resolved else None,
            )
        )
    return rows


# -- reporting ---------------------------------------------------------------------------------
def ratios(variant: Variant, base: Variant, mode: str) -> list[float]:
    """Per-round ratios against ``base``, over the rounds both completed."""
    mine, theirs = variant.times[mode], base.times[mode]
    return [mine[i] / theirs[i] for i in sorted(mine) if i in theirs]


def _median_ratio(named: dict[str, Variant], name: str, base: str, mode: str) -> float | None:
    if name not in named or base not in named:
        return None
    values = ratios(named[name], named[base], mode)
    return statistics.median(values) if values else None


def print_variants(variants: list[Variant]) -> None:
    base = next(v for v in variants if v.name == BASELINE)
    header = (
        f"{'variant':16} {'mode':6} {'vs plain: median (IQR)':>26} {'us/run':>8} {'spans/run':>9}"
    )
    print(header)
    print("-" * (len(header) + 44))
    for mode in MODES:
        for variant in variants:
            if variant.failure is not None or not variant.times[mode]:
                continue
            values = ratios(variant, base, mode)
            spread = _spread(values) if len(values) >= 2 else "IQR n/a"
            cost = statistics.median(variant.times[mode].values()) * 1e6
            spans, runs = variant.counted[mode]
            per_run = spans / runs if runs else float("nan")
            ratio = f"{statistics.median(values):.3f}x ({spread.removeprefix('IQR ')})"
            print(
                f"{variant.name:16} {mode:6} {ratio:>26} {cost:8.0f} {per_run:9.1f}  {variant.what}"
            )
    for variant in variants:
        if variant.failure is not None:
            print(f"{variant.name}: {variant.failure}")


def goal_rows(variants: list[Variant]) -> list[Row]:
    named = _by_name(variants)
    rows: list[Row] = []
    for mode in MODES:
        for name, base, target, label in (
            ("runner", BASELINE, GOAL_UNTRACED_RUNNER, "untraced PydanticAIRunner / plain"),
            ("rt-otlp", BASELINE, GOAL_TRACED, "runnertrace OTLP / plain"),
            ("rt-otlp", "runner", None, "runnertrace OTLP / untraced runner"),
        ):
            value = _median_ratio(named, name, base, mode)
            if value is not None:
                detail = f"{name} over {base}, same rounds"
                rows.append(Row(f"{label}, {mode}", value, "x", detail, target))
        rows.extend(_versus_peers(named, mode))
    return rows


def _versus_peers(named: dict[str, Variant], mode: str) -> list[Row]:
    """Each OTLP variant of ours over the cheapest peer: below 1 beats every peer measured."""
    peers = {n: _median_ratio(named, n, BASELINE, mode) for n in PEERS}
    known = {n: v for n, v in peers.items() if v is not None}
    if not known:
        return []
    cheapest = min(known, key=lambda n: known[n])
    detail = ", ".join(f"{n} {v:.2f}x" for n, v in known.items())
    rows = []
    for name in OURS:
        ours = _median_ratio(named, name, BASELINE, mode)
        if ours is not None:
            label = f"{name} / cheapest peer ({cheapest}), {mode}"
            rows.append(Row(label, ours / known[cheapest], "x", detail, 1.0))
    return rows


def import_ms(statement: str, samples: int, env: dict[str, str] | None = None) -> list[float]:
    """CPU milliseconds for ``statement``, each in a fresh interpreter (its start excluded)."""
    code = (
        "import time\n"
        "start = time.process_time()\n"
        f"{statement}\n"
        "print((time.process_time() - start) * 1000)\n"
    )
    environ = {**os.environ, **(env or {})}
    times = []
    for _ in range(samples):
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=environ
        )
        times.append(float(done.stdout))
    return times


# Pydantic loads every installed pydantic plugin when the first model class is built;
# logfire (a dev dependency) registers one, so any pydantic import then imports logfire.
_NO_PLUGINS = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}
IMPORTS: list[tuple[str, str, dict[str, str] | None, float | None]] = [
    ("`import runnertrace`", "import runnertrace", None, GOAL_IMPORT_MS),
    ("`import typing` (part of the above)", "import typing", None, None),
    ("`from runnertrace import traced`", "from runnertrace import traced", None, None),
    ("the same, pydantic plugins off", "from runnertrace import traced", _NO_PLUGINS, None),
]


def import_rows(samples: int) -> list[Row]:
    rows = []
    for label, statement, env, target in IMPORTS:
        times = import_ms(statement, samples, env)
        spread = f"{min(times):.1f}-{max(times):.1f}"
        detail = f"CPU, median of {samples} fresh interpreters, range {spread}"
        rows.append(Row(label, statistics.median(times), "ms", detail, target))
    return rows


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run, under a minute")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else DEFAULT_ROUNDS)
    runs = 3 if args.quick else RUNS_PER_BATCH
    started = time.perf_counter()
    variants, per_span = asyncio.run(
        measure(
            rounds, runs, warmup=2 if args.quick else 5, per_span_budget_s=2 if args.quick else 8
        )
    )
    rows = goal_rows(variants) + per_span
    rows += overhead_deltas(rounds=4 if args.quick else 12, count=500 if args.quick else 5000)
    rows += import_rows(3 if args.quick else IMPORT_SAMPLES)
    print(
        f"\nrunnertrace and its peers, two-step Pydantic AI run (python {sys.version.split()[0]})"
    )
    print(f"{rounds} interleaved rounds, {runs} runs per batch; CPU time per run, flush included\n")
    print_variants(variants)
    print()
    print_table(rows)
    missed = [r for r in rows if r.verdict == "MISS"]
    print(f"\n{len(missed)} goal(s) missed; took {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
