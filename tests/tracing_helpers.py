"""Shared pieces for the tracing tests: a foreign runner, an open-span tracker."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyText
from runnertrace.core.observer import claim_observer
from runnertrace.testing import CapturedSpans


@dataclass
class ForeignAgent:
    name: str = "foreign"


@dataclass
class ForeignSession:
    id: str = "sess-1"


def scripted_events(prefix: str = "") -> list[ev.StreamEvent]:
    """A well-formed two-step run: a tool call, then an answer, with reasoning."""
    m1, m2, call = f"{prefix}m1", f"{prefix}m2", f"{prefix}c1"
    return [
        ev.StepStart(step_name="plan", step_index=0),
        ev.MessageStart(message_id=m1, model="fake-model", provider="fake"),
        ev.ReasoningStart(message_id=f"{m1}r"),
        ev.ReasoningDelta(message_id=f"{m1}r", delta="thinking"),
        ev.ReasoningEnd(message_id=f"{m1}r"),
        ev.ToolCallStart(tool_call_id=call, tool_name="lookup", parent_message_id=m1),
        ev.ToolCallArgs(tool_call_id=call, delta='{"q": '),
        ev.ToolCallArgs(tool_call_id=call, delta='"x"}'),
        ev.ToolCallEnd(tool_call_id=call),
        ev.MessageEnd(message_id=m1, finish_reason="tool_calls", input_tokens=10, output_tokens=2),
        ev.ToolCallResult(tool_call_id=call, content="found"),
        ev.StepEnd(step_name="plan", step_index=0),
        ev.StepStart(step_name="answer", step_index=1),
        ev.MessageStart(message_id=m2, model="fake-model", provider="fake"),
        ev.TextDelta(message_id=m2, delta="Hello "),
        ev.TextDelta(message_id=m2, delta="world"),
        ev.MessageEnd(message_id=m2, finish_reason="stop", input_tokens=12, output_tokens=2),
        ev.StepEnd(step_name="answer", step_index=1),
    ]


class ForeignRunner:
    """A runner we did not write: not a subclass of ours, duck-typed events.

    ``run`` reports its events through the observer channel when ``report`` is
    true; ``stream`` yields them, optionally pausing so tests can cancel mid-way.
    """

    framework = "foreign"

    def __init__(
        self,
        events: Sequence[Any] | None = None,
        *,
        fail_at: int | None = None,
        error: BaseException | None = None,
        report: bool = True,
        pause: float = 0.0,
    ) -> None:
        self.events = list(events if events is not None else scripted_events())
        self.fail_at = fail_at
        self.error = error or RuntimeError("boom")
        self.report = report
        self.pause = pause
        self.reply = AgentReplyText(text="Hello world", prompt="hi")
        self.calls: list[tuple[Any, Any, Any]] = []
        self.closed = False

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        self.calls.append((agent, session, requests))
        with claim_observer() as report:
            for i, event in enumerate(self.events):
                if i == self.fail_at:
                    raise self.error
                if self.report:
                    report(event)
        return self.reply

    async def stream(self, agent: Any, session: Any, requests: Any) -> AsyncIterator[Any]:
        self.calls.append((agent, session, requests))
        try:
            for i, event in enumerate(self.events):
                if i == self.fail_at:
                    raise self.error
                if self.pause:
                    await asyncio.sleep(self.pause)
                yield event
        finally:
            self.closed = True


class OpenSpanTracker(SpanProcessor):
    """Counts spans started and ended, to prove nothing stays open."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}
        self.started = 0
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        with self._lock:
            self.started += 1
            self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.open.pop(span.context.span_id, None)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    @classmethod
    def on(cls, captured: CapturedSpans, caplog: Any = None) -> OpenSpanTracker:
        """A tracker on ``captured``'s provider; with ``caplog``, DEBUG records are kept
        (for :func:`assert_nothing_left_open` to see OpenTelemetry's detach errors)."""
        if caplog is not None:
            caplog.set_level(logging.DEBUG)
        tracker = cls()
        captured.provider.add_span_processor(tracker)
        return tracker


def detach_failures(caplog: Any) -> list[logging.LogRecord]:
    """OpenTelemetry's "Failed to detach context" records: a context token reset in a
    context other than the one that set it (a span closed from the wrong task)."""
    return [r for r in caplog.records if "Failed to detach context" in r.getMessage()]


def assert_nothing_left_open(tracker: OpenSpanTracker, caplog: Any) -> None:
    """After a run was closed or cancelled: spans were started, every one ended, no
    context token was detached in another context, and no span of ours is current."""
    assert tracker.started > 0
    assert tracker.open == {}
    bad = detach_failures(caplog)
    assert not bad, bad
    assert trace_api.get_current_span() is trace_api.INVALID_SPAN


async def cancel_and_settle(task: asyncio.Task[Any]) -> None:
    """Cancel ``task``, check that it ends cancelled, then let finalisers run.

    An abandoned async generator is closed by the loop later, so collect and
    yield a few times before asserting that nothing was left open.
    """
    import pytest

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
