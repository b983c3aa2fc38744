"""TracingRunner under stress: cancellation at every index, concurrency, malformed streams."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.backends import MEMORY
from tests.tracing_helpers import (
    ForeignAgent,
    ForeignRunner,
    ForeignSession,
    OpenSpanTracker,
    cancel_and_settle,
    scripted_events,
)

from runnertrace import traced
from runnertrace.core import events as ev
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.setup import get_tracing_setup

N_EVENTS = len(scripted_events())


def no_detach_failures(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert not bad, bad


@pytest.fixture
def tracked() -> Any:
    with capture_spans() as captured:
        tracker = OpenSpanTracker()
        captured.provider.add_span_processor(tracker)
        yield captured, tracker


@pytest.mark.parametrize("index", range(N_EVENTS))
async def test_aclose_at_every_index_leaves_nothing_open(
    index: int, tracked: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    captured, tracker = tracked
    base = ForeignRunner()
    stream = traced(base).stream(ForeignAgent(), ForeignSession(), [])
    for _ in range(index + 1):
        await stream.__anext__()
    await stream.aclose()
    assert tracker.started > 0
    assert tracker.open == {}
    assert base.closed  # the base stream was closed too
    root = captured.by_name("invoke_agent foreign")[0]
    assert (root.attributes or {})["runnertrace.cancelled"] is True
    no_detach_failures(caplog)


@pytest.mark.parametrize("index", range(N_EVENTS))
async def test_cancelled_consumer_task_at_every_index(
    index: int, tracked: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    captured, tracker = tracked
    reached = asyncio.Event()

    async def consume() -> None:
        count = 0
        async for _ in traced(ForeignRunner(pause=0.001)).stream(
            ForeignAgent(), ForeignSession(), []
        ):
            count += 1
            if count == index + 1:
                reached.set()
                await asyncio.sleep(10)  # cancelled here, mid-stream

    task = asyncio.create_task(consume())
    await reached.wait()
    await cancel_and_settle(task)
    root = captured.by_name("invoke_agent foreign")[0]
    assert (root.attributes or {})["runnertrace.cancelled"] is True
    assert tracker.open == {}
    no_detach_failures(caplog)


@pytest.mark.parametrize("index", range(N_EVENTS))
async def test_abandoned_stream_closed_later_by_the_loop(
    index: int, tracked: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _captured, tracker = tracked

    async def consume_some() -> None:
        stream = traced(ForeignRunner()).stream(ForeignAgent(), ForeignSession(), [])
        for _ in range(index + 1):
            await stream.__anext__()
        # dropped without aclose: the event loop's async-generator finaliser closes it

    await asyncio.create_task(consume_some())
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
    assert tracker.open == {}
    no_detach_failures(caplog)


async def test_timeout_mid_stream_ends_every_span(tracked: Any) -> None:
    captured, tracker = tracked

    async def consume() -> None:
        async for _ in traced(ForeignRunner(pause=0.05)).stream(
            ForeignAgent(), ForeignSession(), []
        ):
            pass

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(consume(), timeout=0.12)
    assert tracker.open == {}
    root = captured.by_name("invoke_agent foreign")[0]
    assert (root.attributes or {})["error.type"] == "CancelledError"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_thousand_concurrent_runs_never_cross_link(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    runner = traced(_Interleaving())
    await asyncio.gather(*(_one(runner, mode, f"s{i}") for i in range(1000)))
    _assert_separate_traces(captured_spans.spans, 1000)
    no_detach_failures(caplog)


class _Interleaving(ForeignRunner):
    """Yields to the loop before every event, so concurrent runs interleave fully."""

    async def stream(self, agent: Any, session: Any, requests: Any) -> Any:
        for event in scripted_events(prefix=session.id):
            await asyncio.sleep(0)
            yield event

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        from runnertrace.core.observer import claim_observer

        with claim_observer() as report:
            for event in scripted_events(prefix=session.id):
                await asyncio.sleep(0)
                report(event)
        return self.reply


async def _one(runner: Any, mode: str, session_id: str) -> None:
    session = ForeignSession(id=session_id)
    if mode == "run":
        await runner.run(ForeignAgent(), session, [])
    else:
        async for _ in runner.stream(ForeignAgent(), session, []):
            pass


def _assert_separate_traces(spans: Sequence[Any], runs: int) -> None:
    """``runs`` traces of 7 spans, each with one root, one session and no foreign parent."""
    by_trace: dict[int, list[Any]] = defaultdict(list)
    for span in spans:
        by_trace[span.context.trace_id].append(span)
    assert len(by_trace) == runs
    for trace in by_trace.values():
        assert len(trace) == 7
        assert len({(s.attributes or {})["gen_ai.conversation.id"] for s in trace}) == 1
        ids = {s.context.span_id for s in trace}
        roots = [s for s in trace if s.parent is None]
        assert len(roots) == 1
        assert all(s.parent.span_id in ids for s in trace if s.parent is not None)


def test_runs_on_many_threads_each_with_its_own_loop_never_cross_link() -> None:
    """One runner and one pipeline shared by 4 threads, each running 50 runs on its own loop."""
    config = TraceConfig(type="tests.backends.MemoryBackend")
    MEMORY.clear()
    runner = traced(_Interleaving(), config)
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(thread: int) -> None:
        async def runs() -> None:
            await asyncio.gather(
                *(_one(runner, ("run", "stream")[i % 2], f"t{thread}-{i}") for i in range(50))
            )

        start.wait()
        try:
            asyncio.run(runs())
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert get_tracing_setup(config).flush()
    _assert_separate_traces(MEMORY.get_finished_spans(), 200)
    MEMORY.clear()


EVENT_IDS = st.sampled_from(["a", "b", "c"])
RANDOM_EVENT = st.one_of(
    st.builds(ev.StepStart, step_name=EVENT_IDS, step_index=st.none() | st.integers(0, 2)),
    st.builds(ev.StepEnd, step_name=EVENT_IDS, step_index=st.none() | st.integers(0, 2)),
    st.builds(ev.MessageStart, message_id=EVENT_IDS, model=st.none() | st.just("m")),
    st.builds(ev.TextDelta, message_id=EVENT_IDS, delta=st.text(max_size=5)),
    st.builds(ev.MessageEnd, message_id=EVENT_IDS, input_tokens=st.none() | st.integers(0, 9)),
    st.builds(ev.ReasoningStart, message_id=EVENT_IDS),
    st.builds(ev.ReasoningDelta, message_id=EVENT_IDS, delta=st.text(max_size=5)),
    st.builds(ev.ReasoningEnd, message_id=EVENT_IDS),
    st.builds(ev.ToolCallStart, tool_call_id=EVENT_IDS, tool_name=st.just("t")),
    st.builds(ev.ToolCallArgs, tool_call_id=EVENT_IDS, delta=st.text(max_size=5)),
    st.builds(ev.ToolCallEnd, tool_call_id=EVENT_IDS),
    st.builds(ev.ToolCallResult, tool_call_id=EVENT_IDS, content=st.text(max_size=5)),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(RANDOM_EVENT, max_size=30), mode=st.sampled_from(["run", "stream"]))
def test_malformed_streams_pass_through_and_every_span_ends(events: list[Any], mode: str) -> None:
    async def go() -> list[Any]:
        runner = traced(ForeignRunner(events))
        if mode == "run":
            await runner.run(ForeignAgent(), ForeignSession(), [])
            return events
        return [e async for e in runner.stream(ForeignAgent(), ForeignSession(), [])]

    with capture_spans() as captured:
        tracker = OpenSpanTracker()
        captured.provider.add_span_processor(tracker)
        received = asyncio.run(go())
        assert len(received) == len(events)
        assert all(a is b for a, b in zip(received, events, strict=True))
        assert tracker.open == {}
        assert len(captured.by_name("invoke_agent foreign")) == 1
