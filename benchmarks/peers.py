"""runnertrace next to its peers on every framework: ratios, costs, span counts, throughput.

    python benchmarks/peers.py --framework all          # every framework, one process each
    python benchmarks/peers.py --framework langgraph    # one framework
    python benchmarks/peers.py --framework all --quick  # a smoke run, well under a minute each
    python benchmarks/peers.py --framework maf --profile  # where the traced run's time goes
    python benchmarks/peers.py --framework all --machinery  # machinery per run vs bare spans

Run it with an interpreter that has the peers (``pip install -e ".[dev,all,bench]"``
in a venv of its own; the README's figures came from one at ``/tmp/venv-peers``);
a peer that is not installed is skipped with its reason. CrewAI runs in
``.venv-crewai`` (CrewAI pins ``openai<3``): ``--framework all`` starts it with
``$RUNNERTRACE_CREWAI_PYTHON`` (default ``/work/main/.venv-crewai/bin/python``),
``$HOME`` in a temp dir and CrewAI's telemetry off.

**The scenario** is each framework's two-step calculator run of
``frameworks.py`` (the offline model asks for ``multiply``, the tool runs, the
model answers), in run mode and in stream mode.

**The variants**, per framework, each on an agent of its own:

1. ``plain``: the framework's own call, untraced (``frameworks.OWN_CALLS``) --
   the baseline of every ratio;
2. ``runner``: our runner, tracing off;
3. ``rt-otlp``: ``traced(runner, type="otlp")``, batch export to a loopback
   OTLP receiver; ``rt-otlp+content``: the same with ``capture_content``
   (most peers record content by default);
4. ``rt-local``: ``traced(..., type="local")``, a SQLite store in a temp dir;
5. ``rt-noexport``: the traced runner on a backend whose processor only counts
   (``peer_kit.CountingBackend``): the machinery without export;
6. the framework's peers (``peer_setups.PEERS``), each exporting with the SDK's
   ``BatchSpanProcessor`` and OTLP/HTTP to the same receiver: Pydantic AI's own
   instrumentation, Logfire and OpenInference; OpenInference and Logfire on the
   OpenAI Agents SDK; OpenInference's LangChain instrumentor and Langfuse's
   callback handler on LangGraph; ADK's built-in OTel and OpenInference's ADK
   instrumentor; Agent Framework's built-in OTel and OpenInference's
   agent-framework processor; OpenInference on CrewAI and smolagents; MLflow
   tracing's autolog wherever it has one for the framework.

**No peer leaks into another variant's batch.** Peers that patch globally are
switched on before each of their batches and off after (outside the timed
window). Every exporting variant's provider carries a counting processor (its
*tally*) next to its exporter; after each batch every other variant's tally
must be unchanged, a variant that exports nothing must have sent the receiver
nothing, and a variant with a tally must not have sent more than it counted.
Any breach is printed as a LEAK line (and fails the smoke test). ADK and Agent
Framework start their built-in spans on the global provider, which can be set
once per process: there ``peer_kit.GlobalSwitch`` (an API provider, not an SDK
one, so runnertrace does not join it) is installed before any variant is built
and forwards to the built-in peer's provider only during its batches. So in
those two processes every variant, ours included, runs with an application
provider installed, as an app that traces would.

**Timing** (as ``peers.py`` did for Pydantic AI alone). Rounds are interleaved:
each round runs a batch of every variant once per mode, in an order that
rotates from round to round. A batch is timed in process CPU time (all threads,
so batch export and SQLite threads count, see ``overhead.cpu_clock``) and ends
with a flush of the variant's processors inside the timed window, so each
variant pays for its own export and nothing spills into the next batch. The
receiver runs in a child process (``otlp_sink.py``), as a collector would. Each
ratio is against the ``plain`` batch of the same round and mode; the tables
give the median over rounds with the interquartile range. Spans per run are
counted for every variant: what its tally saw (the receiver's count for
MLflow, whose provider is its own), the rows the local store gained, or what
the counting processor saw.

**Goals** (issue 24; reported, not gated): traced to OTLP below every peer of
the framework in both modes; our machinery (``rt-noexport`` minus ``runner``)
at most 3x the bare SDK spans it makes; the untraced runner within 1.03x of the
framework's own call; the stretch: traced within 1.10x of plain. Our machinery
per span is measured after the rounds with the two alternating batch by batch
(``overhead._paired``), against ``start_span`` with as many attributes under an
open parent plus ``end`` on an SDK provider with the same counting processor.

**Throughput and memory** (``--scale-runs N``, after the rounds): the traced
runner alone, N runs back to back, exporting to OTLP and then to the local
store: spans per wall second (the process's own rate, one process), CPU per
1,000 spans, and the RSS of the process before and after.

**Where the time goes** (``--profile``): cProfile, timed in the main thread's
own CPU time, over traced runs into the counting processor against as many
untraced runner runs, alternating in chunks of 20; the extra self time of the
traced runs, grouped. cProfile inflates every call (a run costs 3-7x its
unprofiled time), so read shares, not microseconds. ``--machinery`` measures
only the machinery per run against the bare spans (no peers), for cuts.

- Before (2026-12-01, 400 runs): the OTel SDK 19-52% of the extra in run mode,
  35-76% in stream mode (``start_span``, the sampler's ``should_sample``,
  ``BoundedAttributes.__setitem__``/``_clean_attribute``, ``Span.__init__``,
  ``end``); pydantic ``validate_python`` of our event and model objects first
  or second in run mode; ``isinstance``/``getattr`` chains; ours 16-36%.
  OpenAI Agents: ``dataclasses.replace`` of the ``RunConfig`` and
  ``copy.deepcopy`` per traced run; LangGraph: ``inspect`` checks of callback
  handlers, LangChain's ``ahandle_event``; Pydantic AI: the capability
  machinery our capability switches on, 25% in run mode; ADK: ``_get_events``
  read by our plugin's callbacks, 16%; smolagents and CrewAI: main thread only.
- After (2026-12-02, 100 runs; OTel | our ``tracing`` | our runner, share of
  the extra, run mode / stream mode): OpenAI Agents 23|14|14% / 27|17|9%
  (builtins 23%, ``validate_python`` first; stdlib 15%: ``dataclasses.replace``,
  ``deepcopy``); LangGraph 22|13|18% / 37|26|8% (LangChain's callback manager
  8% in run mode); Pydantic AI 18|10|10% / 27|18|6% (Pydantic AI's own
  capability machinery 21% in run mode); smolagents 33|22|13% / 32|28|4%;
  MAF 33|23|21% / 55|57|19% of +2.4 ms (Agent Framework itself -1.0 ms: its
  own instrumentation does less when ours runs); CrewAI 41|26|13% /
  27|29|5%; ADK 20|12|14% / 37|26|-. Inside ``tracing/`` ``start_span`` is most
  of the cumulative time (OpenAI Agents: 1.6 of 2.3 ms profiled per run); our
  own self time is spread thin: ``content.clean`` (14 calls a run),
  ``TracingRunner.stream`` (8 context-variable sets and resets per event),
  ``RunTracer.handle``. The runner side (the kit's ``relay``/``guarded_sync``,
  the mappers) and pydantic validation cost more than the state machine.
- Cut here: the span templates were cached per (agent, session), so a new
  session id per run rebuilt and cleaned all five every run (33 us); now per
  agent, a run adding its conversation and user (11 us, timeit); a
  ``ParentBased(ALWAYS_ON)`` sampler at ``sample_rate`` 1 (``should_sample``
  1.7 -> 1.3 us a span). Both are inside the paired measurement's noise on the
  loaded machine. What is left to cut is mostly outside ``tracing/``: the
  runners' traced-path work and pydantic validation of our own events.
- Latest (2026-12-03, 200 runs, quiet machine; OTel | our tracing + runner +
  core | builtins, share of the extra, run / stream): OpenAI Agents 27|30|23%
  / 32|32|22%; MAF 34|43|21% / 46|65|17% (Agent Framework itself -23% in stream);
  Pydantic AI 20|20|21% / 25|22|18% (Pydantic AI's own code 19% in run mode);
  ADK 27|34|16% / 38|42|18%; smolagents 38|36|18% / 36|42|18%. The export
  thread, profiled apart on MAF: the OTLP encoder ~35%, requests ~30%, the
  vendor-key copy (``MappedSpanExporter.map_span``) ~15%, metrics ~15%. The
  table with the split of every cell into untraced runner, run's path and
  export thread is in ``docs/performance.md`` ("2026-12-03, later").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")

import frameworks  # noqa: E402  (puts examples/ on the path)
from frameworks import REQUESTS, _modes, _session_ids  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from otlp_sink import SinkProcess  # noqa: E402
from overhead import Row, _paired, cpu_clock, print_table, rss_mb  # noqa: E402
from peer_kit import (  # noqa: E402
    MODES,
    CountingProcessor,
    GlobalSwitch,
    ModeFn,
    Setting,
    Skip,
    Variant,
)
from peer_setups import GLOBAL_SWITCH, PEERS  # noqa: E402

from runnertrace import traced  # noqa: E402
from runnertrace.core.agent import Agent as CoreAgent  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402
from runnertrace.exporters.local_store import SpanStore  # noqa: E402
from runnertrace.tracing.config import TraceConfig  # noqa: E402

BASELINE = "plain"
GOAL_TRACED_VS_PEERS = 1.0  # below every peer of the framework
GOAL_MACHINERY = 3.0  # our machinery over the bare SDK spans it makes
GOAL_UNTRACED_RUNNER = 1.03
GOAL_TRACED = 1.10  # the stretch
GOAL_IMPORT_MS = 20.0  # issue 10
IMPORT_SAMPLES = 5
DEFAULT_ROUNDS = 15
RUNS_PER_BATCH = 8
BARE_SPANS = 2000
BARE_SAMPLES = 7
OURS = ("rt-otlp", "rt-otlp+content")
OUR_NAMES = frozenset({"plain", "runner", "rt-otlp", "rt-otlp+content", "rt-local", "rt-noexport"})
COUNTING = TraceConfig(type="peer_kit.CountingBackend")
CREWAI_PYTHON = os.environ.get("RUNNERTRACE_CREWAI_PYTHON", "/work/main/.venv-crewai/bin/python")


@dataclass(frozen=True)
class Framework:
    """One framework of ``frameworks.FRAMEWORKS``: its agent, runner and own call."""

    name: str
    build: Callable[[Any], CoreAgent]
    runner: Callable[[], Any]

    def fresh_native(self) -> CoreAgent:
        """A fresh agent (the runner given is never used: its native runs)."""
        return self.build(self.runner())


FRAMEWORKS = {name: Framework(name, build, runner) for name, build, runner in frameworks.FRAMEWORKS}


# -- our variants ------------------------------------------------------------------------------
def _fresh_session() -> Session:
    return Session(f"peers-{next(_session_ids)}")


def _runner_variant(fw: Framework, name: str, what: str, base: Any, **kw: Any) -> Variant:
    core = fw.build(base)

    async def check() -> str:
        return str(await core.runner.run(core, _fresh_session(), REQUESTS))

    return Variant(name, what, _modes(core), check, **kw)


def _traced_variant(
    fw: Framework, name: str, what: str, config: TraceConfig, spans: Callable[[], int], **kw: Any
) -> Variant:
    wrapped = traced(fw.runner(), config)
    setup = wrapped.setup
    processors = setup.processors
    provider = setup.provider
    tally = _TALLIES.get(id(provider))
    if name != "rt-noexport" and tally is None:  # on our provider, as on every exporting peer's
        if not isinstance(provider, TracerProvider):
            raise Skip(f"runnertrace built no SDK provider ({provider!r})")
        tally = _TALLIES[id(provider)] = CountingProcessor()
        provider.add_span_processor(tally)

    def flush() -> None:
        # The processors themselves, as the peers' provider.force_flush() does; the
        # setup's flush() runs each on a thread of its own, a cost no peer pays here.
        # The metrics processor's own queue is drained (every span is recorded, in the
        # window), but its readers are not made to export: they do on their period
        # (60 s), and a forced metrics export per batch of 8 runs is a cost no app pays.
        for processor in processors:
            getattr(processor, "batch", processor).force_flush()

    counted = tally.count if tally is not None else None
    return _runner_variant(
        fw, name, what, wrapped, flush=flush, spans=spans, tally=counted, close=setup.shutdown, **kw
    )


# One tally per provider: variants whose configurations differ only per run
# (``capture_content``) share one setup, so one provider.
_TALLIES: dict[int, CountingProcessor] = {}


def our_variants(fw: Framework, setting: Setting) -> list[Callable[[], Variant]]:
    sink_spans = setting.sink_spans()
    otlp = {"endpoint": setting.sink.traces_url}
    path = setting.tmp / "traces.db"

    def stored() -> int:
        return SpanStore(path).count()[0] if path.exists() else 0

    def noexport() -> Variant:
        counter = _counting_processor()
        return _traced_variant(
            fw,
            "rt-noexport",
            "runnertrace, counting no-op",
            COUNTING,
            lambda: counter.spans,
            exports=False,
            to_sink=False,
        )

    return [
        lambda: Variant(
            BASELINE,
            f"{fw.name}, its own call, untraced",
            frameworks.OWN_CALLS[fw.name](fw.fresh_native()),
            exports=False,
            to_sink=False,
        ),
        lambda: _runner_variant(
            fw, "runner", "our runner, tracing off", fw.runner(), exports=False, to_sink=False
        ),
        lambda: _traced_variant(
            fw,
            "rt-otlp",
            "runnertrace, OTLP batch",
            TraceConfig(type="otlp", otlp=otlp),
            sink_spans,
        ),
        lambda: _traced_variant(
            fw,
            "rt-otlp+content",
            "runnertrace, OTLP batch, content",
            TraceConfig(type="otlp", otlp=otlp, capture_content=True),
            sink_spans,
        ),
        lambda: _traced_variant(
            fw,
            "rt-local",
            "runnertrace, local SQLite",
            TraceConfig(type="local", local={"path": str(path)}),
            stored,
            to_sink=False,
        ),
        noexport,
    ]


def _counting_processor() -> CountingProcessor:
    from runnertrace.tracing import get_tracing_setup

    (processor,) = get_tracing_setup(COUNTING).processors
    if not isinstance(processor, CountingProcessor):
        raise TypeError(f"expected the counting processor, got {processor!r}")
    return processor


# -- measuring ---------------------------------------------------------------------------------
class Ledger:
    """Every variant's counters before and after a batch: the leak check."""

    def __init__(self, variants: list[Variant], sink: SinkProcess) -> None:
        self.variants, self.sink = variants, sink

    def snapshot(self, active: Variant) -> dict[str, int]:
        counts = {v.name: v.tally() for v in [*self.variants, active] if v.tally is not None}
        counts["<receiver>"] = self.sink.totals()[0]
        return counts

    def check(self, active: Variant, before: dict[str, int], after: dict[str, int]) -> None:
        moved = {k: after[k] - before[k] for k in before}
        received = moved.pop("<receiver>")
        own = moved.pop(active.name, None)
        # A variant on the same pipeline as the active one (same tally) is not another's.
        shared = {v.name for v in self.variants if v.tally is not None and v.tally == active.tally}
        for other, delta in moved.items():
            if delta and other not in shared:
                active.leaks.append(f"{delta} spans of {other} during {active.name}'s batch")
        if not active.to_sink and received:
            active.leaks.append(f"the receiver got {received} spans during {active.name}'s batch")
        if active.to_sink and own is not None and received > own:
            active.leaks.append(
                f"the receiver got {received} spans during {active.name}'s batch,"
                f" which counted {own}"
            )


async def _batch(variant: Variant, mode: str, runs: int, ledger: Ledger) -> tuple[float, int]:
    """CPU seconds per run over a batch (flush included) and the spans the batch made."""
    fn = variant.modes[mode]
    with variant.switched_on():
        before = ledger.snapshot(variant)
        spans_before = variant.spans()
        gc.collect()
        start = cpu_clock()
        for _ in range(runs):
            await fn()
        variant.flush()
        elapsed = cpu_clock() - start
        spans = variant.spans() - spans_before
        after = ledger.snapshot(variant)
    ledger.check(variant, before, after)
    if variant.tally is not None and variant.name not in ("rt-local",):
        spans = after[variant.name] - before[variant.name]  # what it made, not what arrived
    return elapsed / runs, spans


async def _prepare(variant: Variant, warmup: int, ledger: Ledger) -> None:
    """Refuse a variant that does not run the scenario (a broken run is fast) or makes nothing."""
    if variant.check is not None:
        with variant.switched_on():
            reply = await variant.check()
        if "42" not in reply:
            raise Skip(f"unexpected reply {reply!r}")
    for mode in MODES:
        _, spans = await _batch(variant, mode, warmup, ledger)
        if variant.exports and spans <= 0:
            raise Skip(f"made no spans in {mode} mode")
        variant.times[mode] = {}
        variant.counted[mode] = [0, 0]
    variant.leaks.clear()  # set-up batches ran before every variant was in the ledger


async def measure(
    fw: Framework, rounds: int, runs: int, warmup: int, only: frozenset[str] | None = None
) -> tuple[list[Variant], ExitStack, Setting, dict[str, str]]:
    """Build every variant that sets up (of ``only``, when given), then the interleaved rounds."""
    stack = ExitStack()
    sink = SinkProcess()
    stack.callback(sink.stop)
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    switch = None
    if fw.name in GLOBAL_SWITCH:
        switch = GlobalSwitch()
        trace_api.set_tracer_provider(switch)
    setting = Setting(sink, tmp, switch)
    builders: list[tuple[str, Callable[[], Variant]]] = [
        (name, build)
        for name, build in zip(
            ("plain", "runner", "rt-otlp", "rt-otlp+content", "rt-local", "rt-noexport"),
            our_variants(fw, setting),
            strict=True,
        )
    ]
    builders += [(name, _peer_builder(setup, setting, fw)) for name, setup in PEERS[fw.name]]
    if only is not None:
        builders = [(name, build) for name, build in builders if name in only]
    variants: list[Variant] = []
    skipped: dict[str, str] = {}
    ledger = Ledger(variants, sink)
    global_before = trace_api.get_tracer_provider()
    for label, build in builders:
        variant = await _set_up(label, build, warmup, ledger, skipped)
        if variant is not None:
            stack.callback(variant.close)
            variants.append(variant)
    if not any(v.name == BASELINE for v in variants):
        raise SystemExit("the baseline did not run; nothing to compare with")
    if trace_api.get_tracer_provider() is not global_before:
        raise SystemExit(
            f"a variant installed a global tracer provider ({trace_api.get_tracer_provider()!r}):"
            " isolation broken"
        )
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    for index in range(rounds):
        for mode in MODES if index % 2 == 0 else MODES[::-1]:
            await _round(variants, mode, index, runs, ledger)
        if index == 0:
            estimate = (time.perf_counter() - started) * rounds
            print(f"measuring {rounds} rounds of {runs} runs per batch, about {estimate:.0f}s")
    return variants, stack, setting, skipped


# ``--machinery``: what the machinery per run needs (the baseline is required by measure).
MACHINERY_VARIANTS = frozenset({BASELINE, "runner", "rt-noexport"})


def _peer_builder(setup: Any, setting: Setting, fw: Framework) -> Callable[[], Variant]:
    return lambda: setup(setting, fw.fresh_native, fw.name)


async def _set_up(
    label: str,
    build: Callable[[], Variant],
    warmup: int,
    ledger: Ledger,
    skipped: dict[str, str],
) -> Variant | None:
    """Build and check one variant; a variant that cannot run says why and is left out."""
    try:
        variant = build()
    except (Skip, ImportError) as exc:
        skipped[label] = str(exc)
    except Exception as exc:
        skipped[label] = f"setup failed: {exc!r}"
    else:
        try:
            await _prepare(variant, warmup, ledger)
        except Exception as exc:
            skipped[label] = str(exc) if isinstance(exc, Skip) else f"failed: {exc!r}"
            variant.close()
        else:
            return variant
    print(f"{label}: skipped: {skipped[label]}")
    return None


async def _round(variants: list[Variant], mode: str, index: int, runs: int, ledger: Ledger) -> None:
    """One batch of every live variant in ``mode``, starting one further along each round."""
    live = [v for v in variants if v.failure is None]
    shift = index % len(live)
    for variant in live[shift:] + live[:shift]:
        try:
            seconds, spans = await _batch(variant, mode, runs, ledger)
        except Exception as exc:
            variant.failure = f"failed in round {index}, {mode} mode: {exc!r}"
            print(f"{variant.name}: dropped: {variant.failure}")
            continue
        variant.times[mode][index] = seconds
        variant.counted[mode][0] += spans
        variant.counted[mode][1] += runs


def _by_name(variants: list[Variant]) -> dict[str, Variant]:
    return {v.name: v for v in variants if v.failure is None}


class BareSpans:
    """The per-span floor: a bare SDK span with a given attribute count, on a counting provider.

    Each span is a child of one open root, started with its attributes and ended
    at once: what any tracer must do per span, with nothing of ours around it.
    """

    def __init__(self, attributes: int) -> None:
        provider = TracerProvider()
        provider.add_span_processor(CountingProcessor())
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


async def measure_machinery(variants: list[Variant], batch: int, budget_s: float) -> list[Row]:
    """Our machinery (``rt-noexport`` minus ``runner``) against the bare SDK spans it makes.

    The difference is a fraction of a run, so the table's rounds (many batches
    apart) leave it in the noise: here the two alternate batch by batch
    (``overhead._paired``) and the difference comes from the median ratio.
    """
    named = _by_name(variants)
    traced_v, untraced_v = named.get("rt-noexport"), named.get("runner")
    if traced_v is None or untraced_v is None:
        return [Row("machinery / bare SDK spans", float("nan"), "x", "needs rt-noexport")]
    counter = _counting_processor()
    attributes = round(counter.attributes / max(counter.spans, 1))
    bare = BareSpans(attributes)
    rows = []
    for mode in MODES:
        spans, runs = traced_v.counted[mode]
        per_run = spans / runs
        base, _, paired = await _paired(
            untraced_v.modes[mode], traced_v.modes[mode], 400, batch, budget_s
        )
        ours = [(ratio - 1) * base * 1e6 for ratio in paired]  # us per run
        floor = statistics.median(bare.per_span(BARE_SPANS) for _ in range(BARE_SAMPLES)) * 1e6
        low, middle, high = statistics.quantiles(ours, n=4)
        resolved = low > 0
        rows.append(
            Row(
                f"machinery / bare SDK spans, {mode}",
                middle / (floor * per_run),
                "x",
                ("" if resolved else "TOO NOISY, no verdict: ")
                + f"{middle:.0f} us/run (IQR {low:.0f}-{high:.0f}) for {per_run:g} spans;"
                f" bare span with {attributes} attributes {floor:.1f} us"
                f" ({floor * per_run:.0f} us/run); {len(paired)} paired batches",
                GOAL_MACHINERY if resolved else None,
            )
        )
    return rows


# -- throughput, memory, profile ---------------------------------------------------------------
async def _run_many(run: ModeFn, runs: int) -> tuple[float, float, float, float]:
    """(CPU s, wall s, RSS MB before, RSS MB after) over ``runs`` runs back to back."""
    gc.collect()
    rss_before = rss_mb()
    cpu_before, wall_before = cpu_clock(), time.perf_counter()
    for _ in range(runs):
        await run()
    cpu, wall = cpu_clock() - cpu_before, time.perf_counter() - wall_before
    gc.collect()
    return cpu, wall, rss_before, rss_mb()


async def measure_scale(fw: Framework, setting: Setting, runs: int) -> list[Row]:
    """Spans/s, CPU per 1,000 spans and RSS over ``runs`` traced runs, to OTLP and to SQLite.

    The untraced runner goes first, as the control: its CPU is what the runs
    cost without us (so "tracing CPU per 1,000 spans" is ours alone), its RSS
    growth what the framework itself keeps.
    """
    untraced = _modes(fw.build(fw.runner()))["run"]
    await untraced()
    base_cpu, base_wall, rss_before, rss_after = await _run_many(untraced, runs)
    rows = [
        Row(
            f"untraced runner, {runs} runs",
            rss_after,
            "MB",
            f"RSS {rss_before:.0f} -> {rss_after:.0f} MB ({rss_after - rss_before:+.1f});"
            f" {base_cpu:.1f}s CPU, {base_wall:.1f}s wall",
        )
    ]
    path = setting.tmp / "scale.db"
    backends: list[tuple[str, TraceConfig, Callable[[], int]]] = [
        (
            "otlp",
            TraceConfig(type="otlp", otlp={"endpoint": setting.sink.traces_url}),
            setting.sink_spans(),
        ),
        (
            "local",
            TraceConfig(type="local", local={"path": str(path)}),
            lambda: SpanStore(path).count()[0] if path.exists() else 0,
        ),
    ]
    for label, config, delivered in backends:
        wrapped = traced(fw.runner(), config)
        run = _modes(fw.build(wrapped))["run"]
        await run()
        wrapped.setup.flush()
        spans_before = delivered()
        cpu, wall, rss_before, _ = await _run_many(run, runs)
        flush_start = cpu_clock()
        wrapped.setup.flush()
        cpu += cpu_clock() - flush_start
        spans = max(delivered() - spans_before, 1)
        rss_after = rss_mb()
        wrapped.setup.shutdown()
        rows += [
            Row(
                f"to {label}: spans/s, one process",
                spans / wall,
                "/s",
                f"{spans} spans from {runs} runs in {wall:.1f}s wall (a loaded machine);"
                f" {spans / cpu:.0f} per CPU second",
            ),
            Row(
                f"to {label}: CPU per 1,000 spans, whole run",
                cpu / spans * 1e6,
                "ms",
                f"{cpu:.1f}s CPU; {spans / runs:g} spans/run",
            ),
            Row(
                f"to {label}: tracing CPU per 1,000 spans",
                (cpu - base_cpu) / spans * 1e6,
                "ms",
                "the whole run's minus the untraced runner's, same number of runs",
            ),
            Row(
                f"to {label}: RSS after {runs} more runs",
                rss_after,
                "MB",
                f"{rss_after - rss_before:+.1f} MB over the runs",
            ),
        ]
    return rows


async def profile(fw: Framework, runs: int, top: int) -> str:
    """Self time per function, traced (counting processor) minus untraced runner, per run.

    The two alternate in chunks of 20 runs, each chunk added to its own
    profiler, so warm-up, caches and the machine's load fall on both alike.
    cProfile sees the main thread only, timed in its own CPU time (``time.thread_time``),
    so neither the machine's load nor waits on other threads show up as self time.
    """
    plain = _modes(fw.build(fw.runner()))
    traced_modes = _modes(fw.build(traced(fw.runner(), COUNTING)))
    lines = []
    chunk = 20
    for mode in MODES:
        profilers = {label: cProfile.Profile(time.thread_time) for label in ("untraced", "traced")}
        calls = {"untraced": plain[mode], "traced": traced_modes[mode]}
        for call in calls.values():
            for _ in range(5):
                await call()
        gc.collect()
        for _ in range(max(1, runs // chunk)):
            for label, call in calls.items():
                profilers[label].enable()
                for _ in range(chunk):
                    await call()
                profilers[label].disable()
        done = max(1, runs // chunk) * chunk
        self_time: dict[str, float] = {}
        totals = {}
        for label, profiler in profilers.items():
            sign = 1.0 if label == "traced" else -1.0
            entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
            totals[label] = sum(entry[2] for entry in entries.values()) / done * 1e6
            for (file, _line, func), (_, _, tottime, _, _) in entries.items():
                key = f"{_short(file)}:{func}"
                self_time[key] = self_time.get(key, 0.0) + sign * tottime / done * 1e6
        extra = totals["traced"] - totals["untraced"]
        lines.append(
            f"{fw.name} {mode}: {totals['untraced']:.0f} -> {totals['traced']:.0f} us/run"
            f" of profiled self time ({extra:+.0f} us), {done} runs each"
        )
        by_area: dict[str, float] = {}
        for key, value in self_time.items():
            by_area[_area(key)] = by_area.get(_area(key), 0.0) + value
        for area, value in sorted(by_area.items(), key=lambda kv: -abs(kv[1]))[:8]:
            lines.append(f"  {area:32} {value:+8.0f} us/run")
        for key, value in sorted(self_time.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"    {key[:72]:72} {value:+7.1f}")
    return "\n".join(lines)


_AREAS = (
    ("runnertrace/tracing", "runnertrace tracing"),
    ("runnertrace/runners", "runnertrace runner"),
    ("runnertrace", "runnertrace core"),
    ("opentelemetry", "OTel SDK/API"),
    ("stdlib/", "stdlib"),
    ("~:", "builtins"),
)


def _short(file: str) -> str:
    """A profile entry's file, short: site-packages relative, ``src/`` relative, or stdlib."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    if "/src/" in file:
        return file.split("/src/", 1)[1]
    if file == "~" or file.startswith("<"):
        return file
    if "/lib/python3" in file:
        return "stdlib/" + file.rsplit("/", 1)[-1]
    return file.rsplit("/", 1)[-1]


def _area(key: str) -> str:
    for prefix, area in _AREAS:
        if key.startswith(prefix):
            return area
    if key.startswith("<frozen"):
        return "stdlib"
    head = key.split("/", 1)[0] if "/" in key else key.split(":", 1)[0]
    return f"framework and others ({head})"


# -- reporting ---------------------------------------------------------------------------------
def ratios(variant: Variant, base: Variant, mode: str) -> list[float]:
    mine, theirs = variant.times[mode], base.times[mode]
    return [mine[i] / theirs[i] for i in sorted(mine) if i in theirs]


def _median_ratio(named: dict[str, Variant], name: str, base: str, mode: str) -> float | None:
    if name not in named or base not in named:
        return None
    values = ratios(named[name], named[base], mode)
    return statistics.median(values) if values else None


def table(variants: list[Variant]) -> list[dict[str, Any]]:
    """One row per variant and mode: ratio to plain (median, IQR), us/run, spans/run."""
    base = next(v for v in variants if v.name == BASELINE)
    rows = []
    for mode in MODES:
        for variant in variants:
            if variant.failure is not None or not variant.times[mode]:
                continue
            values = ratios(variant, base, mode)
            spans, runs = variant.counted[mode]
            quartiles = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
            rows.append(
                {
                    "variant": variant.name,
                    "mode": mode,
                    "ratio": statistics.median(values),
                    "iqr": [quartiles[0], quartiles[2]],
                    "us_per_run": statistics.median(variant.times[mode].values()) * 1e6,
                    "spans_per_run": spans / runs if runs else float("nan"),
                    "what": variant.what,
                    "peer": variant.name not in OUR_NAMES,
                }
            )
    return rows


def print_variants(rows: list[dict[str, Any]], variants: list[Variant]) -> None:
    header = (
        f"{'variant':16} {'mode':6} {'vs plain: median (IQR)':>26} {'us/run':>8} {'spans/run':>9}"
    )
    print(header)
    print("-" * (len(header) + 44))
    for row in rows:
        low, high = row["iqr"]
        ratio = f"{row['ratio']:.3f}x ({low:.2f}-{high:.2f})"
        print(
            f"{row['variant']:16} {row['mode']:6} {ratio:>26} {row['us_per_run']:8.0f}"
            f" {row['spans_per_run']:9.1f}  {row['what']}"
        )
    for variant in variants:
        if variant.failure is not None:
            print(f"{variant.name}: {variant.failure}")
        for leak in variant.leaks:
            print(f"LEAK: {leak}")


def goal_rows(variants: list[Variant]) -> list[Row]:
    named = _by_name(variants)
    peers = [v.name for v in variants if v.name not in OUR_NAMES and v.failure is None]
    rows: list[Row] = []
    for mode in MODES:
        for name, base, target, label in (
            ("runner", BASELINE, GOAL_UNTRACED_RUNNER, "untraced runner / own call"),
            ("rt-otlp", BASELINE, GOAL_TRACED, "runnertrace OTLP / own call (stretch)"),
            ("rt-otlp", "runner", None, "runnertrace OTLP / untraced runner"),
        ):
            value = _median_ratio(named, name, base, mode)
            if value is not None:
                rows.append(Row(f"{label}, {mode}", value, "x", f"{name} over {base}", target))
        rows.extend(_versus_peers(named, peers, mode))
    return rows


def _versus_peers(named: dict[str, Variant], peers: list[str], mode: str) -> list[Row]:
    """Each OTLP variant of ours over the cheapest peer: below 1 beats every peer measured."""
    known = {n: v for n in peers if (v := _median_ratio(named, n, BASELINE, mode)) is not None}
    if not known:
        return []
    cheapest = min(known, key=lambda n: known[n])
    detail = ", ".join(f"{n} {v:.2f}x" for n, v in known.items())
    rows = []
    for name in OURS:
        ours = _median_ratio(named, name, BASELINE, mode)
        if ours is not None:
            label = f"{name} / cheapest peer ({cheapest}), {mode}"
            rows.append(Row(label, ours / known[cheapest], "x", detail, GOAL_TRACED_VS_PEERS))
    return rows


def _row_json(row: Row) -> dict[str, Any]:
    return {
        "label": row.label,
        "value": row.value,
        "unit": row.unit,
        "detail": row.detail,
        "verdict": row.verdict,
    }


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
async def run_framework(fw: Framework, args: argparse.Namespace) -> dict[str, Any]:
    if args.profile:
        report = await profile(fw, args.profile_runs, top=12)
        print(report)
        return {"framework": fw.name, "profile": report}
    if args.scale_only:
        with ExitStack() as stack:
            sink = SinkProcess()
            stack.callback(sink.stop)
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            rows = await measure_scale(fw, Setting(sink, tmp, None), args.scale_runs or 1000)
        print(f"\n{fw.name}: throughput and memory, one process (python {sys.version.split()[0]})")
        print_table(rows)
        return {"framework": fw.name, "goals": [_row_json(r) for r in rows]}
    rounds = args.rounds or (2 if args.quick else DEFAULT_ROUNDS)
    runs = 2 if args.quick else RUNS_PER_BATCH
    only = MACHINERY_VARIANTS if args.machinery else None
    variants, stack, setting, skipped = await measure(
        fw, 1 if args.machinery else rounds, runs, warmup=1 if args.quick else 4, only=only
    )
    with stack:
        rows = goal_rows(variants)
        if args.machinery:
            rows = await measure_machinery(variants, runs, budget_s=args.machinery_s)
        elif not args.quick:
            rows += await measure_machinery(variants, runs, budget_s=8)
        if args.scale_runs:
            rows += await measure_scale(fw, setting, args.scale_runs)
        data = table(variants)
        print(f"\n{fw.name}: runnertrace and its peers (python {sys.version.split()[0]})")
        print(f"{rounds} interleaved rounds, {runs} runs per batch; CPU per run, flush included\n")
        print_variants(data, variants)
        print()
        print_table(rows)
        return {
            "framework": fw.name,
            "rounds": rounds,
            "runs": runs,
            "variants": data,
            "skipped": skipped,
            "leaks": [leak for v in variants for leak in v.leaks],
            "failures": {v.name: v.failure for v in variants if v.failure is not None},
            "goals": [_row_json(r) for r in rows],
        }


def _child(name: str, argv: list[str], json_dir: Path) -> tuple[int, Path]:
    """``--framework name`` in a process of its own (CrewAI: in its own venv)."""
    out = json_dir / f"{name}.json"
    env = dict(os.environ)
    python = sys.executable
    if name == "crewai":
        if not Path(CREWAI_PYTHON).exists():
            print(f"crewai: skipped: no CrewAI interpreter at {CREWAI_PYTHON}")
            return 0, out
        python = CREWAI_PYTHON
        env["HOME"] = tempfile.mkdtemp(prefix="peers-crewai-home-")
    done = subprocess.run(
        [python, str(Path(__file__)), "--framework", name, "--json", str(out), *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done.returncode, out


def _child_argv(args: argparse.Namespace) -> list[str]:
    """The options of this run, for each framework's process."""
    argv = ["--quick"] if args.quick else []
    if args.rounds:
        argv += ["--rounds", str(args.rounds)]
    if args.scale_runs:
        argv += ["--scale-runs", str(args.scale_runs)]
    if args.scale_only:
        argv += ["--scale-only"]
    if args.profile:
        argv += ["--profile", "--profile-runs", str(args.profile_runs)]
    if args.machinery:
        argv += ["--machinery", "--machinery-s", str(args.machinery_s)]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--framework", default="pydantic-ai", help=f"one of {', '.join(FRAMEWORKS)}, or all"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run, seconds per framework")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--scale-runs",
        type=int,
        default=0,
        help="also throughput and RSS over this many traced runs per backend",
    )
    parser.add_argument(
        "--scale-only", action="store_true", help="only the throughput and RSS of --scale-runs"
    )
    parser.add_argument("--profile", action="store_true", help="differential cProfile instead")
    parser.add_argument(
        "--machinery",
        action="store_true",
        help="only our machinery per run against the bare spans (no peers, no table)",
    )
    parser.add_argument("--machinery-s", type=float, default=8.0, help="its budget per mode")
    parser.add_argument("--profile-runs", type=int, default=400)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.framework == "all":
        passed = _child_argv(args)
        results, codes = [], {}
        with tempfile.TemporaryDirectory() as json_dir:
            for name in FRAMEWORKS:
                code, out = _child(name, passed, Path(json_dir))
                codes[name] = code
                if out.exists():
                    results.append(json.loads(out.read_text()))
        if not (args.profile or args.scale_only):
            print_summary(results)
            print()
            print_table(import_rows(3 if args.quick else IMPORT_SAMPLES))
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1))
        print(f"\ntook {time.perf_counter() - started:.1f}s; exit codes {codes}")
        return max(codes.values(), default=0)
    if args.framework not in FRAMEWORKS:
        parser.error(
            f"--framework: unknown {args.framework!r}; one of {', '.join(FRAMEWORKS)}, all"
        )
    fw = FRAMEWORKS[args.framework]
    try:
        fw.fresh_native()
    except ImportError as exc:
        print(f"{fw.name}: skipped, not installed in this interpreter: {exc}")
        if args.json is not None:
            args.json.write_text(json.dumps({"framework": fw.name, "not_installed": str(exc)}))
        return 0
    result = asyncio.run(run_framework(fw, args))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    print(f"\ntook {time.perf_counter() - started:.1f}s")
    return 0


def print_summary(results: list[dict[str, Any]]) -> None:
    """Ours against the cheapest peer, per framework and mode."""
    print("\nsummary: runnertrace OTLP against the cheapest peer, per framework and mode")
    columns = ("rt-otlp", 8), ("+content", 9), ("cheapest peer", 24), ("ours/peer", 9)
    print(f"{'framework':14} {'mode':6} " + " ".join(f"{n:>{w}}" for n, w in columns))
    for result in results:
        if "variants" not in result:
            print(f"{result['framework']:14} not run: {result.get('not_installed', 'no result')}")
            continue
        for mode in MODES:
            rows = {r["variant"]: r for r in result["variants"] if r["mode"] == mode}
            peers = [r for r in rows.values() if r["peer"]]
            ours = rows.get("rt-otlp")
            content = rows.get("rt-otlp+content")
            if ours is None:
                continue
            if peers:
                cheapest = min(peers, key=lambda r: r["ratio"])
                peer = f"{cheapest['variant']} {cheapest['ratio']:.2f}x"
                versus = f"{ours['ratio'] / cheapest['ratio']:.2f}x"
            else:
                peer, versus = "none installed", "-"
            with_content = f"{content['ratio']:.2f}x" if content else "-"
            print(
                f"{result['framework']:14} {mode:6} {ours['ratio']:7.2f}x {with_content:>9}"
                f" {peer:>24} {versus:>9}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
