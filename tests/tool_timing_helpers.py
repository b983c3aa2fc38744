"""What the tool-timing tests share: a tool that notes when it really ran, and the checks.

An ``execute_tool`` span is the tool's execution (GenAI semconv), so it must start
when the framework starts the tool and end when the result comes back, not when
the model announced the call. Each framework's test builds an agent whose one tool
is :meth:`ToolClock.run`, drives it in run and stream mode, with and without a
model that keeps streaming after it announced the call, and hands the spans to
:func:`assert_tool_spans_time_the_tool`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan

from runnertrace.testing import CapturedSpans

TOOL_SECONDS = 0.005
"""How long the probe tool works."""
LINGER_SECONDS = 0.3
"""How long a lingering model streams on after it announced the tool call."""
SLACK_NS = 1_000_000
"""How far a span may start before the tool's entry, or end after its exit."""
LINGERS = [0.0, LINGER_SECONDS]
CITIES = ("Oslo", "Rome")
"""The two calls each test's model asks for, in one response."""


@dataclass
class ToolClock:
    """Records ``(entry_ns, exit_ns)`` of each run of the probe tool (by ``time.time_ns``),
    keyed by its ``city`` argument: each test's model asks for :data:`CITIES`."""

    runs: dict[str, tuple[int, int]] = field(default_factory=dict)

    def run(self, city: str) -> str:
        """The tool's body for sync tools."""
        entry = time.time_ns()
        time.sleep(TOOL_SECONDS)
        self.runs[city] = (entry, time.time_ns())
        return f"sunny in {city}"

    async def arun(self, city: str) -> str:
        """The tool's body for async tools."""
        entry = time.time_ns()
        await asyncio.sleep(TOOL_SECONDS)
        self.runs[city] = (entry, time.time_ns())
        return f"sunny in {city}"


def _by_id(spans: CapturedSpans) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans.spans}


def assert_tool_spans_time_the_tool(
    spans: CapturedSpans, clock: ToolClock, *, tool: str = "weather", step: str
) -> None:
    """Each ``execute_tool`` span brackets its tool's run within :data:`SLACK_NS`, and is a
    child of the step ``step`` that ran it, ending before that step does."""
    tool_spans = spans.by_name(f"execute_tool {tool}")
    assert sorted(clock.runs) == sorted(CITIES), "the tool did not run once per call"
    assert len(tool_spans) == len(CITIES), [s.name for s in spans.spans]
    by_id = _by_id(spans)
    for span in tool_spans:
        assert span.attributes is not None
        city = json.loads(str(span.attributes["gen_ai.tool.call.arguments"]))["city"]
        entry, exit_ = clock.runs[city]
        assert span.start_time is not None and span.end_time is not None
        early = entry - span.start_time
        late = span.end_time - exit_
        assert 0 <= early <= SLACK_NS, f"span starts {early / 1e6:.3f} ms before the tool"
        assert 0 <= late <= SLACK_NS, f"span ends {late / 1e6:.3f} ms after the tool"
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        assert parent.name == f"agent_step {step}", parent.name
        assert parent.end_time is not None and span.end_time <= parent.end_time
        assert parent.start_time is not None and parent.start_time <= span.start_time
