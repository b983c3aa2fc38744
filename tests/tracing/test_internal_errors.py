"""The error boundary: faults are logged without feeding back into us, and the
pytest tolerance switch belongs to one context."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Mapping

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from opentelemetry.util.types import AttributeValue

from runnertrace import traced
from runnertrace._internal.errors import (
    handle_internal_errors,
    internal_log,
    report_internal_error,
    tolerate_internal_errors,
)
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing.backend import Backend

instrumentation_utils = pytest.importorskip("opentelemetry.instrumentation.utils")


# -- logging a fault cannot recurse into us ----------------------------------------------------
class TelemetryLoggingHandler(logging.Handler):
    """What a logging integration does (Logfire's handler, an OTel log bridge).

    Each record becomes telemetry in the application's pipeline, unless
    instrumentation is suppressed: then, like Logfire's handler, it falls back
    to plain output.
    """

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer
        self.fallback: list[str] = []
        self.as_telemetry: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not instrumentation_utils.is_instrumentation_enabled():
            self.fallback.append(record.getMessage())
            return
        self.as_telemetry.append(record.getMessage())
        with self.tracer.start_as_current_span(f"log {len(self.as_telemetry)}"):
            pass


class FaultyProcessor(SpanProcessor):
    """A pipeline stage of ours that fails on every span (a new call site each time)."""

    def on_end(self, span: ReadableSpan) -> None:
        with handle_internal_errors(f"processing {span.name}"):
            raise ValueError(f"cannot process {span.name}")


@pytest.fixture
def runnertrace_logger_handler() -> Iterator[TelemetryLoggingHandler]:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(FaultyProcessor())
    handler = TelemetryLoggingHandler(provider.get_tracer("app"))
    logger = logging.getLogger("runnertrace")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        provider.shutdown()


def test_an_internal_error_is_logged_with_instrumentation_suppressed(
    runnertrace_logger_handler: TelemetryLoggingHandler,
) -> None:
    """The record reaches the handler, but never as telemetry that could fail in us again."""
    with tolerate_internal_errors():
        report_internal_error("first", RuntimeError("original fault"))
    handler = runnertrace_logger_handler
    assert handler.as_telemetry == []
    assert len(handler.fallback) == 1
    assert "internal error in first" in handler.fallback[0]
    assert "original fault" in handler.fallback[0]


class FaultReportingHandler(logging.Handler):
    """A handler that pays no attention to suppression and fails in our code each time."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())
        report_internal_error(f"handler call {len(self.records)}", ValueError("handler fault"))


def test_a_fault_reported_while_logging_one_is_counted_not_logged() -> None:
    handler = FaultReportingHandler()
    logger = logging.getLogger("runnertrace")
    logger.addHandler(handler)
    try:
        with tolerate_internal_errors():
            report_internal_error("first", RuntimeError("original fault"))
    finally:
        logger.removeHandler(handler)
    assert len(handler.records) == 1
    assert "original fault" in handler.records[0]
    assert internal_log.suppressed == {"handler call 1": 1}


# -- tolerance is per context -------------------------------------------------------------------
def outcome_of_a_fault(where: str) -> str:
    try:
        report_internal_error(where, ValueError(where))
    except ValueError:
        return "raised"
    return "logged"


def test_tolerance_in_one_thread_does_not_reach_another() -> None:
    both_inside = threading.Barrier(2, timeout=10)
    both_done = threading.Barrier(2, timeout=10)
    outcomes: dict[str, str] = {}

    def tolerant() -> None:
        with tolerate_internal_errors():
            both_inside.wait()
            outcomes["tolerant"] = outcome_of_a_fault("tolerant thread")
            both_done.wait()

    def strict() -> None:
        both_inside.wait()  # the other thread is inside its tolerant block now
        outcomes["strict"] = outcome_of_a_fault("strict thread")
        both_done.wait()

    threads = [threading.Thread(target=tolerant), threading.Thread(target=strict)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert outcomes == {"tolerant": "logged", "strict": "raised"}


async def test_tolerance_in_one_task_does_not_reach_another() -> None:
    tolerant_inside = asyncio.Event()
    strict_done = asyncio.Event()

    async def tolerant() -> str:
        with tolerate_internal_errors():
            tolerant_inside.set()
            await strict_done.wait()  # stays inside while the other task reports
            return outcome_of_a_fault("tolerant task")

    async def strict() -> str:
        await tolerant_inside.wait()
        try:
            return outcome_of_a_fault("strict task")
        finally:
            strict_done.set()

    assert await asyncio.gather(tolerant(), strict()) == ["logged", "raised"]


# -- export threads always tolerate -------------------------------------------------------------
SEEN = InMemorySpanExporter()


class ToolMappingFailsBackend(Backend):
    """A backend whose attribute mapping (run on the export thread) fails for tool spans."""

    name = "tool-mapping-fails"

    def exporter(self) -> SpanExporter:
        return SEEN

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        if span.name.startswith("execute_tool"):
            raise ValueError("mapping bug")
        return None


async def test_a_fault_on_the_export_thread_is_logged_even_under_pytest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No test context reaches an export thread: the fault costs one span, not the batch."""
    SEEN.clear()
    caplog.set_level(logging.WARNING, logger="runnertrace")
    runner = traced(NativeRunner(), type="test_internal_errors.ToolMappingFailsBackend")
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    await runner.run(agent, Session("s"), [AgentRequestText(prompt="What is 2 * 3?")])
    assert runner.setup.flush()
    names = sorted(span.name for span in SEEN.get_finished_spans())
    assert names == sorted(
        ["invoke_agent math"] + ["agent_step math"] * 2 + ["chat scripted-1"] * 2
    )
    faults = [r for r in caplog.records if "mapping bug" in r.getMessage()]
    assert len(faults) == 1
    assert "tool-mapping-fails mapping" in faults[0].getMessage()
