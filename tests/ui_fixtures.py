"""A store for the dashboard's tests: real traced runs of the native agent, plus hand-made spans.

The native runs come from the real pipeline (TracingRunner, batch processor,
SQLite exporter), nested runs included (an agent a tool runs: :func:`team_runs`);
the hand-made spans carry what the native agent does not produce offline: another
framework, models, a ``gen_ai.usage.cost`` on chat spans and the run's totals on
its run span (as the tracing layer writes them), a ``user.id``, and an error on a
chat span.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from composition_checks import agent_figures, check_store_rows  # noqa: F401 - re-exported
from runnertrace.core import Agent as CoreAgent
from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SqliteSpanExporter
from runnertrace.runners.native import (
    Agent,
    LlmResponse,
    Message,
    NativeModule,
    NativeRunner,
    ScriptedLlm,
    ToolCall,
    Usage,
    calculator,
    tool,
)
from runnertrace.tracing import attributes as A
from runnertrace.tracing import get_tracing_setup
from runnertrace.tracing.config import Settings, TraceConfig
from runnertrace.tracing.runner import TracingRunner

MS = 1_000_000
TASKS = ("What is 1234 * 5678, plus 17?", "What is 100 divided by 0?", "Hello! What can you do?")
PRICEY_SESSION = "chat-42"
TEAM_SESSION = "team-7"


class PricedLlm(ScriptedLlm):
    """The scripted model under a provider with list prices: its calls get a cost
    (``gpt-4o``: $2.50 in, $10 out per million tokens)."""

    provider = "openai"


def _ask(
    call_id: str, name: str, arguments: dict[str, object], tokens: tuple[int, int]
) -> LlmResponse:
    return LlmResponse(content=[ToolCall(call_id, name, arguments)], usage=Usage(*tokens))


def _say(text: str, tokens: tuple[int, int]) -> LlmResponse:
    return LlmResponse(content=[Message("assistant", text)], usage=Usage(*tokens))


async def team_runs(settings: TraceConfig | None = None, session_id: str = TEAM_SESSION) -> None:
    """Two traced runs with agents nested in tools, as a user writes them (a TracingRunner
    called inside a tool nests its run under the tool call):

    * ``planner`` (gpt-4o, priced: 1000+1200 in, 20+30 out) asks ``researcher`` through
      its tool; the researcher (the unpriced scripted model: 300+400 in, 10+8 out) uses
      the calculator. The planner's cost is partial: 2 of its 4 calls have no price.
    * ``recursive`` delegates to itself: an agent nested in itself (50+70 in its own
      two calls, 20 in the nested run's one call).
    """
    researcher = CoreAgent(
        "researcher",
        TracingRunner(NativeRunner(), settings),
        Agent(
            ScriptedLlm(
                turns=[
                    _ask("r1", "calculator", {"expression": "6 * 7"}, (300, 10)),
                    _say("It is 42.", (400, 8)),
                ]
            ),
            tools=[calculator],
            name="researcher",
        ),
    )

    @tool
    async def ask_researcher(question: str) -> str:
        """Ask the researcher.

        Args:
            question: what to find out.
        """
        request = [AgentRequestText(prompt=question)]
        return str(await researcher.runner.run(researcher, Session(session_id), request))

    planner = CoreAgent(
        "planner",
        TracingRunner(NativeRunner(), settings),
        Agent(
            PricedLlm(
                model="gpt-4o",
                turns=[
                    _ask("p1", "ask_researcher", {"question": "What is 6 * 7?"}, (1000, 20)),
                    _say("The researcher says 42.", (1200, 30)),
                ],
            ),
            tools=[ask_researcher],
            name="planner",
        ),
    )
    agents: dict[str, CoreAgent] = {}

    @tool
    async def delegate(task: str) -> str:
        """Hand a part of the task to another run of this agent.

        Args:
            task: the part to do.
        """
        me = agents["recursive"]
        return str(await me.runner.run(me, Session(session_id), [AgentRequestText(prompt=task)]))

    agents["recursive"] = CoreAgent(
        "recursive",
        TracingRunner(NativeRunner(), settings),
        Agent(
            ScriptedLlm(
                turns=[  # the outer run's first call, the nested run's only one, the outer's last
                    _ask("d1", "delegate", {"task": "the leaf"}, (50, 5)),
                    _say("The leaf is done.", (20, 2)),
                    _say("All done.", (70, 4)),
                ]
            ),
            tools=[delegate],
            name="recursive",
        ),
    )
    for agent in (planner, agents["recursive"]):
        await agent.runner.run(agent, Session(session_id), [AgentRequestText(prompt="go")])


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
        # the totals the tracing layer puts on a run span as it ends: its chat and tool
        run.set_attributes(
            {
                A.AGG_INPUT_TOKENS: 100 * (index + 1),
                A.AGG_OUTPUT_TOKENS: 20,
                A.AGG_COST: 0.0125 * (index + 1),
                A.AGG_MODEL_CALLS: 1,
                A.AGG_TOOL_CALLS: 1,
                A.AGG_ERRORS: 1 if failed else 0,
            }
        )
        if failed:
            run.set_attribute("error.type", "RateLimitError")
            run.set_status(Status(StatusCode.ERROR, "429 slow down"))
        run.end(end_time=t + 300 * MS)
    provider.shutdown()


def app_runs(location: str | Path, service: str | None, count: int, start_ns: int) -> None:
    """``count`` runs (a run span and its tool) of the app ``service`` (None: no service.name)."""
    attributes = {"service.name": service} if service else {}
    provider = TracerProvider(resource=Resource(attributes))
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(location)))
    tracer = provider.get_tracer("app")
    for index in range(count):
        at = start_ns + index * 10**6
        span = tracer.start_span(
            f"invoke_agent {service}",
            start_time=at,
            attributes={"runnertrace.span.type": "run", "gen_ai.agent.name": "helper"},
        )
        child = tracer.start_span(
            "execute_tool look", context=trace_api.set_span_in_context(span), start_time=at + 10
        )
        child.end(end_time=at + 20)
        span.end(end_time=at + 100)
    provider.shutdown()


def build_store(db: Path) -> Path:
    """The test store: 4 native runs (one with a failed tool) and 3 'pricey' runs."""
    asyncio.run(_native_runs(db))
    import time

    hand_made_runs(db, time.time_ns() - 3_600 * 1000 * MS)
    return db


def build_team_store(db: Path) -> Path:
    """A store holding :func:`team_runs`, written by the real local pipeline."""
    settings = Settings(
        trace={
            "enabled": True,
            "type": "local",
            "local": {"path": str(db)},
            "capture_content": True,
        }
    )
    asyncio.run(team_runs(settings.trace))
    assert get_tracing_setup(settings.trace).flush()
    return db


# -- for composition tests: the store's rows against the spans --------------------------------
