"""Pricing happens off the run's path (issue 32, item 5).

A model call that ends while the price table is still loading does not wait for it:
the run goes on and returns, and the call's span (with its cost) and the spans of the
runs whose totals depend on it end once the table is ready, as they would have ended
had it been there. Each test holds the loader on an event (the ``_read_table`` seam),
so "the run did not wait" is a fact checked by state, not by a clock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from tests.nesting_helpers import Outer, call, drive, inner_traced_runner
from tests.tracing_helpers import ForeignAgent, ForeignRunner

from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A
from runnertrace.tracing import cost
from runnertrace.tracing.runner import traced

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
    late_chats = attributes(captured_spans, "chat gpt-4o")
    (late_run,) = attributes(captured_spans, "invoke_agent early")

    # the same attributes, in the same order, with the same values as when the table is there
    assert [list(c.items()) for c in early_chats] == [list(c.items()) for c in late_chats]
    assert list(early_run.items()) == list(late_run.items())
    costs = [c[A.COST] for c in early_chats]
    assert costs == [(1000 * 2.5 + 100 * 10) / 1e6, (3000 * 2.5 + 20 * 10) / 1e6]
    assert early_run[A.AGG_COST] == costs[0] + costs[1] and A.UNPRICED_CALLS not in early_run


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
