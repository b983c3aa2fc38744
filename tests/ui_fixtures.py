"""A store for the dashboard's tests: real traced runs of the native agent, plus hand-made spans.

The native runs come from the real pipeline (TracingRunner, batch processor,
SQLite exporter); the hand-made spans carry what the native agent does not
produce offline: another framework, models, a ``gen_ai.usage.cost`` on chat
and run spans, a ``user.id``, and an error on a chat span.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SqliteSpanExporter
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing import get_tracing_setup
from runnertrace.tracing.config import Settings

MS = 1_000_000
TASKS = ("What is 1234 * 5678, plus 17?", "What is 100 divided by 0?", "Hello! What can you do?")
PRICEY_SESSION = "chat-42"


async def _native_runs(db: Path) -> None:
    settings = Settings(
        trace={
            "enabled": True,
            "type": "local",
            "local": {"path": str(db)},
            "capture_content": True,
        }
    )
    runtime = Runtime(settings=settings)
    for name, session_id in (("calc", "calc-session"), ("helper", "helper-session")):
        native = Agent(ScriptedLlm(), tools=[calculator], instructions="Use the tool.", name=name)
        agent = NativeModule([native], runtime=runtime).get(native)
        session = Session(session_id)
        for task in TASKS if name == "calc" else TASKS[2:]:
            await runtime.run(agent, session, [AgentRequestText(prompt=task)])
    get_tracing_setup(settings.trace).flush()


def hand_made_runs(db: Path, start_ns: int, count: int = 3) -> None:
    """``count`` runs of agent "pricey" (framework langgraph) with models, cost and a user."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("ui-test")
    for index in range(count):
        t = start_ns + index * 1000 * MS
        failed = index == count - 1
        run = tracer.start_span(
            "invoke_agent pricey",
            start_time=t,
            attributes={
                "runnertrace.span.type": "run",
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "pricey",
                "runnertrace.framework": "langgraph",
                "runnertrace.mode": "run",
                "gen_ai.conversation.id": PRICEY_SESSION,
                "user.id": "ada",
                "gen_ai.usage.cost": 0.0125 * (index + 1),
                "gen_ai.input.messages": (
                    '[{"role": "user", "parts": [{"type": "text", "content": '
                    f'"question {index} about <b>zebras</b>"}}]}}]'
                ),
                "gen_ai.output.messages": (
                    '[{"role": "assistant", "parts": [{"type": "text", "content": '
                    f'"answer {index}"}}]}}]'
                ),
            },
        )
        ctx = trace_api.set_span_in_context(run)
        model = "gpt-test-large" if index % 2 else "gpt-test-mini"
        chat = tracer.start_span(
            f"chat {model}",
            context=ctx,
            kind=SpanKind.CLIENT,
            start_time=t + 5 * MS,
            attributes={
                "runnertrace.span.type": "message",
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": 100 * (index + 1),
                "gen_ai.usage.output_tokens": 20,
                "gen_ai.usage.cost": 0.0125 * (index + 1),
            },
        )
        if failed:
            chat.set_attribute("error.type", "RateLimitError")
            chat.set_status(Status(StatusCode.ERROR, "429 slow down"))
        chat.end(end_time=t + (200 + 100 * index) * MS)
        tool = tracer.start_span(
            "execute_tool lookup",
            context=ctx,
            start_time=t + 210 * MS,
            attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": "lookup"},
        )
        tool.end(end_time=t + 260 * MS)
        if failed:
            run.set_attribute("error.type", "RateLimitError")
            run.set_status(Status(StatusCode.ERROR, "429 slow down"))
        run.end(end_time=t + 300 * MS)
    provider.shutdown()


def build_store(db: Path) -> Path:
    """The test store: 4 native runs (one with a failed tool) and 3 'pricey' runs."""
    asyncio.run(_native_runs(db))
    import time

    hand_made_runs(db, time.time_ns() - 3_600 * 1000 * MS)
    return db
