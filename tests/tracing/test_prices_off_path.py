"""Pricing happens off the run's path (issue 32, item 5).

A model call that ends while the price table is still loading does not wait for it:
the run goes on and returns, and the call's span (with its cost) and the spans of the
runs whose totals depend on it end once the table is ready, as they would have ended
had it been there. Each test holds the loader on an event (the ``_read_table`` seam),
so "the run did not wait" is a fact checked by state, not by a clock.

Nothing that waits is lost: every way out ends it first (priced, or unpriced and said
so on its run when the table is not there in time). Our pipeline's flush and shutdown,
an app provider's own ``force_flush`` and ``shutdown`` (with the SDK's simple and batch
processors), one the app installs after our pipeline was built, the process's exit
ahead of the app provider's own exit hook, and a fork (in fresh processes: the table
must be cold there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.backends import MEMORY
from tests.nesting_helpers import Outer, call, drive, inner_traced_runner
from tests.tracing_helpers import ForeignAgent, ForeignRunner

from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A
from runnertrace.tracing import cost
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.runner import traced
from runnertrace.tracing.setup import get_tracing_setup

MODES = ["run", "stream"]
PRICED = {"model": "gpt-4o", "provider": "openai"}


class HeldTable:
    """A fresh, not yet loaded price table whose loader blocks until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        read = cost._read_table  # noqa: SLF001 - our own module's seam for holding the load
        for name, value in {
            "_loaded": threading.Event(),
            "_settled": threading.Event(),
            "_gave_up": threading.Event(),
            "_load_state": {"started": False, "available": True},
            "_rates": {},
            "_pending": deque(),
        }.items():
            monkeypatch.setattr(cost, name, value)

        def held() -> None:
            self.entered.set()
            self.release.wait()
            read()

        monkeypatch.setattr(cost, "_read_table", held)

    def still_loading(self) -> bool:
        return self.entered.is_set() and not self.release.is_set() and cost.prices_pending()


@pytest.fixture
def held_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldTable]:
    table = HeldTable(monkeypatch)
    yield table
    table.release.set()  # the loader ends (and settles) before the module's state is restored
    cost.settle_prices(cost.LOAD_WAIT_S + 1.0)
    # Both threads read the held events: left running, the settling thread would wait
    # on an event nobody sets any more and say "still loading" during a later test.
    for thread in threading.enumerate():
        if thread.name.startswith("runnertrace-prices"):
            thread.join(cost.LOAD_WAIT_S + 5.0)


def ended(spans: CapturedSpans) -> list[str]:
    """The names of the spans ended so far, without settling what is pending."""
    return [s.name for s in spans.exporter.get_finished_spans()]


TIMINGS = {A.TTFC, A.TTFC_LOGFIRE}  # measured per run: the one value two runs do not share


def attributes(spans: CapturedSpans, name: str) -> list[dict[str, Any]]:
    """Each span's attributes in their order, its measured timings left out."""
    return [
        {k: v for k, v in (s.attributes or {}).items() if k not in TIMINGS}
        for s in spans.by_name(name)
    ]


def two_priced_calls() -> Any:
    return traced(ForeignRunner([*call("a", 1000, 100, **PRICED), *call("b", 3000, 20, **PRICED)]))


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_that_ends_before_the_table_loads_is_priced_and_the_run_did_not_wait(
    mode: str, held_table: HeldTable, captured_spans: CapturedSpans
) -> None:
    await drive(two_priced_calls(), mode, ForeignAgent("early"))
    # the run returned while the loader was still blocked: nothing priced has ended yet
    assert held_table.still_loading()
    assert "chat gpt-4o" not in ended(captured_spans)
    assert "invoke_agent early" not in ended(captured_spans)
    held_table.release.set()
    early_chats = attributes(captured_spans, "chat gpt-4o")  # settles: the spans end now
    (early_run,) = attributes(captured_spans, "invoke_agent early")
    captured_spans.clear()

    await drive(two_priced_calls(), mode, ForeignAgent("early"))  # the table is loaded now
    # priced on the run's path, as before: ended when the run returns, nothing settled
    assert not cost.prices_pending()
    assert ended(captured_spans).count("chat gpt-4o") == 2
    assert "invoke_agent early" in ended(captured_spans)
    late_chats = attributes(captured_spans, "chat gpt-4o")
    (late_run,) = attributes(captured_spans, "invoke_agent early")

    # the same attributes, in the same order, with the same values as when the table is there
    assert [list(c.items()) for c in early_chats] == [list(c.items()) for c in late_chats]
    assert list(early_run.items()) == list(late_run.items())
    costs = [c[A.COST] for c in early_chats]
    assert costs == [(1000 * 2.5 + 100 * 10) / 1e6, (3000 * 2.5 + 20 * 10) / 1e6]
    assert early_run[A.AGG_COST] == costs[0] + costs[1] and A.UNPRICED_CALLS not in early_run


async def test_capture_spans_read_after_its_block_has_the_calls_that_waited(
    held_table: HeldTable,
) -> None:
    """The block's end shuts its provider down: what waits for the table ends first,
    into the block's exporter, so reading after the block finds every span."""
    from runnertrace.testing import capture_spans

    with capture_spans() as captured:
        await drive(two_priced_calls(), "run", ForeignAgent("after"))
        assert held_table.still_loading() and "chat gpt-4o" not in ended(captured)
        held_table.release.set()
    assert ended(captured).count("chat gpt-4o") == 2
    assert ended(captured).count("invoke_agent after") == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_nested_run_that_waits_keeps_its_parents_totals_and_end_order(
    mode: str, held_table: HeldTable, captured_spans: CapturedSpans
) -> None:
    await drive(traced(Outer(inner_traced_runner(mode))), mode)
    assert held_table.still_loading()
    assert not {"invoke_agent outer", "invoke_agent inner"} & set(ended(captured_spans))
    held_table.release.set()
    early = attributes(captured_spans, "invoke_agent outer") + attributes(
        captured_spans, "invoke_agent inner"
    )
    spans = captured_spans.spans
    by_name = {s.name: s for s in spans}
    # each run span still ends at its own time: the inner run before the outer one
    inner_end = by_name["invoke_agent inner"].end_time or 0
    assert inner_end <= (by_name["invoke_agent outer"].end_time or 0)
    captured_spans.clear()

    await drive(traced(Outer(inner_traced_runner(mode))), mode)
    late = attributes(captured_spans, "invoke_agent outer") + attributes(
        captured_spans, "invoke_agent inner"
    )
    assert [list(a.items()) for a in early] == [list(a.items()) for a in late]
    assert early[0][A.UNPRICED_CALLS] == 3  # the fake models stay unpriced: partial, as before


async def test_a_table_that_never_loads_ends_the_pending_spans_unpriced_at_a_flush(
    held_table: HeldTable, captured_spans: CapturedSpans
) -> None:
    await drive(two_priced_calls(), "run", ForeignAgent("slow"))
    assert held_table.still_loading()
    assert cost.settle_prices(0.0)  # a flush whose time is up settles without the table
    chats = attributes(captured_spans, "chat gpt-4o")
    (run,) = attributes(captured_spans, "invoke_agent slow")
    assert [A.COST in c for c in chats] == [False, False]
    assert A.AGG_COST not in run and run[A.UNPRICED_CALLS] == 2
    # the spans ended while the loader was still held in its load
    assert any(t.name == "runnertrace-prices" and t.is_alive() for t in threading.enumerate())


# -- every provider's flush and shutdown paths end what waits ------------------------------------
PROCESSORS = {"simple": SimpleSpanProcessor, "batch": BatchSpanProcessor}


@pytest.fixture(params=sorted(PROCESSORS))
def app_provider(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The app's own SDK provider, as the global one (``trace.type: app`` joins it), with
    the SDK's simple or batch processor (the batch one only exports when flushed here)."""
    provider, exporter = TracerProvider(shutdown_on_exit=False), InMemorySpanExporter()
    if request.param == "batch":
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: provider)
    yield provider, exporter
    provider.shutdown()


def exported(exporter: InMemorySpanExporter, name: str) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in exporter.get_finished_spans() if s.name == name]


def two_priced_calls_in(config: TraceConfig) -> Any:
    events = [*call("a", 1000, 100, **PRICED), *call("b", 3000, 20, **PRICED)]
    return traced(ForeignRunner(events), config)


COSTS = [(1000 * 2.5 + 100 * 10) / 1e6, (3000 * 2.5 + 20 * 10) / 1e6]


async def test_an_app_providers_force_flush_ends_the_calls_that_wait_for_prices(
    held_table: HeldTable, app_provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = app_provider
    await drive(two_priced_calls_in(TraceConfig(type="app")), "run", ForeignAgent("early"))
    assert held_table.still_loading()
    assert exported(exporter, "chat gpt-4o") == []
    held_table.release.set()
    assert provider.force_flush()  # the app's own flush: it waits for the table, then exports
    assert [c[A.COST] for c in exported(exporter, "chat gpt-4o")] == COSTS
    (run,) = exported(exporter, "invoke_agent early")
    assert run[A.AGG_COST] == sum(COSTS) and A.UNPRICED_CALLS not in run


# The time is up for the batch processor's own flush too: its spans go at its next export.
@pytest.mark.parametrize("app_provider", ["simple"], indirect=True)
async def test_an_app_providers_flush_whose_time_is_up_ends_them_unpriced(
    held_table: HeldTable, app_provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = app_provider
    await drive(two_priced_calls_in(TraceConfig(type="app")), "stream", ForeignAgent("slow"))
    assert held_table.still_loading()
    provider.force_flush(1)  # the loader is held for good: the flush's time runs out first
    assert [A.COST in c for c in exported(exporter, "chat gpt-4o")] == [False, False]
    (run,) = exported(exporter, "invoke_agent slow")
    assert A.AGG_COST not in run and run[A.UNPRICED_CALLS] == 2


async def test_an_app_providers_shutdown_ends_the_calls_that_wait_before_its_exporters_close(
    held_table: HeldTable,
    app_provider: tuple[TracerProvider, InMemorySpanExporter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, exporter = app_provider
    await drive(two_priced_calls_in(TraceConfig(type="app")), "run", ForeignAgent("last"))
    assert held_table.still_loading()
    # The settling thread already waits out the full LOAD_WAIT_S; the shutdown's own
    # settle waits this much, then ends them unpriced, before the exporters shut.
    monkeypatch.setattr(cost, "LOAD_WAIT_S", 0.01)
    provider.shutdown()
    assert [A.COST in c for c in exported(exporter, "chat gpt-4o")] == [False, False]
    (run,) = exported(exporter, "invoke_agent last")
    assert run[A.UNPRICED_CALLS] == 2


async def test_our_own_providers_shutdown_ends_the_calls_that_wait(held_table: HeldTable) -> None:
    MEMORY.clear()
    config = TraceConfig(type="tests.backends.MemoryBackend")
    setup = get_tracing_setup(config)
    assert setup.owns_provider
    await drive(two_priced_calls_in(config), "run", ForeignAgent("own"))
    assert held_table.still_loading()
    held_table.release.set()
    assert setup.shutdown(10.0)
    assert [c[A.COST] for c in exported(MEMORY, "chat gpt-4o")] == COSTS
    (run,) = exported(MEMORY, "invoke_agent own")
    assert run[A.AGG_COST] == sum(COSTS)


# -- the end of the process, and a fork, while calls wait ----------------------------------------
REPO = Path(__file__).resolve().parents[2]

PROCESS_START = """
import asyncio, json, os, sys, threading
sys.path.insert(0, "tests")  # the helpers import each other as pytest puts them on the path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from runnertrace.tracing import attributes as A
from runnertrace.tracing import cost
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.runner import traced
from nesting_helpers import call, drive
from tracing_helpers import ForeignAgent, ForeignRunner

KEYS = (A.COST, A.AGG_COST, A.UNPRICED_CALLS)

class Closing(SpanExporter):
    '''Takes nothing once shut down, as real exporters do; says what it took (the chats
    and runs) when shut.'''
    def __init__(self):
        self.took, self.closed = [], False
    def export(self, spans):
        if self.closed:
            print(json.dumps({"refused": [s.name for s in spans]}), flush=True)
            return SpanExportResult.FAILURE
        for s in spans:
            if not s.name.startswith(("chat", "invoke_agent")):
                continue  # the steps: never priced, never wait
            attrs = s.attributes or {}
            self.took.append({"name": s.name, **{k: attrs[k] for k in KEYS if k in attrs}})
        return SpanExportResult.SUCCESS
    def shutdown(self):
        self.closed = True
        print(json.dumps({"took": self.took}), flush=True)

# The app's provider, with its own exit hook (the SDK's default): ours must come first.
provider, exporter = TracerProvider(), Closing()
provider.add_span_processor(SimpleSpanProcessor(exporter))
release = threading.Event()
read_table = cost._read_table
def held():
    release.wait()
    read_table()
cost._read_table = held  # the table loads only once released

def priced_run(name):
    events = [*call("a", 1000, 100, model="gpt-4o", provider="openai")]
    runner = traced(ForeignRunner(events), TraceConfig(type="app"))
    asyncio.run(drive(runner, "run", ForeignAgent(name)))
"""

AT_EXIT = """
trace.set_tracer_provider(provider)
priced_run("exiting")
assert cost.prices_pending() and not exporter.took  # the run is back, its call still waits
# The settling thread waits the full LOAD_WAIT_S; the exit's settle only this long.
cost.LOAD_WAIT_S = 0.01
"""


def run_probe(code: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNERTRACE_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROCESS_START) + textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_at_exit_the_calls_that_wait_end_before_the_apps_provider_shuts_down() -> None:
    (report,) = run_probe(AT_EXIT)  # nothing refused after the exporter shut
    assert report["took"] == [
        {"name": "chat gpt-4o"},  # the table never loaded: unpriced, and said so on its run
        {"name": "invoke_agent exiting", A.UNPRICED_CALLS: 1},
    ]


FORK = """
trace.set_tracer_provider(provider)

def before_fork():
    release.set()  # the newest before-fork hook runs first: cost's own one runs after it

os.register_at_fork(before=before_fork)
priced_run("parent")
assert cost.prices_pending() and not exporter.took
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    # The parent's spans ended before the fork: the child has them once, as a copy.
    copied = [t["name"] for t in exporter.took]
    exporter.took.clear()
    priced_run("child")  # the table came loaded: priced on the run's path, as before
    report = {"copied": copied, "pending": cost.prices_pending(), "took": exporter.took}
    os.write(write_end, json.dumps(report).encode())
    os._exit(0)
os.close(write_end)
# No flush: the fork waited for the calls that waited, so they ended in the parent.
print(json.dumps({"parent": list(exporter.took)}), flush=True)
with os.fdopen(read_end) as pipe:
    print(json.dumps({"child": json.loads(pipe.read())}), flush=True)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
exporter.took.clear()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_fork_while_calls_wait_ends_them_in_the_parent_and_leaves_the_child_its_prices() -> None:
    parent, child, at_exit = run_probe(FORK)
    priced = [{"name": "chat gpt-4o", A.COST: COSTS[0]}]
    assert parent == {"parent": [*priced, {"name": "invoke_agent parent", A.AGG_COST: COSTS[0]}]}
    assert child == {
        "child": {
            "copied": ["chat gpt-4o", "invoke_agent parent"],
            "pending": False,
            "took": [*priced, {"name": "invoke_agent child", A.AGG_COST: COSTS[0]}],
        }
    }
    assert at_exit == {"took": []}


INSTALLED_LATER = """
from runnertrace.tracing.setup import get_tracing_setup

setup = get_tracing_setup(TraceConfig(type="app"))  # built on the API's proxy
assert not isinstance(setup.provider, TracerProvider)
trace.set_tracer_provider(provider)  # then the app installs its SDK provider
priced_run("later")
assert cost.prices_pending() and not exporter.took
provider.force_flush(1)  # the loader is held for good: this flush's time runs out first
print(json.dumps({"flushed": list(exporter.took)}), flush=True)
"""


def test_a_provider_the_app_installs_after_our_pipeline_settles_at_its_flush() -> None:
    flushed, at_exit = run_probe(INSTALLED_LATER)
    unpriced = [{"name": "chat gpt-4o"}, {"name": "invoke_agent later", A.UNPRICED_CALLS: 1}]
    assert flushed == {"flushed": unpriced}
    assert at_exit == {"took": unpriced}


FORK_WHILE_STILL_LOADING = """
trace.set_tracer_provider(provider)
priced_run("parent")
assert cost.prices_pending() and not exporter.took
cost.LOAD_WAIT_S = 0.01  # the fork waits this (and a second) for the table: not enough
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    # The parent's waiting spans are the parent's to end: the child ends only its own.
    priced_run("child")
    provider.force_flush(1)
    report = {"pending": cost.prices_pending(), "took": exporter.took}
    os.write(write_end, json.dumps(report).encode())
    os._exit(0)
os.close(write_end)
with os.fdopen(read_end) as pipe:
    print(json.dumps({"child": json.loads(pipe.read())}), flush=True)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
provider.force_flush(1)
print(json.dumps({"parent": list(exporter.took)}), flush=True)
exporter.took.clear()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_fork_that_outwaits_the_load_leaves_the_parents_waiting_spans_to_the_parent() -> None:
    child, parent, _ = run_probe(FORK_WHILE_STILL_LOADING)
    assert child == {
        "child": {
            "pending": False,
            "took": [{"name": "chat gpt-4o"}, {"name": "invoke_agent child", A.UNPRICED_CALLS: 1}],
        }
    }
    assert parent == {
        "parent": [{"name": "chat gpt-4o"}, {"name": "invoke_agent parent", A.UNPRICED_CALLS: 1}]
    }
